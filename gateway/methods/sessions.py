"""sessions.* — create, list, get, history, delete, subscribe, unsubscribe."""

from __future__ import annotations

import structlog

from ..errors import NotFound
from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Int, Obj, Str

log = structlog.get_logger("gateway.sessions")
KEY = Obj(sessionKey=Str(pattern=SESSION_KEY))


def _subscribe(ctx: CallContext, key: str) -> None:
    if ctx.connection is not None:
        ctx.services.bus.subscribe(key, ctx.connection)


@registry.method("sessions.create", Obj(label=Str(0, 200, optional=True)),
                 "Create a session (key: a new UUID); the caller is subscribed to it.")
async def create(ctx: CallContext, p: dict) -> dict:
    session = await ctx.services.sessions.create(label=p["label"])
    _subscribe(ctx, session["sessionKey"])
    return session


@registry.method("sessions.list", Obj(limit=Int(1, 500, default=50), offset=Int(0, default=0)),
                 "Sessions, newest updatedAt first.")
async def list_(ctx: CallContext, p: dict) -> dict:
    sessions, total = await ctx.services.sessions.list(p["limit"], p["offset"])
    return {"sessions": sessions, "total": total}


@registry.method("sessions.get", KEY, "One session's metadata.")
async def get(ctx: CallContext, p: dict) -> dict:
    return await ctx.services.sessions.get(p["sessionKey"])


@registry.method("sessions.update", Obj(sessionKey=Str(pattern=SESSION_KEY), label=Str(0, 200)),
                 "Change a session's label.")
async def update(ctx: CallContext, p: dict) -> dict:
    return await ctx.services.sessions.update(p["sessionKey"], label=p["label"])


@registry.method("sessions.history",
                 Obj(sessionKey=Str(pattern=SESSION_KEY), limit=Int(1, 1000, default=200),
                     before=Str(1, 256, optional=True)),
                 "Messages of a session, oldest first; `before` pages back from a message id.")
async def history(ctx: CallContext, p: dict) -> dict:
    return await ctx.services.sessions.history(p["sessionKey"], p["limit"], p["before"])


@registry.method("sessions.delete", KEY, "Delete a session: metadata, transcript and its memory chunks.")
async def delete(ctx: CallContext, p: dict) -> dict:
    s = ctx.services
    key = p["sessionKey"]
    await s.chat.abort(key, None)
    await s.sessions.delete(key)
    if s.memory is not None:
        await s.memory.forget_session(key)
    log.info("session deleted", session=key)
    return {"deleted": True}


@registry.method("sessions.subscribe", KEY, "Receive this session's chat events on this connection.")
async def subscribe(ctx: CallContext, p: dict) -> dict:
    key = p["sessionKey"]
    if not await ctx.services.sessions.exists(key):
        raise NotFound(f"session not found: {key}", {"sessionKey": key})
    _subscribe(ctx, key)
    return {"subscribed": True}


@registry.method("sessions.unsubscribe", KEY, "Stop receiving this session's chat events here.")
async def unsubscribe(ctx: CallContext, p: dict) -> dict:
    if ctx.connection is not None:
        ctx.services.bus.unsubscribe(p["sessionKey"], ctx.connection)
    return {"subscribed": False}
