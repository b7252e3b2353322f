"""The one ASGI guard in front of every route of the HTTP API listener (/mcp, /v1), in this order:

0. a header that must come once and came more than once (handshake.py's `SINGLE`: Authorization,
   Origin, Host, Content-Length, Content-Type, Transfer-Encoding, the X-Jarvis-* and X-OpenWebUI-* ones,
   MCP's): 400, as the WebSocket's port answers it — which of two tokens, origins or users to trust?;
1. Origin: the WebSocket's allow-list (403);
2. the bearer token, whose principal (access.py) the routes' calls carry (`principal_of`); a wrong one is counted by the WebSocket's per-address limiter and answered slowly
   (401, 429 past the limiter), as one of a bounded number of such waits (httplimits.py: the oldest is
   answered at once to make room), with `Connection: close`;
3. the limits of a request with the right token (httplimits.py): its token's and all tokens' requests in
   flight, the request bodies held at once, the body's own cap (413) and its time to arrive (408);
4. the route, its event stream (if it answers one) counted and ended when idle or when too many are open;
5. whatever escapes the route: the one error value of the dispatcher (`failure`: a database that cannot
   be reached is a retryable 503, anything else a 500 with an errorId whose traceback only the log has),
   in OpenAI's JSON error shape; never text/plain.

A principal revoked while its requests are answered (`revoked`, from access.py's `on_revoked`) has them
ended at once: 401 "token revoked" when nothing was answered yet, else its stream cut short.

Lifespan events pass through.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Mapping

import structlog

from .. import errors as e
from .handshake import duplicated
from .httperrors import BodyRefused, http_error, send_error, send_json
from .httplimits import HttpLimits, Refusal, Stream

if TYPE_CHECKING:  # pragma: no cover
    from ..access import Principals
    from ..config import Config
    from ..principals import Principal
    from .handshake import Handshake

log = structlog.get_logger("gateway.http")

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
Failure = Callable[[str, Exception], e.JarvisError]  # (what was asked, what it raised) → the one error value

_CLOSE = {"Connection": "close"}

_DISCONNECT = {"type": "http.disconnect"}


async def send_refusal(send: Send, refusal: Refusal) -> None:
    await send_error(
        send, refusal.status, refusal.message, type_=refusal.type, code=refusal.code, headers=refusal.headers
    )


PRINCIPAL = "jarvis.principal"  # the ASGI scope's key for the request's principal, set by the Guard


def principal_of(scope: Mapping[str, Any]) -> "Principal":
    """The principal the Guard authenticated for this request (a route behind the Guard always has one)."""
    return scope[PRINCIPAL]


def _is_event_stream(message: dict[str, Any]) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in message["headers"])


class Guard:
    def __init__(
        self,
        app: Callable,
        config: "Config",
        principals: "Principals",
        handshake: "Handshake",
        limits: HttpLimits,
        failure: Failure | None = None,
    ):
        self.app = app
        self.config = config
        self.principals = principals
        self.handshake = handshake
        self.limits = limits
        self.failure = failure
        self.open: dict[str, set[asyncio.Task[Any]]] = {}  # a principal's token digest → its requests answered
        self.cut: set[asyncio.Task[Any]] = set()  # requests ended because their principal was revoked

    def revoked(self, digests: set[str]) -> None:
        """The principals of these token digests were revoked (by identity: a name given anew is another
        principal): end their requests in flight — a /v1 stream, an MCP call — now; their next request is
        refused by the token check."""
        for digest in digests:
            for task in self.open.pop(digest, set()):
                self.cut.add(task)
                task.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers", [])
        peer = (scope.get("client") or ("?", 0))[0]
        twice = duplicated(k for k, _ in raw)
        if twice is not None:
            log.warning("duplicate header refused", header=twice[:64], peer=peer, api="http")
            await send_error(
                send,
                400,
                f"duplicate {twice[:64]} header",
                type_="invalid_request_error",
                code="duplicate_header",
                headers=_CLOSE,
            )
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
        origin = headers.get("origin")
        if origin is not None and origin not in self.handshake.allowed_origins:
            from .handshake import origin_refusal

            log.warning("origin refused", origin=origin[:200], peer=peer, api="http")
            await send_error(send, 403, origin_refusal(origin), type_="permission_error", code="origin_not_allowed")
            return
        scheme, _, token = headers.get("authorization", "").partition(" ")
        principal = self.principals.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        if principal is None:
            await self._wrong_token(send, peer, scheme)
            return
        scope[PRINCIPAL] = principal  # the routes' calls carry it (`principal_of`)
        key = principal.name  # limits per principal: every device of one person counted as theirs
        refusal = self.limits.admit(key)
        if refusal is not None:
            await send_refusal(send, refusal)
            return
        task = asyncio.current_task()
        assert task is not None
        mine = self.open.setdefault(principal.token_hash, set())
        mine.add(task)
        try:
            await self._admitted(scope, receive, send, headers)
        finally:
            self.limits.done(key)
            self.cut.discard(task)
            mine.discard(task)
            if not mine and self.open.get(principal.token_hash) is mine:
                del self.open[principal.token_hash]

    async def _wrong_token(self, send: Send, peer: str, scheme: str) -> None:
        wait, _cut = await self.limits.unauthenticated(peer, self.handshake.auth_failed(peer, "http"))
        if wait:
            await send_error(
                send,
                429,
                "too many failed authentications; wrong tokens are refused for a while "
                "(the right one is always accepted)",
                type_="rate_limit_error",
                code="rate_limited",
                headers={"Retry-After": str(int(wait) + 1), **_CLOSE},
            )
            return
        message = (
            "invalid token"
            if scheme
            else "missing token: send Authorization: Bearer <gateway token> (`jarvis token` prints it)"
        )
        await send_error(
            send,
            401,
            message,
            type_="authentication_error",
            code="invalid_api_key",
            headers={"WWW-Authenticate": 'Bearer realm="jarvis"', **_CLOSE},
        )

    async def _admitted(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> None:
        limits = self.limits
        limit = self.config.server.http_max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await BodyRefused.too_large(limit).send_to(send)
            return
        held = int(declared) if declared.isdigit() else 0
        refusal = limits.take_body(held)
        if refusal is not None:
            await send_refusal(send, refusal)
            return
        timeout = self.config.server.http_body_timeout
        loop = asyncio.get_running_loop()
        received = 0
        started = finished = refused = False
        body_done = False
        deadline: float | None = None
        stream: Stream | None = None
        gone: asyncio.Future[None] = loop.create_future()  # the route is to hear that its client went away

        async def counting_receive() -> dict[str, Any]:
            nonlocal received, body_done, deadline, held
            if body_done:  # after the body: waiting for a disconnect, as long as a response streams
                return await _until(receive, gone)
            if deadline is None:
                deadline = loop.time() + timeout
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyRefused(
                    408,
                    f"request body not all received within {timeout:g} s (server.httpBodyTimeout)",
                    "request_timeout",
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyRefused.too_large(limit)
                if received > held:  # a body without Content-Length (chunked), counted as it comes
                    refused = limits.take_body(received - held)
                    if refused is not None:
                        raise BodyRefused(refused.status, refused.message, refused.code)
                    held = received
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started, finished, stream, refused
            if gone.done() and (stream is not None or refused):
                return  # the guard ended this answer (an idle stream, a stream refused): writes go nowhere
            if message["type"] == "http.response.start":
                if _is_event_stream(message):
                    opened = limits.open_stream(scope.get("path", ""), gone)
                    if isinstance(opened, Refusal):
                        refused = started = finished = True
                        gone.set_result(None)
                        await send_refusal(send, opened)
                        return
                    stream = opened
                started = True
            elif message["type"] == "http.response.body":
                if stream is not None:
                    stream.sent(message.get("body", b""), loop.time())
                finished = not message.get("more_body", False)
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyRefused as exc:
            if not started:
                await exc.send_to(send)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task not in self.cut:
                raise
            # Its principal was revoked: refused if nothing was answered yet, else its stream cut short
            # (below), and the connection with it.
            task.uncancel()
            log.info("request ended: principal revoked", principal=principal_of(scope).name, path=scope.get("path"))
            if not started:
                started = finished = True
                try:
                    await send_error(
                        send, 401, "token revoked", type_="authentication_error", code="invalid_api_key", headers=_CLOSE
                    )
                except Exception:  # noqa: BLE001 - the client is gone
                    pass
        except Exception as exc:  # noqa: BLE001 - every failure is answered in OpenAI's shape, and logged
            await self._failed(scope, exc, send, started)
            finished = finished or not started  # mid-stream: the body is ended below
        finally:
            limits.give_body(held)
            if stream is not None:
                limits.close_stream(stream)
        if started and not finished:  # a stream ended by the guard (idle): end its body cleanly
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:  # noqa: BLE001 - the client is gone already
                pass

    async def _failed(self, scope: Scope, exc: Exception, send: Send, started: bool) -> None:
        what = f"{scope.get('method', '?')} {scope.get('path', '?')}"
        if self.failure is not None:
            err = self.failure(what, exc)  # logs it (an internal error with its errorId and traceback)
        else:
            log.error("internal error", request=what, exc_info=exc)
            err = e.InternalError("internal error")
        if started:
            return  # the answer is under way: the log has it; the client sees its stream end
        status, body, headers = http_error(err)
        try:
            await send_json(send, status, body, headers)
        except Exception:  # noqa: BLE001 - the client is gone
            pass


async def _until(receive: Receive, gone: asyncio.Future[None]) -> dict[str, Any]:
    """The next message of `receive`, or a disconnect as soon as `gone` is done (the guard ended the
    response: the route stops as if its client had gone)."""
    if gone.done():
        return _DISCONNECT
    nxt = asyncio.ensure_future(receive())
    try:
        await asyncio.wait([nxt, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not nxt.done():
            nxt.cancel()
    if nxt.done() and not nxt.cancelled():
        return nxt.result()
    return _DISCONNECT
