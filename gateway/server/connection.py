"""One WebSocket client: its outgoing queue, backpressure and closing.

Frames are queued and written by one writer task per connection, so a client that stops reading
delays nobody else: once what it left unsent passes `server.maxSendBuffer` it is closed with 1008
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

from .. import protocol

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Config
    from ..events import Event

log = structlog.get_logger("gateway.server")

# Close codes
POLICY = 1008
TOO_BIG = 1009
RESTART = 1012


class Connection:
    """One authenticated-or-not client. Implements the event bus's Subscriber."""

    __slots__ = ("ws", "connection_id", "peer", "subscriptions", "authed", "_out", "_out_bytes",
                 "_wake", "_writer", "inflight", "config", "log", "closing", "closer", "tasks")

    def __init__(self, ws: ServerConnection, config: "Config"):
        self.ws = ws
        self.config = config
        self.connection_id = uuid.uuid4().hex[:12]
        self.peer = peer_of(ws)
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
        # What is still unsent from before this frame decides: a client that reads promptly is never
        # closed for one big frame (replies are capped at server.maxReplyBytes), one that stopped reading is.
        buffered = self._out_bytes + _transport_buffer(self.ws)
        if buffered > self.config.server.max_send_buffer:
            self.log.warning("closing slow consumer", buffered=buffered)
            self.close_soon(POLICY, "slow consumer")
            return
        self._out.append(data)
        self._out_bytes += len(data)
        self._wake.set()

    def deliver(self, event: "Event") -> None:
        """An event of a session this connection subscribed to (EventBus)."""
        if event.frame is None:
            event.frame = protocol.encode(protocol.notification(event.method, event.params))
        self.push(event.frame)

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
