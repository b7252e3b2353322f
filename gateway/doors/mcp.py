"""An MCP server over the memory tool catalog (the official SDK's low-level `Server`).

Two ways in, one server:
    /mcp on the HTTP API listener   streamable HTTP, stateless JSON answers, tools run in process
                                    (`mount(http_api, services)`; the listener's guard checks the token),
                                    each call taken through the one path as Door.MCP
    `jarvis mcp`                    stdio; each call is forwarded to the running gateway over its
                                    WebSocket (cli/mcp.py: `build_server(Forwarder(…))`)

Tools act on the token's default agent unless the client passes `agentId`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.lowlevel import Server

from .. import __version__
from ..calls import Door
from ..tools.catalog import TOOLS, Caller, run_tool, tool_schema

if TYPE_CHECKING:  # pragma: no cover
    from ..registry import ServiceAccess
    from .httpapi import HttpApi

INSTRUCTIONS = (
    "Jarvis is the user's self-hosted long-term memory: notes, keyed memories and past "
    "conversations. Search it before answering questions about the user or earlier talks; "
    "store lasting facts the user tells you with memory_set."
)


def list_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name=t.name,
            title=t.name.replace("_", " "),
            description=t.description,
            input_schema=tool_schema(t, agent=True),
            annotations=types.ToolAnnotations(
                read_only_hint=t.read_only,
                destructive_hint=t.destructive,
                idempotent_hint=t.idempotent,
                open_world_hint=False,
            ),
        )
        for t in TOOLS
    ]


def build_server(caller: Caller, redact: bool = True) -> Server:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list_tools())

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        out = await run_tool(params.name, params.arguments or {}, caller, agent=True, redact=redact)
        return types.CallToolResult(content=[types.TextContent(type="text", text=out.text)], is_error=out.error)

    return Server(
        "jarvis", version=__version__, instructions=INSTRUCTIONS, on_list_tools=on_list_tools, on_call_tool=on_call_tool
    )


def mount(api: "HttpApi", services: "ServiceAccess") -> None:
    """Streamable HTTP at /mcp: stateless (nothing held between requests), JSON answers."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(
        build_server(services.calls.caller(Door.MCP), redact=services.config.memory.redact_secrets),
        json_response=True,
        stateless=True,
        max_request_body_size=api.config.server.http_max_body_bytes,
    )
    api.add_routes([Route("/mcp", StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"])])
    api.add_lifespan(manager.run)
