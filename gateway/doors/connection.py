"""One WebSocket client: its outgoing queue, backpressure and closing.

Frames are queued and written by one writer task per connection, all that is queued in one write, so
a client that stops reading delays nobody else: once what it left unsent passes `server.maxSendBuffer` it is closed with 1008
"slow consumer". Implements the event bus's Subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from .. import protocol

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Config
    from ..events import Event
    from ..principals import Principal

log = structlog.get_logger("gateway.server")

# Close codes
POLICY = 1008
TOO_BIG = 1009
RESTART = 1012

# Seconds a close (and what is flushed before it) may take before the socket is aborted.
CLOSE_TIMEOUT = 5.0


class Connection:
    """One authenticated-or-not client. Implements the event bus's Subscriber."""

    answers = True  # its client can answer a chat.confirm (events.Subscriber)

    __slots__ = (
        "ws",
        "connection_id",
        "peer",
        "subscriptions",
        "authed",
        "principal",
        "_out",
        "_out_bytes",
        "_wake",
        "_room",
        "_writer",
        "inflight",
        "config",
        "log",
        "closing",
        "closer",
        "tasks",
    )

    def __init__(self, ws: ServerConnection, config: "Config"):
        self.ws = ws
        self.config = config
        self.connection_id = uuid.uuid4().hex[:12]
        self.peer = peer_of(ws)
        self.subscriptions: set[str] = set()
        self.authed = bool(getattr(ws, "jarvis_authed", False))
        # Who authenticated it (principals.py): set by the handshake, from the header or the auth frame.
        self.principal: "Principal | None" = getattr(ws, "jarvis_principal", None)
        self._out: deque[bytes] = deque()
        self._out_bytes = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
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
        # What is still unsent from before this frame decides. Replies wait for room first (send_reply)
        # and the read loop stops reading while the client is behind, so this bound (a buffer and one
        # largest reply) is reached only by events piling up for a client that does not read them.
        buffered = self._out_bytes + _transport_buffer(self.ws)
        if buffered > self.config.server.max_send_buffer + self.config.server.max_reply_bytes:
            self.log.warning("closing slow consumer", buffered=buffered)
            self.close_soon(POLICY, "slow consumer")
            return
        self._out.append(data)
        self._out_bytes += len(data)
        self._wake.set()

    def deliver(self, event: "Event") -> None:
        """An event of a session this connection subscribed to (EventBus)."""
        if event.frame is None:
            event.frame = protocol.encode(protocol.notification(*event.notification(protocol.code_of)))
        self.push(event.frame)

    def unsent(self) -> int:
        return self._out_bytes + _transport_buffer(self.ws)

    async def wait_for_room(self, limit: int) -> bool:
        """Wait until what is unsent is at most `limit` bytes; False (and the connection closed as a slow
        consumer) when the client has not read it within server.slowConsumerSeconds."""
        if self.unsent() <= limit or self.closing:
            return not self.closing
        try:
            async with asyncio.timeout(self.config.server.slow_consumer_seconds):
                while self.unsent() > limit and not self.closing:
                    self._room.clear()
                    await self._room.wait()
        except TimeoutError:
            self.log.warning("closing slow consumer", buffered=self.unsent())
            self.close_soon(POLICY, "slow consumer")
            return False
        return not self.closing

    def has_room_for_reply(self) -> bool:
        """Whether a reply may be queued now, without waiting (see send_reply)."""
        return not self.closing and self.unsent() <= self.config.server.max_send_buffer // 2

    async def send_reply(self, data: bytes) -> None:
        """Queue a reply once the client has read most of what is queued (half of server.maxSendBuffer).

        A client that pipelines many big requests is slowed down to its reading pace instead of being
        closed; one that stops reading is closed as a slow consumer after server.slowConsumerSeconds."""
        if await self.wait_for_room(self.config.server.max_send_buffer // 2):
            self.push(data)

    def send_obj(self, obj: Any) -> None:
        self.push(protocol.encode(obj))

    async def writer(self) -> None:
        ws = self.ws
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._out:
                    # All that is queued goes out in one write, one system call rather than one per
                    # frame (a client with 4 requests in flight gets its 4 replies together): what
                    # ws.send does for one message, done for several.
                    async with ws.send_context():
                        while self._out:
                            data = self._out.popleft()
                            self._out_bytes -= len(data)
                            ws.protocol.send_text(data)
                        ws.transport.writelines(ws.protocol.data_to_send())
                    self._room.set()  # replies waiting for room look again
        except ConnectionClosed:
            pass

    def close_soon(self, code: int, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        self._room.set()
        self._out.clear()
        self._out_bytes = 0
        self.closer = asyncio.create_task(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        """Close, and abort the socket if that takes longer than CLOSE_TIMEOUT. websockets' close()
        first waits for the client to read what is queued (drain) and only then starts its own
        timeout, so a client that never reads would hold the socket and its buffers for good."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.ws.close(code, reason)
        self._abort()

    def _abort(self) -> None:
        if self.ws.state is not State.CLOSED:
            self.log.warning("close timed out: socket aborted", peer=self.peer, unsent=self.unsent())
            self.ws.transport.abort()

    async def flush_and_close(self, code: int, reason: str) -> None:
        """Send what is queued (an error explaining why), then close (bounded: see _close)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                while self._out:
                    data = self._out.popleft()
                    await self.ws.send(data, text=True)
        self.mark_closed()
        await self._close(code, reason)

    def mark_closed(self) -> None:
        """Nothing more goes out; replies waiting for room give up now."""
        self.closing = True
        self._room.set()


def peer_of(ws: ServerConnection) -> str:
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
