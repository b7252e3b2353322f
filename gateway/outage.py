"""A database that cannot be reached, said twice: when it goes, and when it comes back.

Every call, search and sync that fails for the database's absence used to log its own line (a sync: its
traceback), ~400 a gateway in 10 s of outage. One Outage per database connection (storage/postgres/db.py)
counts them instead: the first failure logs `database_unreachable` (warning, with why), the rest are only
counted, and a probe (`probe()`: a query, every `PROBE_EVERY` seconds) notices the database answer again
and logs `database_reachable` (warning: an outage ended) with how many failures there were and how long.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Awaitable, Callable

import structlog

from .errors import Unavailable, storage_unreachable

log = structlog.get_logger("gateway.storage")

PROBE_EVERY = 0.5  # seconds between tries of a database that went away


class Outage:
    def __init__(self, probe: Callable[[], Awaitable[object]], where: str = ""):
        self.probe = probe  # succeeds when the database answers (a cheap query)
        self.where = where  # said with both lines (an instance, a redacted URL)
        self.since: float | None = None  # time.monotonic() of the outage's first failure; None: up
        self.failures = 0  # failures said or counted since then
        self.outages = 0  # outages since this gateway started (system.health could show it)
        self._prober: asyncio.Task[None] | None = None

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> Unavailable | None:
        """The Unavailable that `exc` amounts to when it says the database cannot be reached (counted into
        the outage, which the first of them begins and says), else None."""
        down = storage_unreachable(exc)
        if down is None:
            return None
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            self.outages += 1
            log.warning("database_unreachable", where=self.where, error=f"{type(exc).__name__}: {str(exc)[:200]}")
            with contextlib.suppress(RuntimeError):  # no running loop: a tool's; its next failure retries
                self._prober = asyncio.get_running_loop().create_task(self._until_back(), name="database-probe")
        return down

    async def _until_back(self) -> None:
        while True:
            await asyncio.sleep(PROBE_EVERY)
            try:
                async with asyncio.timeout(max(PROBE_EVERY * 4, 2.0)):
                    await self.probe()
            except Exception:  # noqa: BLE001 - still away (or answering slowly): try again
                continue
            break
        assert self.since is not None
        log.warning(
            "database_reachable",
            where=self.where,
            failures=self.failures,
            seconds=round(time.monotonic() - self.since, 2),
        )
        self.since, self.failures, self._prober = None, 0, None

    async def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._prober
            self._prober = None
