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
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncGenerator

import structlog

from ..errors import Invalid
from ..schema import SESSION_KEY, Field, text_problem
from .providers import OfflineResponder, UpstreamError
from .relay import RelayedTurn, _items, check_model, opening
from .respevents import DONE, ResponseEvents, new_id
from .restools import HOSTED_ITEMS, ChatTools, chat_tools, tool_choice
from .stream import Delta, Usage

if TYPE_CHECKING:  # pragma: no cover
    from ..storage.base import ResponseStore
    from .providers import ChatProvider

ITEM_TYPES = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "tool_search_call",
    "tool_search_output",
    "additional_tools",
    "reasoning",
    *sorted(HOSTED_ITEMS),
)
MESSAGE_ROLES = ("user", "assistant", "system", "developer")
TOOL_CHOICES = ("auto", "none", "required")
_KEY = re.compile(SESSION_KEY)
log = structlog.get_logger("gateway.chat")
# fields of the request that go to a chat completions upstream as they are
_PASSED = ("temperature", "top_p", "parallel_tool_calls", "user", "metadata", "seed")


class ResponsesRequest(Field):
    """A Responses API request body, checked as far as the gateway relies on it (the rest is the upstream's
    to judge): `model`, `input`, `instructions`, `tools`, `tool_choice`, `previous_response_id`,
    `conversation`, `store`, `stream`, `user`."""

    json_type = "object"

    def validate(self, value: Any, path: str) -> Any:
        def at(name: str) -> str:
            return f"{path}.{name}" if path else name

        check_model(value, path)
        given = value.get("input")
        if given is None:
            raise Invalid("required, a string or a list of input items", field=at("input"))
        if isinstance(given, str):
            if not given:
                raise Invalid("must not be empty", field=at("input"))
        elif isinstance(given, list) and given:
            for i, item in enumerate(given):
                _check_item(item, at(f"input[{i}]"))
        else:
            raise Invalid("must be a string or a non-empty list of input items", field=at("input"))
        for name in ("instructions", "previous_response_id", "user"):
            if value.get(name) is not None and not isinstance(value[name], str):
                raise Invalid("must be a string", field=at(name))
        for name in ("stream", "store"):
            if not isinstance(value.get(name, False), bool):
                raise Invalid("must be true or false", field=at(name))
        conversation = value.get("conversation")
        if conversation is not None:
            cid = conversation.get("id") if isinstance(conversation, dict) else conversation
            where = at("conversation.id") if isinstance(conversation, dict) else at("conversation")
            if not isinstance(cid, str) or not _KEY.fullmatch(cid):
                raise Invalid("must be a conversation id, [A-Za-z0-9._:-]{1,128} (it names the session)", field=where)
        tools = value.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                raise Invalid("must be a list of tools", field=at("tools"))
            for i, tool in enumerate(tools):
                _check_tool(tool, at(f"tools[{i}]"))
        choice = value.get("tool_choice")
        if choice is not None:
            if isinstance(choice, str):
                if choice not in TOOL_CHOICES:
                    raise Invalid(f"must be one of {', '.join(TOOL_CHOICES)}, or an object", field=at("tool_choice"))
            elif not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
                raise Invalid("must be auto, none, required, or an object with a `type`", field=at("tool_choice"))
            elif choice["type"] in ("function", "custom") and not isinstance(choice.get("name"), str):
                raise Invalid("required, the function's name", field=at("tool_choice.name"))
        # What the gateway keeps follows the text rule of every method's params (schema.py): the user's
        # messages (the transcript, the session's label), the model and user names.
        for where, text in _kept_texts(value):
            problem = text_problem(text)
            if problem:
                raise Invalid(problem, field=at(where))
        return value


def _check_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise Invalid("must be an object", field=where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind not in ITEM_TYPES:
        raise Invalid(f"type must be one of {', '.join(ITEM_TYPES)}", field=f"{where}.type")
    if kind == "message":
        if item.get("role") not in MESSAGE_ROLES:
            raise Invalid(f"must be one of {', '.join(MESSAGE_ROLES)}", field=f"{where}.role")
        content = item.get("content")
        if not (isinstance(content, str) or (isinstance(content, list) and all(isinstance(p, dict) for p in content))):
            raise Invalid("must be a string or a list of content parts", field=f"{where}.content")
    elif kind in ("function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"):
        if not isinstance(item.get("call_id"), str) or not item["call_id"]:
            raise Invalid("required, the call's id (a non-empty string)", field=f"{where}.call_id")
        if kind in ("function_call", "custom_tool_call"):
            if not isinstance(item.get("name"), str) or not item["name"]:
                raise Invalid("required, the tool's name", field=f"{where}.name")
            if item.get("namespace") is not None and not isinstance(item["namespace"], str):
                raise Invalid("must be a string (the namespace tool's name)", field=f"{where}.namespace")
            argument = "arguments" if kind == "function_call" else "input"
            if not isinstance(item.get(argument), str):
                rule = "the arguments as JSON" if kind == "function_call" else "the tool's raw input"
                raise Invalid(f"must be a string ({rule})", field=f"{where}.{argument}")
        else:
            output = item.get("output")
            if not (isinstance(output, str) or (isinstance(output, list) and all(isinstance(p, dict) for p in output))):
                raise Invalid("must be a string or a list of content parts", field=f"{where}.output")
    elif kind in ("tool_search_call", "tool_search_output"):
        if item.get("call_id") is not None and not isinstance(item["call_id"], str):
            raise Invalid("must be a string, the call's id", field=f"{where}.call_id")
    if kind in ("tool_search_output", "additional_tools"):
        tools = item.get("tools")
        if not isinstance(tools, list):
            raise Invalid("must be a list of tools", field=f"{where}.tools")
        for k, tool in enumerate(tools):
            _check_tool(tool, f"{where}.tools[{k}]")


def _check_tool(tool: Any, where: str) -> None:
    """A tool as far as the gateway reads it: a type; a function's or custom tool's name (and a function's
    parameters, an object); a namespace's name and its tools (each checked alike)."""
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise Invalid("must be an object with a `type`", field=where)
    kind = tool["type"]
    if kind in ("function", "custom", "namespace") and (not isinstance(tool.get("name"), str) or not tool["name"]):
        raise Invalid(f"required, the {kind}'s name", field=f"{where}.name")
    if kind == "function" and tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
        raise Invalid("must be a JSON Schema object", field=f"{where}.parameters")
    if kind == "custom" and tool.get("format") is not None and not isinstance(tool["format"], dict):
        raise Invalid(
            "must be an object ({type: text} or {type: grammar, syntax, definition})", field=f"{where}.format"
        )
    if kind == "namespace":
        tools = tool.get("tools")
        if not isinstance(tools, list) or not tools:
            raise Invalid("must be a non-empty list of the namespace's tools", field=f"{where}.tools")
        for k, each in enumerate(tools):
            _check_tool(each, f"{where}.tools[{k}]")


def _kept_texts(value: dict[str, Any]) -> list[tuple[str, str]]:
    out = [(name, value[name]) for name in ("model", "user", "instructions") if isinstance(value.get(name), str)]
    given = value["input"]
    if isinstance(given, str):
        return [*out, ("input", given)]
    for i, item in enumerate(given):
        if item.get("role") == "user":
            content = item.get("content")
            out.append((f"input[{i}].content", content if isinstance(content, str) else _parts_text(content)))
    return out


RESPONSES_REQUEST = ResponsesRequest(description="an OpenAI Responses API request body")


def _parts_text(parts: Any) -> str:
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
    offered = offered or ChatTools()
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []

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
            call(item["call_id"], offered.chat_name("function", item.get("namespace"), item["name"]), item["arguments"])
        elif kind == "custom_tool_call":
            name = offered.chat_name("custom", item.get("namespace"), item["name"])
            call(item["call_id"], name, json.dumps({"input": item["input"]}, ensure_ascii=False))
        elif kind == "tool_search_call":
            arguments = item.get("arguments")
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            call(item.get("call_id") or "", offered.chat_name("tool_search", None, "tool_search"), text)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            given = item["output"]
            output(item["call_id"], given if isinstance(given, str) else _parts_text(given))
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


class KeptResponses:
    """One agent's and one principal's view of the responses kept in the storage engine (storage/base.py
    ResponseStore, bounded per principal by `openaiApi.storedResponses`, `storedResponseBytes` and
    `storedResponseDays`): every gateway on the engine reads what another kept, and a restart loses none.
    A response that was not stored, was evicted or expired, or is another principal's is not found."""

    def __init__(self, store: "ResponseStore", agent_id: str, principal: str):
        self.store, self.agent_id, self.principal = store, agent_id, principal

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

        self.sink.recalled(recalled)
        streamed = bool(self.responses.get("stream"))
        events = ResponseEvents(self.response_id, self.responses["model"], self.responses)
        reply: list[str] = []
        finished = False

        async def tell(batch: list[dict[str, Any]]) -> None:
            if streamed:
                for event in batch:
                    await self.sink.chunk(event)

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
                    self.sink.noted(note)
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
        except UpstreamError as exc:
            self.sink.refused(exc)
            raise
        except GeneratorExit:  # the run stopped reading: the reply was cut at chat.maxReplyChars
            if not events.done:
                await tell(events.close_open("incomplete"))
            raise
        finally:
            if events.done:
                await self._keep(events.response, streamed)
        if finished and self.answered is not None:
            self.answered("".join(reply))

    async def _keep(self, response: dict[str, Any], streamed: bool) -> None:
        if not streamed:
            self.sink.completed(response)
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


def chat_text_of(items: list[dict[str, Any]]) -> str:
    """The conversation's opening user message among items (names a new session; relay.opening)."""
    return opening(as_messages(items, None))
