"""The OpenAI-compatible door: any OpenAI client gets recall and capture.

On the HTTP API listener (doors/httpapi.py: bearer token, Origin, body cap already checked):

    GET  /v1/models                 the chat provider's models      → the call chat.models
    GET  /v1/models/{model}         one of them                     → the call chat.models
    POST /v1/chat/completions       streaming (SSE) or not          → the call chat.relay
    POST /v1/responses              streaming (SSE) or not          → the call chat.respond
    GET  /v1/responses/{id}         a response kept                 → the call chat.response

The door only translates: the HTTP request into a call of the one path (dispatcher.py, Door.OPENAI),
and the call's result, its stream, or its one error value (`httpapi.http_error`: status, OpenAI's JSON
error, Retry-After) into the HTTP answer. A completion request is the call `chat.relay` (chat/relay.py):
the body, `X-Jarvis-Session`, and whether to recall and capture; the method validates the body and
runs the turn as a chat run of its session, the upstream's chunks coming back through this door's
`RelayChannel`, the run's events as to any subscriber of the session.

What was recalled is told in the `X-Jarvis-Memory` response header (compact JSON, at most
MEMORY_HEADER_BYTES) and in a `jarvis` field of the last chunk (or of the completion object).
`X-Jarvis-Memory: off` / `X-Jarvis-Capture: off` turn recall / capture off for one request;
`openaiApi.memory` / `openaiApi.capture` for all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, AsyncIterator

import orjson
from ..calls import Call, Door
from ..chat.providers import UpstreamError
from ..chat.relay import agent_for_user, anonymous_agent, choices, proxied_user
from ..chat.respevents import DONE
from ..errors import Invalid, JarvisError, NotFound, Unavailable
from ..memory.present import references
from ..principals import OWNER
from ..protocol import error_of
from .httpapi import http_error, json_error, principal_of

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from ..calls import ServiceAccess
    from ..events import Event

MEMORY_HEADER_BYTES = 4096  # X-Jarvis-Memory: whole entries only, the best first
QUEUE_HIGH = 256  # chunks waiting for a slow client before the upstream is no longer read
_ENDS = ("chat.final", "chat.error", "chat.aborted")


class ApiError(Exception):
    """An answer in OpenAI's error shape."""

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

    @classmethod
    def of(cls, err: JarvisError) -> "ApiError":
        """The one error value of a call of this door, with `param` and the message naming what the
        client sent: a member of its body, or the X-Jarvis-Session header."""
        param = message = None
        if isinstance(err, Invalid) and err.field is not None:
            field = err.field.removeprefix("params.")
            if field == "request":  # the body itself
                return cls(400, f"the request body {err.rule}", code="invalid_json")
            param = "X-Jarvis-Session" if field == "session" else field.removeprefix("request.")
            message = f"{param}: {err.rule}"
        status, body, headers = http_error(err, param=param, message=message)
        error = orjson.loads(body)["error"]
        return cls(status, error["message"], type_=error["type"], code=error["code"], param=param, headers=headers)

    def response(self) -> "Response":
        return json_error(
            self.status, self.message, type_=self.type, code=self.code, param=self.param, headers=self.headers
        )


INLINE_JSON_BYTES = 64 << 10  # a bigger body is parsed in a thread: a 6 MB one takes ~100 ms of CPU


async def read_body(raw: bytes, max_items: int) -> Any:
    """A /v1 request body parsed (in a thread when big: the event loop never waits on it), its
    `messages` (or `input` items) past `max_items` (openaiApi.maxMessages) refused with a 400 naming
    the field; a refused body is dropped in the thread too. Its bytes are capped by the listener
    (server.httpMaxBodyBytes: 413)."""
    if len(raw) <= INLINE_JSON_BYTES:
        return _parse(raw, max_items)
    return await asyncio.to_thread(_parse, raw, max_items)


def _parse(raw: bytes, max_items: int) -> Any:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if isinstance(body, dict):
        for name in ("messages", "input"):
            items = body.get(name)
            if isinstance(items, list) and len(items) > max_items:
                n = len(items)
                del body, items  # freed here, not by whoever handles the error
                raise ApiError(
                    400,
                    f"{name}: {n} items, at most {max_items} (openaiApi.maxMessages)",
                    code="array_above_max_length",
                    param=name,
                )
    return body


def memory_header(recalled: list[dict[str, Any]]) -> str:
    """Compact JSON of the recalled sources, ASCII (a header), whole entries up to MEMORY_HEADER_BYTES."""
    entries = references(recalled)
    while True:
        text = json.dumps(entries, separators=(",", ":"), ensure_ascii=True)
        if len(text) <= MEMORY_HEADER_BYTES or not entries:
            return text
        entries.pop()


# ---- one request's channel -------------------------------------------------------------------------------
class RelayChannel:
    """The door's end of a relayed request (chat/relay.py's RelaySink), and the request's connection to
    the event bus (subscribed to its session like a WebSocket client): the upstream's chunks and the
    run's last event, in order, for the HTTP answer."""

    def __init__(self, slow_consumer_seconds: float, peer: str):
        self.connection_id = "openai-" + uuid.uuid4().hex[:12]
        self.peer = peer  # the client's address
        self.closing = False  # the client went away
        self.subscriptions: set[str] = set()
        self.slow_consumer_seconds = slow_consumer_seconds
        self.run_id: str | None = None
        self.session_key: str | None = None
        self.capture = True
        self.completion: dict[str, Any] | None = None
        self.error: UpstreamError | None = None
        self.memory: list[dict[str, Any]] = []  # what was recalled into the request
        self.notes: list[str] = []  # what of the request was left out (chat/restools.py)
        self.ended = False
        self._queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._room = asyncio.Event()
        self._room.set()

    # the event bus's Subscriber
    def deliver(self, event: "Event") -> None:
        if event.method in _ENDS:
            self._queue.put_nowait(("end", event.method, event.params))

    # chat/relay.py's RelaySink
    async def chunk(self, obj: dict[str, Any]) -> None:
        self._queue.put_nowait(("chunk", obj))
        if self._queue.qsize() >= QUEUE_HIGH:  # the client reads slower than the upstream writes
            self._room.clear()
            wait = self.slow_consumer_seconds
            try:  # as long as a WebSocket subscriber may take: a client that never reads holds nothing
                async with asyncio.timeout(wait):
                    await self._room.wait()
            except TimeoutError:
                raise Unavailable(
                    f"the client read nothing of the stream for {wait:g} s "
                    "(server.slowConsumerSeconds): the reply was stopped",
                    retryable=True,
                ) from None

    def recalled(self, hits: list[dict[str, Any]]) -> None:
        self.memory = hits

    def completed(self, obj: dict[str, Any]) -> None:
        self.completion = obj

    def refused(self, exc: UpstreamError) -> None:
        self.error = exc

    def noted(self, note: str) -> None:
        self.notes.append(note)

    # the door's side
    async def get(self) -> tuple[Any, ...]:
        """The next chunk, or ("end", method, event) of this run."""
        while True:
            item = await self._queue.get()
            if self._queue.qsize() < QUEUE_HIGH // 2:
                self._room.set()
            if item[0] == "end":
                if item[2].get("runId") != self.run_id:
                    continue  # another run of the session (the one before, told late)
                self.ended = True
            return item

    def jarvis(self) -> dict[str, Any]:
        """The extra field of the last chunk (or of the completion): session, run and recalled sources;
        `notes` when something of the request was left out."""
        extra = {
            "session": self.session_key if self.capture else None,
            "runId": self.run_id,
            "memory": json.loads(memory_header(self.memory)),
        }
        if self.notes:
            extra["notes"] = list(self.notes)
        return extra

    def headers(self) -> dict[str, str]:
        headers = {"X-Jarvis-Memory": memory_header(self.memory)}
        if self.capture and self.session_key is not None:
            headers["X-Jarvis-Session"] = self.session_key
        return headers


def _failure(channel: RelayChannel, event: dict[str, Any]) -> ApiError:
    """A run that ended in chat.error, as the HTTP error to answer with: the upstream's own refusal as it
    gave it, any other failure as its one error value."""
    exc = channel.error
    if exc is not None:
        error = exc.error or {}
        code = "upstream_timeout" if exc.status == 504 else "upstream_error"
        said = error.get("message")
        message = said if exc.status < 500 and isinstance(said, str) else exc.message
        headers = {"Retry-After": str(max(1, exc.retry_after_ms // 1000))} if exc.retry_after_ms else None
        return ApiError(
            exc.status,
            message,
            type_=str(error.get("type") or "upstream_error"),
            code=str(error.get("code") or code) if exc.status < 500 else code,
            param=error.get("param") if isinstance(error.get("param"), str) else None,
            headers=headers,
        )
    err = event.get("error") or {}  # {code, message, retryable}: rendered by the class of its code (503 retryable)
    data = {"retryable": bool(err.get("retryable"))}
    return ApiError.of(
        error_of({"code": err.get("code"), "message": err.get("message") or "internal error", "data": data})
    )


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
    found = choices(chunk)
    return not found or any(isinstance(c, dict) and c.get("finish_reason") for c in found)


async def _frames(channel: RelayChannel, body: dict[str, Any], first: tuple[Any, ...]) -> AsyncIterator[bytes]:
    """The SSE body. Text goes out as it comes; the tail chunks are held so that the last one can carry
    the `jarvis` field."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
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
                failure = _failure(channel, event) if method == "chat.error" else _aborted(event)
                yield _sse({"error": _error_body(failure)})
                return
            if event.get("truncated") or not held:  # cut at chat.maxReplyChars, or the upstream sent no tail
                held = [
                    {
                        "id": last.get("id", f"chatcmpl-{channel.run_id}"),
                        "object": "chat.completion.chunk",
                        "created": last.get("created", 0),
                        "model": last.get("model", body["model"]),
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
            held[-1] = {**held[-1], "jarvis": channel.jarvis()}
            for h in held:
                yield _sse(h)
            yield b"data: [DONE]\n\n"
            return
        item = await channel.get()


def _error_body(failure: ApiError) -> dict[str, Any]:
    return {"message": failure.message, "type": failure.type, "param": failure.param, "code": failure.code}


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: " + str(obj.get("type", "message")).encode() + b"\n" + _sse(obj)


async def _response_frames(channel: RelayChannel, body: dict[str, Any], first: tuple[Any, ...]) -> AsyncIterator[bytes]:
    """The SSE body of /v1/responses: `event: <type>` and `data: <event>` as OpenAI sends them. The
    response's last event (`response.completed` …) is held so that its response can carry the `jarvis`
    field; a failure is an `error` event, as OpenAI's."""
    held: list[dict[str, Any]] = []
    sequence = 0
    item = first
    while True:
        if item[0] == "chunk":
            event = item[1]
            sequence = int(event.get("sequence_number", sequence)) + 1
            if event.get("type") in DONE:
                held.append(event)
            else:
                yield _event(event)
        else:
            method, end = item[1], item[2]
            if method in ("chat.error", "chat.aborted"):
                failure = _failure(channel, end) if method == "chat.error" else _aborted(end)
                error = _error_body(failure)
                yield _event({"type": "error", **error, "sequence_number": sequence, "error": error})
                return
            for event in held:
                yield _event({**event, "response": {**event["response"], "jarvis": channel.jarvis()}})
            return
        item = await channel.get()


# ---- the routes --------------------------------------------------------------------------------
ACTING_FOR = "jarvis.actingFor"  # the ASGI scope's key: the principal acting for a front-end's user


def routes(services: "ServiceAccess") -> list["BaseRoute"]:
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    config = services.config
    calls = services.calls

    def call(request: Request, method: str, params: dict[str, Any], channel: RelayChannel | None = None) -> Any:
        """`method` through the one path, as the principal the listener's guard authenticated (or the
        principal acting for a front-end's user, `acting_for`)."""
        principal = request.scope.get(ACTING_FOR) or principal_of(request.scope)
        return calls.perform(Call(Door.OPENAI, method, params, principal, connection=channel))

    def acting_for(request: Request, body: Any) -> str | None:
        """A principal with scope `proxy` acts for the front-end's user the request names (its `user`, or
        Open WebUI's forwarded-user header): that user's own agent, made on first use (within agents.max),
        and nothing else; a request that names no user (a front-end's own title and tag tasks) acts in
        the front-end's anonymous agent (`anon.<principal>`), never a person's memory nor the agent the key
        was made on. Without the scope: the token's own agent (the `user` then picks a session only); the
        owner's token works as it always did. → the agent, or None."""
        principal = principal_of(request.scope)
        if principal.name == OWNER or not principal.may("proxy") or not isinstance(body, dict):  # owner: as ever
            return None
        user = proxied_user(body, request.headers)
        agent = anonymous_agent(principal.name) if user is None else agent_for_user(user)
        request.scope[ACTING_FOR] = replace(principal, agents=(agent,))
        return agent

    async def stop(request: Request, channel: RelayChannel) -> None:
        """The client is gone: the run stops, its partial reply is kept marked aborted."""
        if not channel.ended and channel.run_id is not None:
            with contextlib.suppress(JarvisError):
                await call(request, "chat.abort", {"sessionKey": channel.session_key, "runId": channel.run_id})

    def watch(request: Request, channel: RelayChannel, receive: Any) -> "asyncio.Task[None]":
        """A task that stops the run (and with it the upstream request) when the client goes away."""

        async def watching() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            channel.closing = True
            await stop(request, channel)

        return asyncio.create_task(watching(), name=f"openai-watch-{channel.run_id}")

    def event_stream(
        request: Request, channel: RelayChannel, body: dict[str, Any], first: tuple[Any, ...], frames: Any
    ) -> Response:
        class EventStream(Response):
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                headers = [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ]
                headers += [(k.lower().encode(), v.encode()) for k, v in channel.headers().items()]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                watcher = watch(request, channel, receive)
                try:
                    async with contextlib.aclosing(frames(channel, body, first)) as sent:
                        async for frame in sent:
                            await send({"type": "http.response.body", "body": frame, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except OSError:  # the client went away while we wrote
                    pass
                finally:
                    watcher.cancel()
                    with contextlib.suppress(BaseException):
                        await stop(request, channel)
                    services.bus.drop(channel)

        return EventStream()

    async def models(request: Request) -> Response:
        try:
            found = (await call(request, "chat.models", {}))["models"]
        except JarvisError as exc:
            return ApiError.of(exc).response()
        return JSONResponse({"object": "list", "data": found})

    async def model(request: Request) -> Response:
        wanted = request.path_params["model"]
        try:
            found = (await call(request, "chat.models", {}))["models"]
            for one in found:
                if one.get("id") == wanted:
                    return JSONResponse(one)
            raise NotFound(f"The model `{wanted}` does not exist; GET /v1/models lists them")
        except JarvisError as exc:
            refused = ApiError.of(exc)
            if isinstance(exc, NotFound):
                refused.param, refused.code = "model", "model_not_found"
            return refused.response()

    async def completions(request: Request) -> Response:
        return await answer(request, "chat.relay", _frames)

    async def responses(request: Request) -> Response:
        return await answer(request, "chat.respond", _response_frames)

    async def stored_response(request: Request) -> Response:
        try:
            found = await call(request, "chat.response", {"responseId": request.path_params["response_id"]})
        except JarvisError as exc:
            return ApiError.of(exc).response()
        return Response(_json(found), 200, media_type="application/json")

    async def answer(request: Request, method: str, frames: Any) -> Response:
        try:
            return await _complete(request, method, frames)
        except ApiError as exc:
            return exc.response()
        except JarvisError as exc:
            return ApiError.of(exc).response()

    async def _complete(request: Request, method: str, frames: Any) -> Response:
        body = await read_body(await request.body(), config.openai_api.max_messages)
        off = {"off", "false", "0", "no"}
        params = {
            "request": body,
            "session": request.headers.get("x-jarvis-session"),
            "memory": config.openai_api.memory and request.headers.get("x-jarvis-memory", "").lower() not in off,
            "capture": config.openai_api.capture and request.headers.get("x-jarvis-capture", "").lower() not in off,
        }
        agent = acting_for(request, body)
        if agent is not None:
            params["agentId"] = agent
        channel = RelayChannel(config.server.slow_consumer_seconds, (request.client or ("?", 0))[0])
        try:
            started = await call(request, method, params, channel)
            stream = body.get("stream") is True  # the body is valid now (the call validated it)
            channel.run_id, channel.session_key, channel.capture = (
                started["runId"],
                started["sessionKey"],
                started.get("captured", params["capture"]),  # not a side request's (chat/relay.py)
            )
            watcher = watch(request, channel, request.receive)  # until the response is under way
            try:
                first = await channel.get()
                if not (stream and first[0] == "chunk"):
                    while first[0] != "end":
                        first = await channel.get()
            except BaseException:
                await asyncio.shield(stop(request, channel))
                raise
            finally:
                watcher.cancel()
        except BaseException:
            services.bus.drop(channel)
            raise
        if first[0] == "chunk" or (stream and first[1] == "chat.final"):  # (an upstream stream of no chunk)
            return event_stream(request, channel, body, first, frames)
        services.bus.drop(channel)
        if first[1] == "chat.error":
            raise _failure(channel, first[2])
        if first[1] == "chat.aborted":
            raise _aborted(first[2])
        return Response(
            _json({**(channel.completion or {}), "jarvis": channel.jarvis()}),
            200,
            media_type="application/json",
            headers=channel.headers(),
        )

    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/responses/{response_id}", stored_response, methods=["GET"]),
    ]
