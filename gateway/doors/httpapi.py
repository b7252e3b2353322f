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
Every request passes one ASGI guard first (httpguard.py): the Origin allow-list of the WebSocket, the
bearer token (wrong ones counted by the same per-address limiter, their slow answers bounded in number),
the limits of httplimits.py (requests per token and in all, request bodies held, event streams open and
idle), and a cap on the request body. Refusals are JSON in OpenAI's error shape (httperrors.py), which
MCP clients read as well as OpenAI SDKs do; so is the one error value of a call (dispatcher.py) that a
route answers over HTTP (`http_error`: its class's status, `Retry-After` for what may be retried), and
whatever escapes a route. uvicorn's own log lines go through the gateway's logger (logs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from typing import TYPE_CHECKING, Any, AsyncContextManager, Callable

import structlog

from .httperrors import BodyRefused, error_body, http_error, json_error, send_error
from .httpguard import Failure, Guard, principal_of
from .httplimits import HttpLimits

__all__ = [
    "BodyRefused",
    "HttpApi",
    "ListenError",
    "error_body",
    "http_error",
    "json_error",
    "principal_of",
    "send_error",
]

if TYPE_CHECKING:  # pragma: no cover
    from starlette.routing import BaseRoute

    from ..access import Principals
    from ..config import Config
    from .admission import Admission
    from .handshake import Handshake

log = structlog.get_logger("gateway.http")

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class ListenError(OSError):
    """`server.httpPort` could not be bound; the message names the setting."""


def _gated_protocol(admission: "Admission | None", timeout: float, stalled: float) -> type:
    """uvicorn's h11 protocol, counted by `admission` from accept until a request's headers are in,
    dropped when no request is in progress for `timeout` seconds (a silent socket, headers trickled),
    and when its writes stay paused (the client reads nothing) for `stalled` seconds: uvicorn has no
    write timeout, so a client that stops reading a streamed answer would hold it for good."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from .admission import FULL

    class GatedProtocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:
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
        def capture_signals(self):
            yield

    return Server(config)


class HttpApi:
    def __init__(
        self,
        config: "Config",
        principals: "Principals",
        handshake: "Handshake",
        admission: "Admission | None" = None,
        failure: Failure | None = None,
    ):
        self.config = config
        self.admission = admission
        self.limits = HttpLimits(config.server)
        self.failure = failure  # (request, exception) → the one error value: the dispatcher's
        self.principals = principals
        self.guard: Guard | None = None
        self.handshake = handshake
        self.routes: list["BaseRoute"] = []
        self.lifespans: list[Callable[[], AsyncContextManager[Any]]] = []
        self.port = 0
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

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

        class LeftToTheGuard(Response):
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                pass  # Starlette re-raises the exception to the guard, which answers it in OpenAI's shape

        async def failed(request: Request, exc: Exception) -> Response:
            return LeftToTheGuard()

        app = Starlette(
            routes=self.routes,
            lifespan=lifespan,
            exception_handlers={404: not_found, 405: not_allowed, BodyRefused: refused, Exception: failed},
        )
        self.guard = Guard(app, self.config, self.principals, self.handshake, self.limits, self.failure)
        return self.guard

    def revoked(self, digests: set[str]) -> None:
        """The principals of these token digests were revoked: their requests in flight end (Guard.revoked)."""
        if self.guard is not None:
            self.guard.revoked(digests)

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
            limit_concurrency=None,  # the guard's limits instead: uvicorn's counts idle and unauthenticated sockets
            timeout_keep_alive=5,
            backlog=BACKLOG,
            timeout_graceful_shutdown=math.ceil(max(1.0, c.shutdown_grace + 1.0)),  # uvicorn takes whole seconds
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
        self.limits.end_streams()  # runs have ended by now; what streams still is an idle GET /mcp
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
