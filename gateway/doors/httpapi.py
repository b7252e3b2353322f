"""The HTTP API listener beside the WebSocket: uvicorn + Starlette in the gateway's own event loop.

websockets parses only GET requests, so APIs that need POST (MCP's streamable HTTP at `/mcp`, the
OpenAI-compatible `/v1/...`) get a second listener on `server.httpPort`, same host. Features add their
routes and lifespans before `start()`:

    api = HttpApi(config, principals, handshake, admission)  # admission: the WebSocket's, one socket budget
    api.add_routes([Route("/v1/models", models)])       # Starlette routes
    api.add_lifespan(session_manager.run)               # an async context held while serving
    await api.start()                                   # bound, lifespans entered; before READY=1
    await api.stop()                                    # with the gateway, after running chats ended

Every socket is counted from accept by the WebSocket listener's Admission (server.maxPendingSockets,
server.maxPendingPerAddress, the descriptor budget) until its request's headers are in, and dropped when
they are not in within server.handshakeTimeout (after a response too: an idle keep-alive connection).
Every request passes one ASGI guard first: the Origin allow-list of the WebSocket, the bearer token
(wrong ones counted by the same per-address limiter), and a cap on the request body. Refusals are
JSON in OpenAI's error shape, which MCP clients read as well as OpenAI SDKs do; so is the one error
value of a call (dispatcher.py) that a route answers over HTTP (`http_error`: its class's status,
`Retry-After` for what may be retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING, Any, AsyncContextManager, Callable, cast

import orjson
import structlog

from .. import errors as e

if TYPE_CHECKING:  # pragma: no cover
    from starlette.routing import BaseRoute

    from ..access import Principals
    from ..principals import Principal
    from ..config import Config
    from .admission import Admission
    from .handshake import Handshake

log = structlog.get_logger("gateway.http")

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


def error_body(status: int, message: str, *, type_: str, code: str | None = None, param: str | None = None) -> bytes:
    """OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def json_error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """A Starlette response in OpenAI's error shape."""
    from starlette.responses import Response

    body = error_body(status, message, type_=type_, code=code, param=param)
    return Response(body, status, media_type="application/json", headers=headers)


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    body = error_body(status, message, type_=type_, code=code, param=param)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# The one error value of a call (dispatcher.py) over HTTP, by its class (most specific first): the status,
# OpenAI's error `type`, and its `code`.
HTTP_ERRORS: tuple[tuple[type[e.JarvisError], int, str, str], ...] = (
    (e.Invalid, 400, "invalid_request_error", "invalid_value"),
    (e.ParseError, 400, "invalid_request_error", "invalid_json"),
    (e.InvalidRequest, 400, "invalid_request_error", "invalid_request"),
    (e.Unauthenticated, 401, "authentication_error", "invalid_api_key"),
    (e.Forbidden, 403, "permission_error", "insufficient_scope"),
    (e.MethodNotFound, 404, "invalid_request_error", "not_found"),
    (e.NotFound, 404, "invalid_request_error", "not_found"),
    (e.SessionLimit, 409, "conflict_error", "session_limit"),
    (e.RunActive, 409, "conflict_error", "session_busy"),
    (e.Conflict, 409, "conflict_error", "conflict"),
    (e.RateLimited, 429, "rate_limit_error", "rate_limited"),
    (e.DiskFull, 507, "server_error", "insufficient_storage"),
    (e.Unavailable, 503, "server_error", "unavailable"),
)


def http_error(
    err: e.JarvisError, *, param: str | None = None, message: str | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers) of an error value: 500 `internal_error` for a class the table does not
    name; `Retry-After` (whole seconds, at least 1) when the error says when to retry or is retryable."""
    status, type_, code = next(
        ((s, t, c) for cls, s, t, c in HTTP_ERRORS if isinstance(err, cls)), (500, "server_error", "internal_error")
    )
    if isinstance(err, e.Invalid):
        code = _invalid_code(err.rule)
    data = err.data or {}
    headers: dict[str, str] = {}
    if isinstance(data.get("retryAfterMs"), int):
        headers["Retry-After"] = str(max(1, -(-data["retryAfterMs"] // 1000)))
    elif isinstance(err, e.Unavailable) and err.retryable:
        headers["Retry-After"] = "1"
    text = message or err.message
    if data.get("errorId"):
        text += f" (errorId {data['errorId']})"
    return status, error_body(status, text, type_=type_, code=code, param=param), headers


def _invalid_code(rule: str) -> str:
    if rule.startswith("required"):
        return "missing_required_parameter"
    if rule.startswith(("must be a ", "must be an ", "must be true or false")):
        return "invalid_type"
    return "invalid_value"


class ListenError(OSError):
    """`server.httpPort` could not be bound; the message names the setting."""


class BodyRefused(Exception):
    """Raised from `receive()` for a request body past `server.httpMaxBodyBytes` (413) or not all in
    within `server.httpBodyTimeout` of the first read (408: a client trickling it would hold the
    request, its task and its socket for good)."""

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    async def send_to(self, send: Send) -> None:
        await send_error(send, self.status, self.message, type_="invalid_request_error", code=self.code)

    @classmethod
    def too_large(cls, limit: int) -> "BodyRefused":
        return cls(413, f"request body is over {limit} bytes (server.httpMaxBodyBytes)", "request_too_large")


PRINCIPAL = "jarvis.principal"  # the ASGI scope's key for the request's principal, set by the Guard


def principal_of(scope: Scope) -> "Principal":
    """The principal the Guard authenticated for this request (a route behind the Guard always has one)."""
    return cast("Principal", scope[PRINCIPAL])


class Guard:
    """ASGI middleware: Origin, bearer token, body size. Lifespan events pass through."""

    def __init__(self, app: Callable, config: "Config", principals: "Principals", handshake: "Handshake"):
        self.app = app
        self.config = config
        self.principals = principals
        self.handshake = handshake
        self.open: dict[str, set[asyncio.Task[Any]]] = {}  # principal → its requests being answered
        self.cut: set[asyncio.Task[Any]] = set()  # requests ended because their principal was revoked

    def revoked(self, names: set[str]) -> None:
        """`names` were revoked: end their requests in flight — a /v1 stream, an MCP call — now (access.py's
        `on_revoked`); their next request is refused by the token check."""
        for name in names:
            for task in self.open.pop(name, set()):
                self.cut.add(task)
                task.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        peer = (scope.get("client") or ("?", 0))[0]
        origin = headers.get("origin")
        if origin is not None and origin not in self.handshake.allowed_origins:
            from .handshake import origin_refusal

            log.warning("origin refused", origin=origin[:200], peer=peer, api="http")
            await send_error(send, 403, origin_refusal(origin), type_="permission_error", code="origin_not_allowed")
            return
        scheme, _, token = headers.get("authorization", "").partition(" ")
        principal = self.principals.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        if principal is None:
            wait = await self.handshake.auth_failed(peer, "http")
            if wait:
                await send_error(
                    send,
                    429,
                    "too many failed authentications; wrong tokens are refused for a while "
                    "(the right one is always accepted)",
                    type_="rate_limit_error",
                    code="rate_limited",
                    headers={"Retry-After": str(int(wait) + 1)},
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
                headers={"WWW-Authenticate": 'Bearer realm="jarvis"'},
            )
            return
        scope[PRINCIPAL] = principal  # the routes' calls carry it (`principal_of`)
        limit = self.config.server.http_max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await BodyRefused.too_large(limit).send_to(send)
            return
        timeout = self.config.server.http_body_timeout
        received = 0
        started = False
        body_done = False
        deadline: float | None = None

        async def counting_receive() -> dict[str, Any]:
            nonlocal received, body_done, deadline
            if body_done:  # after the body: waiting for a disconnect, as long as a response streams
                return await receive()
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + timeout
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
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        task = asyncio.current_task()
        assert task is not None
        mine = self.open.setdefault(principal.name, set())
        mine.add(task)
        ended = False

        async def ending_send(message: dict[str, Any]) -> None:
            nonlocal ended
            ended = message["type"] == "http.response.body" and not message.get("more_body", False)
            await tracking_send(message)

        try:
            await self.app(scope, counting_receive, ending_send)
        except BodyRefused as exc:
            if not started:
                await exc.send_to(send)
        except asyncio.CancelledError:
            if task not in self.cut:
                raise
            # Its principal was revoked: the request ends here — refused if nothing was answered yet, else
            # its answer (an SSE stream) cut short — and the connection with it.
            task.uncancel()
            log.info("request ended: principal revoked", principal=principal.name, path=scope.get("path"))
            with contextlib.suppress(Exception):
                if not started:
                    await send_error(send, 401, "token revoked", type_="authentication_error", code="invalid_api_key")
                elif not ended:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.cut.discard(task)
            mine.discard(task)
            if not mine and self.open.get(principal.name) is mine:
                del self.open[principal.name]


def _gated_protocol(admission: "Admission | None", timeout: float, stalled: float) -> type:
    """uvicorn's h11 protocol, counted by `admission` from accept until a request's headers are in,
    dropped when no request is in progress for `timeout` seconds (a silent socket, headers trickled),
    and when its writes stay paused (the client reads nothing) for `stalled` seconds: uvicorn has no
    write timeout, so a client that stops reading a streamed answer would hold it for good."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from .admission import FULL

    class GatedProtocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._idle_timer: asyncio.TimerHandle | None = None
            self._stall_timer: asyncio.TimerHandle | None = None
            self._wait_for_request()
            if admission is not None and not admission.admit(self, (self.client or ("?", 0))[0]):
                transport.write(FULL)
                transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            for timer in (self._idle_timer, self._stall_timer):
                if timer is not None:
                    timer.cancel()
            if admission is not None:
                admission.gone(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if admission is not None:
                admission.talking(self)
            super().data_received(data)
            if self._in_request() and admission is not None:
                admission.upgraded(self)  # the headers are in: no longer pending

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stall_timer is None:
                self._stall_timer = self.loop.call_later(stalled, self.transport.abort)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._stall_timer is not None:
                self._stall_timer.cancel()
                self._stall_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._wait_for_request()

        def _in_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _wait_for_request(self) -> None:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = self.loop.call_later(timeout, self._idle_check)

        def _idle_check(self) -> None:
            self._idle_timer = None
            if not self._in_request() and not self.transport.is_closing():
                self.transport.abort()

    return GatedProtocol


def _uvicorn_server(config: Any) -> Any:
    """uvicorn's Server without its signal handlers: the gateway owns SIGTERM/SIGINT."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            yield

    return Server(config)


class HttpApi:
    def __init__(
        self, config: "Config", principals: "Principals", handshake: "Handshake", admission: "Admission | None" = None
    ):
        self.config = config
        self.admission = admission
        self.principals = principals
        self.handshake = handshake
        self.routes: list["BaseRoute"] = []
        self.lifespans: list[Callable[[], AsyncContextManager[Any]]] = []
        self.port = 0
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self.guard: Guard | None = None

    @property
    def enabled(self) -> bool:
        return self.config.server.http_port != 0

    def add_routes(self, routes: list["BaseRoute"]) -> None:
        self.routes.extend(routes)

    def add_lifespan(self, factory: Callable[[], AsyncContextManager[Any]]) -> None:
        self.lifespans.append(factory)

    def url(self, path: str = "") -> str:
        host = self.config.server.host
        host = "127.0.0.1" if host in ("", "0.0.0.0") else ("[::1]" if host == "::" else host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}{path}"

    def app(self) -> Callable:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response

        lifespans = list(self.lifespans)

        @contextlib.asynccontextmanager
        async def lifespan(_app: Any):
            async with contextlib.AsyncExitStack() as stack:
                for factory in lifespans:
                    await stack.enter_async_context(factory())
                yield

        async def not_found(request: Request, exc: Exception) -> Response:
            return json_error(404, f"no route {request.method} {request.url.path}", code="not_found")

        async def not_allowed(request: Request, exc: Exception) -> Response:
            message = f"{request.method} is not allowed on {request.url.path}"
            return json_error(405, message, code="method_not_allowed")

        async def refused(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, BodyRefused)  # a route read a body too big or too slow
            return json_error(exc.status, exc.message, code=exc.code)

        app = Starlette(
            routes=self.routes,
            lifespan=lifespan,
            exception_handlers={404: not_found, 405: not_allowed, BodyRefused: refused},
        )
        self.guard = Guard(app, self.config, self.principals, self.handshake)
        return self.guard

    def revoked(self, names: set[str]) -> None:
        """`names` were revoked: their requests in flight end (Guard.revoked)."""
        if self.guard is not None:
            self.guard.revoked(names)

    async def start(self) -> None:
        """Bind `server.httpPort` (-1: a free port), enter the lifespans, serve. Raises OSError with the
        port in its message when it is taken."""
        if not self.enabled:
            return
        import uvicorn

        from .admission import BACKLOG  # admission's room for sockets not counted yet assumes it

        c = self.config.server
        port = 0 if c.http_port < 0 else c.http_port
        try:
            sock = socket.create_server((c.host or "0.0.0.0", port), family=_family(c.host), reuse_port=False)
        except OSError as exc:
            raise ListenError(
                exc.errno,
                f"cannot serve the HTTP API on {c.host}:{port}: {exc.strerror} (choose a free port with "
                "--http-port, JARVIS_HTTP_PORT or server.httpPort, or 0 to turn it off)",
            ) from exc
        sock.setblocking(False)
        # Accepted connections inherit it: each answer and a streamed reply's small writes go out at once,
        # instead of waiting ~40 ms each for a delayed ACK (asyncio sets it only on IPPROTO_TCP sockets,
        # and create_server's are protocol 0).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app(),
            http=_gated_protocol(self.admission, c.handshake_timeout, c.slow_consumer_seconds),
            lifespan="on",
            log_config=None,
            access_log=False,
            server_header=False,
            limit_concurrency=c.max_connections,
            timeout_keep_alive=5,
            backlog=BACKLOG,
            timeout_graceful_shutdown=max(1.0, c.shutdown_grace + 1.0),
            h11_max_incomplete_event_size=64 << 10,
            ws="none",
        )
        self._server = _uvicorn_server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="http-api")
        while not self._server.started:
            if self._task.done():
                await self._task  # its exception, e.g. a lifespan that failed
                raise RuntimeError("the HTTP API listener stopped while starting")
            await asyncio.sleep(0.01)
        log.info("http api listening", url=self.url(), routes=[getattr(r, "path", "?") for r in self.routes])

    def stop_accepting(self) -> None:
        """Close the listener; requests in flight (a streaming reply) go on until `stop()`."""
        if self._server is not None:
            self._server.should_exit = True

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.config.server.shutdown_grace + 5)
        except (TimeoutError, asyncio.TimeoutError):
            self._server.force_exit = True
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        except Exception:
            log.exception("http api stopped with an error")
        self._server = self._task = None


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in (host or "") else socket.AF_INET
