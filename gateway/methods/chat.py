"""chat.send, chat.abort."""

from __future__ import annotations

from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Obj, Str


@registry.method(
    "chat.send",
    Obj(sessionKey=Str(pattern=SESSION_KEY), message=Str(1, 100_000), idempotencyKey=Str(1, 256, optional=True)),
    "Send a user message; the reply streams as chat.delta … chat.final to subscribers (the caller included).",
)
async def send(ctx: CallContext, p: dict) -> dict:
    key = p["sessionKey"]
    result = await ctx.services.chat.send(key, p["message"], p["idempotencyKey"])
    if ctx.connection is not None:
        ctx.services.bus.subscribe(key, ctx.connection)
    return result


@registry.method("chat.abort", Obj(sessionKey=Str(pattern=SESSION_KEY), runId=Str(1, 64, optional=True)),
                 "Abort the session's active run (or that run only); the partial reply is kept.")
async def abort(ctx: CallContext, p: dict) -> dict:
    return {"aborted": await ctx.services.chat.abort(p["sessionKey"], p["runId"])}
