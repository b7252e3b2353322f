"""`jarvis token create|list|revoke` and `jarvis audit` — principals and the audit log from a terminal.

    jarvis token                                         the owner's token (the gateway token), as before
    jarvis token create NAME --agent A [--agent B] --scope read,chat [--expires 30d] [--new-agent] [--json]
    jarvis token list [--json]
    jarvis token revoke NAME [--json]
    jarvis audit [--since 1d] [--principal NAME] [--limit N] [--json]

Each calls the method of its name (principals.create, principals.list, principals.revoke, audit.list)
through cli/dispatch.py: the running gateway's when one of this state dir answers, else in this process
on the state dir. A new token is printed once — only its hash is kept. A principal makes only principals
within what it holds (its agents and scopes; `proxy` only the owner); an agent that does not exist is made
only with --new-agent. Exit codes: 1 refused (the name is taken, no such principal or agent, beyond the
caller), 2 bad usage, 3 cannot connect or a token the gateway refuses.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ..config import Config
from ..errors import Invalid, JarvisError
from ..principals import SCOPES
from .client import CallError
from .common import _common, print_json
from .dispatch import methods


def add_token_commands(p: argparse.ArgumentParser) -> None:
    """The sub-commands of `jarvis token` (the bare command prints the owner's token)."""
    sub = p.add_subparsers(dest="token_command", metavar="{create,list,revoke}", help="manage principals")
    c = sub.add_parser(
        "create",
        help="a new principal: a name with its own token, agents and scopes (the token is shown once)",
        description="Make a principal — a person, device or app with its own token. The token is "
        "printed once and only its hash is kept. Scopes: read (search, get, list, history), write (memory "
        "and session changes), chat (send, regenerate, abort, and start the sessions it chats in), admin "
        "(everything, principals and sync included), proxy (/v1: act for a front-end's users; the owner's to "
        "give). A key makes only keys within its own agents and scopes.",
    )
    c.add_argument("name", help="letters, digits, '.', '_' or '-' (up to 64)")
    c.add_argument(
        "--agent", action="append", required=True, metavar="A", help="an agent it may reach (repeatable); '*': all"
    )
    c.add_argument("--scope", required=True, metavar="S[,S…]", help="comma-separated: " + ", ".join(SCOPES))
    c.add_argument("--expires", metavar="WHEN", help="a span (90m, 12h, 30d, 4w) or an ISO 8601 time; default never")
    c.add_argument(
        "--new-agent",
        action="store_true",
        help="make the agents that do not exist yet (without it an unknown agent is refused, so a typo "
        "never makes an empty agent)",
    )
    c.add_argument("--json", action="store_true", help="print {principal, token} as JSON")
    c = sub.add_parser("list", help="every principal (never a token)")
    c.add_argument("--json", action="store_true", help="print the principals.list result as JSON")
    c = sub.add_parser("revoke", help="revoke a principal: its token stops working and its connections close")
    c.add_argument("name", help="the principal (see `jarvis token list`)")
    c.add_argument("--json", action="store_true", help="print the principals.revoke result as JSON")
    for leaf in sub.choices.values():
        _common(leaf)


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="who wrote or deleted what, through which door, when",
        description="The audit log: every write and delete of memory and sessions and every principal "
        "change, with the principal, the method, its target, the door and the time — never a message, a "
        "memory's value or a token.",
    )
    p.add_argument("--since", metavar="WHEN", help="a span back from now (30m, 12h, 1d, 2w) or an ISO 8601 time")
    p.add_argument("--principal", metavar="NAME", help="only this principal's entries")
    p.add_argument("--limit", type=int, default=200, help="the newest N entries (1..10000, default 200)")
    p.add_argument("--json", action="store_true", help="print the audit.list result as JSON")
    _common(p)
    p.set_defaults(handler=run_audit)


def run_token(args: argparse.Namespace, config: Config) -> int:
    """`jarvis token create|list|revoke`."""
    if args.token_command == "create":
        params: dict[str, Any] = {"name": args.name, "agents": ",".join(args.agent), "scopes": args.scope}
        if args.expires:
            params["expires"] = args.expires
        if args.new_agent:
            params["createAgents"] = True
        return _run("principals.create", params, args, _show_created)
    if args.token_command == "list":
        return _run("principals.list", {}, args, _show_list)
    return _run("principals.revoke", {"name": args.name}, args, _show_revoked)


def run_audit(args: argparse.Namespace, config: Config) -> int:
    if not 1 <= args.limit <= 10_000:
        print("jarvis audit: --limit must be between 1 and 10000", file=sys.stderr)
        return 2
    params: dict[str, Any] = {"limit": args.limit}
    if args.since:
        params["since"] = args.since
    if args.principal:
        params["principal"] = args.principal
    args.config = config
    return _run("audit.list", params, args, _show_audit, prog="jarvis audit")


def _run(method: str, params: dict[str, Any], args: argparse.Namespace, show: Any, prog: str = "jarvis token") -> int:
    async def go() -> Any:
        async with methods(args.config) as m:
            return await m.call(method, params)

    try:
        result = asyncio.run(go())
    except Invalid as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return 2
    except JarvisError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return 1
    except CallError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print_json(result)
    else:
        show(result)
    return 0


def _show_created(res: dict[str, Any]) -> None:
    p = res["principal"]
    print(res["token"])
    print(
        f"(principal {p['name']}: agents {', '.join(p['agents'])}; scopes {', '.join(p['scopes'])}; "
        f"expires {p['expires'] or 'never'}. The token is shown this once: keep it now.)",
        file=sys.stderr,
    )


def _show_list(res: dict[str, Any]) -> None:
    rows = [("name", "agents", "scopes", "created", "expires", "last used", "")]
    for p in res["principals"]:
        rows.append(
            (
                p["name"],
                ",".join(p["agents"]),
                ",".join(p["scopes"]),
                (p["created"] or "-")[:16].replace("T", " "),
                (p["expires"] or "never")[:16].replace("T", " "),
                (p["lastUsed"] or "-")[:16].replace("T", " "),
                "revoked " + p["revoked"][:16].replace("T", " ") if p.get("revoked") else "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())


def _show_revoked(res: dict[str, Any]) -> None:
    print(f"revoked {res['principal']['name']}: its token no longer works, and its connections are closed")


def _show_audit(res: dict[str, Any]) -> None:
    for e in res["entries"]:
        target = f" {e['target']}" if e.get("target") else ""
        agent = f" [{e['agent']}]" if e.get("agent") else ""
        ok = "" if e.get("ok", True) else " (refused)"
        if e.get("runPrincipal"):  # an answer to a chat.confirm: whose run it was, and which answer
            ok += f" ({'allowed' if e.get('allow') else 'denied'} for {e['runPrincipal']}'s run)"
        if e.get("confirmedBy"):  # the model's destructive call, allowed by someone
            ok += f" (allowed by {e['confirmedBy']})"
        print(
            f"{e['at'][:19].replace('T', ' ')}  {e['principal']:<16} {e.get('door', ''):<6} {e['method']}{agent}{target}{ok}"
        )
