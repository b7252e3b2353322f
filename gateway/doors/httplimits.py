"""What a client can make the HTTP API listener hold, each with its limit (doors/httpguard.py's Guard asks):

    requests      authenticated ones in flight (a streamed reply until it ends): `server.httpMaxPerToken`
                  per token's principal (429 past it), `server.maxConnections` for all (503): a client
                  holding one token can never make the listener refuse another's
    body bytes    request bodies held at once, from their first byte to their answer:
                  `server.httpBodyBytesInFlight` (503 past it); a parsed body takes several times its size
    streams       event streams open at once (GET /mcp, streamed /v1 replies): `server.httpMaxStreams`
                  (503 past it), below a token's requests so idle streams never take its last ones; a
                  stream that sent no event for `server.httpStreamIdleSeconds` is ended (keep-alive
                  comments do not count)
    wrong tokens  requests waiting out `server.authFailureDelay`: at most `server.maxPendingSockets`; past
                  it the oldest is answered at once and its connection closed, as the WebSocket closes an
                  unauthenticated connection to make room, so a flood of wrong tokens holds nothing the
                  owner needs

Refusals are `Refusal`s (status, message, OpenAI's error type and code, Retry-After), which the guard
sends in OpenAI's JSON error shape. Every limit is counted here and released in a `finally` of the guard.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, TypeVar

import structlog

from ..config import ServerConfig

log = structlog.get_logger("gateway.http")

T = TypeVar("T")


@dataclass
class Refusal:
    status: int
    message: str
    code: str
    type: str = "server_error"
    retry_after: int = 1

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


@dataclass(eq=False)
class Stream:
    """One open event stream: ended (`gone`) when idle too long."""

    gone: asyncio.Future[None]
    last: float
    timer: asyncio.TimerHandle | None = None
    path: str = ""

    def sent(self, body: bytes, now: float) -> None:
        """A body chunk went out: an event (not only `:` comments) makes the stream busy again."""
        if body and any(line and not line.startswith(b":") for line in body.splitlines()):
            self.last = now


@dataclass
class HttpLimits:
    config: ServerConfig
    inflight: int = 0
    per_token: Counter[str] = field(default_factory=Counter)
    body_bytes: int = 0
    streams: set[Stream] = field(default_factory=set)
    waiting: dict[asyncio.Future[None], str] = field(default_factory=dict)  # wrong tokens, oldest first
    refused: Counter[str] = field(default_factory=Counter)  # by code: what chaos.py and tests read
    evicted: int = 0  # wrong-token waits cut short to make room
    idle_closed: int = 0  # streams ended for idleness

    # ---- authenticated requests ------------------------------------------------------------------
    def admit(self, key: str) -> Refusal | None:
        """Take a request slot of the principal `key` (a name; None), or say why not."""
        c = self.config
        if self.per_token[key] >= c.http_max_per_token:
            return self._refuse(
                Refusal(
                    429,
                    f"too many requests in flight with this token (server.httpMaxPerToken = {c.http_max_per_token}); "
                    "retry when one has ended",
                    "rate_limited",
                    "rate_limit_error",
                )
            )
        if self.inflight >= c.max_connections:
            return self._refuse(
                Refusal(
                    503,
                    f"too many requests in flight (server.maxConnections = {c.max_connections}); retry shortly",
                    "overloaded",
                )
            )
        self.per_token[key] += 1
        self.inflight += 1
        return None

    def done(self, key: str) -> None:
        self.inflight -= 1
        self.per_token[key] -= 1
        if self.per_token[key] <= 0:
            del self.per_token[key]

    def take_body(self, n: int) -> Refusal | None:
        """Count `n` more bytes of request bodies held (None), or say why they may not be."""
        limit = self.config.http_body_bytes_in_flight
        if self.body_bytes + n > limit:
            return self._refuse(
                Refusal(
                    503,
                    f"the gateway holds {limit} bytes of request bodies already (server.httpBodyBytesInFlight); "
                    "retry shortly",
                    "overloaded",
                )
            )
        self.body_bytes += n
        return None

    def give_body(self, n: int) -> None:
        self.body_bytes -= n

    # ---- event streams -----------------------------------------------------------------------------
    def open_stream(self, path: str, gone: asyncio.Future[None]) -> Stream | Refusal:
        """Count an event stream (`gone` is set when it is to end), or say why it may not open."""
        c = self.config
        if len(self.streams) >= c.http_max_streams:
            return self._refuse(
                Refusal(
                    503,
                    f"too many event streams open (server.httpMaxStreams = {c.http_max_streams}); retry shortly",
                    "too_many_streams",
                    retry_after=5,
                )
            )
        loop = asyncio.get_running_loop()
        stream = Stream(gone, loop.time(), path=path)
        self.streams.add(stream)
        self._arm(stream, c.http_stream_idle_seconds)
        return stream

    def _arm(self, stream: Stream, after: float) -> None:
        stream.timer = asyncio.get_running_loop().call_later(after, self._check_idle, stream)

    def _check_idle(self, stream: Stream) -> None:
        idle = self.config.http_stream_idle_seconds
        quiet = asyncio.get_running_loop().time() - stream.last
        if quiet < idle:
            self._arm(stream, idle - quiet)
            return
        stream.timer = None
        self.idle_closed += 1
        if self.idle_closed == 1 or self.idle_closed % 1000 == 0:
            log.info("idle event stream ended", path=stream.path, idleS=idle, ended=self.idle_closed)
        if not stream.gone.done():
            stream.gone.set_result(None)

    def end_streams(self) -> None:
        """End every open stream (the listener is stopping: a GET /mcp stream would hold its shutdown
        for the whole grace period)."""
        for stream in self.streams:
            if not stream.gone.done():
                stream.gone.set_result(None)

    def close_stream(self, stream: Stream) -> None:
        if stream.timer is not None:
            stream.timer.cancel()
        self.streams.discard(stream)

    # ---- wrong tokens ------------------------------------------------------------------------------
    async def unauthenticated(self, peer: str, wait: Awaitable[T]) -> tuple[T | None, bool]:
        """Await `wait` (a wrong token's slow answer) as one of at most `server.maxPendingSockets`; the
        oldest is cut short to make room for a new one. → (its result, or None when cut short; cut short)."""
        loop = asyncio.get_running_loop()
        while len(self.waiting) >= self.config.max_pending_sockets:
            oldest = next(iter(self.waiting))
            del self.waiting[oldest]
            oldest.set_result(None)
            self.evicted += 1
            if self.evicted == 1 or self.evicted % 1000 == 0:
                log.warning("wrong-token request answered early to make room", peer=peer, evicted=self.evicted)
        room: asyncio.Future[None] = loop.create_future()
        self.waiting[room] = peer
        task = asyncio.ensure_future(wait)
        either: list[asyncio.Future[Any]] = [task, room]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting.pop(room, None)
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result(), False
        return None, True

    def _refuse(self, refusal: Refusal) -> Refusal:
        self.refused[refusal.code] += 1
        n = self.refused[refusal.code]
        if n == 1 or n % 1000 == 0:
            log.warning("http request refused", code=refusal.code, status=refusal.status, refused=n)
        return refusal

    def snapshot(self) -> dict[str, Any]:
        return {
            "inflight": self.inflight,
            "bodyBytes": self.body_bytes,
            "streams": len(self.streams),
            "waitingWrongTokens": len(self.waiting),
            "refused": dict(self.refused),
            "evicted": self.evicted,
            "idleClosed": self.idle_closed,
        }
