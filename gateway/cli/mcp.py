"""`jarvis mcp` — the gateway's memory tools for MCP clients (Claude Desktop, Claude Code, Cursor) over stdio.

It speaks MCP on stdin/stdout and forwards each tool call to the running gateway over its WebSocket,
with the token from the state dir (or --token / JARVIS_GATEWAY_TOKEN). With no gateway running it still
answers `initialize` and `tools/list` (the list is static) and turns each call into a tool error that says
how to start the gateway, until one answers. docs/mcp.md has the client configurations.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from ..config import Config


def add_commands(sub: Any) -> None:
    from .common import _common

    p = sub.add_parser(
        "mcp",
        help="serve the memory tools to an MCP client over stdio (forwards to the running gateway)",
        description="Speak MCP (Model Context Protocol) on stdin/stdout for an MCP client such as Claude Desktop, "
        "Claude Code or Cursor: it lists six memory tools (memory_search, memory_get, memory_set, "
        "memory_delete, memory_list, memory_recall) and forwards each call to the running gateway over "
        "its WebSocket. Tools act on the gateway's default agent unless a call passes agentId. "
        "Over HTTP, the gateway serves the same tools itself at /mcp on server.httpPort.",
        epilog="Example: claude mcp add jarvis -- jarvis mcp. Exit codes: 0 stdin closed; 1 the gateway refused "
        "the token (one line on stderr). With no gateway running yet, the tools are listed and each call "
        "answers a tool error saying how to start it, until it answers. See docs/mcp.md.",
    )
    p.add_argument("--url", help="gateway WebSocket URL (default ws://HOST:PORT/ from the config)")
    _common(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, config: Config) -> int:
    import sys

    from .. import logs
    from .mcpstdio import serve_stdio

    # stdout carries MCP and nothing else: logs (warnings up, unless --log-level) go to stderr.
    logs.setup(args.log_level or "warning", config.log_format, stream=sys.stderr)
    if args.token:
        config.token = args.token
    return asyncio.run(serve_stdio(config, args.url))
