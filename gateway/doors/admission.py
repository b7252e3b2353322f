"""Admission from accept: every TCP socket is counted from the moment it is accepted, not only once its
WebSocket upgrade is done, so sockets that never send a byte cannot use up the file descriptors the
gateway needs for its own files (sessions.json, transcripts, SQLite, locks).

    pending     accepted, upgrade (or HTTP request) not finished: at most `server.maxPendingSockets`,
                `server.maxPendingPerAddress` per client address; past either, the oldest one that has
                not sent a byte is dropped (else the oldest): a real client sends its request at once
    all         every socket: at most RLIMIT_NOFILE − `server.fdReserve` − what was open at start − room
                for sockets accepted but not counted yet (socket_budget); past it the oldest pending
                one is dropped, or the new one answered HTTP 503 when none is pending

The pending time itself is bounded by `server.handshakeTimeout`.
"""

from __future__ import annotations

import os
import resource
from collections import Counter
from typing import Any

import structlog

from ..config import ServerConfig

log = structlog.get_logger("gateway.server")

BACKLOG = 100  # the listening socket's backlog: asyncio accepts this many at a time

FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
    b"Connection: close\r\nContent-Length: 31\r\n\r\ntoo many connections; retry soon"
)


def open_descriptors() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


def socket_budget(config: ServerConfig) -> tuple[int, int, int]:
    """(sockets allowed at once, RLIMIT_NOFILE, descriptors reserved) for this process now.

    Room is left for sockets not counted yet: asyncio accepts up to BACKLOG at a time and makes their
    connections a loop iteration later (by when another burst may be in), and a dropped socket's
    descriptor is closed one iteration after it is dropped; so three bursts."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # raised to the hard limit by app.serve
    limit = soft if soft != resource.RLIM_INFINITY else 65536
    reserve = config.fd_reserve or max(64, limit // 8)
    return max(1, limit - reserve - open_descriptors() - 3 * BACKLOG), limit, reserve


class Admission:
    """Counts sockets from accept to close; `admit` says whether a new one may stay."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.max_sockets, self.fd_limit, self.fd_reserve = socket_budget(config)
        self.live: set[Any] = set()
        self.pending: dict[Any, str] = {}  # insertion order: oldest first
        self.silent: dict[Any, str] = {}  # the pending ones that have not sent a byte yet, oldest first
        self.per_address: Counter[str] = Counter()
        self.dropped = 0  # pending sockets dropped to make room
        self.refused = 0  # answered 503: every socket was upgraded already
        self.flooded = 0  # cut for sending too much before authenticating
        if self.max_sockets < config.max_connections + config.max_pending_sockets:
            log.warning(
                "few file descriptors: fewer sockets than server.maxConnections + maxPendingSockets "
                "fit; raise LimitNOFILE",
                sockets=self.max_sockets,
                rlimitNofile=self.fd_limit,
                reserved=self.fd_reserve,
            )

    def admit(self, conn: Any, address: str) -> bool:
        c = self.config
        if self.per_address[address] >= c.max_pending_per_address:
            self._drop(self._victim(address), "per address")
        if len(self.pending) >= c.max_pending_sockets:
            self._drop(self._victim(None), "in total")
        if len(self.live) >= self.max_sockets:
            if not self.pending:
                self.refused += 1
                if self.refused == 1 or self.refused % 1000 == 0:
                    log.warning(
                        "socket refused: descriptors are kept for the gateway's files",
                        sockets=len(self.live),
                        refused=self.refused,
                    )
                return False
            self._drop(self._victim(None), "descriptors")
        self.live.add(conn)
        self.pending[conn] = self.silent[conn] = address
        self.per_address[address] += 1
        return True

    def _victim(self, address: str | None) -> Any:
        """The oldest pending socket (of `address`) that has sent nothing, else the oldest one."""
        for table in (self.silent, self.pending):
            for conn, a in table.items():
                if address is None or a == address:
                    return conn
        raise AssertionError("no pending socket to drop")  # callers checked there is one

    def talking(self, conn: Any) -> None:
        """The socket sent its first bytes: dropped only after the silent ones."""
        self.silent.pop(conn, None)

    def upgraded(self, conn: Any) -> None:
        """The WebSocket upgrade is done: no longer pending (still counted among all sockets)."""
        self.silent.pop(conn, None)
        address = self.pending.pop(conn, None)
        if address is not None:
            self._uncount(address)

    def gone(self, conn: Any) -> None:
        self.upgraded(conn)
        self.live.discard(conn)

    def _drop(self, conn: Any, why: str) -> None:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 1000 == 0:
            log.warning(
                "pending socket dropped: too many sockets that did not finish their upgrade",
                limit=why,
                dropped=self.dropped,
                peer=self.pending.get(conn),
            )
        self.gone(conn)
        conn.transport.abort()

    def cut(self, address: str, limit: str) -> None:
        """A socket is cut for sending too much before authenticating (logged 1st and every 1000th)."""
        self.flooded += 1
        if self.flooded == 1 or self.flooded % 1000 == 0:
            log.warning(
                "closing a socket that sent too much before authenticating", limit=limit, peer=address, cut=self.flooded
            )

    def _uncount(self, address: str) -> None:
        self.per_address[address] -= 1
        if self.per_address[address] <= 0:
            del self.per_address[address]
