"""`jarvis sessions list|show|delete|export|trash|restore|purge` — read and tidy conversations from a
terminal (like `llm logs`), through the running gateway (its sessions.* methods, so PostgreSQL storage
works too).

    jarvis sessions list [--limit N] [--offset N] [--json]
    jarvis sessions show KEY [--json]                      the metadata and every message
    jarvis sessions delete KEY [--json]                    to the trash; says how to undo it
    jarvis sessions export KEY [--format md|jsonl]         markdown, or one JSON message per line
    jarvis sessions trash [--limit N] [--offset N] [--json]
    jarvis sessions restore KEY [--json]                   back from the trash, whole
    jarvis sessions purge KEY | --all [--json]             out of the trash for good

`--json` prints the methods' results (show: `{session, messages}`). Exit codes as `jarvis call`: 1 the
gateway answered with an error (no such session), 2 bad usage, 3 cannot connect.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from .client import CallError, Connection
from .common import print_json
from ..config import Config

HISTORY_PAGE = 1000


def add_commands(sub: Any) -> None:
    from .common import _common

    p = sub.add_parser(
        "sessions",
        help="list, show, export, delete or restore sessions (through the running gateway)",
        description="Read and tidy conversations through the running gateway: list them, show one "
        "with every message, export it as markdown or JSON lines, delete it (to the trash, kept "
        "memory.trashDays), restore it from the trash or purge it for good.",
    )
    p.set_defaults(handler=run, sessions_command=None)
    s = p.add_subparsers(
        dest="sessions_command",
        metavar="{list,show,delete,export,trash,restore,purge}",
        help="what to do (each has its own --help)",
    )
    c = s.add_parser("list", help="the sessions, most recently active first")
    c.add_argument("--limit", type=int, default=50, help="at most this many (1..500, default 50)")
    c.add_argument("--offset", type=int, default=0, help="skip this many first (default 0)")
    c.add_argument("--json", action="store_true", help="print the sessions.list result as JSON")
    c = s.add_parser("show", help="one session: its details and every message")
    c.add_argument("key", help="the session key (see `jarvis sessions list`)")
    c.add_argument("--json", action="store_true", help="print {session, messages} as JSON")
    c = s.add_parser("delete", help="delete a session: to the trash, with its transcript; out of search at once")
    c.add_argument("key", help="the session key (see `jarvis sessions list`)")
    c.add_argument("--json", action="store_true", help="print the sessions.delete result as JSON")
    c = s.add_parser("trash", help="the deleted sessions, most recently deleted first")
    c.add_argument("--limit", type=int, default=50, help="at most this many (1..500, default 50)")
    c.add_argument("--offset", type=int, default=0, help="skip this many first (default 0)")
    c.add_argument("--json", action="store_true", help="print the sessions.trash result as JSON")
    c = s.add_parser("restore", help="bring a session back from the trash, whole and searchable")
    c.add_argument("key", help="the session key (see `jarvis sessions trash`)")
    c.add_argument("--json", action="store_true", help="print the restored session as JSON")
    c = s.add_parser("purge", help="remove a session (or --all) from the trash for good")
    c.add_argument("key", nargs="?", help="the session key (see `jarvis sessions trash`)")
    c.add_argument("--all", action="store_true", help="empty the whole trash")
    c.add_argument("--json", action="store_true", help="print the sessions.purge result as JSON")
    c = s.add_parser("export", help="print a session as markdown or JSON lines (redirect it to a file)")
    c.add_argument("key", help="the session key (see `jarvis sessions list`)")
    c.add_argument(
        "--format",
        choices=("md", "jsonl"),
        default="md",
        help="md: a readable document (default); jsonl: one message object per line",
    )
    for leaf in set(s.choices.values()):
        leaf.add_argument("--url", help="gateway URL (default ws://HOST:PORT/ from the config)")
        _common(leaf)


def run(args: argparse.Namespace, config: Config) -> int:
    if not args.sessions_command:
        print(
            "usage: jarvis sessions {list,show,delete,export,trash,restore,purge} …  (see jarvis sessions --help)",
            file=sys.stderr,
        )
        return 2
    if args.sessions_command in ("list", "trash") and not (1 <= args.limit <= 500 and args.offset >= 0):
        print("jarvis sessions: --limit must be between 1 and 500 and --offset >= 0", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, config))
    except CallError as exc:
        print(f"jarvis sessions: {exc}", file=sys.stderr)
        return exc.exit_code


async def _run(args: argparse.Namespace, config: Config) -> int:
    conn = await Connection.open(config, args.url)
    try:
        cmd = args.sessions_command
        if cmd == "list":
            res = await conn.call("sessions.list", {"limit": args.limit, "offset": args.offset})
            if args.json:
                return _json(res)
            for s in res["sessions"]:
                model = f"  [{s['model']}]" if s.get("model") else ""
                print(
                    f"{s['updatedAt'][:16].replace('T', ' ')}  {s['messageCount']:>4} msg  {s['sessionKey']}  "
                    f"{s.get('label') or 'Untitled session'}{model}"
                )
            shown = args.offset + len(res["sessions"])
            if not res["sessions"]:
                print("no sessions" if res["total"] == 0 else f"no sessions past {args.offset} (of {res['total']})")
            elif shown < res["total"]:
                print(f"({shown} of {res['total']}; --offset {shown} shows more)", file=sys.stderr)
            return 0
        if cmd == "delete":
            res = await conn.call("sessions.delete", {"sessionKey": args.key})
            if args.json:
                return _json(res)
            return _say(
                f"deleted {args.key}: in the trash until {res['expiresAt'][:10]}\n"
                f"undo: jarvis sessions restore {args.key}"
            )
        if cmd == "trash":
            res = await conn.call("sessions.trash", {"limit": args.limit, "offset": args.offset})
            if args.json:
                return _json(res)
            for s in res["sessions"]:
                print(
                    f"{s['deletedAt'][:16].replace('T', ' ')}  {s['messageCount']:>4} msg  {s['sessionKey']}  "
                    f"{s.get('label') or 'Untitled session'}  [until {s['expiresAt'][:10]}]"
                )
            if not res["sessions"]:
                print("the trash is empty" if res["total"] == 0 else f"nothing past {args.offset} (of {res['total']})")
            return 0
        if cmd == "restore":
            res = await conn.call("sessions.restore", {"sessionKey": args.key})
            return _json(res) if args.json else _say(f"restored {args.key} ({res['messageCount']} messages)")
        if cmd == "purge":
            res = await conn.call("sessions.purge", {"sessionKey": args.key, "all": args.all})
            if args.json:
                return _json(res)
            return _say(
                f"purged {len(res['purged'])}: {', '.join(res['purged'])}" if res["purged"] else "nothing to purge"
            )
        session = await conn.call("sessions.get", {"sessionKey": args.key})
        messages = await _all_messages(conn, args.key)
        if cmd == "show" and args.json:
            return _json({"session": session, "messages": messages})
        if cmd == "export" and args.format == "jsonl":
            for m in messages:
                print_json(m, indent=False)
            return 0
        sys.stdout.write(markdown(session, messages))
        return 0
    finally:
        await conn.close()


async def _all_messages(conn: Connection, key: str) -> list[dict[str, Any]]:
    """Every message, oldest first (sessions.history pages backwards)."""
    pages: list[list[dict[str, Any]]] = []
    before = None
    while True:
        params: dict[str, Any] = {"sessionKey": key, "limit": HISTORY_PAGE}
        if before is not None:
            params["before"] = before
        res = await conn.call("sessions.history", params)
        pages.append(res["messages"])
        if not res.get("hasMore") or not res["messages"]:
            break
        before = res["messages"][0]["id"]
    return [m for page in reversed(pages) for m in page]


ROLES = {"user": "You", "assistant": "Jarvis", "system": "System"}


def markdown(session: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    """A session as a markdown document: a title, its details, then each message under a heading."""
    out = [
        f"# {session.get('label') or 'Untitled session'}",
        "",
        f"- session: `{session['sessionKey']}`",
        f"- created: {session['createdAt']}, last active: {session['updatedAt']}",
        f"- messages: {session['messageCount']}",
    ]
    if session.get("model"):
        out.append(f"- model: {session['model']}")
    if session.get("systemPrompt"):
        out.append(f"- system prompt: {' '.join(session['systemPrompt'].split())}")
    for m in messages:
        notes = []
        if m.get("aborted"):
            notes.append("stopped")
        if m.get("truncated"):
            notes.append("shortened")
        if m.get("versions"):
            notes.append(f"regenerated: version {len(m['versions'])} of {len(m['versions'])}")
        extra = f" ({', '.join(notes)})" if notes else ""
        out += [
            "",
            f"## {ROLES.get(m['role'], m['role'])} · {str(m.get('timestamp', ''))[:19].replace('T', ' ')}{extra}",
            "",
            str(m.get("content", "")).rstrip(),
        ]
        sources = [
            f"{r['path']}:{r['startLine']}" + (f"–{r['endLine']}" if r["endLine"] != r["startLine"] else "")
            for r in m.get("memory") or []
        ]
        if sources:
            out += ["", f"*Sources: {'; '.join(sources)}*"]
    return "\n".join(out) + "\n"


def _json(obj: Any) -> int:
    print_json(obj)
    return 0


def _say(text: str) -> int:
    print(text)
    return 0
