"""The WebSocket + HTTP server: a thin pump between sockets and the pure protocol.

    http.py        plain HTTP on the same port: /healthz, the web page, /static/
    handshake.py   the upgrade (Origin, duplicate headers, header auth) and the auth frame
    connection.py  one client: outgoing queue, backpressure ("slow consumer"), closing
    dispatch.py    text frame → protocol.parse → limits → registry → replies (size-capped)
    admission.py   every socket counted from accept: pending upgrades bounded, descriptors kept in reserve
    __init__.py    GatewayServer: bind, accept, the read loop per connection, shutdown

Data flows one way: socket → protocol → registry → method → service. The server never touches
storage, and services never import the server.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame

from .. import __version__, protocol
from ..errors import InvalidRequest
from .admission import BACKLOG, FULL, Admission
from .connection import CLOSE_TIMEOUT, POLICY, RESTART, Connection, peer_of
from .jsonrpc import JsonRpcDoor
from .handshake import Handshake

if TYPE_CHECKING:  # pragma: no cover
    from ..registry import ServiceAccess

__all__ = ["GatewayServer"]

log = structlog.get_logger("gateway.server")

PREAUTH_FRAMES = 32  # frames (an auth frame, pings) a socket may send before it has authenticated
PREAUTH_SLICE = 1024  # before auth, bytes are parsed this many at a time, so the frame budget cuts a
# flood after one slice (~170 empty pings) rather than a whole read (~40,000)


class GatedConnection(ServerConnection):
    """websockets' connection, counted by Admission from accept to close, with a budget of bytes and
    frames before authentication: a client that has not authenticated yet cannot make the gateway
    parse and answer a flood of pings."""

    def __init__(self, admission: Admission, preauth_bytes: int, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.admission = admission
        self.preauth_bytes = preauth_bytes
        self.preauth_frames = PREAUTH_FRAMES
        self.jarvis_authed = False

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if not self.admission.admit(self, peer_of(self)):
            transport.write(FULL)
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.admission.gone(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.jarvis_authed:
            super().data_received(data)
            return
        self.admission.talking(self)
        self.preauth_bytes -= len(data)
        if self.preauth_bytes < 0:
            self._flood("bytes")
            return
        for i in range(0, len(data), PREAUTH_SLICE):
            super().data_received(data[i : i + PREAUTH_SLICE])
            if self.transport.is_closing():
                return

    def process_event(self, event: Any) -> None:
        if not self.jarvis_authed and isinstance(event, Frame):
            self.preauth_frames -= 1
            if self.preauth_frames < 0:
                self._flood("frames")
                return
        super().process_event(event)

    def _flood(self, what: str) -> None:
        if not self.transport.is_closing():
            self.admission.cut(peer_of(self), what)
            self.transport.abort()


def gated(admission: Admission, preauth_bytes: int) -> type[GatedConnection]:
    """GatedConnection bound to one listener's admission and pre-auth budget (websockets' `serve` takes
    the class of its connections and makes them itself)."""

    class Gated(GatedConnection):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(admission, preauth_bytes, *args, **kwargs)

    return Gated


class GatewayServer:
    def __init__(self, services: "ServiceAccess"):
        self.services = services
        self.config = services.config
        self.connections: set[Connection] = set()
        self.evicting = 0  # connections closed to make room, not yet gone
        self._server: Server | None = None
        self.port = 0
        self.handshake = Handshake(
            self.config, services.principals, {"name": "jarvis-gateway", "version": __version__}, self._make_room
        )
        self.dispatch = JsonRpcDoor(services, self.handshake.auth_ok)
        self.admission: Admission | None = None

    # ---- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        c = self.config.server
        admission = self.admission = Admission(c)
        # Before auth: the upgrade request (headers) and one auth frame, with room to spare.
        preauth_bytes = c.preauth_frame_bytes + (64 << 10)
        self._server = await serve(
            self._handle,
            c.host,
            c.port,
            create_connection=gated(admission, preauth_bytes),
            process_request=self.handshake.process_request,
            open_timeout=c.handshake_timeout,
            backlog=BACKLOG,
            max_size=c.preauth_frame_bytes,
            ping_interval=c.ping_interval or None,
            ping_timeout=c.ping_interval or None,
            close_timeout=CLOSE_TIMEOUT,
            compression=None,  # small JSON frames: deflate costs more CPU than it saves on loopback
            max_queue=64,
            server_header=f"jarvis-gateway/{__version__}",
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        self.handshake.bound(self.port)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close(close_connections=False)

    async def close_all(self, code: int = RESTART, reason: str = "server restarting") -> None:
        requests = self.dispatch.requests
        if requests:  # let requests in flight finish (bounded) before storage closes
            await asyncio.wait(list(requests), timeout=5)
        conns = list(self.connections)
        for conn in conns:
            conn.mark_closed()
        if conns:
            # Deliver what is already queued (e.g. the chat.aborted of a run stopped by this shutdown)
            # before the close frame; bounded, so a client that stopped reading cannot hold it up.
            await asyncio.wait([asyncio.create_task(conn.flush_and_close(code, reason)) for conn in conns], timeout=5)
        if self._server is not None:
            self._server.close(close_connections=True, code=code, reason=reason)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def revoked(self, digests: set[str]) -> None:
        """The principals of these token digests were revoked (access.py's `on_revoked`, by identity, not
        name): their connections close now, 1008 "token revoked"."""
        for conn in list(self.connections):
            if conn.principal is not None and conn.principal.token_hash in digests:
                conn.log.info("closing: principal revoked", principal=conn.principal.name)
                conn.close_soon(POLICY, "token revoked")

    def _make_room(self) -> bool:
        """Below the connection limit: yes. At it, close a connection that has not authenticated yet,
        so sockets that never authenticate cannot hold every slot until authTimeout. False if none."""
        if len(self.connections) - self.evicting < self.config.server.max_connections:
            return True
        victim = next((c for c in self.connections if not c.authed and not c.closing), None)
        if victim is None:
            return False
        log.warning("connection limit: closing an unauthenticated connection", peer=victim.peer)
        self.evicting += 1
        victim.close_soon(POLICY, "connection limit reached; authenticate sooner")
        closer = victim.closer
        assert closer is not None  # close_soon made it: the victim was not closing
        closer.add_done_callback(lambda _: self._evicted())
        return True

    def _evicted(self) -> None:
        self.evicting -= 1

    def connection_count(self) -> int:
        return len(self.connections)

    # ---- WebSocket -----------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        if self.admission is not None:
            self.admission.upgraded(ws)
        conn = Connection(ws, self.config)
        self.connections.add(conn)
        conn._writer = asyncio.create_task(conn.writer())
        try:
            if not conn.authed and not await self.handshake.authenticate(conn):
                return
            ws.protocol.max_message_size = self.config.server.max_frame_bytes
            conn.log.debug("connection ready", peer=conn.peer)
            async for message in ws:
                # Backpressure: while the client is behind on reading, read no more requests from it.
                if conn.closing or not await conn.wait_for_room(self.config.server.max_send_buffer):
                    break
                if isinstance(message, bytes):
                    conn.send_obj(
                        protocol.error_response(
                            None, InvalidRequest("binary frames are not accepted; send JSON as text")
                        )
                    )
                    continue
                self.dispatch.on_text(conn, message)
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
            conn.mark_closed()
            if conn._writer is not None:
                conn._writer.cancel()
