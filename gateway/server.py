"""The WebSocket + HTTP server: routes, Origin check, auth, the connection loop, limits, fan-out.

It only moves data: text in → `protocol.parse` → `registry.dispatch` → `protocol.encode` → text out.
Per connection, requests run as concurrent tasks (a slow `chat.send` never holds up `system.health`),
bounded by `server.maxInflight`; outgoing frames go through a queue so that a client which stops
reading is closed at `server.maxSendBuffer` instead of slowing anyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import uuid
from collections import deque
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from . import __version__, protocol
from .auth import AuthLimiter, TokenStore
from .errors import GatewayError, InternalError, InvalidRequest, RateLimited, Unauthenticated
from .registry import CallContext, registry

if TYPE_CHECKING:  # pragma: no cover
    from .app import Services

log = structlog.get_logger("gateway.server")

WEB_DIR = Path(__file__).parent / "web"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PLACEHOLDER = b"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Jarvis Gateway</title></head>
<body><h1>Jarvis Gateway</h1><p>The gateway is running. Connect a JSON-RPC client over WebSocket to this address.</p></body></html>"""

# Close codes
POLICY = 1008
TOO_BIG = 1009
RESTART = 1012


class Connection:
    """One authenticated-or-not client. Implements the event bus's Subscriber."""

    __slots__ = ("ws", "connection_id", "peer", "subscriptions", "authed", "_out", "_out_bytes",
                 "_wake", "_writer", "inflight", "server", "log", "closing", "closer", "tasks")

    def __init__(self, ws: ServerConnection, server: "GatewayServer"):
        self.ws = ws
        self.server = server
        self.connection_id = uuid.uuid4().hex[:12]
        self.peer = _peer(ws)
        self.subscriptions: set[str] = set()
        self.authed = bool(getattr(ws, "jarvis_authed", False))
        self._out: deque[bytes] = deque()
        self._out_bytes = 0
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.inflight = 0
        self.closing = False
        self.closer: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # requests being handled
        self.log = log.bind(conn=self.connection_id)

    # ---- outgoing ------------------------------------------------------------------------------
    def push(self, data: bytes) -> None:
        if self.closing:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        buffered = self._out_bytes + _transport_buffer(self.ws)
        if buffered > self.server.config.server.max_send_buffer:
            self.log.warning("closing slow consumer", buffered=buffered)
            self.close_soon(POLICY, "slow consumer")
            return
        self._wake.set()

    def send_obj(self, obj: Any) -> None:
        self.push(protocol.encode(obj))

    async def writer(self) -> None:
        ws = self.ws
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._out:
                    data = self._out.popleft()
                    self._out_bytes -= len(data)
                    await ws.send(data, text=True)
        except ConnectionClosed:
            pass

    def close_soon(self, code: int, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        self._out.clear()
        self._out_bytes = 0
        self.closer = asyncio.create_task(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(code, reason)

    async def flush_and_close(self, code: int, reason: str) -> None:
        """Send what is queued (an error explaining why), then close."""
        with contextlib.suppress(Exception):
            while self._out:
                data = self._out.popleft()
                await self.ws.send(data, text=True)
        self.closing = True
        await self._close(code, reason)


def _peer(ws: ServerConnection) -> str:
    addr = ws.remote_address
    if isinstance(addr, tuple) and addr:
        return str(addr[0])
    return str(addr or "unknown")


def _transport_buffer(ws: ServerConnection) -> int:
    transport = getattr(ws, "transport", None)
    try:
        return transport.get_write_buffer_size() if transport is not None else 0
    except Exception:  # transport already closed
        return 0


def _http(status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> Response:
    h = Headers()
    h["Content-Type"] = content_type
    h["Content-Length"] = str(len(body))
    h["X-Content-Type-Options"] = "nosniff"
    h["Referrer-Policy"] = "no-referrer"
    for k, v in (headers or {}).items():
        h[k] = v
    return Response(status, HTTPStatus(status).phrase, h, body)


def _origin_refusal(origin: str) -> str:
    shown = origin[:200].replace("\n", " ").replace("\r", " ")
    return (f"origin {shown} is not allowed: add it to server.allowedOrigins in config.toml "
            f"(allowedOrigins = [\"{shown}\"] under [server]) and restart the gateway\n")


def _json_http(status: int, obj: Any) -> Response:
    return _http(status, protocol.encode(obj), "application/json", {"Cache-Control": "no-store"})


class GatewayServer:
    def __init__(self, services: "Services", tokens: TokenStore):
        self.services = services
        self.config = services.config
        self.tokens = tokens
        self.limiter = AuthLimiter(self.config.server.auth_failures_per_minute)
        self.connections: set[Connection] = set()
        self.evicting = 0  # connections closed to make room, not yet gone
        self.requests: set[asyncio.Task[None]] = set()  # every request being handled
        self._server: Server | None = None
        self.port = 0
        self.allowed_origins: set[str] = set()
        self._auth_ok_server = {"name": "jarvis-gateway", "version": __version__}

    # ---- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        c = self.config.server
        self._server = await serve(
            self._handle,
            c.host,
            c.port,
            process_request=self._process_request,
            max_size=c.preauth_frame_bytes,
            ping_interval=c.ping_interval or None,
            ping_timeout=c.ping_interval or None,
            close_timeout=5,
            compression=None,  # small JSON frames: deflate costs more CPU than it saves on loopback
            max_queue=64,
            server_header=f"jarvis-gateway/{__version__}",
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        self.allowed_origins = {f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}",
                                f"http://[::1]:{self.port}", *c.allowed_origins}
        if c.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""):
            self.allowed_origins.add(f"http://{c.host}:{self.port}")

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close(close_connections=False)

    async def close_all(self, code: int = RESTART, reason: str = "server restarting") -> None:
        if self.requests:  # let requests in flight finish (bounded) before storage closes
            await asyncio.wait(list(self.requests), timeout=5)
        conns = list(self.connections)
        for conn in conns:
            conn.closing = True
        if conns:
            # Deliver what is already queued (e.g. the chat.aborted of a run stopped by this shutdown)
            # before the close frame; bounded, so a client that stopped reading cannot hold it up.
            await asyncio.wait([asyncio.create_task(conn.flush_and_close(code, reason)) for conn in conns],
                               timeout=5)
        if self._server is not None:
            self._server.close(close_connections=True, code=code, reason=reason)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def _evict(self) -> bool:
        """At the connection limit, close a connection that has not authenticated yet, so
        sockets that never authenticate cannot hold every slot until authTimeout. False if none."""
        victim = next((c for c in self.connections if not c.authed and not c.closing), None)
        if victim is None:
            return False
        log.warning("connection limit: closing an unauthenticated connection", peer=victim.peer)
        self.evicting += 1
        victim.close_soon(POLICY, "connection limit reached; authenticate sooner")
        victim.closer.add_done_callback(lambda _: self._evicted())
        return True

    def _evicted(self) -> None:
        self.evicting -= 1

    def connection_count(self) -> int:
        return len(self.connections)

    # ---- HTTP ----------------------------------------------------------------------------------
    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if not upgrade:
            if path == "/healthz" and "?" in request.path:
                return self._origin_probe(request.path.split("?", 1)[1])
            return self._http_route(path)
        if path != "/":
            return _http(404, b"not found\n", "text/plain; charset=utf-8")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in self.allowed_origins:
            log.warning("origin refused", origin=origin[:200], peer=_peer(ws))
            return _http(403, _origin_refusal(origin).encode(), "text/plain; charset=utf-8")
        if len(self.connections) - self.evicting >= self.config.server.max_connections and not self._evict():
            return _http(503, b"too many connections\n", "text/plain; charset=utf-8", {"Retry-After": "1"})
        authz = request.headers.get("Authorization")
        if authz is not None:
            peer = _peer(ws)
            wait = self.limiter.blocked_for(peer)
            if wait:
                return _http(429, b"too many failed authentications\n", "text/plain; charset=utf-8",
                             {"Retry-After": str(int(wait) + 1)})
            scheme, _, token = authz.partition(" ")
            if scheme.lower() != "bearer" or not self.tokens.check(token.strip()):
                self.limiter.failed(peer)
                log.warning("auth failed", peer=peer, via="header")
                return _http(401, b"invalid token\n", "text/plain; charset=utf-8",
                             {"WWW-Authenticate": 'Bearer realm="jarvis"'})
            ws.jarvis_authed = True  # type: ignore[attr-defined]
        return None

    def _http_route(self, path: str) -> Response:
        if path == "/healthz":
            return _json_http(200, {"status": "ok"})
        if path in ("/", "/index.html"):
            index = WEB_DIR / "index.html"
            body = index.read_bytes() if index.is_file() else PLACEHOLDER
            return _http(200, body, "text/html; charset=utf-8",
                         {"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})
        if path.startswith("/static/"):
            return self._static(path[len("/static/"):])
        return _http(404, b"not found\n", "text/plain; charset=utf-8")

    def _static(self, rel: str) -> Response:
        not_found = _http(404, b"not found\n", "text/plain; charset=utf-8")
        if not rel or "\\" in rel or any(part in ("", ".", "..") for part in rel.split("/")):
            return not_found
        base = WEB_DIR.resolve()
        target = (base / rel).resolve()
        if base not in target.parents or not target.is_file():
            return not_found
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if target.suffix == ".js":
            ctype = "text/javascript"
        if ctype.startswith("text/") or ctype in ("application/json", "image/svg+xml"):
            ctype += "; charset=utf-8"
        # Assets are small and change with upgrades: revalidate each load rather than risk a stale UI.
        return _http(200, target.read_bytes(), ctype,
                     {"Cache-Control": "no-cache", "Content-Security-Policy": CSP})

    def _origin_probe(self, query: str) -> Response:
        """`GET /healthz?origin=O`: whether a browser page at origin O may open the WebSocket, and why not.
        A page cannot read the body of a refused handshake, so the web page asks here when its socket
        never opens."""
        from urllib.parse import parse_qs

        origin = (parse_qs(query).get("origin") or [""])[0][:200]
        body: dict[str, Any] = {"status": "ok"}
        if origin:
            allowed = origin in self.allowed_origins
            body["origin"] = {"origin": origin, "allowed": allowed, "setting": "server.allowedOrigins"}
            if not allowed:
                body["origin"]["reason"] = _origin_refusal(origin).strip()
        return _json_http(200, body)

    # ---- WebSocket -----------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        conn = Connection(ws, self)
        self.connections.add(conn)
        conn._writer = asyncio.create_task(conn.writer())
        try:
            if not conn.authed and not await self._authenticate(conn):
                return
            ws.protocol.max_message_size = self.config.server.max_frame_bytes
            conn.log.debug("connection ready", peer=conn.peer)
            async for message in ws:
                if conn.closing:
                    break
                if isinstance(message, bytes):
                    conn.send_obj(protocol.error_response(None, InvalidRequest("binary frames are not accepted; send JSON as text")))
                    continue
                self._on_text(conn, message)
        except ConnectionClosed:
            pass
        finally:
            if conn.closer is not None:
                # Our close (1008 "slow consumer") must go out before returning from the handler,
                # or websockets closes with a plain 1000 and the client never learns why.
                with contextlib.suppress(Exception):
                    await asyncio.wait([conn.closer], timeout=10)
            self.connections.discard(conn)
            self.services.bus.drop(conn)
            conn.closing = True
            if conn._writer is not None:
                conn._writer.cancel()

    async def _authenticate(self, conn: Connection) -> bool:
        ws = conn.ws
        try:
            async with asyncio.timeout(self.config.server.auth_timeout):
                message = await ws.recv()
        except TimeoutError:
            await conn.flush_and_close(POLICY, "authentication timeout")
            return False

        def refuse(req_id: Any, err: GatewayError, reason: str) -> Any:
            conn.send_obj(protocol.error_response(req_id, err))
            return conn.flush_and_close(POLICY, reason)

        if isinstance(message, bytes):
            await refuse(None, Unauthenticated("authenticate first: send {\"type\":\"auth\",\"token\":…}"),
                         "unauthenticated")
            return False
        frame = protocol.parse(message)
        token: Any = None
        req_id: Any = None
        if frame.auth_frame:
            token = frame.auth_token
        elif not frame.batch and frame.requests and frame.requests[0].method == "auth":
            req = frame.requests[0]
            req_id = req.reply_id
            token = req.params.get("token") if isinstance(req.params, dict) else None
        else:
            await refuse(frame.requests[0].reply_id if frame.requests and not frame.batch else None,
                         Unauthenticated("authenticate first: send {\"type\":\"auth\",\"token\":…}"),
                         "unauthenticated")
            return False
        wait = self.limiter.blocked_for(conn.peer)
        if wait:
            log.warning("auth rate limited", peer=conn.peer)
            await refuse(req_id, RateLimited("too many failed authentications from this address",
                                             int(wait * 1000) + 1), "rate limited")
            return False
        if not self.tokens.check(token):
            self.limiter.failed(conn.peer)
            log.warning("auth failed", peer=conn.peer, via="frame")
            await refuse(req_id, Unauthenticated("invalid token"), "invalid token")
            return False
        conn.authed = True
        result = {"connectionId": conn.connection_id, "server": self._auth_ok_server, "protocol": 1}
        if frame.auth_frame:
            conn.send_obj(protocol.notification("auth.ok", result))
        elif req_id is not None:
            conn.send_obj(protocol.response(req_id, result))
        return True

    def _on_text(self, conn: Connection, text: str) -> None:
        frame = protocol.parse(text)
        if frame.auth_frame:  # already authenticated: acknowledge again, harmlessly
            conn.send_obj(protocol.notification("auth.ok", {"connectionId": conn.connection_id,
                                                            "server": self._auth_ok_server, "protocol": 1}))
            return
        if not frame.batch:
            if frame.errors:
                conn.send_obj(frame.errors[0])
                return
            req = frame.requests[0]
            if conn.inflight >= self.config.server.max_inflight:
                if not req.is_notification:
                    conn.send_obj(protocol.error_response(req.id, RateLimited(
                        f"too many requests in flight on this connection (max {self.config.server.max_inflight})", 50)))
                return
            conn.inflight += 1
            self._track(conn, self._single(conn, req))
            return
        # A batch counts as many requests as it holds.
        n = max(1, len(frame.requests))
        if conn.inflight + n > self.config.server.max_inflight:
            conn.send_obj(protocol.error_response(None, RateLimited(
                f"too many requests in flight on this connection (max {self.config.server.max_inflight})", 50)))
            return
        conn.inflight += n
        self._track(conn, self._batch(conn, frame, n))

    def _track(self, conn: Connection, coro: Any) -> None:
        """Run a request as a task we keep hold of: shutdown waits for it before closing storage."""
        task = asyncio.create_task(coro)
        conn.tasks.add(task)
        self.requests.add(task)
        task.add_done_callback(conn.tasks.discard)
        task.add_done_callback(self.requests.discard)

    async def _single(self, conn: Connection, req: protocol.Request) -> None:
        try:
            reply = await self._call(conn, req)
            if reply is not None:
                conn.send_obj(reply)
        finally:
            conn.inflight -= 1

    async def _batch(self, conn: Connection, frame: protocol.Frame, n: int) -> None:
        try:
            replies = await asyncio.gather(*(self._call(conn, r) for r in frame.requests))
            answer = [r for r in replies if r is not None] + frame.errors
            if answer:
                conn.send_obj(answer)
        finally:
            conn.inflight -= n

    async def _call(self, conn: Connection, req: protocol.Request) -> dict[str, Any] | None:
        if req.method == "auth":
            result: Any = {"connectionId": conn.connection_id, "server": self._auth_ok_server, "protocol": 1}
            return None if req.is_notification else protocol.response(req.id, result)
        ctx = CallContext(self.services, conn, req.reply_id)
        try:
            result = await registry.dispatch(ctx, req.method, req.params)
        except GatewayError as exc:
            if req.is_notification:
                return None
            return protocol.error_response(req.id, exc)
        except Exception:
            error_id = uuid.uuid4().hex[:12]
            conn.log.exception("internal error", method=req.method, errorId=error_id)
            if req.is_notification:
                return None
            return protocol.error_response(req.id, InternalError("internal error", {"errorId": error_id}))
        return None if req.is_notification else protocol.response(req.id, result)
