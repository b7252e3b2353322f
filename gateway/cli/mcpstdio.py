"""`jarvis mcp`'s server: the MCP server of doors/mcp.py on stdin/stdout, each tool call forwarded to the
running gateway over its WebSocket (client.py), where it takes the one path of a call. Its error comes
back as the JarvisError of its JSON-RPC code (`protocol.error_of`), so a tool error reads the same here
as on /mcp; a gateway that cannot be reached or does not answer is a retryable Unavailable."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any, Callable

from ..config import Config
from ..errors import Unavailable
from ..doors.mcp import build_server
from .client import CallError, CallTimeout, Connection, GatewayCallError


class Forwarder:
    """A caller over one WebSocket connection to the gateway, opened again if it drops (every memory
    tool is idempotent, so a call the old connection lost may be sent again)."""

    def __init__(self, config: Config, url: str | None):
        self.config = config
        self.url = url
        self.conn: Connection | None = None
        self._lock = asyncio.Lock()

    async def connect(self) -> None:
        self.conn = await Connection.open(self.config, self.url)

    async def __call__(self, method: str, params: dict[str, Any]) -> Any:
        for attempt in (1, 2):  # a gateway restarted since the last call: connect again, once
            try:
                async with self._lock:
                    if self.conn is None or self.conn.closed:
                        await self.connect()
                assert self.conn is not None
                return await self.conn.call(method, params)
            except GatewayCallError as exc:
                raise exc.error from None
            except CallTimeout as exc:  # connected but unanswered: a new connection would wait as long again
                raise Unavailable(str(exc)) from None
            except CallError as exc:
                if attempt == 2:
                    said = "not running" in str(exc)  # it says so already, and what to do
                    raise Unavailable(str(exc) if said else f"{exc} (is the gateway still running?)") from None
                if self.conn is not None:
                    await self.conn.close()

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def allowed(self, ctx: Any) -> Callable[[str], bool]:
        """The methods the token's principal may call: the gateway's `system.methods` lists only those.
        With no gateway answering yet, every tool is listed (the gateway still admits each call)."""
        try:
            listed = await self("system.methods", {})
        except Unavailable:
            return lambda _name: True
        names = {m["name"] for m in listed["methods"]}
        return names.__contains__


async def serve_stdio(config: Config, url: str | None) -> int:
    """`jarvis mcp`: serve MCP on stdin/stdout until stdin closes. The tool list is static (the catalog),
    so `initialize` and `tools/list` answer with no gateway running: an MCP client started before the
    gateway (at login) still has its tools, each call a clear tool error until the gateway answers, then
    forwarded without a restart. Only a gateway that refuses the token is fatal at start (one line on
    stderr, exit 1): waiting would not mend it."""
    from mcp.server.stdio import stdio_server

    forward = Forwarder(config, url)
    try:
        await forward.connect()
    except CallError as exc:
        if str(exc).startswith("gateway refused the connection"):
            print(f"jarvis mcp: {exc}", file=sys.stderr, flush=True)
            return 1
        print(
            f"jarvis mcp: {exc}; serving the tools anyway, each call says so until it answers",
            file=sys.stderr,
            flush=True,
        )
    server = build_server(forward, redact=config.memory.redact_secrets, allowed=forward.allowed)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        with contextlib.suppress(Exception):
            await forward.close()
    return 0
