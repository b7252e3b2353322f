"""`OpenAIProvider`: any OpenAI-compatible `/chat/completions` endpoint, streamed, through the SDK.

Retries before the first byte are the SDK's (bounded by `chat.maxRetries`, honouring
`Retry-After`/`retry-after-ms`); `chat.timeout` runs between chunks with content (upstream.paced). The tool
calls of one answer are joined from their streamed fragments here, within what one answer may keep
(MAX_TOOL_CALLS, chat.maxToolArgumentBytes); the runner refuses those cut (chat/tools.bound_calls)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncGenerator

import structlog

from ..neterrors import connection_failure
from ..neterrors import short as _short
from .provider import ChatProvider, ToolsRejected, UpstreamError, model_object
from .stream import MAX_TOOL_ARGUMENT_CHARS, Delta, ToolCall, ToolCalls, Usage
from .upstream import paced

log = structlog.get_logger("gateway.chat")


MODELS_TIMEOUT_S = 10.0
MODELS_TTL_S = 60.0  # how long the upstream's model list is kept (a new model shows up within a minute)


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
