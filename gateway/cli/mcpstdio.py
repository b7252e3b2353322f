"""`jarvis mcp`'s server: the MCP server of doors/mcp.py on stdin/stdout, each tool call forwarded to the
running gateway over its WebSocket (client.py), where it takes the one path of a call. Its error comes
back as the JarvisError of its JSON-RPC code (`protocol.error_of`), so a tool error reads the same here
as on /mcp; a gateway that cannot be reached or does not answer is a retryable Unavailable."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from typing import Any, BinaryIO, Callable

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
    lines = BoundedLines(sys.stdin.buffer, LINE_BYTES)
    try:
        async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
            await server.run(read, write, server.create_initialization_options())
    finally:
        with contextlib.suppress(Exception):
            await forward.close()
    return 0


LINE_BYTES = 16 << 20  # one message on stdin, at most (a tool's arguments: 256 KiB, refused by the tool door)


class BoundedLines:
    """Standard input's lines for the MCP SDK's stdio server, each at most `limit` bytes. A longer line
    is read past 64 KiB at a time, never held, said on stderr, and answered as an error for its id: a
    200 MB line costs what a 16 MiB one does (it was read whole, decoded and parsed: ~650 MB)."""

    def __init__(self, stream: BinaryIO, limit: int):
        self.stream = stream
        self.limit = limit

    def __aiter__(self) -> "BoundedLines":
        return self

    async def __anext__(self) -> str:
        line = await asyncio.to_thread(self._next)
        if line is None:
            raise StopAsyncIteration
        return line

    def _next(self) -> str | None:
        raw = self.stream.readline(self.limit + 1)
        if not raw:
            return None
        if len(raw) > self.limit and not raw.endswith(b"\n"):
            head = raw[:4096]
            while (rest := self.stream.readline(1 << 16)) and not rest.endswith(b"\n"):
                pass
            print(
                f"jarvis mcp: a message of more than {self.limit:,} bytes was dropped (the most one may be)",
                file=sys.stderr,
                flush=True,
            )
            return self._refusal(head)
        return raw.decode("utf-8", "replace")

    def _refusal(self, head: bytes) -> str:
        """What the SDK is given for a dropped line: a request of the same id (found in the line's head)
        for a method that says why, which it answers with an error — so the client waits for nothing;
        a line with no id found: one that is no JSON-RPC message (refused, and the SDK goes on)."""
        found = _ID.search(head)
        if found is None:
            return "{}\n"
        why = f"message of more than {self.limit} bytes dropped by jarvis mcp"
        return f'{{"jsonrpc":"2.0","id":{found.group(1).decode()},"method":"{why}"}}\n'


_ID = re.compile(
    rb'^\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]{0,100}"\s*,)*\s*"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")'
)
