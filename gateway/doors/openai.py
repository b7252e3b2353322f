"""The OpenAI-compatible door: any OpenAI client gets recall and capture.

On the HTTP API listener (doors/httpapi.py: bearer token, Origin, body cap already checked):

    GET  /v1/models                 the chat provider's models      → the call chat.models
    GET  /v1/models/{model}         one of them                     → the call chat.models
    POST /v1/chat/completions       streaming (SSE) or not          → the call chat.relay
    POST /v1/responses              streaming (SSE) or not          → the call chat.respond
    GET  /v1/responses/{id}         a response kept                 → the call chat.response

The door only translates: the HTTP request into a call of the one path (dispatcher.py, Door.OPENAI),
and the call's result, or its one error value (`httpapi.http_error`: status, OpenAI's JSON error,
Retry-After) into the HTTP answer. A completion request is the call `chat.relay` (chat/relay.py): the
body, `X-Jarvis-Session`, and whether to recall and capture; the method validates the body, starts the
turn as a chat run of its session and answers with the run's handle, whose typed events
(chat/events.py) doors/openaistream.py renders as JSON or SSE. The run's events reach the session's
subscribers as for any chat run.

`X-Jarvis-Memory: off` / `X-Jarvis-Capture: off` turn recall / capture off for one request;
`openaiApi.memory` / `openaiApi.capture` for all.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, AsyncGenerator

import orjson
import structlog

from ..calls import Call, Door, ForUser
from ..chat.events import RunHandle
from ..errors import JarvisError, NotFound
from .httpapi import principal_of
from .openaistream import ApiError, Frames, chat_frames, reply, response_frames, to_json

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from ..calls import ServiceAccess


log = structlog.get_logger("gateway.openai")

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


FOR_USER = "jarvis.forUser"  # the ASGI scope's key: the front-end's user a request is sent for (ForUser)
PROXY_USER_HEADERS = ("x-openwebui-user-id", "x-openwebui-user-name")  # Open WebUI's forwarded user


def proxied_user(request: dict[str, Any], headers: Any) -> str | None:
    """Whom a front-end acting for its users (scope `proxy`) sends this request for: the request's `user`,
    else the forwarded-user header Open WebUI sends (ENABLE_FORWARD_USER_INFO_HEADERS); None when neither."""
    user = request.get("user")
    if isinstance(user, str) and user.strip():
        return user.strip()
    for name in PROXY_USER_HEADERS:
        value = headers.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()[:512]
    return None


class EventStream:
    """The SSE answer of a run (an ASGI app): the headers, then the frames as the run makes them; the run
    stops when the client goes away (its partial reply kept, marked aborted)."""

    def __init__(
        self,
        door: "V1Door",
        request: "Request",
        handle: RunHandle,
        headers: dict[str, str],
        frames: AsyncGenerator[bytes, None],
    ):
        self.door, self.request, self.handle, self.headers, self.frames = door, request, handle, headers, frames

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        headers += [(k.lower().encode(), v.encode()) for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        watcher = self.door.watch(self.request, self.handle, receive)
        try:
            async with contextlib.aclosing(self.frames) as sent:
                async for frame in sent:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while we wrote
            pass
        finally:
            watcher.cancel()
            try:  # the abort finishes even when this task is cancelled (the cancellation still goes on)
                await asyncio.shield(self.door.stop(self.request, self.handle))
            except Exception:
                log.warning("openai_stream_stop_failed", exc_info=True)


class V1Door:
    """The routes' handlers: each request a call of the one path, its answer rendered."""

    def __init__(self, services: "ServiceAccess"):
        self.config = services.config
        self.calls = services.calls

    def call(self, request: "Request", method: str, params: dict[str, Any]) -> Any:
        """`method` through the one path, as the principal the listener's guard authenticated; a request a
        front-end sends for one of its users says whom (`FOR_USER`: the dispatcher narrows the principal)."""
        return self.calls.perform(
            Call(Door.OPENAI, method, params, principal_of(request.scope), for_user=request.scope.get(FOR_USER))
        )

    async def stop(self, request: "Request", handle: RunHandle) -> None:
        """The client is gone: the run stops, its partial reply is kept marked aborted."""
        if not handle.ended:
            with contextlib.suppress(JarvisError):
                await self.call(request, "chat.abort", {"sessionKey": handle.session_key, "runId": handle.run_id})

    def watch(self, request: "Request", handle: RunHandle, receive: Any) -> "asyncio.Task[None]":
        """A task that stops the run (and with it the upstream request) when the client goes away."""

        async def watching() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            await self.stop(request, handle)

        return asyncio.create_task(watching(), name=f"openai-watch-{handle.run_id}")

    # ---- the routes ------------------------------------------------------------------------------------
    async def models(self, request: "Request") -> "Response":
        from starlette.responses import JSONResponse

        try:
            found = (await self.call(request, "chat.models", {}))["models"]
        except JarvisError as exc:
            return ApiError.of(exc).response()
        return JSONResponse({"object": "list", "data": found})

    async def model(self, request: "Request") -> "Response":
        from starlette.responses import JSONResponse

        wanted = request.path_params["model"]
        try:
            found = (await self.call(request, "chat.models", {}))["models"]
            for one in found:
                if one.get("id") == wanted:
                    return JSONResponse(one)
            raise NotFound(f"The model `{wanted}` does not exist; GET /v1/models lists them")
        except JarvisError as exc:
            refused = ApiError.of(exc)
            if isinstance(exc, NotFound):
                refused.param, refused.code = "model", "model_not_found"
            return refused.response()

    async def completions(self, request: "Request") -> "Response":
        return await self.answer(request, "chat.relay", chat_frames)

    async def responses(self, request: "Request") -> "Response":
        return await self.answer(request, "chat.respond", response_frames)

    async def stored_response(self, request: "Request") -> "Response":
        from starlette.responses import Response

        # A front-end's user names themselves on a GET as on a POST (its forwarded-user header): the
        # response is looked up in that user's agent, where the POST kept it (proxy; none named: anonymous).
        request.scope[FOR_USER] = ForUser(proxied_user({}, request.headers))
        try:
            found = await self.call(request, "chat.response", {"responseId": request.path_params["response_id"]})
        except JarvisError as exc:
            return ApiError.of(exc).response()
        return Response(to_json(found), 200, media_type="application/json")

    async def answer(self, request: "Request", method: str, frames: Frames) -> Any:
        try:
            return await self._run(request, method, frames)
        except ApiError as exc:
            return exc.response()
        except JarvisError as exc:
            return ApiError.of(exc).response()

    async def _run(self, request: "Request", method: str, frames: Frames) -> Any:
        """The run the request starts, answered as JSON once it ends, or as SSE from its first chunk."""
        from starlette.responses import Response

        config = self.config
        body = await read_body(await request.body(), config.openai_api.max_messages)
        off = {"off", "false", "0", "no"}
        params = {
            "request": body,
            "session": request.headers.get("x-jarvis-session"),
            "memory": config.openai_api.memory and request.headers.get("x-jarvis-memory", "").lower() not in off,
            "capture": config.openai_api.capture and request.headers.get("x-jarvis-capture", "").lower() not in off,
        }
        if isinstance(body, dict):  # whom a front-end sends it for (its `proxy` scope: the dispatcher's to weigh)
            request.scope[FOR_USER] = ForUser(proxied_user(body, request.headers))
        handle: RunHandle = await self.call(request, method, params)
        watcher = self.watch(request, handle, request.receive)  # until the response is under way
        try:
            answer = await reply(handle, body, frames)
        except BaseException:
            await asyncio.shield(self.stop(request, handle))
            raise
        finally:
            watcher.cancel()
        if answer.frames is not None:
            return EventStream(self, request, handle, answer.headers, answer.frames)
        return Response(answer.body, 200, media_type="application/json", headers=answer.headers)


def routes(services: "ServiceAccess") -> list["BaseRoute"]:
    from starlette.routing import Route

    door = V1Door(services)
    return [
        Route("/v1/models", door.models, methods=["GET"]),
        Route("/v1/models/{model:path}", door.model, methods=["GET"]),
        Route("/v1/chat/completions", door.completions, methods=["POST"]),
        Route("/v1/responses", door.responses, methods=["POST"]),
        Route("/v1/responses/{response_id}", door.stored_response, methods=["GET"]),
    ]
