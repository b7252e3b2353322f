"""chat.send, chat.regenerate, chat.abort, chat.confirm, chat.models; chat.relay (the OpenAI-compatible door's)."""

from __future__ import annotations

from ..calls import Door
from ..chat.events import RunHandle
from ..chat.relay import RELAY_REQUEST, RelayedTurn, first_user_text, session_for, side_request
from ..chat.resrequest import RESPONSES_REQUEST
from ..chat.responses import KeptResponses, not_kept, responses_turn
from ..errors import Conflict, NotFound, SessionLimit
from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Bool, Field, Obj, Str
from .sessions import with_agent


MESSAGE_CHARS = 100_000  # chat.send's message, at most (`jarvis chat -m -` refuses more before reading it)


@registry.method(
    "chat.send",
    with_agent(
        sessionKey=Str(pattern=SESSION_KEY), message=Str(1, MESSAGE_CHARS), idempotencyKey=Str(1, 256, optional=True)
    ),
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
    "chat.confirm",
    with_agent(
        runId=Str(1, 64),
        callId=Str(1, 4096, description="the callId of the chat.confirm event"),
        allow=Bool(description="true runs the call; false denies it (the model is told)"),
    ),
    "Answer a run's chat.confirm: whether the model's destructive tool call (a delete, an overwrite) may run "
    "→ {runId, callId, allow}; -32004 when no such call waits (answered, timed out, or its run ended). Only "
    "the principal that started the run, or one with `write` on its agent, answers (-32003 for others); the "
    "audit names who answered and the run's principal.",
)
async def confirm(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    ctx.noted["agent"], ctx.noted["allow"] = agent.id, p["allow"]
    started = await agent.chat.answer(p["runId"], p["callId"], p["allow"], ctx.principal, ctx.door.value)
    if started is not None:
        ctx.noted["runPrincipal"] = started
    return {"runId": p["runId"], "callId": p["callId"], "allow": p["allow"]}


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


def _relayed(request: Field, where: str) -> Obj:
    """The params of a /v1 request's call: its body, the session header, the recall and capture switches."""
    return with_agent(
        request=request,
        session=Str(pattern=SESSION_KEY, optional=True, description="the session; default: the request's own"),
        memory=Bool(default=True, description=f"recall memory into the request's {where}"),
        capture=Bool(default=True, description="keep the user message and the reply in the session"),
    )


@registry.method(
    "chat.relay",
    _relayed(RELAY_REQUEST, "system prompt"),
    "Relay an OpenAI chat completions request as a chat run of its session (chat/relay.py): recalled "
    "memory in its system prompt, the upstream's own answer streamed to the door, the run's events to "
    "the session's subscribers, the turn in its transcript → the run's handle (chat/events.py).",
    doors=frozenset({Door.OPENAI}),
)
async def relay(ctx: CallContext, p: dict) -> RunHandle:
    # A front-end's user's agent (scope proxy: the dispatcher's reach) is made on first use, within agents.max.
    agent = await ctx.services.agent(p["agentId"], create=p["agentId"] is not None)
    request = p["request"]
    key = p["session"] or session_for(request, agent.chat.threads)
    side = (
        not p["session"]
        and not request.get("user")
        and side_request(
            request["messages"], request.get("tools") or request.get("functions"), request.get("response_format")
        )
    )
    turn = RelayedTurn(request, memory=p["memory"], capture=p["capture"] and not side, remember=not side)
    return await _start(ctx, agent, key, turn)


async def _start(ctx: CallContext, agent, key: str, turn: RelayedTurn) -> RunHandle:
    """A relayed turn started as a run of session `key` (made when the turn is kept) → its handle."""
    ctx.noted["target"] = key  # the audit names the session a /v1 request writes
    if turn.capture:
        await _ensure_session(agent, key, first_user_text(turn.request))
    return await agent.chat.relay(key, turn)


@registry.method(
    "chat.respond",
    _relayed(RESPONSES_REQUEST, "instructions"),
    "Relay an OpenAI Responses API request as a chat run of its session (chat/responses.py): the upstream's "
    "/v1/responses, or its chat completions translated; `previous_response_id` and `conversation` continue "
    "a session → the run's handle (chat/events.py), with its responseId.",
    doors=frozenset({Door.OPENAI}),
)
async def respond(ctx: CallContext, p: dict) -> RunHandle:
    agent = await ctx.services.agent(p["agentId"], create=p["agentId"] is not None)  # as chat.relay
    key, turn = await responses_turn(
        p["request"],
        session=p["session"],
        memory=p["memory"],
        capture=p["capture"],
        store=_kept(ctx, agent),
        threads=agent.chat.threads,
    )
    handle = await _start(ctx, agent, key, turn)
    handle.response_id = turn.response_id
    return handle


@registry.method(
    "chat.response",
    with_agent(responseId=Str(1, 256, description="a response id of POST /v1/responses")),
    "A response of /v1/responses kept (the storage engine's, chat/responses.py's KeptResponses) by this "
    "principal → the response object.",
    doors=frozenset({Door.OPENAI}),
)
async def response(ctx: CallContext, p: dict) -> dict:
    agent = await ctx.services.agent(p["agentId"])
    store = _kept(ctx, agent)
    stored = await store.get(p["responseId"]) if store is not None else None
    if stored is None:
        raise NotFound(f"Response with id '{p['responseId']}' not found: {not_kept(store, p['responseId'])}")
    return stored.response


def _kept(ctx: CallContext, agent) -> KeptResponses | None:
    """The responses the caller kept in this agent (None: the gateway keeps none)."""
    if agent.chat.responses is None:
        return None
    return KeptResponses(agent.chat.responses, agent.id, ctx.principal)


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
