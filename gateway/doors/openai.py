"""The OpenAI-compatible endpoint with memory: any OpenAI client gets recall and capture.

On the HTTP API listener (doors/httpapi.py: bearer token, Origin, body cap already checked):

    GET  /v1/models                 the chat provider's models (ChatProvider.list_models)
    GET  /v1/models/{model}         one of them
    POST /v1/chat/completions       streaming (SSE as OpenAI sends it) or not

A completion request is a chat run of the session it belongs to (chat/runner.py, `send(relay=...)`):
the last user message is recalled against memory as chat.send does, the recalled memory goes into the
client's system prompt, the request goes to the upstream as the client sent it (ChatProvider.relay),
its answer comes back as the upstream sent it, WebSocket subscribers of the session see chat.delta …
chat.final, and the user message and the reply are appended to the transcript and indexed.

Which session: `X-Jarvis-Session`, else the `user` field (`openai:user:<user>`), else one per
conversation: `openai:<hash of the system prompt and the first user message>`, so that a client resending
the whole history each turn stays in one session. Only the last message (when it is the user's) and the
reply are written: the history a client resends was written by the turns before.

What was recalled is told in the `X-Jarvis-Memory` response header (compact JSON, at most
MEMORY_HEADER_BYTES) and in a `jarvis` field of the last chunk (or of the completion object).
`X-Jarvis-Memory: off` / `X-Jarvis-Capture: off` turn recall / capture off for one request;
`openaiApi.memory` / `openaiApi.capture` for all.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any, AsyncIterator

import orjson
import structlog

from ..chat.providers import UpstreamError
from ..chat.stream import Delta, Usage
from ..chat.runner import memory_section
from ..errors import Conflict, JarvisError, SessionLimit, Unavailable
from ..methods.chat import name_after_first_message
from ..schema import SESSION_KEY
from .httpapi import error_body

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from ..services import Agent, Services

log = structlog.get_logger("gateway.openai_api")

MEMORY_HEADER_BYTES = 4096  # X-Jarvis-Memory: whole entries only, the best first
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
QUEUE_HIGH = 256  # chunks waiting for a slow client before the upstream is no longer read
_USER_KEY = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SESSION_KEY = re.compile(SESSION_KEY)


class ApiError(Exception):
    """A request the endpoint answers with an OpenAI-shaped error."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param
        self.headers = headers

    def response(self) -> "Response":
        from starlette.responses import Response

        return Response(
            error_body(self.status, self.message, type_=self.type, code=self.code, param=self.param),
            self.status,
            media_type="application/json",
            headers=self.headers,
        )


# ---- the request -------------------------------------------------------------------------------
def parse_request(raw: bytes) -> dict[str, Any]:
    """The request body, checked as far as the endpoint relies on it; the rest is the upstream's to judge."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400,
            "model: required, a model id from GET /v1/models",
            param="model",
            code="missing_required_parameter" if model is None else "invalid_type",
        )
    messages = body.get("messages")
    if messages is None:
        raise ApiError(
            400, "messages: required, a list of {role, content}", param="messages", code="missing_required_parameter"
        )
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: must be a non-empty list", param="messages", code="invalid_type")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ApiError(400, f"messages[{i}]: must be an object", param=f"messages[{i}]", code="invalid_type")
        if m.get("role") not in ROLES:
            raise ApiError(
                400,
                f"messages[{i}].role: must be one of {', '.join(ROLES)}",
                param=f"messages[{i}].role",
                code="invalid_value",
            )
        content = m.get("content")
        if not (
            content is None
            or isinstance(content, str)
            or (isinstance(content, list) and all(isinstance(p, dict) for p in content))
        ):
            raise ApiError(
                400,
                f"messages[{i}].content: must be a string or a list of content parts",
                param=f"messages[{i}].content",
                code="invalid_type",
            )
    if not isinstance(body.get("stream", False), bool):
        raise ApiError(400, "stream: must be true or false", param="stream", code="invalid_type")
    options = body.get("stream_options")
    if options is not None and not (
        isinstance(options, dict) and isinstance(options.get("include_usage", False), bool)
    ):
        raise ApiError(
            400,
            "stream_options: must be an object; include_usage true or false",
            param="stream_options",
            code="invalid_type",
        )
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise ApiError(400, "user: must be a string", param="user", code="invalid_type")
    return body


def text_of(content: Any) -> str:
    """A message's text: the string, or its text parts joined (images and audio have none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if p.get("type") == "text" and isinstance(p.get("text"), str))
    return ""


def session_for(headers: Any, body: dict[str, Any]) -> str:
    given = headers.get("x-jarvis-session")
    if given is not None:
        if not _SESSION_KEY.fullmatch(given):
            raise ApiError(
                400,
                "X-Jarvis-Session: must match [A-Za-z0-9._:-]{1,128} and not be dots only",
                param="X-Jarvis-Session",
                code="invalid_value",
            )
        return given
    user = body.get("user")
    if user:
        return "openai:user:" + (user if _USER_KEY.fullmatch(user) else _digest(user))
    messages = body["messages"]
    system = next((text_of(m.get("content")) for m in messages if m["role"] in ("system", "developer")), "")
    first = next((text_of(m.get("content")) for m in messages if m["role"] == "user"), "")
    return "openai:" + _digest(json.dumps([system, first]))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def with_memory(messages: list[dict[str, Any]], recalled: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client's messages with the recalled memory at the end of its system prompt (one added first
    when it has none)."""
    section = memory_section(recalled)
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


def memory_header(recalled: list[dict[str, Any]]) -> str:
    """Compact JSON of the recalled sources, ASCII (a header), whole entries up to MEMORY_HEADER_BYTES."""
    entries = [
        {"path": r["path"], "startLine": r["startLine"], "endLine": r["endLine"], "score": round(float(r["score"]), 4)}
        for r in recalled
    ]
    while True:
        text = json.dumps(entries, separators=(",", ":"), ensure_ascii=True)
        if len(text) <= MEMORY_HEADER_BYTES or not entries:
            return text
        entries.pop()


# ---- one request as a chat run -------------------------------------------------------------------
class Relay:
    """A completion request as the chat runner sees it (`ChatService.send(relay=...)`), and the
    channel between the run and the HTTP response: chunks and the run's last event, in order."""

    def __init__(self, agent: "Agent", key: str, body: dict[str, Any], *, memory: bool, capture: bool):
        self.agent, self.key, self.body = agent, key, body
        self.memory, self.capture = memory, capture
        last = body["messages"][-1]
        self.user_text = (text_of(last.get("content")) or None) if last["role"] == "user" else None
        self.query = next((text_of(m.get("content")) for m in reversed(body["messages"]) if m["role"] == "user"), "")
        self.recalled: list[dict[str, Any]] = []
        self.error: UpstreamError | None = None
        self.completion: dict[str, Any] | None = None
        self.run_id: str | None = None
        self.ended = False
        self._queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._room = asyncio.Event()
        self._room.set()

    def listener(self, method: str, event: dict[str, Any]) -> None:
        if method in ("chat.final", "chat.error", "chat.aborted"):
            self._queue.put_nowait(("end", method, event))

    async def get(self) -> tuple[Any, ...]:
        item = await self._queue.get()
        if self._queue.qsize() < QUEUE_HIGH // 2:
            self._room.set()
        if item[0] == "end":
            self.ended = True
        return item

    async def _put(self, chunk: dict[str, Any]) -> None:
        self._queue.put_nowait(("chunk", chunk))
        if self._queue.qsize() >= QUEUE_HIGH:  # the client reads slower than the upstream writes
            self._room.clear()
            wait = self.agent.chat.config.server.slow_consumer_seconds
            try:  # as long as a WebSocket subscriber may take: a client that never reads holds nothing
                async with asyncio.timeout(wait):
                    await self._room.wait()
            except TimeoutError:
                raise Unavailable(
                    f"the client read nothing of the stream for {wait:g} s "
                    "(server.slowConsumerSeconds): the reply was stopped",
                    retryable=True,
                ) from None

    async def stream(self, recalled: list[dict[str, Any]]) -> AsyncIterator[Delta | Usage]:
        """The run's source: the upstream's answer; chunks go to the HTTP response, text to the run."""
        self.recalled = recalled
        body = {**self.body, "messages": with_memory(self.body["messages"], recalled)}
        try:
            answer = await self.agent.chat.provider.relay(body, recalled)
            if not self.body.get("stream"):
                self.completion = _checked(answer, "completion")
                for item in _items(answer):
                    yield item
                return
            async with contextlib.aclosing(answer) as chunks:
                async for chunk in chunks:
                    await self._put(_checked(chunk, "chunk"))
                    for item in _items(chunk):
                        yield item
        except UpstreamError as exc:
            self.error = exc
            raise

    async def abort(self) -> None:
        """The client is gone: the run stops, its partial reply is kept marked aborted."""
        if not self.ended and self.run_id is not None:
            await self.agent.chat.abort(self.key, self.run_id)

    def watch(self, receive: Any) -> "asyncio.Task[None]":
        """A task that stops the run (and with it the upstream request) when the client goes away."""

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            await self.abort()

        return asyncio.create_task(watch(), name=f"openai-watch-{self.run_id}")

    def jarvis(self) -> dict[str, Any]:
        """The extra field of the last chunk (or of the completion): session, run and recalled sources."""
        return {
            "session": self.key if self.capture else None,
            "runId": self.run_id,
            "memory": json.loads(memory_header(self.recalled)),
        }

    def headers(self) -> dict[str, str]:
        headers = {"X-Jarvis-Memory": memory_header(self.recalled)}
        if self.capture:
            headers["X-Jarvis-Session"] = self.key
        return headers


def _checked(obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UpstreamError(f"the chat provider sent a {what} that is not a JSON object", 502, retryable=True)
    return obj


def _choices(obj: dict[str, Any]) -> list[Any]:
    """The `choices` of a chunk or a completion; none when the upstream sent something else there."""
    choices = obj.get("choices")
    return choices if isinstance(choices, list) else []


def _items(obj: dict[str, Any]) -> list[Delta | Usage]:
    """The text of the first choice and the usage in a chunk or a completion object."""
    out: list[Delta | Usage] = []
    for choice in _choices(obj):
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


def _failure(relay: Relay, event: dict[str, Any]) -> ApiError:
    """A run that ended in chat.error, as the HTTP error to answer with."""
    exc = relay.error
    if exc is not None:
        error = exc.error or {}
        code = "upstream_timeout" if exc.status == 504 else "upstream_error"
        message = error.get("message") if exc.status < 500 and isinstance(error.get("message"), str) else exc.message
        headers = {"Retry-After": str(max(1, exc.retry_after_ms // 1000))} if exc.retry_after_ms else None
        return ApiError(
            exc.status,
            message,
            type_=str(error.get("type") or "upstream_error"),
            code=str(error.get("code") or code) if exc.status < 500 else code,
            param=error.get("param") if isinstance(error.get("param"), str) else None,
            headers=headers,
        )
    err = event.get("error", {})
    return ApiError(500, str(err.get("message", "internal error")), type_="server_error", code="internal_error")


def _aborted(event: dict[str, Any]) -> ApiError:
    """A run that ended in chat.aborted (the gateway stopping, or chat.abort from a WebSocket client)."""
    why = "the gateway is stopping" if event.get("reason") == "shutdown" else "chat.abort stopped it"
    return ApiError(
        503, f"the reply was aborted: {why}", type_="server_error", code="aborted", headers={"Retry-After": "1"}
    )


# ---- the response ------------------------------------------------------------------------------
def _json(obj: Any) -> bytes:
    """JSON of what the upstream sent. Its strings may hold lone surrogates (a pair split across chunks by
    a proxy), which orjson refuses: they go out escaped (\\ud83d), as the upstream sent them."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()


def _sse(obj: Any) -> bytes:
    return b"data: " + _json(obj) + b"\n\n"


def _is_tail(chunk: dict[str, Any]) -> bool:
    """A chunk that may be the stream's last: no choices (usage) or one that finishes."""
    choices = _choices(chunk)
    return not choices or any(isinstance(c, dict) and c.get("finish_reason") for c in choices)


async def _frames(relay: Relay, first: tuple[Any, ...]) -> AsyncIterator[bytes]:
    """The SSE body. Text goes out as it comes; the tail chunks are held so that the last one can carry
    the `jarvis` field."""
    include_usage = bool((relay.body.get("stream_options") or {}).get("include_usage"))
    held: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    item = first
    while True:
        if item[0] == "chunk":
            chunk = last = item[1]
            if chunk.get("usage") and not chunk.get("choices") and not include_usage:
                pass  # the offline responder always counts; the client did not ask
            elif _is_tail(chunk):
                held.append(chunk)
            else:
                for h in held:
                    yield _sse(h)
                held.clear()
                yield _sse(chunk)
        else:
            method, event = item[1], item[2]
            if method in ("chat.error", "chat.aborted"):
                for h in held:
                    yield _sse(h)
                # OpenAI's mid-stream error: the SDK raises it (a stream that just ends reads as whole)
                failure = _failure(relay, event) if method == "chat.error" else _aborted(event)
                yield _sse(
                    {
                        "error": {
                            "message": failure.message,
                            "type": failure.type,
                            "param": failure.param,
                            "code": failure.code,
                        }
                    }
                )
                return
            if event.get("truncated") or not held:  # cut at chat.maxReplyChars, or the upstream sent no tail
                held = [
                    {
                        "id": last.get("id", f"chatcmpl-{relay.run_id}"),
                        "object": "chat.completion.chunk",
                        "created": last.get("created", 0),
                        "model": last.get("model", relay.body["model"]),
                        "choices": [
                            {
                                "index": 0,
                                "delta": {},
                                "logprobs": None,
                                "finish_reason": "length" if event.get("truncated") else "stop",
                            }
                        ],
                    }
                ]
            held[-1] = {**held[-1], "jarvis": relay.jarvis()}
            for h in held:
                yield _sse(h)
            yield b"data: [DONE]\n\n"
            return
        item = await relay.get()


def _event_stream(relay: Relay, first: tuple[Any, ...]) -> "Response":
    from starlette.responses import Response

    class EventStream(Response):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            headers = [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
            ]
            headers += [(k.lower().encode(), v.encode()) for k, v in relay.headers().items()]
            await send({"type": "http.response.start", "status": 200, "headers": headers})

            watcher = relay.watch(receive)
            try:
                async with contextlib.aclosing(_frames(relay, first)) as frames:
                    async for frame in frames:
                        await send({"type": "http.response.body", "body": frame, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:  # the client went away while we wrote
                pass
            finally:
                watcher.cancel()
                with contextlib.suppress(BaseException):
                    await relay.abort()

    return EventStream()


# ---- the routes --------------------------------------------------------------------------------
def routes(services: "Services") -> list["BaseRoute"]:
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    config = services.config

    async def models(request: Request) -> Response:
        agent = await services.agent()
        return JSONResponse({"object": "list", "data": await agent.chat.provider.list_models()})

    async def model(request: Request) -> Response:
        agent = await services.agent()
        wanted = request.path_params["model"]
        for found in await agent.chat.provider.list_models():
            if found.get("id") == wanted:
                return JSONResponse(found)
        return ApiError(
            404,
            f"The model `{wanted}` does not exist; GET /v1/models lists them",
            param="model",
            code="model_not_found",
        ).response()

    async def completions(request: Request) -> Response:
        try:
            return await _complete(request)
        except ApiError as exc:
            return exc.response()

    async def _complete(request: Request) -> Response:
        body = parse_request(await request.body())
        key = session_for(request.headers, body)
        off = {"off", "false", "0", "no"}
        memory = config.openai_api.memory and request.headers.get("x-jarvis-memory", "").lower() not in off
        capture = config.openai_api.capture and request.headers.get("x-jarvis-capture", "").lower() not in off
        with services.request_scope():
            agent = await services.agent()
            relay = Relay(agent, key, body, memory=memory, capture=capture)
            try:
                if capture:
                    await _ensure_session(agent, key, body)
                started = await agent.chat.send(key, relay.user_text, None, relay=relay)
            except SessionLimit as exc:
                raise ApiError(409, exc.message, type_="conflict_error", code="session_limit") from None
            except Conflict as exc:
                raise ApiError(
                    409, f"{exc.message}; retry when it has ended", type_="conflict_error", code="session_busy"
                ) from None
            except Unavailable as exc:
                raise ApiError(
                    503, exc.message, type_="server_error", code="unavailable", headers={"Retry-After": "1"}
                ) from None
            except JarvisError as exc:
                raise ApiError(400, exc.message, code="invalid_request") from None
            relay.run_id = started["runId"]
            watcher = relay.watch(request.receive)  # until the response is under way
            try:
                first = await relay.get()
                if not (body.get("stream") and first[0] == "chunk"):
                    while first[0] != "end":
                        first = await relay.get()
            except BaseException:
                await asyncio.shield(relay.abort())
                raise
            finally:
                watcher.cancel()
        if first[0] == "chunk":
            return _event_stream(relay, first)
        if first[1] == "chat.error":
            raise _failure(relay, first[2])
        if first[1] == "chat.aborted":
            raise _aborted(first[2])
        if body.get("stream"):  # an upstream stream with no chunk at all
            return _event_stream(relay, first)
        return Response(
            _json({**(relay.completion or {}), "jarvis": relay.jarvis()}),
            200,
            media_type="application/json",
            headers=relay.headers(),
        )

    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
    ]


async def _ensure_session(agent: "Agent", key: str, body: dict[str, Any]) -> None:
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
    first = next((text_of(m.get("content")) for m in body["messages"] if m["role"] == "user"), "")
    await name_after_first_message(agent, key, first)
