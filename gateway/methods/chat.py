"""chat.send, chat.regenerate, chat.abort, chat.models; chat.relay (the OpenAI-compatible door's)."""

from __future__ import annotations

from ..calls import Door
from ..chat.relay import RELAY_REQUEST, RelayedTurn, RelaySink, first_user_text, session_for
from ..errors import Conflict, InvalidRequest, NotFound, SessionLimit
from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Bool, Str
from .sessions import with_agent


@registry.method(
    "chat.send",
    with_agent(sessionKey=Str(pattern=SESSION_KEY), message=Str(1, 100_000), idempotencyKey=Str(1, 256, optional=True)),
    "Send a user message; the reply streams as chat.delta … chat.final to subscribers (the caller included).",
)
async def send(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    key = p["sessionKey"]
    # Before the message is appended: a sessions.json write after a transcript append would hide that
    # append from the recount that repairs counters after a crash (it compares modification times).
    await name_after_first_message(agent, key, p["message"])
    result = await agent.chat.send(key, p["message"], p["idempotencyKey"])
    if ctx.connection is not None:
        # Synchronous, before the run task first runs: no event of this run can be missed.
        ctx.services.bus.subscribe(agent.topic(key), ctx.connection)
    return result


@registry.method(
    "chat.regenerate",
    with_agent(
        sessionKey=Str(pattern=SESSION_KEY),
        messageId=Str(1, 256, description="the session's last reply (any of its versions)"),
        idempotencyKey=Str(1, 256, optional=True),
    ),
    "Ask again for the session's last reply: a new version of it streams as chat.delta … chat.final (its message "
    "has `replaces`: the first version's id); the transcript keeps every version, history shows the latest.",
)
async def regenerate(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    key = p["sessionKey"]
    result = await agent.chat.regenerate(key, p["messageId"], p["idempotencyKey"])
    if ctx.connection is not None:
        ctx.services.bus.subscribe(agent.topic(key), ctx.connection)
    return result


def label_from(message: str, limit: int = 60) -> str:
    """A session name from its first message: the first line, whitespace folded, cut at a word."""
    line = next((ln for ln in message.splitlines() if ln.strip()), "")
    text = " ".join(line.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:-") + "…"


async def name_after_first_message(agent, key: str, message: str) -> None:
    """A session created without a label is named after its first message (sessions.update renames it)."""
    try:
        session = await agent.sessions.get(key)
    except NotFound:
        return
    if session.get("label") or session.get("messageCount", 0) > 0:
        return
    label = label_from(message)
    if label:
        await agent.sessions.update(key, label=label)


@registry.method(
    "chat.abort",
    with_agent(sessionKey=Str(pattern=SESSION_KEY), runId=Str(1, 64, optional=True)),
    "Abort the session's active run (or that run only); the partial reply is kept.",
)
async def abort(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    return {"aborted": await agent.chat.abort(p["sessionKey"], p["runId"])}


@registry.method(
    "chat.models",
    with_agent(),
    "The chat models the provider offers (the upstream's /v1/models, or the configured model when it "
    "has none) → {models: [{id, object, created, owned_by}], default}; a session's `model` picks one.",
)
async def models(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    provider = agent.chat.provider
    return {"models": await provider.list_models(), "default": provider.model}


@registry.method(
    "chat.relay",
    with_agent(
        request=RELAY_REQUEST,
        session=Str(pattern=SESSION_KEY, optional=True, description="the session; default: the request's own"),
        memory=Bool(default=True, description="recall memory into the request's system prompt"),
        capture=Bool(default=True, description="keep the user message and the reply in the session"),
    ),
    "Relay an OpenAI chat completions request as a chat run of its session (chat/relay.py): recalled "
    "memory in its system prompt, the upstream's own answer streamed to the door, the run's events to "
    "the session's subscribers, the turn in its transcript → {runId, status, sessionKey}.",
    doors=frozenset({Door.OPENAI}),
)
async def relay(ctx: CallContext, p: dict) -> dict:
    sink = ctx.connection
    if not isinstance(sink, RelaySink):  # only the door's relay channel can take the upstream's answer
        raise InvalidRequest("chat.relay needs a door that takes the upstream's answer (/v1/chat/completions)")
    agent = await ctx.services.agent(p["agentId"])
    request = p["request"]
    threads = agent.chat.threads
    key = p["session"] or session_for(request, threads)
    turn = RelayedTurn(request, memory=p["memory"], capture=p["capture"], sink=sink)
    turn.answered = lambda reply: threads.remember(request["messages"], reply, key)
    if turn.capture:
        await _ensure_session(agent, key, first_user_text(request))
    started = await agent.chat.relay(key, turn)
    # Synchronous, before the run task first runs: the door hears every event of this run.
    ctx.services.bus.subscribe(agent.topic(key), ctx.connection)
    return {**started, "sessionKey": key}


async def _ensure_session(agent, key: str, first: str) -> None:
    """The session exists, named after the conversation's first user message."""
    if not await agent.sessions.exists(key):
        try:
            await agent.sessions.create(key=key)
        except SessionLimit:
            raise
        except Conflict:
            pass  # created by a request a moment ago
        else:
            if agent.memory is not None:
                agent.memory.session_started(key)
    await name_after_first_message(agent, key, first)
