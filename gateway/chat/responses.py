"""A request of the Responses API (`POST /v1/responses`) relayed as a chat run: the `chat.respond`
method. It is the chat completions relay (chat/relay.py) with another shape at both ends:

    request = RESPONSES_REQUEST.validate(body)            # input (a string or items), instructions, tools …
    chat = as_chat(request, history)                      # the same conversation as a chat completions body
    turn = RespondedTurn(chat, …, responses=request, …)   # a RelayedTurn: same recall, session, transcript

The turn asks the upstream's own `/v1/responses` (`chat.responsesApi` "upstream", or "auto" until the
upstream answers it 404/405/501) and passes its `response.*` events on, or asks its chat completions
(translated: "translate", the offline responder, an upstream without the route) and makes the events
from the chunks (respevents.py). Either way the client gets the same events, under one response id of
the gateway's, and the run gets the text.

`previous_response_id` continues a stored response (`KeptResponses`: the storage engine's, so any
gateway on it, across restarts; bounded per principal by `openaiApi.storedResponses`,
`storedResponseBytes` and `storedResponseDays`): its input and output come first in what is sent upstream, and the turn
goes on in its session. `conversation` names the session. `store: false` keeps the response out of the
store (the conversation is still captured unless capture is off).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncGenerator

import structlog

from ..errors import Invalid
from ..principals import OWNER
from .events import Chunk, Completed, Noted, Recalled
from .providers import OfflineResponder, UpstreamError
from .relay import RelayedTurn, Threads, _items, session_for, side_request
from .respevents import DONE, ResponseEvents, new_id
from .restools import ChatTools, chat_tools, tool_choice
from .stream import Delta, Usage

if TYPE_CHECKING:  # pragma: no cover
    from ..principals import Principal
    from ..storage.base import ResponseStore
    from .providers import ChatProvider

log = structlog.get_logger("gateway.chat")
# fields of the request that go to a chat completions upstream as they are
_PASSED = ("temperature", "top_p", "parallel_tool_calls", "user", "metadata", "seed")


# ---- the request read ----------------------------------------------------------------------------------
def parts_text(parts: Any) -> str:
    """The text of a list of content parts (input_text, output_text, text); other parts have none."""
    if not isinstance(parts, list):
        return ""
    return "\n".join(
        p["text"]
        for p in parts
        if isinstance(p, dict)
        and p.get("type") in ("input_text", "output_text", "text")
        and isinstance(p.get("text"), str)
    )


def input_items(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    given = request["input"]
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given)


def conversation_of(request: dict[str, Any]) -> str | None:
    conversation = request.get("conversation")
    return conversation.get("id") if isinstance(conversation, dict) else conversation


# ---- as a chat completions request ---------------------------------------------------------------------
def _chat_content(content: Any) -> Any:
    """A message's content for chat completions: a string stays; parts become chat parts (text, image_url),
    and all-text parts one string (what local servers read best)."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for p in content if isinstance(content, list) else []:
        if p.get("type") in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
            parts.append({"type": "text", "text": p["text"]})
        elif p.get("type") == "input_image" and isinstance(p.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def as_messages(
    items: list[dict[str, Any]], instructions: str | None, offered: ChatTools | None = None
) -> list[dict[str, Any]]:
    """Responses input items as chat messages: a message as itself (developer as system), consecutive
    tool calls (function, custom, tool_search: by the names `offered` gives them upstream) as one
    assistant message's tool_calls, each output a tool message; reasoning, tool lists and hosted tools'
    records dropped."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []

    def named(kind: str, namespace: str | None, name: str) -> str:  # none offered: as the client named it
        return offered.chat_name(kind, namespace, name) if offered is not None else name

    def call(call_id: str, name: str, arguments: str) -> None:
        one = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and (last.get("tool_calls") or not last.get("content")):
            last.setdefault("tool_calls", []).append(one)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [one]})

    def output(call_id: str, text: str) -> None:
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _chat_content(item.get("content"))})
        elif kind == "function_call":
            call(item["call_id"], named("function", item.get("namespace"), item["name"]), item["arguments"])
        elif kind == "custom_tool_call":
            name = named("custom", item.get("namespace"), item["name"])
            call(item["call_id"], name, json.dumps({"input": item["input"]}, ensure_ascii=False))
        elif kind == "tool_search_call":
            arguments = item.get("arguments")
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            call(item.get("call_id") or "", named("tool_search", None, "tool_search"), text)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            given = item["output"]
            output(item["call_id"], given if isinstance(given, str) else parts_text(given))
        elif kind == "tool_search_output":
            found = [{k: t.get(k) for k in ("type", "name", "description") if k in t} for t in item["tools"]]
            output(item.get("call_id") or "", json.dumps({"tools": found}, ensure_ascii=False))
    return messages


def as_chat(
    request: dict[str, Any], items: list[dict[str, Any]], *, strict: bool = True, offered: ChatTools | None = None
) -> dict[str, Any]:
    """The request as a chat completions body (streamed): its `items` (the previous response's input
    and output, then its own) as messages; its tools as chat tools (restools.py: a namespace's functions,
    a custom tool as a function of its raw input, hosted tools left out). A tool that cannot be carried
    at all: UpstreamError 400 naming it (`strict`; the offline responder takes any). `offered`: the
    tools' translation already made (chat_tools), to say the model's calls back in the client's items."""
    offered = offered if offered is not None else chat_tools(request, items, strict=strict)
    body: dict[str, Any] = {
        "model": request["model"],
        "messages": as_messages(items, request.get("instructions"), offered),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body.update({name: request[name] for name in _PASSED if request.get(name) is not None})
    if request.get("max_output_tokens") is not None:
        body["max_tokens"] = request["max_output_tokens"]
    if offered.tools:
        body["tools"] = offered.tools
        choice = tool_choice(request.get("tool_choice"), offered)
        if choice is not None:
            body["tool_choice"] = choice
    fmt = (request.get("text") or {}).get("format") if isinstance(request.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        body["response_format"] = {"type": "json_object"}
    return body


# ---- the stored responses ---------------------------------------------------------------------------
@dataclass
class Stored:
    response: dict[str, Any]
    items: list[dict[str, Any]]  # all it was asked, the previous responses' input and output included
    session: str | None  # its session (None: capture was off)
    size: int = 0


def owner_key(principal: "Principal") -> str:
    """Whose a kept response is, as the store keeps it: the owner's name, else the principal's name and a
    digest of its token's digest (its identity: principals.same), so that a revoked principal's responses
    are never a new principal's of the same name."""
    if not principal.token_hash:
        return principal.name
    return f"{principal.name}#{hashlib.sha256(principal.token_hash.encode()).hexdigest()[:24]}"


async def note_old_owners(store: "ResponseStore") -> int:
    """Log once (at start) how many kept responses are owned in the form before `owner_key` (a principal's
    bare name): no principal reads them any more (docs/openai-endpoint.md), and they expire with
    `openaiApi.storedResponseDays` → how many."""
    try:
        counts = await store.count_by_principal()
    except Exception as exc:  # housekeeping: a store that cannot say is not the start's failure
        log.warning("stored responses not counted", error=str(exc)[:200])
        return 0
    old = sum(n for key, n in counts.items() if key != OWNER and "#" not in key)
    if old:
        log.warning(
            "stored responses of the old owner form",
            count=old,
            note="kept before principals were told apart by token; no longer readable, they expire",
        )
    return old


class KeptResponses:
    """One agent's and one principal's view of the responses kept in the storage engine (storage/base.py
    ResponseStore, bounded per principal by `openaiApi.storedResponses`, `storedResponseBytes` and
    `storedResponseDays`): every gateway on the engine reads what another kept, and a restart loses none.
    A response that was not stored, was evicted or expired, or is another principal's is not found.
    A principal is its identity, not its name (`owner_key`): a name revoked and made anew is another
    principal, which neither reads the old one's responses nor shares its limits."""

    def __init__(self, store: "ResponseStore", agent_id: str, principal: "Principal"):
        self.store, self.agent_id, self.principal = store, agent_id, owner_key(principal)

    async def put(self, stored: Stored) -> bool:
        record = {"response": stored.response, "items": stored.items, "session": stored.session}
        return await self.store.put(self.agent_id, self.principal, stored.response["id"], record)

    async def get(self, response_id: str) -> Stored | None:
        record = await self.store.get(self.agent_id, self.principal, response_id)
        if record is None or not isinstance(record.get("response"), dict) or not isinstance(record.get("items"), list):
            return None
        session = record.get("session")
        return Stored(record["response"], record["items"], session if isinstance(session, str) else None)

    def not_kept(self, response_id: str) -> str:
        """Why `response_id` is not found, naming the limits that may have dropped it."""
        limits = self.store.limits
        return (
            f"no response {response_id!r} is kept (responses are kept only with store true, per principal "
            f"the newest openaiApi.storedResponses ({limits.count}) within openaiApi.storedResponseBytes "
            f"({limits.bytes}), for openaiApi.storedResponseDays ({limits.keep_s / 86400:g}))"
        )


# ---- the turn ----------------------------------------------------------------------------------------
RESPONSES_API_MISSING = (404, 405, 501)  # an upstream's answer to /v1/responses that means it has none


@dataclass
class RespondedTurn(RelayedTurn):
    """A Responses request as a relayed turn: `request` is its chat completions form (what the session,
    the transcript and recall read), `responses` the Responses request, `items` all it asks (a
    previous response's input and output first)."""

    responses: dict[str, Any] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)
    store: KeptResponses | None = None
    session: str | None = None
    response_id: str = field(default_factory=lambda: new_id("resp"))

    def _upstream_body(self, recalled: list[dict[str, Any]]) -> dict[str, Any]:
        """The request for an upstream's own /v1/responses: previous turns spelled out (the upstream does
        not know the gateway's response ids), the recalled memory after the instructions."""
        from ..memory.present import prompt_section

        body = {k: v for k, v in self.responses.items() if k not in ("previous_response_id", "conversation")}
        body["input"], body["stream"] = self.items, True
        section = prompt_section(recalled)
        if section:
            body["instructions"] = (
                self.responses.get("instructions") or "Use the recalled memory below when it is relevant."
            ) + section
        return body

    async def stream(
        self, provider: "ChatProvider", recalled: list[dict[str, Any]]
    ) -> AsyncGenerator[Delta | Usage, None]:
        from .relay import with_memory

        self.events.tell(Recalled(recalled))
        streamed = bool(self.responses.get("stream"))
        events = ResponseEvents(self.response_id, self.responses["model"], self.responses)
        reply: list[str] = []
        finished = False

        async def tell(batch: list[dict[str, Any]]) -> None:
            if streamed:
                for event in batch:
                    await self.events.put(Chunk(event))

        try:
            source: AsyncGenerator[Any, None] | None = None
            if provider.responses_api != "translate":
                try:
                    source = await provider.respond(self._upstream_body(recalled))
                except UpstreamError as exc:
                    missing = exc.status in RESPONSES_API_MISSING and (exc.error or {}).get("code") != "model_not_found"
                    if provider.responses_api != "auto" or not missing:  # an unknown model is not a missing route
                        raise
                    provider.responses_api = "translate"  # remembered: asked in chat completions from now on
            if source is not None:
                async with contextlib.aclosing(source) as upstream:
                    async for raw in upstream:
                        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
                            raise UpstreamError(
                                "the chat provider sent an event that is not a JSON object with a type",
                                502,
                                retryable=True,
                            )
                        if raw["type"] == "error" or raw["type"] == "response.failed":
                            error = raw.get("error") or (raw.get("response") or {}).get("error") or {}
                            raise UpstreamError(
                                f"the chat provider failed the response: {str(error.get('message', 'error'))[:300]}",
                                502,
                                retryable=True,
                            )
                        event = events.observe(raw)
                        await tell([event])
                        for item in _event_items(raw):
                            reply.append(item.text if isinstance(item, Delta) else "")
                            yield item
                if not events.done:  # the upstream's stream ended without its response.completed
                    await tell(events.close_open("completed"))
            else:
                offline = isinstance(provider, OfflineResponder)  # it calls no tool: any tool list will do
                offered = chat_tools(self.responses, self.items, strict=not offline)
                for note in offered.notes:
                    self.events.tell(Noted(note))
                if offered.notes:
                    log.info("responses_tools_left_out", response=self.response_id, notes=offered.notes)
                events.offered = offered
                body = as_chat(self.responses, self.items, offered=offered)
                body["messages"] = with_memory(body["messages"], recalled)
                await tell(events.start())
                chunks = await provider.relay(body, recalled)
                async with contextlib.aclosing(chunks) as upstream:
                    async for chunk in upstream:
                        if not isinstance(chunk, dict):
                            raise UpstreamError(
                                "the chat provider sent a chunk that is not a JSON object", 502, retryable=True
                            )
                        await tell(events.chunk(chunk))
                        for item in _items(chunk):
                            text = item.text if isinstance(item, Delta) and isinstance(item.text, str) else ""
                            reply.append(text)
                            yield item
                await tell(events.finish())
            finished = True
        except GeneratorExit:  # the run stopped reading: the reply was cut at chat.maxReplyChars
            if not events.done:
                await tell(events.close_open("incomplete"))
            raise
        finally:
            if events.done:
                await self._keep(events.response, streamed)
        if finished:
            self.reply = "".join(reply)

    async def _keep(self, response: dict[str, Any], streamed: bool) -> None:
        if not streamed:
            self.events.tell(Completed(response))
        if self.store is not None and self.responses.get("store", True):
            try:
                await self.store.put(Stored(response, [*self.items, *response.get("output", [])], self.session))
            except Exception as exc:  # the answer went out already: say it, do not fail the run over it
                log.warning("response_not_kept", response=response.get("id"), error=str(exc)[:300])


def _event_items(event: dict[str, Any]) -> list[Delta | Usage]:
    """The run's share of an upstream's event: the text, and the usage at the end."""
    kind = event.get("type")
    if kind == "response.output_text.delta" and isinstance(event.get("delta"), str) and event["delta"]:
        return [Delta(event["delta"])]
    if kind in DONE and isinstance(event.get("response"), dict):
        usage = event["response"].get("usage")
        if isinstance(usage, dict):
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                return [Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))]
    return []


# ---- the request as a turn ---------------------------------------------------------------------------
async def responses_turn(
    request: dict[str, Any],
    *,
    session: str | None,
    memory: bool,
    capture: bool,
    store: KeptResponses | None,
    threads: Threads,
) -> tuple[str, RespondedTurn]:
    """A Responses request (RESPONSES_REQUEST, validated) as a relayed turn → (its session, the turn; a
    client's side request is kept out of the sessions). Its items are the previous response's input and
    output (`previous_response_id`, kept in `store`; Invalid naming the field when not kept), then its own; its
    session is `session` (the door's header), else its `conversation`, else the previous response's, else
    found as for chat completions (relay.session_for)."""
    wanted = request.get("previous_response_id")
    previous = await store.get(wanted) if wanted is not None and store is not None else None
    if wanted is not None and previous is None:
        why = not_kept(store, wanted)  # never kept, or evicted, expired, another principal's
        raise Invalid(why, field="request.previous_response_id")
    items = [*previous.items, *input_items(request)] if previous is not None else input_items(request)
    chat = {"model": request["model"], "messages": as_messages(items, request.get("instructions"))}
    if request.get("user"):
        chat["user"] = request["user"]
    named = session or conversation_of(request) or (previous.session if previous else None)
    key = named or session_for(chat, threads)
    text = request.get("text")
    side = (
        not named
        and not request.get("user")
        and side_request(chat["messages"], request.get("tools"), text.get("format") if isinstance(text, dict) else None)
    )
    turn = RespondedTurn(
        chat,
        memory=memory,
        capture=capture and not side,
        remember=not side,
        responses=request,
        items=items,
        store=store,
    )
    turn.session = key if turn.capture else None
    return key, turn


def not_kept(store: KeptResponses | None, response_id: str) -> str:
    """Why `response_id` is not found (the limits that may have dropped it)."""
    return store.not_kept(response_id) if store is not None else f"no response {response_id!r} is kept here"
