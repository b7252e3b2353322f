"""sessions.* — create, list, get, update, history, delete, trash, restore, purge, subscribe, unsubscribe.

Every method takes an optional `agentId` (default: the configured agent, "main"); each agent has its
own sessions, transcripts and memory index and never sees another's.
"""

from __future__ import annotations

import structlog

from ..errors import Invalid, NotFound
from ..registry import CallContext, registry
from ..schema import AGENT_ID, SESSION_KEY, Bool, Int, Obj, Str
from ..sessions.history import SETTINGS
from ..timeutil import days_after, now_iso

log = structlog.get_logger("gateway.sessions")


def agent_param() -> Str:
    return Str(pattern=AGENT_ID, optional=True, description="agent (default: main)")


def with_agent(**fields) -> Obj:
    return Obj(agentId=agent_param(), **fields)


KEY = with_agent(sessionKey=Str(pattern=SESSION_KEY))
MAX_SYSTEM_PROMPT = 20_000


def settings_params(how: str) -> dict[str, Str]:
    return {
        "model": Str(0, 200, optional=True, description=f"the chat model for this session (see chat.models); {how}"),
        "systemPrompt": Str(
            0,
            MAX_SYSTEM_PROMPT,
            optional=True,
            description=f"this session's system prompt instead of chat.systemPrompt; {how}",
        ),
    }


def settings_of(p: dict) -> dict[str, str]:
    return {name: p[name] for name in SETTINGS if p[name] is not None}


@registry.method(
    "sessions.create",
    with_agent(
        label=Str(0, 200, optional=True),
        sessionKey=Str(
            pattern=SESSION_KEY,
            optional=True,
            description="a key of your choosing (default: a new UUID); "
            "keys starting with sessions.ephemeralPrefix are pruned",
        ),
        **settings_params("default: the configured one"),
    ),
    "Create a session; the caller is subscribed to it.",
)
async def create(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"], create=True)
    session = await agent.sessions.create(label=p["label"], key=p["sessionKey"], settings=settings_of(p))
    if agent.memory is not None:  # memory.sync.onSessionStart: catch a dirty index up in the background
        agent.memory.session_started(session["sessionKey"])
    if ctx.connection is not None:
        ctx.services.bus.subscribe(agent.topic(session["sessionKey"]), ctx.connection)
    return session


@registry.method(
    "sessions.list",
    with_agent(limit=Int(1, 500, default=50), offset=Int(0, default=0)),
    "Sessions, newest updatedAt first.",
)
async def list_(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    sessions, total = await agent.sessions.list(p["limit"], p["offset"])
    return {"sessions": sessions, "total": total}


@registry.method("sessions.get", KEY, "One session's metadata.")
async def get(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    return await agent.sessions.get(p["sessionKey"])


@registry.method(
    "sessions.update",
    with_agent(
        sessionKey=Str(pattern=SESSION_KEY),
        label=Str(0, 200, optional=True),
        **settings_params('"" resets it to the configured one'),
    ),
    "Change a session's label, model or system prompt (the fields given; at least one).",
)
async def update(ctx: CallContext, p: dict) -> dict:
    changes = {"label": p["label"]} if p["label"] is not None else {}
    changes.update(settings_of(p))
    if not changes:
        raise Invalid("give at least one of label, model, systemPrompt", field="label")
    agent = await ctx.services.agent(p["agentId"])
    return await agent.sessions.update(p["sessionKey"], **changes)


@registry.method(
    "sessions.history",
    with_agent(sessionKey=Str(pattern=SESSION_KEY), limit=Int(1, 1000, default=200), before=Str(1, 256, optional=True)),
    "Messages of a session, oldest first; `before` pages back from a message id.",
)
async def history(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    return await agent.sessions.history(
        p["sessionKey"], p["limit"], p["before"], ctx.services.config.sessions.history_max_bytes
    )


@registry.method(
    "sessions.delete",
    KEY,
    "Delete a session: its metadata and transcript go to the trash for memory.trashDays (sessions.restore "
    "brings it back whole), its memory chunks leave search at once. → {deleted, trashed, expiresAt}",
)
async def delete(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    await agent.delete_session(p["sessionKey"])
    log.info("session deleted", agent=agent.id, session=p["sessionKey"])
    return {"deleted": True, "trashed": True, "expiresAt": days_after(now_iso(), ctx.services.config.memory.trash_days)}


@registry.method(
    "sessions.trash",
    with_agent(limit=Int(1, 500, default=50), offset=Int(0, default=0)),
    "Sessions sessions.delete put in the trash, the most recently deleted first. → {sessions:[session + "
    "deletedAt, expiresAt], total}",
)
async def trash(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    trashed = await agent.sessions.trash()
    page = trashed[p["offset"] : p["offset"] + p["limit"]]
    return {
        "sessions": [
            s | {"expiresAt": days_after(s["deletedAt"], ctx.services.config.memory.trash_days)} for s in page
        ],
        "total": len(trashed),
    }


@registry.method(
    "sessions.restore",
    KEY,
    "Bring a session back from the trash whole (metadata and transcript); searchable again when this "
    "answers. → session",
)
async def restore(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    session = await agent.restore_session(p["sessionKey"])
    log.info("session restored", agent=agent.id, session=p["sessionKey"])
    return session


@registry.method(
    "sessions.purge",
    with_agent(
        sessionKey=Str(pattern=SESSION_KEY, optional=True, description="the trashed session to remove for good"),
        all=Bool(default=False, description="empty the whole trash"),
    ),
    "Remove sessions from the trash for good: one (sessionKey) or all (all: true). → {purged:[keys]}",
)
async def purge(ctx: CallContext, p: dict) -> dict:
    keys = purge_target(p, "sessionKey")
    agent = await ctx.services.agent(p["agentId"])
    return {"purged": await agent.sessions.purge(keys)}


def purge_target(p: dict, field: str) -> list[str] | None:
    """What a purge names: [the one in `field`], or None for all (`all: true`); exactly one of them."""
    if (p[field] is not None) == p["all"]:
        raise Invalid(f"give {field}, or all: true" + (", not both" if p["all"] else ""), field=field)
    return [p[field]] if p[field] is not None else None


@registry.method(
    "sessions.compact",
    KEY,
    "Flush all but the most recent messages into the day's memory file (memory/YYYY-MM-DD.md) "
    "now; the prompt carries on from the recent ones. → {compacted, path?, startLine?, endLine?}",
)
async def compact(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    key = p["sessionKey"]
    if not await agent.sessions.exists(key):
        raise NotFound(f"session not found: {key}", {"sessionKey": key})
    assert agent.chat.compactor is not None
    return await agent.chat.compactor.compact(key)


@registry.method(
    "sessions.prune",
    with_agent(),
    "Apply retention now: delete ephemeral sessions (key prefix sessions.ephemeralPrefix) that are "
    "older than ephemeralMaxAgeHours or beyond the newest ephemeralMaxCount. → {deleted:[keys]}",
)
async def prune(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    return {"deleted": await agent.prune(ctx.services.config.sessions)}


@registry.method("sessions.subscribe", KEY, "Receive this session's chat events on this connection.")
async def subscribe(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    key = p["sessionKey"]
    if not await agent.sessions.exists(key):
        raise NotFound(f"session not found: {key}", {"sessionKey": key})
    if ctx.connection is not None:
        ctx.services.bus.subscribe(agent.topic(key), ctx.connection)
    return {"subscribed": True}


@registry.method("sessions.unsubscribe", KEY, "Stop receiving this session's chat events here.")
async def unsubscribe(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    if ctx.connection is not None:
        ctx.services.bus.unsubscribe(agent.topic(p["sessionKey"]), ctx.connection)
    return {"subscribed": False}
