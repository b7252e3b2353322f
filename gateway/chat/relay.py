"""A request of the OpenAI-compatible door relayed as a chat run (`ChatService.relay`, the `chat.relay`
method): the same recall, events and transcript as `chat.send`, but the prompt is the client's and the
answer is the upstream's own (`ChatProvider.relay`).

    turn = RelayedTurn(request, memory=True, capture=True)
    handle = await agent.chat.relay(session_for(request), turn)   # the run's events (chat/events.py)

`RELAY_REQUEST` is the request's schema, checked as far as the gateway relies on it (the rest is the
upstream's to judge), so the dispatcher validates it before anything touches it. The run's handle
(chat/events.py) tells the door what was recalled, the upstream's chunks (or its completion object) as
they came, and the run's end (its refusal is a Failed carrying the UpstreamError), to answer in the
door's shape; the session's subscribers hear the run as for any chat run.

Which session: the door's `X-Jarvis-Session`, else the `user` field (`openai:user:<user>`), else one per
conversation, found by its history (`Threads`): a request whose history is what an earlier turn said and
answered continues that turn's session, so that a client resending the whole history each turn stays in
one session, and two conversations that begin alike ("hello") part once they differ. Only the last
message (when it is the user's) and the reply are written: the history a client resends was written by
the turns before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncGenerator

from ..errors import Invalid
from ..memory.present import prompt_section
from ..schema import Field, text_problem
from .events import Chunk, Completed, Recalled, RunHandle
from .providers import UpstreamError
from .stream import Delta, Usage
from .upstream import content_text

if TYPE_CHECKING:  # pragma: no cover
    from .providers import ChatProvider

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_USER_KEY = re.compile(r"[A-Za-z0-9._-]{1,64}")


class RelayRequest(Field):
    """An OpenAI chat completions request body: `model`, `messages` (each with a role, its content a
    string or a list of parts), `stream`, `stream_options`, `user`; other members pass to the upstream."""

    json_type = "object"

    def validate(self, value: Any, path: str) -> Any:
        def at(name: str) -> str:
            return f"{path}.{name}" if path else name

        check_model(value, path)
        messages = value.get("messages")
        if messages is None:
            raise Invalid("required, a list of {role, content}", field=at("messages"))
        if not isinstance(messages, list) or not messages:
            raise Invalid("must be a non-empty list", field=at("messages"))
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise Invalid("must be an object", field=at(f"messages[{i}]"))
            if m.get("role") not in ROLES:
                raise Invalid(f"must be one of {', '.join(ROLES)}", field=at(f"messages[{i}].role"))
            content = m.get("content")
            if not (
                content is None
                or isinstance(content, str)
                or (isinstance(content, list) and all(isinstance(p, dict) for p in content))
            ):
                raise Invalid("must be a string or a list of content parts", field=at(f"messages[{i}].content"))
        # What the gateway keeps of the messages — the last one when it is the user's (the transcript) and the
        # first user message (it names the session) — follows the text rule of every method's params
        # (schema.py); the rest only goes upstream, so an upstream's odd reply, resent, bricks nothing.
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        for i in sorted({users[0], len(messages) - 1} if users else set()):
            problem = text_problem(text_of(messages[i].get("content"))) if messages[i]["role"] == "user" else None
            if problem:
                raise Invalid(problem, field=at(f"messages[{i}].content"))
        if not isinstance(value.get("stream", False), bool):
            raise Invalid("must be true or false", field=at("stream"))
        options = value.get("stream_options")
        if options is not None and not (
            isinstance(options, dict) and isinstance(options.get("include_usage", False), bool)
        ):
            raise Invalid("must be an object; include_usage true or false", field=at("stream_options"))
        if value.get("user") is not None and not isinstance(value["user"], str):
            raise Invalid("must be a string", field=at("user"))
        for name in ("model", "user"):
            problem = text_problem(value[name]) if isinstance(value.get(name), str) else None
            if problem:
                raise Invalid(problem, field=at(name))
        return value


def check_model(value: Any, path: str) -> None:
    """A /v1 request body is an object that names its `model` (both doors' first rule)."""
    if not isinstance(value, dict):
        raise Invalid("must be a JSON object", field=path)
    model = value.get("model")
    where = f"{path}.model" if path else "model"
    if model is None:
        raise Invalid("required, a model id from GET /v1/models", field=where)
    if not isinstance(model, str) or not model:
        raise Invalid("must be a model id from GET /v1/models (a non-empty string)", field=where)


RELAY_REQUEST = RelayRequest(description="an OpenAI chat completions request body")


def text_of(content: Any) -> str:
    """A message's text: the string, or its text parts joined (images and audio have none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if p.get("type") == "text" and isinstance(p.get("text"), str))
    return ""


def session_for(request: dict[str, Any], threads: "Threads") -> str:
    """The session of a request that names none: its `user`'s, else its conversation's (by its history)."""
    user = request.get("user")
    if user:
        return "openai:user:" + (user if _USER_KEY.fullmatch(user) else _digest(user))
    return threads.find(request["messages"])


def opening(messages: list[dict[str, Any]]) -> str:
    """The conversation's first real user message, what names its session: the last of the user messages
    before the first reply (an agent's context messages come first — Codex's `<environment_context>`,
    an AGENTS.md — then what its user asked); the first user message when none comes before a reply."""
    before = [m for m in _until_reply(messages) if m.get("role") == "user"]
    if before:
        return text_of(before[-1].get("content"))
    return next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")


def _until_reply(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            return messages[:i]
    return messages


def first_user_text(request: dict[str, Any]) -> str:
    """The label of a new session: the conversation's opening (above)."""
    return opening(request["messages"])


STRUCTURED = ("json_schema", "json_object")


def side_request(messages: list[dict[str, Any]], tools: Any, answer_format: Any) -> bool:
    """A client's side request — a title, tags, a summary of a conversation — told by its shape, not its
    words: it asks for a structured answer (`answer_format`, a response_format or text.format of type
    json_schema or json_object), offers no tools, and continues no conversation (no reply among its
    messages). Such a request is relayed, but not kept: it makes no session (docs/openai-endpoint.md)."""
    structured = isinstance(answer_format, dict) and answer_format.get("type") in STRUCTURED
    replied = any(m.get("role") == "assistant" for m in messages)
    return structured and not tools and not replied


THREADS_MAX = 10_000  # conversations remembered per agent (about 100 bytes each), the least recent forgotten


def said(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What a conversation said, as a client resends it: the user's and the assistant's texts, whitespace
    folded (clients trim or re-wrap), system prompts, tool calls and their results left out (a client may
    rewrite its system prompt; a tool round trip is part of one turn)."""
    out = []
    for m in messages:
        if m.get("role") in ("user", "assistant"):
            text = " ".join(text_of(m.get("content")).split())
            if text:
                out.append((m["role"], text))
    return out


def _answered(messages: list[dict[str, Any]]) -> bool:
    """Whether the messages hold a reply to a user message (a turn a conversation had), not only context."""
    asked = False
    for m in messages:
        if m.get("role") == "user":
            asked = True
        elif asked and m.get("role") == "assistant":
            return True
    return False


def _history(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The history a request continues: what it says before its last user message."""
    told = said(messages)
    return told[:-1] if told and told[-1][0] == "user" and messages[-1].get("role") == "user" else told


class Threads:
    """Which session a conversation is in, found by its history: each turn remembers the digest of what
    was said up to and with its reply; a request whose history (all before its last user message) has
    that digest continues the turn's session. A request with no history — no reply to a user message
    among its messages, whatever system, developer or context messages it begins with — starts a new
    session, and so
    does one whose history two sessions said word for word (two conversations that began alike and got
    the same reply, as the offline responder gives): from there on each goes on in its own. Bounded
    (THREADS_MAX, least recently used forgotten) and kept in memory: after a restart, a conversation's
    next turn starts a session of its own (`openai:<digest of what it says>`) and goes on in it.

    `shared`: several gateways on one database, any of which a conversation's next turn may reach; a
    gateway's memory does not see the others', so the conversation is named by what every gateway can
    compute, `openai:<digest of the system prompt and the opening user message>` (two conversations that
    begin alike are one session there: not solved yet)."""

    def __init__(self, limit: int = THREADS_MAX, shared: bool = False):
        self.limit, self.shared = limit, shared
        self._keys: OrderedDict[str, str | None] = OrderedDict()  # digest → session (None: two said it)

    @staticmethod
    def _digest(told: list[tuple[str, str]]) -> str:
        # ASCII JSON: an upstream's reply may hold lone surrogates (a pair split across chunks), which have
        # no UTF-8; escaped, the halves read as the pair the client joins them into and sends back.
        return _digest(json.dumps(told))

    def find(self, messages: list[dict[str, Any]]) -> str:
        if self.shared:
            system = next((text_of(m.get("content")) for m in messages if m["role"] in ("system", "developer")), "")
            return "openai:" + _digest(json.dumps([system, opening(messages)]))
        history = _history(messages)
        if not history or not _answered(messages):
            # No reply yet: a new conversation, whatever context messages it begins with (two runs of an
            # agent in one folder share their system, developer and environment messages, not their turns).
            return "openai:" + uuid.uuid4().hex
        digest = self._digest(history)
        if digest not in self._keys:
            # A history this gateway did not answer: a conversation's next turn after a restart, or a
            # client's canned opening (a greeting, few-shot turns) that many conversations share. Named by
            # all the request says, its question included: the same request again (a retry) finds it,
            # another conversation with the same opening does not.
            return "openai:" + self._digest(said(messages))
        self._keys.move_to_end(digest)
        return self._keys[digest] or "openai:" + uuid.uuid4().hex

    def remember(self, messages: list[dict[str, Any]], reply: str, key: str) -> None:
        """A turn answered `messages` with `reply` in session `key`: the next turn's history will say so."""
        told = said([*messages, {"role": "assistant", "content": reply}])
        if not told:
            return
        digest = self._digest(told)
        self._keys[digest] = key if self._keys.get(digest, key) == key else None
        self._keys.move_to_end(digest)
        while len(self._keys) > self.limit:
            self._keys.popitem(last=False)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def with_memory(messages: list[dict[str, Any]], recalled: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client's messages with the recalled memory at the end of its system prompt (one added first
    when it has none)."""
    section = prompt_section(recalled)
    if not section:
        return messages
    first = messages[0]
    if first["role"] in ("system", "developer"):
        content = first.get("content")
        if isinstance(content, list):
            content = [*content, {"type": "text", "text": section}]
        else:
            content = (content or "") + section
        return [{**first, "content": content}, *messages[1:]]
    note = "Use the recalled memory below when it is relevant." + section
    return [{"role": "system", "content": note}, *messages]


@dataclass
class RelayedTurn:
    """One relayed request as the chat runner sees it."""

    request: dict[str, Any]  # validated by RELAY_REQUEST
    memory: bool  # recall memory into the client's system prompt
    capture: bool  # write the user message and the reply to the session's transcript
    # what the run tells its starter (the door): made by the runner when it starts the run
    events: RunHandle = field(default_factory=lambda: RunHandle(0.0))
    # the next turn of its conversation finds the session by its history (not a side request's): the runner
    # remembers the reply (Threads.remember) once the upstream has sent it all (`reply`)
    remember: bool = True
    reply: str | None = None

    @property
    def user_text(self) -> str | None:
        """The user message to write: the last message, when it is the user's."""
        last = self.request["messages"][-1]
        return (text_of(last.get("content")) or None) if last["role"] == "user" else None

    @property
    def query(self) -> str:
        """What memory is searched for: the last user message."""
        return next((text_of(m.get("content")) for m in reversed(self.request["messages"]) if m["role"] == "user"), "")

    async def stream(
        self, provider: "ChatProvider", recalled: list[dict[str, Any]]
    ) -> AsyncGenerator[Delta | Usage, None]:
        """The run's source: the upstream's answer; its chunks go to the run's handle, their text to the run."""
        body = {**self.request, "messages": with_memory(self.request["messages"], recalled)}
        self.events.tell(Recalled(recalled))
        reply: list[str] = []
        answer = await provider.relay(body, recalled)
        if not self.request.get("stream"):
            completion = _checked(answer, "completion")
            self.events.tell(Completed(completion))
            for item in _items(completion):
                reply.append(_text(item))
                yield item
        else:
            async with contextlib.aclosing(answer) as chunks:
                async for chunk in chunks:
                    await self.events.put(Chunk(_checked(chunk, "chunk")))
                    for item in _items(chunk):
                        reply.append(_text(item))
                        yield item
        self.reply = "".join(reply)


def _text(item: Delta | Usage) -> str:
    return (content_text(item.text) or "") if isinstance(item, Delta) else ""


def _checked(obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UpstreamError(f"the chat provider sent a {what} that is not a JSON object", 502, retryable=True)
    return obj


def choices(obj: dict[str, Any]) -> list[Any]:
    """The `choices` of a chunk or a completion; none when the upstream sent something else there."""
    found = obj.get("choices")
    return found if isinstance(found, list) else []


def _items(obj: dict[str, Any]) -> list[Delta | Usage]:
    """The text of the first choice and the usage in a chunk or a completion object."""
    out: list[Delta | Usage] = []
    for choice in choices(obj):
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            part = choice.get("delta") or choice.get("message") or {}
            text = part.get("content") if isinstance(part, dict) else None
            if text:  # a string, or content parts: the run's upstream.checked takes their text
                out.append(Delta(text))
    usage = obj.get("usage")
    if isinstance(usage, dict):
        with contextlib.suppress(TypeError, ValueError, OverflowError):  # counts that are not numbers: none told
            out.append(Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)))
    return out
