"""An MCP server over the memory tool catalog (the official SDK's low-level `Server`).

Two ways in, one server:
    /mcp on the HTTP API listener   streamable HTTP, stateless JSON answers, tools run in process
                                    (`mount(http_api, services)`; the listener's guard checks the token),
                                    each call taken through the one path as Door.MCP
    `jarvis mcp`                    stdio; each call is forwarded to the running gateway over its
                                    WebSocket (cli/mcp.py: `build_server(Forwarder(…))`)

Tools act on the token's own agent (its principal's first; the owner's: the configured one) unless the
client passes `agentId`. `tools/list` lists only the tools whose method the principal may call (a `read`
token sees no memory_set / memory_delete); a call of another is refused by the dispatcher anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

import mcp_types as types
from mcp.server.lowlevel import Server

from .. import __version__
from ..calls import ACTING, Door
from ..tools.catalog import TOOLS, Caller, run_tool, tool_schema

if TYPE_CHECKING:  # pragma: no cover
    from ..principals import Principal
    from ..registry import ServiceAccess
    from .httpapi import HttpApi

# Which methods the client may call: a predicate on a method's name, asked for each `tools/list`.
Allowed = Callable[[Any], Awaitable[Callable[[str], bool]]]

INSTRUCTIONS = (
    "Jarvis is the user's self-hosted long-term memory: notes, keyed memories and past "
    "conversations. Search it before answering questions about the user or earlier talks; "
    "store lasting facts the user tells you with memory_set."
)


def list_tools(may: Callable[[str], bool] = lambda method: True) -> list[types.Tool]:
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
        if may(t.method)
    ]


async def _everything(ctx: Any) -> Callable[[str], bool]:
    return lambda method: True


def build_server(
    caller: Caller,
    redact: bool = True,
    allowed: Allowed = _everything,
    principal: "Callable[[Any], Principal] | None" = None,
) -> Server:
    """`allowed(ctx)`: which methods this request's client may call (its tools listed); `principal(ctx)`:
    who calls, in process (/mcp), acting for the tool's call (`calls.ACTING`)."""

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list_tools(await allowed(ctx)))

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        acting = ACTING.set(principal(ctx)) if principal is not None else None
        try:
            out = await run_tool(params.name, params.arguments or {}, caller, agent=True, redact=redact)
        finally:
            if acting is not None:
                ACTING.reset(acting)
        return types.CallToolResult(content=[types.TextContent(type="text", text=out.text)], is_error=out.error)

    return Server(
        "jarvis", version=__version__, instructions=INSTRUCTIONS, on_list_tools=on_list_tools, on_call_tool=on_call_tool
    )


def mount(api: "HttpApi", services: "ServiceAccess") -> None:
    """Streamable HTTP at /mcp: stateless (nothing held between requests), JSON answers."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.routing import Route

    from .httpapi import principal_of

    def principal(ctx: Any) -> "Principal":
        return principal_of(ctx.request.scope)  # the listener's guard authenticated this request

    async def allowed(ctx: Any) -> Callable[[str], bool]:
        return principal(ctx).may_call

    manager = StreamableHTTPSessionManager(
        build_server(
            services.calls.caller(Door.MCP),
            redact=services.config.memory.redact_secrets,
            allowed=allowed,
            principal=principal,
        ),
        json_response=True,
        stateless=True,
        max_request_body_size=api.config.server.http_max_body_bytes,
    )
    api.add_routes([Route("/mcp", StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"])])
    api.add_lifespan(manager.run)
