"""What every `jarvis` command shares: the flags that override config.toml and the environment, and the
one JSON printer (indented for people and `--json`, one line per object for JSONL)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson


def print_json(obj: Any, indent: bool = True) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 if indent else None).decode() + "\n")
    sys.stdout.flush()


def _common(p: argparse.ArgumentParser, token: bool = True) -> None:
    g = p.add_argument_group("configuration (override config.toml and the environment)")
    if token and not any(a.dest == "token" for a in p._actions):
        g.add_argument(
            "--token",
            metavar="TOKEN",
            help="the token to present to the gateway (default: JARVIS_GATEWAY_TOKEN, else <stateDir>/gateway.token); "
            "a principal's token acts as that principal",
        )
    g.add_argument("--state-dir", metavar="DIR", help="state directory (env JARVIS_STATE_DIR, default ~/.jarvis)")
    g.add_argument("--workspace", metavar="DIR", help="workspace with MEMORY.md and memory/ (env JARVIS_WORKSPACE)")
    g.add_argument("--host", help="bind / connect address (env JARVIS_HOST, default 127.0.0.1)")
    g.add_argument("--port", type=int, help="port (env JARVIS_PORT, default 18789; 0 = any free port)")
    g.add_argument(
        "--http-port",
        type=int,
        metavar="PORT",
        help="HTTP API port for /mcp and /v1 (env JARVIS_HTTP_PORT, default 18790; 0 = off, -1 = any free port)",
    )
    g.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="how much the gateway logs (config logLevel, default info)",
    )
    g.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        help="log lines as JSON or for a console; auto picks console on a terminal (config logFormat)",
    )


def _common_on_leaves(p: argparse.ArgumentParser) -> None:
    """Add the shared flags to every leaf command (`jarvis memory status --state-dir D`): on a parent
    too, the leaf's default would overwrite what was given before the sub-command."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        if not any(a.dest == "state_dir" for a in p._actions):
            _common(p)
        return
    for action in subs:
        for child in set(action.choices.values()):
            _common_on_leaves(child)


def read_stdin(limit: int, what: str, field: str) -> str:
    """Standard input as UTF-8 text (`jarvis chat -m -`, `jarvis memory set KEY -`), refused past `limit`
    bytes before more of it is read or held: Invalid naming `field` and the limit (a 200 MB message
    used to be read whole, encoded and sent before the method refused it)."""
    from ..errors import Invalid

    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise Invalid(f"{what} on standard input is more than {limit:,} bytes, the most it may be", field)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"{what} on standard input is not UTF-8 text (byte {exc.start})", field) from None
