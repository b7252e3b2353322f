"""Chat providers behind one small interface.

A provider has capabilities as attributes (`name`, `model`, `tools_supported`) and two methods:

- `stream(messages, tools=..., model=...)`: an async iterator of `Delta(text)` items that may end with
  `ToolCalls` (the function calls the model made, their streamed argument fragments joined) and a
  `Usage`, passed on as the upstream sent them (`upstream.checked` validates and repairs them before
  the runner uses them). `model=` picks another model than the configured one (a session's). Failures
  raise `Unavailable` with `retryable` set; the runner turns that into `chat.error`.
- `list_models()`: the models it offers as OpenAI model objects. It never fails: without an answer
  from upstream it offers the configured model. The upstream's answer is kept MODELS_TTL_S seconds, so
  a client polling `GET /v1/models` (or `chat.models`) does not make every poll an upstream request;
  a failure is not kept, and callers that ask while a request is out share its answer.

For the OpenAI-compatible endpoint (gateway/doors/openai.py) a provider also answers `relay(body,
recalled)`: the client's request forwarded as it is, answered with OpenAI's own chunks (`stream: true`)
or completion object. Its failures raise `UpstreamError`, an `Unavailable` that knows the HTTP status
to answer with.

- `OpenAIProvider`: any OpenAI-compatible `/chat/completions` endpoint, streamed. Retries before the
  first byte are the SDK's (bounded by `chat.maxRetries`, honouring `Retry-After`/`retry-after-ms`).
- `OfflineResponder`: the default with no endpoint configured. It says plainly that it is not a
  language model, shows what memory recalled, and streams in several deltas like a real provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any, AsyncGenerator, Callable

import structlog

from ..config import Config
from ..errors import Unavailable
from ..memory.present import offline_line
from ..neterrors import connection_failure
from ..neterrors import short as _short
from ..sessions.transcript import OFFLINE_PREAMBLE
from .stream import MAX_TOOL_ARGUMENT_CHARS, Delta, ToolCall, ToolCalls, Usage
from .upstream import paced

log = structlog.get_logger("gateway.chat")


class ToolsRejected(Exception):
    """The provider refused a request because it offered tools (a local server without function calling)."""


class UpstreamError(Unavailable):
    """The upstream failed a relayed request: `status` is what the endpoint answers (the upstream's own
    4xx, 502 when it is down or failed, 504 when it is slow), `error` its OpenAI error object if any."""

    def __init__(
        self,
        message: str,
        status: int,
        *,
        retryable: bool,
        retry_after_ms: int | None = None,
        error: dict[str, Any] | None = None,
    ):
        super().__init__(message, retryable=retryable, retry_after_ms=retry_after_ms)
        self.status = status
        self.error = error
        self.unreachable = False  # nothing answered at the endpoint (refused, reset, no route)


class ChatProvider:
    name = "base"
    model = ""
    # False: the replies are not memory (they only echo the question and what was recalled); the runner
    # marks them `"remember": false` in the transcript and the memory index leaves them out.
    replies_are_memory = True
    # Function calling: offered when True, except to the models that refused `tools` (remembered by the
    # runner: a server may host models with and without function calling).
    tools_supported = False
    tools_refused: frozenset[str] = frozenset()
    # How a Responses API request (chat/responses.py) reaches it: "upstream" (its own /v1/responses, through
    # `respond`), "translate" (as chat completions, through `relay`), "auto" (upstream until it answers that
    # it has no such route). The offline responder and a provider without the wire format translate.
    responses_api = "translate"
    offline_now = False  # True while the offline responder answers (no model configured, or none found)

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        recalled: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        model: str | None = None,
    ) -> AsyncGenerator[Delta | ToolCalls | Usage, None]:
        raise NotImplementedError

    async def list_models(self) -> list[dict]:
        """The models this provider offers, as OpenAI model objects
        (`{"id", "object": "model", "created", "owned_by"}`); the configured one by default."""
        return [model_object(self.model, self.name)]

    async def relay(self, body: dict[str, Any], recalled: list[dict[str, Any]]) -> Any:
        """Answer an OpenAI chat completions request: an async iterator of chunk objects when
        `body["stream"]`, else one completion object. Built here on `stream()`, answering under the model
        name the client asked for (the offline responder has no other: a client configured for any model
        works out of the box); a provider that speaks the wire format forwards the request instead."""
        chunks = self._chunks(body, recalled)
        if body.get("stream"):
            return chunks
        text: list[str] = []
        usage = None
        async for chunk in chunks:
            for choice in chunk["choices"]:
                text.append(choice["delta"].get("content") or "")
            usage = chunk.get("usage") or usage
        return {
            "id": chunk["id"],
            "object": "chat.completion",
            "created": chunk["created"],
            "model": chunk["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(text)},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }

    async def respond(self, body: dict[str, Any]) -> AsyncGenerator[Any, None]:
        """Answer a Responses API request (streamed) with the upstream's own `response.*` events."""
        raise NotImplementedError

    async def _chunks(self, body: dict[str, Any], recalled: list[dict[str, Any]]) -> AsyncGenerator[dict, None]:
        """`stream()` as OpenAI's chunks: the role first, the text, `finish_reason`, then the usage (always;
        the endpoint drops it unless the client asked for it)."""
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "system_fingerprint": None,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        from .upstream import content_text  # upstream.py imports this module's Delta and Usage

        yield chunk({"role": "assistant", "content": ""})
        usage = None
        # stream() reads text contents, as chat.send makes them; a client may send a list of content parts
        messages = [{**m, "content": content_text(m.get("content")) or ""} for m in body["messages"]]
        async with contextlib.aclosing(self.stream(messages, recalled=recalled)) as items:
            async for item in items:
                if isinstance(item, Delta):
                    yield chunk({"content": item.text})
                elif isinstance(item, Usage):  # no tools are offered here: no ToolCalls come
                    usage = item
        yield chunk({}, "stop")
        if usage is not None:
            yield {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                },
            }

    async def close(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        """What chats, for system.health and the start-up line: provider, model, baseUrl, discovered."""
        return {"provider": self.name, "model": self.model, "baseUrl": None, "discovered": False}


class OfflineResponder(ChatProvider):
    name = "offline"
    model = "offline-responder"
    replies_are_memory = False
    offline_now = True
    PREAMBLE = OFFLINE_PREAMBLE

    NOT_CONFIGURED = "no chat model is configured (set OPENAI_API_KEY or OPENAI_BASE_URL to use one)"

    def __init__(self, delta_delay: float = 0.01, why: Callable[[], str] | None = None):
        self.delta_delay = delta_delay
        self.why = why  # why there is no model now (discovery's reason); else none is configured

    @staticmethod
    def compose(user_text: str, recalled: list[dict[str, Any]], why: str = NOT_CONFIGURED) -> str:
        quoted = " ".join(user_text.split())
        if len(quoted) > 200:
            quoted = quoted[:199] + "…"
        lines = [
            f"{OfflineResponder.PREAMBLE}: {why}.",
            f"You wrote: “{quoted}”",
        ]
        if recalled:
            lines.append("")
            lines.append("From memory I recalled:")
            lines += [offline_line(r) for r in recalled]
        else:
            lines.append("Nothing in memory matched this message.")
        return "\n".join(lines)

    async def stream(self, messages, *, recalled=None, tools=None, tool_choice=None, model=None):
        user_text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        text = self.compose(user_text, recalled or [], self.why() if self.why else self.NOT_CONFIGURED)
        # Stream in word-sized groups so clients exercise real incremental rendering.
        words = text.split(" ")
        step = max(1, len(words) // 12)
        for i in range(0, len(words), step):
            piece = " ".join(words[i : i + step])
            yield Delta(piece if i + step >= len(words) else piece + " ")
            if self.delta_delay:
                await asyncio.sleep(self.delta_delay)
            else:
                await asyncio.sleep(0)
        prompt_chars = sum(len(m.get("content") or "") for m in messages)
        yield Usage(prompt_tokens=prompt_chars // 4, completion_tokens=len(text) // 4)


MODELS_TIMEOUT_S = 10.0
MODELS_TTL_S = 60.0  # how long the upstream's model list is kept (a new model shows up within a minute)


def model_object(model_id: str, owned_by: str, created: int | None = 0) -> dict:
    """An OpenAI model object."""
    return {"id": model_id, "object": "model", "created": int(created or 0), "owned_by": owned_by}


def _retry_after_ms(exc: Any) -> int | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    for name, factor in (("retry-after-ms", 1), ("retry-after", 1000)):
        value = headers.get(name)
        if value:
            try:
                return int(float(value) * factor)
            except ValueError:
                continue
    return None


class OpenAIProvider(ChatProvider):
    name = "openai"
    tools_supported = True

    def __init__(
        self,
        api_key: str,
        base_url: str,
        model: str,
        timeout: float,
        max_retries: int,
        *,
        max_argument_chars: int = MAX_TOOL_ARGUMENT_CHARS,
        max_id_chars: int = 4096,
        responses_api: str = "auto",
    ):
        from openai import AsyncOpenAI

        self.model = model
        self.responses_api = responses_api
        self.timeout = timeout
        # What one answer's tool calls may hold in memory (chat.maxToolArgumentBytes, chat.maxToolCallIdChars):
        # more is counted, not kept (the runner refuses those calls, chat/tools.bound_calls).
        self.max_argument_chars = max_argument_chars
        self.max_id_chars = max_id_chars
        self.endpoint = (base_url or "https://api.openai.com/v1").rstrip("/")
        # Local servers (llama.cpp, Ollama, vLLM) accept any key; the SDK insists on a non-empty one.
        self.client = AsyncOpenAI(
            api_key=api_key or "not-needed", base_url=base_url or None, timeout=timeout, max_retries=max_retries
        )
        self._models: tuple[float, list[dict]] | None = None  # (time.monotonic() of the answer, its models)
        self._models_request: asyncio.Task[list[dict]] | None = None  # the one out now

    async def list_models(self) -> list[dict]:
        """The upstream's `/v1/models`; the configured model when it does not answer (many local servers
        have no such route) or answers with nothing. The configured model is always among them."""
        if self._models is not None and time.monotonic() - self._models[0] < MODELS_TTL_S:
            models = list(self._models[1])
        else:
            if self._models_request is None or self._models_request.done():
                self._models_request = asyncio.create_task(self._upstream_models())
            # Shielded: a caller that goes away does not cancel the others' answer.
            models = list(await asyncio.shield(self._models_request))
        if self.model and not any(m["id"] == self.model for m in models):
            models.insert(0, model_object(self.model, self.name))
        return models

    async def _upstream_models(self) -> list[dict]:
        try:
            page = await asyncio.wait_for(self.client.models.list(), MODELS_TIMEOUT_S)
            models = [
                model_object(m.id, getattr(m, "owned_by", None) or "upstream", getattr(m, "created", 0))
                for m in page.data
            ]
        except Exception as exc:  # unreachable, 404, not JSON, too slow: the configured model still works
            log.info("chat_models_unavailable", endpoint=self.endpoint, error=_short(str(exc)) or type(exc).__name__)
            return []  # not kept: the next call asks again
        self._models = (time.monotonic(), models)
        return models

    async def stream(self, messages, *, recalled=None, tools=None, tool_choice=None, model=None):
        import openai

        calls: dict[int, _Pending] = {}
        room = _Room(self.max_argument_chars, self.max_id_chars)  # what this answer's calls may keep
        dropped = 0  # calls past MAX_TOOL_CALLS: a runaway model's, never kept
        try:
            stream = await self.client.chat.completions.create(
                model=model or self.model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                **({"tools": tools} if tools else {}),
                **({"tool_choice": tool_choice} if tools and tool_choice else {}),
            )
            async with stream:
                # chat.timeout between chunks with content, not between bytes (see upstream.paced)
                async for chunk in paced(stream, self.timeout, _has_content):
                    # As sent: the runner checks shapes and repairs text (upstream.checked).
                    for choice in chunk.choices or []:
                        text = getattr(choice.delta, "content", None)
                        if text:
                            yield Delta(text)
                        for part in getattr(choice.delta, "tool_calls", None) or []:
                            index = part.index if isinstance(getattr(part, "index", None), int) else len(calls)
                            if index not in calls and len(calls) >= MAX_TOOL_CALLS:
                                dropped += 1
                                continue
                            calls.setdefault(index, _Pending()).add(part, room)
                    if chunk.usage:
                        usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
                        if calls:  # the calls come before the usage, as they did on the wire
                            yield _finished(calls)
                            calls = {}
                        yield usage
            if calls:
                yield _finished(calls)
            if dropped:
                log.warning(
                    "chat model streamed more tool calls than are kept: the rest dropped",
                    kept=MAX_TOOL_CALLS,
                    parts_dropped=dropped,
                )
        except TimeoutError:
            raise self.silent() from None
        except openai.APIStatusError as exc:
            if tools and exc.status_code in (400, 404, 422, 501):  # before any output: the request itself
                raise ToolsRejected(f"HTTP {exc.status_code}: {_short(exc.message)}") from None
            raise self.failure(exc) from None
        except Exception as exc:
            raise self.failure(exc) from None

    def silent(self) -> UpstreamError:
        """`paced` ran out: chat.timeout without a chunk that carries content."""
        return UpstreamError(
            f"chat provider at {self.endpoint} sent no content for {self.timeout:g} s "
            f"(chat.timeout; keep-alive comments do not count)",
            504,
            retryable=True,
        )

    def failure(self, exc: Exception) -> UpstreamError:
        """What an exception of the SDK (or of its HTTP library, for a stream cut mid-way) means."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return UpstreamError(f"chat provider timed out at {self.endpoint}", 504, retryable=True)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            retryable = status == 429 or status == 408 or status >= 500
            error = exc.body.get("error", exc.body) if isinstance(exc.body, dict) else None
            return UpstreamError(
                f"chat provider at {self.endpoint} answered HTTP {status}: {_short(exc.message)}",
                status if 400 <= status < 500 else 502,
                retryable=retryable,
                retry_after_ms=_retry_after_ms(exc),
                error=error if isinstance(error, dict) else None,
            )
        if isinstance(exc, openai.APIConnectionError):
            gone = UpstreamError(
                f"chat provider unreachable at {self.endpoint}: {connection_failure(exc)}", 502, retryable=True
            )
            gone.unreachable = True
            return gone
        return UpstreamError(
            f"chat provider at {self.endpoint} failed: {type(exc).__name__}: {_short(str(exc))}", 502, retryable=True
        )

    async def relay(self, body, recalled):
        """The request as the client sent it (model, tools and the rest untouched), the answer as the
        upstream sent it: raw chunk objects, or the completion object."""
        import openai

        try:
            if not body.get("stream"):
                return await self.client.post("/chat/completions", body=body, cast_to=object)
            stream = await self.client.post(
                "/chat/completions", body=body, cast_to=object, stream=True, stream_cls=openai.AsyncStream[object]
            )
        except Exception as exc:
            raise self.failure(exc) from None
        return self._relay_chunks(stream)

    async def respond(self, body: dict[str, Any]) -> AsyncGenerator[Any, None]:
        """The Responses request as it is (streamed) to the upstream's /v1/responses; its events as sent."""
        import openai

        try:
            stream = await self.client.post(
                "/responses", body=body, cast_to=object, stream=True, stream_cls=openai.AsyncStream[object]
            )
        except Exception as exc:
            raise self.failure(exc) from None
        return self._relay_chunks(stream, _event_has_content)

    async def _relay_chunks(self, stream: Any, has_content: Any = None) -> AsyncGenerator[dict, None]:
        from .upstream import paced

        try:
            async with stream:
                # chat.timeout between chunks with content, as for chat.send (keep-alive comments do not count)
                async for chunk in paced(stream, self.timeout, has_content or _relay_has_content):
                    yield chunk
        except TimeoutError:
            raise self.silent() from None
        except Exception as exc:
            raise self.failure(exc) from None

    async def close(self) -> None:
        if self._models_request is not None:
            self._models_request.cancel()
        await self.client.close()

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "model": self.model, "baseUrl": self.endpoint, "discovered": False}


MAX_TOOL_CALLS = 64  # calls kept of one answer (16 run, the rest answered "skipped"); past it: dropped


KEPT_HEAD_CHARS = 200  # of a call's arguments that are not kept whole


class _Room:
    """What the tool calls of one answer may keep: argument characters in all, an id's length."""

    __slots__ = ("arguments", "id_chars")

    def __init__(self, arguments: int, id_chars: int):
        self.arguments, self.id_chars = arguments, id_chars


class _Pending:
    """A tool call being streamed: OpenAI sends the id and name first, then the arguments in fragments,
    each piece naming its call by `index`."""

    __slots__ = ("id", "name", "parts", "kept", "size")

    def __init__(self) -> None:
        self.id, self.name, self.kept, self.size = "", "", 0, 0
        self.parts: list[str] = []

    def add(self, part: Any, room: _Room) -> None:
        if getattr(part, "id", None):
            call_id = str(part.id)
            self.id = call_id if len(call_id) <= room.id_chars else ""  # too long: the runner gives it one
        fn = getattr(part, "function", None)
        if fn is None:
            return
        if getattr(fn, "name", None):
            self.name = (self.name + str(fn.name))[:200]
        piece = getattr(fn, "arguments", None)
        if isinstance(piece, str) and piece:
            self.size += len(piece)
            if self.size > self.kept + len(piece):  # already cut
                return
            if self.size > MAX_TOOL_ARGUMENT_CHARS or len(piece) > room.arguments:
                # Too long for a call (its room given back), or past the answer's: a head is kept, for the
                # note the runner stores in its place (chat/tools.bound_calls).
                if self.size <= MAX_TOOL_ARGUMENT_CHARS:
                    room.arguments = 0
                else:
                    room.arguments += self.kept
                head = ("".join(self.parts) + piece)[:KEPT_HEAD_CHARS]
                self.parts, self.kept = [head], len(head)
                return
            self.parts.append(piece)
            self.kept += len(piece)
            room.arguments -= len(piece)

    def done(self) -> ToolCall:
        return ToolCall(self.id, self.name, "".join(self.parts), self.size)


def _finished(calls: dict[int, _Pending]) -> ToolCalls:
    return ToolCalls([calls[i].done() for i in sorted(calls)])


def _has_content(chunk: Any) -> bool:
    """Whether a stream chunk carries something: text, a tool call, or the usage."""
    return bool(chunk.usage) or any(
        getattr(c.delta, "content", None) or getattr(c.delta, "tool_calls", None) for c in chunk.choices or []
    )


def _relay_has_content(chunk: Any) -> bool:
    """`_has_content` for a relayed chunk, a raw JSON object of any shape."""
    if not isinstance(chunk, dict):
        return True  # not ours to judge here: the endpoint refuses it
    choices = chunk.get("choices")
    return bool(chunk.get("usage")) or (
        isinstance(choices, list)
        and any(
            isinstance(c, dict)
            and isinstance(c.get("delta"), dict)
            and (c["delta"].get("content") or c["delta"].get("tool_calls"))
            for c in choices
        )
    )


def _event_has_content(event: Any) -> bool:
    """`_has_content` for a Responses API event: text, a function call's arguments, an item, the end."""
    kind = event.get("type") if isinstance(event, dict) else None
    return (
        not isinstance(kind, str)
        or kind.endswith(".delta")
        or kind.startswith("response.output_item")
        or kind
        in (
            "response.completed",
            "response.incomplete",
            "response.failed",
            "error",
        )
    )


RETIRED_KEPT = 4  # providers of servers left behind kept open (a turn may still be streaming from one)
RETRY_S = 5.0  # while no server answers, a chat turn asks again at most this often (`jarvis models` always)


class DiscoveredProvider(ChatProvider):
    """Chat through a model server found on loopback (chat/discovery.py), or the offline responder while
    none answers, saying why. It stands where one provider is expected (the runner, compaction, /v1 hold
    one object for the gateway's life) and passes each call to the provider of the moment:

    - asked at start (`start()`, in the background), by `list_models()` (`chat.models`, `jarvis models`,
      the web page's picker) every time, and by a chat turn while none answers, at most every RETRY_S;
    - a turn whose server does not answer (refused: it went away) is answered by the offline responder,
      the reason in its text; the next turn past RETRY_S asks again and comes back to the server.
    """

    def __init__(self, config: Config):
        self.config = config
        self.offline = OfflineResponder(config.chat.offline_delta_delay, why=lambda: self.reason)
        self.current: ChatProvider = self.offline
        self.found: Any = None  # discovery.Found of the current server
        self.reason = "looking for a model server on this machine (chat.discover)"
        self._probe: asyncio.Task[None] | None = None
        self._asked = -float("inf")  # time.monotonic() of the last probe's start
        self._old: list[ChatProvider] = []  # providers of servers left behind, closed with this one
        self._closing: set[asyncio.Task[None]] = set()

    # What callers read of a provider is the current one's.
    @property
    def name(self) -> str:  # type: ignore[override]
        return self.current.name

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.current.model

    @property
    def replies_are_memory(self) -> bool:  # type: ignore[override]
        return self.current.replies_are_memory

    @property
    def tools_supported(self) -> bool:  # type: ignore[override]
        return self.current.tools_supported

    @property
    def responses_api(self) -> str:  # type: ignore[override]
        return self.current.responses_api

    @property
    def tools_refused(self) -> frozenset[str]:
        return self.current.tools_refused

    @tools_refused.setter
    def tools_refused(self, value: frozenset[str]) -> None:
        self.current.tools_refused = value

    @property
    def endpoint(self) -> str | None:
        return self.found.base_url if self.current is not self.offline else None

    @property
    def offline_now(self) -> bool:  # type: ignore[override]
        return self.current is self.offline

    def describe(self) -> dict[str, Any]:
        if self.current is self.offline:
            return {**self.offline.describe(), "reason": self.reason}
        return {**self.current.describe(), "discovered": True, "server": self.found.server}

    def start(self) -> asyncio.Task[None]:
        """The first probe, in the background: start-up never waits on it past `settled`."""
        return self._ask()

    async def settled(self, timeout: float) -> None:
        """Wait (without blocking the loop) up to `timeout` s for the probe out now, so the start-up line can say."""
        if self._probe is not None and not self._probe.done():
            await asyncio.wait([self._probe], timeout=timeout)

    async def discover(self) -> None:
        """Ask now (or share the probe already out)."""
        await asyncio.shield(self._ask())

    def _ask(self) -> asyncio.Task[None]:
        if self._probe is None or self._probe.done():
            self._asked = time.monotonic()
            self._probe = asyncio.create_task(self._run_probe(), name="chat-discovery")
        return self._probe

    async def _run_probe(self) -> None:
        from .discovery import discover

        try:
            found, why = await discover(self.config.chat.discover_ports)
        except Exception as exc:  # never the turn's failure: the offline responder says it
            found, why = None, f"looking for a model server failed: {type(exc).__name__}: {_short(str(exc))}"
        if found is None:
            self._lose(why)
            return
        if self.found == found and self.current is not self.offline:
            return
        same = self.found is not None and (self.found.base_url, self.found.model) == (found.base_url, found.model)
        if not (same and isinstance(self.current, OpenAIProvider)):
            c = self.config.chat
            provider = OpenAIProvider(
                "",
                found.base_url,
                found.model,
                c.timeout,
                0,  # a server that goes away falls back at once; the next turn asks again
                max_argument_chars=c.max_tool_argument_bytes,
                max_id_chars=c.max_tool_call_id_chars,
                responses_api="translate",  # local servers have chat completions; few have /v1/responses
            )
            if self.current is not self.offline:
                self._retire(self.current)
            self.current = provider
        self.found = found
        self.reason = ""
        log.info(
            "chat model discovered",
            server=found.server,
            chat_url=found.base_url,
            chat_model=found.model,
            models=len(found.models),
        )

    def _lose(self, why: str) -> None:
        if self.current is not self.offline:
            log.warning("discovered chat model gone; the offline responder answers", chat_url=self.endpoint, reason=why)
            self._retire(self.current)
            self.current = self.offline
        self.reason = why

    def _retire(self, provider: ChatProvider) -> None:
        """A provider left behind (its server went away or changed): kept while a turn may still stream from
        it, closed once RETIRED_KEPT newer ones followed (a server that comes and goes for days holds no more)."""
        self._old.append(provider)
        while len(self._old) > RETIRED_KEPT:
            task = asyncio.create_task(self._old.pop(0).close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _now(self) -> ChatProvider:
        """The provider for a turn: while none answers, ask again when the last probe is RETRY_S old."""
        if self.current is self.offline and time.monotonic() - self._asked >= RETRY_S:
            await self.discover()
        return self.current

    def _gone(self, provider: ChatProvider, exc: UpstreamError) -> bool:
        """Whether `exc` says the server went away: then the offline responder answers, saying so."""
        if not exc.unreachable or provider is self.offline:
            return False
        if provider is self.current:
            why = exc.message.rsplit(": ", 1)[-1]  # "chat provider unreachable at URL: connection refused"
            self._lose(f"the model server found at {self.endpoint} stopped answering ({_short(why)})")
            self._asked = time.monotonic()
        return True

    async def stream(self, messages, *, recalled=None, tools=None, tool_choice=None, model=None):
        provider = await self._now()
        started = False
        try:
            async with contextlib.aclosing(
                provider.stream(messages, recalled=recalled, tools=tools, tool_choice=tool_choice, model=model)
            ) as items:
                async for item in items:
                    started = True
                    yield item
            return
        except UpstreamError as exc:
            if started or not self._gone(provider, exc):
                raise
        async with contextlib.aclosing(self.offline.stream(messages, recalled=recalled)) as items:
            async for item in items:
                yield item

    async def relay(self, body, recalled):
        provider = await self._now()
        try:
            return await provider.relay(body, recalled)
        except UpstreamError as exc:
            if not self._gone(provider, exc):
                raise
        return await self.offline.relay(body, recalled)

    async def respond(self, body: dict[str, Any]) -> AsyncGenerator[Any, None]:
        provider = self.current
        if provider is self.offline:  # it went away since the turn chose how to ask
            raise UpstreamError(f"no chat model: {self.reason}", 502, retryable=True)
        return await provider.respond(body)

    async def list_models(self) -> list[dict]:
        # Asked while none answers: look now. With a server in use, at most every RETRY_S (a client polling
        # GET /v1/models does not make each poll a round of probes).
        if self.current is self.offline or time.monotonic() - self._asked >= RETRY_S:
            await self.discover()
        return await self.current.list_models()

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        for provider in {id(p): p for p in [*self._old, self.current]}.values():
            await provider.close()


def make_provider(config: Config) -> ChatProvider:
    if config.chat_provider == "openai":
        c = config.chat
        return OpenAIProvider(
            c.api_key,
            c.base_url,
            c.model,
            c.timeout,
            c.max_retries,
            max_argument_chars=c.max_tool_argument_bytes,
            max_id_chars=c.max_tool_call_id_chars,
            responses_api=c.responses_api,
        )
    if config.discovers:
        return DiscoveredProvider(config)
    return OfflineResponder(config.chat.offline_delta_delay)
