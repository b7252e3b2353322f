"""The opening handshake and authentication: Origin, header auth, duplicate headers, the auth frame.

    HTTP upgrade → process_request: bad headers 400, Origin 403, full 503, header token 401/429
    first frame  → authenticate: {"type":"auth",…} or an `auth` request, else -32001 and close 1008

Only wrong tokens are slowed down (`server.authFailureDelay`) and, past the per-address budget,
answered "rate limited": the right token always gets in at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Iterable

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from .. import protocol
from ..auth import AuthLimiter
from ..config import Config
from ..errors import JarvisError, RateLimited, Unauthenticated
from .pages import json as http_json, route as http_route, text as http_text
from .connection import POLICY, Connection, peer_of

if TYPE_CHECKING:  # pragma: no cover
    from ..access import Principals

log = structlog.get_logger("gateway.server")


class _BadRequest(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def origin_refusal(origin: str) -> str:
    shown = origin[:200].replace("\n", " ").replace("\r", " ")
    return (
        f"origin {shown} is not allowed: add it to server.allowedOrigins in config.toml "
        f'(allowedOrigins = ["{shown}"] under [server]) and restart the gateway'
    )


# Headers whose second copy would change what a request means (a token, an origin, a user, a body's
# length or type, a session): more than one is a bad request on every route.
SINGLE = frozenset(
    {
        "authorization",
        "origin",
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "x-jarvis-session",
        "x-jarvis-memory",
        "x-jarvis-capture",
        "mcp-session-id",
        "mcp-protocol-version",
        "upgrade",
        "sec-websocket-key",
        "sec-websocket-version",
    }
)
SINGLE_PREFIXES = ("x-openwebui-",)  # Open WebUI's forwarded user (id, name, email, role, chat id)


def duplicated(names: Iterable[bytes | str]) -> str | None:
    """The first header of `SINGLE` (or of a prefix of SINGLE_PREFIXES) that comes more than once among
    a request's header `names` (both listeners: the ASGI scope's, the WebSocket port's), in its usual
    spelling (Content-Length); None when none does."""
    seen: set[str] = set()
    for k in names:
        spelled = k.decode("latin-1") if isinstance(k, bytes) else k
        name = spelled.lower()
        if name in seen and (name in SINGLE or name.startswith(SINGLE_PREFIXES)):
            return "-".join(part.capitalize() for part in name.split("-"))[:64]
        seen.add(name)
    return None


def _one_header(headers: Headers, name: str) -> str | None:
    """The header's value, None when absent; more than one is a bad request (which one would we trust?)."""
    values = headers.get_all(name)
    if len(values) > 1:
        raise _BadRequest(f"duplicate {name} header")
    return values[0] if values else None


class Handshake:
    def __init__(
        self, config: Config, principals: "Principals", server_info: dict[str, str], make_room: Callable[[], bool]
    ):
        """`principals`: who a presented token belongs to (access.Principals.authenticate, every door's);
        `make_room()`: True when a connection may be accepted now (closing an idle one if need be)."""
        self.config = config
        self.principals = principals
        self.limiter = AuthLimiter(config.server.auth_failures_per_minute)
        self.server_info = server_info
        self.make_room = make_room
        self.allowed_origins: set[str] = set()

    def bound(self, port: int) -> None:
        """The port is known: the gateway's own page may connect from it."""
        c = self.config.server
        self.allowed_origins = {
            f"http://127.0.0.1:{port}",
            f"http://localhost:{port}",
            f"http://[::1]:{port}",
            *c.allowed_origins,
        }
        if c.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""):
            self.allowed_origins.add(f"http://{c.host}:{port}")

    def auth_ok(self, conn: Connection) -> dict[str, Any]:
        return {"connectionId": conn.connection_id, "server": self.server_info, "protocol": 1}

    async def process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        try:
            return await self._route_request(ws, request)
        except _BadRequest as exc:
            # One line, no traceback: a client sending odd headers must not be able to flood the log.
            log.warning("bad request", reason=exc.reason, peer=peer_of(ws))
            return http_text(400, exc.reason)

    async def _route_request(self, ws: ServerConnection, request: Request) -> Response | None:
        twice = duplicated(k for k, _ in request.headers.raw_items())
        if twice is not None:  # every request of this port, its pages too, as the HTTP API listener
            raise _BadRequest(f"duplicate {twice} header")
        path = request.path.split("?", 1)[0]
        upgrade = (_one_header(request.headers, "Upgrade") or "").lower() == "websocket"
        if not upgrade:
            if path == "/healthz" and "?" in request.path:
                return self._origin_probe(request.path.split("?", 1)[1])
            return http_route(path)
        if path != "/":
            return http_text(404, "not found")
        origin = _one_header(request.headers, "Origin")
        if origin is not None and origin not in self.allowed_origins:
            log.warning("origin refused", origin=origin[:200], peer=peer_of(ws))
            return http_text(403, origin_refusal(origin))
        if not self.make_room():
            return http_text(503, "too many connections", {"Retry-After": "1"})
        authz = _one_header(request.headers, "Authorization")
        if authz is not None:
            scheme, _, token = authz.partition(" ")
            principal = self.principals.authenticate(token.strip()) if scheme.lower() == "bearer" else None
            if principal is None:
                wait = await self.auth_failed(peer_of(ws), "header")
                if wait:
                    return http_text(
                        429,
                        "too many failed authentications; wrong tokens are refused for a while "
                        "(the right one is always accepted)",
                        {"Retry-After": str(int(wait) + 1)},
                    )
                return http_text(401, "invalid token", {"WWW-Authenticate": 'Bearer realm="jarvis"'})
            ws.jarvis_authed = True  # type: ignore[attr-defined]
            ws.jarvis_principal = principal  # type: ignore[attr-defined]  # the Connection takes it up
        return None

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
                body["origin"]["reason"] = origin_refusal(origin)
        return http_json(200, body)

    async def auth_failed(self, peer: str, via: str) -> float:
        """Count a wrong token and answer it slowly; → seconds the peer is over its failure budget (0: not).

        Only wrong answers are slowed down or refused: the right token is always accepted at once, so
        a local process guessing tokens cannot lock the owner out."""
        over = self.limiter.failed(peer)
        log.warning("auth failed", peer=peer, via=via, rateLimited=bool(over))
        delay = self.config.server.auth_failure_delay
        if delay:
            await asyncio.sleep(delay)
        return over

    async def authenticate(self, conn: Connection) -> bool:
        ws = conn.ws
        try:
            async with asyncio.timeout(self.config.server.auth_timeout):
                message = await ws.recv()
        except TimeoutError:
            await conn.flush_and_close(POLICY, "authentication timeout")
            return False

        def refuse(req_id: Any, err: JarvisError, reason: str) -> Any:
            conn.send_obj(protocol.error_response(req_id, err))
            return conn.flush_and_close(POLICY, reason)

        if isinstance(message, bytes):
            await refuse(None, Unauthenticated('authenticate first: send {"type":"auth","token":…}'), "unauthenticated")
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
            await refuse(
                frame.requests[0].reply_id if frame.requests and not frame.batch else None,
                Unauthenticated('authenticate first: send {"type":"auth","token":…}'),
                "unauthenticated",
            )
            return False
        principal = self.principals.authenticate(token)
        if principal is None:
            wait = await self.auth_failed(conn.peer, "frame")
            if wait:
                await refuse(
                    req_id,
                    RateLimited(
                        "too many failed authentications from this address; wrong "
                        "tokens are refused for a while (the right one is always "
                        "accepted)",
                        int(wait * 1000) + 1,
                    ),
                    "rate limited",
                )
            else:
                await refuse(req_id, Unauthenticated("invalid token"), "invalid token")
            return False
        conn.authed = True
        conn.principal = principal
        ws.jarvis_authed = True  # type: ignore[attr-defined]  # GatedConnection: no pre-auth budget now
        result = self.auth_ok(conn)
        if frame.auth_frame:
            conn.send_obj(protocol.notification("auth.ok", result))
        elif req_id is not None:
            conn.send_obj(protocol.response(req_id, result))
        return True
