"""chat.send, chat.abort."""

from __future__ import annotations

from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Str
from .sessions import with_agent


@registry.method(
    "chat.send",
    with_agent(sessionKey=Str(pattern=SESSION_KEY), message=Str(1, 100_000),
               idempotencyKey=Str(1, 256, optional=True)),
    "Send a user message; the reply streams as chat.delta … chat.final to subscribers (the caller included).",
)
async def send(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    key = p["sessionKey"]
    result = await agent.chat.send(key, p["message"], p["idempotencyKey"])
    if ctx.connection is not None:
        # Synchronous, before the run task first runs: no event of this run can be missed.
        ctx.services.bus.subscribe(agent.topic(key), ctx.connection)
    return result


@registry.method("chat.abort", with_agent(sessionKey=Str(pattern=SESSION_KEY), runId=Str(1, 64, optional=True)),
                 "Abort the session's active run (or that run only); the partial reply is kept.")
async def abort(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    return {"aborted": await agent.chat.abort(p["sessionKey"], p["runId"])}
