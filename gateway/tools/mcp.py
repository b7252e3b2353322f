"""An MCP server over the memory tool catalog (the official SDK's low-level `Server`).

Two ways in, one server:
    /mcp on the HTTP API listener   streamable HTTP, stateless JSON answers, tools run in process
                                    (`mount(http_api, services)`; the listener's guard checks the token)
    `jarvis mcp`                    stdio; each call is forwarded to the running gateway over its
                                    WebSocket (`serve_stdio(config, url)`)

Tools act on the token's default agent unless the client passes `agentId`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.lowlevel import Server

from .. import __version__
from .catalog import TOOLS, CallFailed, Caller, in_process, run_tool, tool_schema

if TYPE_CHECKING:  # pragma: no cover
    from ..client import Connection
    from ..config import Config
    from ..registry import ServiceAccess
    from ..server.httpapi import HttpApi

INSTRUCTIONS = ("Jarvis is the user's self-hosted long-term memory: notes, keyed memories and past "
                "conversations. Search it before answering questions about the user or earlier talks; "
                "store lasting facts the user tells you with memory_set.")


def list_tools() -> list[types.Tool]:
    return [types.Tool(name=t.name, title=t.name.replace("_", " "), description=t.description,
                       input_schema=tool_schema(t, agent=True),
                       annotations=types.ToolAnnotations(read_only_hint=t.read_only, destructive_hint=t.destructive,
                                                         idempotent_hint=t.idempotent, open_world_hint=False))
            for t in TOOLS]


def build_server(caller: Caller) -> Server:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list_tools())

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        out = await run_tool(params.name, params.arguments or {}, caller, agent=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=out.text)], is_error=out.error)

    return Server("jarvis", version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def mount(api: "HttpApi", services: "ServiceAccess") -> None:
    """Streamable HTTP at /mcp: stateless (nothing held between requests), JSON answers."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(build_server(in_process(services)), json_response=True, stateless=True,
                                           max_request_body_size=api.config.server.http_max_body_bytes)
    api.add_routes([Route("/mcp", StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"])])
    api.add_lifespan(manager.run)


# ---- stdio: forward to the running gateway ------------------------------------------------------
class Forwarder:
    """A caller over one WebSocket connection to the gateway, opened again if it drops (every memory
    tool is idempotent, so a call the old connection lost may be sent again)."""

    def __init__(self, config: "Config", url: str | None):
        self.config = config
        self.url = url
        self.conn: "Connection | None" = None
        self._lock = asyncio.Lock()

    async def connect(self) -> None:
        from ..client import Connection

        self.conn = await Connection.open(self.config, self.url)

    async def __call__(self, method: str, params: dict[str, Any]) -> Any:
        from ..client import CallError, GatewayCallError

        for attempt in (1, 2):  # a gateway restarted since the last call: connect again, once
            try:
                async with self._lock:
                    if self.conn is None or self.conn.closed:
                        await self.connect()
                assert self.conn is not None
                return await self.conn.call(method, params)
            except GatewayCallError as exc:
                raise CallFailed(exc.error_message) from None
            except CallError as exc:
                if attempt == 2:
                    raise CallFailed(f"{exc} (is the gateway still running?)") from None
                if self.conn is not None:
                    await self.conn.close()

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def serve_stdio(config: "Config", url: str | None) -> int:
    """`jarvis mcp`: connect to the gateway first (no gateway: one line on stderr, exit 1), then serve
    MCP on stdin/stdout until stdin closes."""
    from mcp.server.stdio import stdio_server

    from ..client import CallError

    forward = Forwarder(config, url)
    try:
        await forward.connect()
    except CallError as exc:
        print(f"jarvis mcp: {exc}", file=sys.stderr, flush=True)
        return 1
    server = build_server(forward)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        with contextlib.suppress(Exception):
            await forward.close()
    return 0
