"""What the one path of a call (dispatcher.py) writes to the audit log, and how refusals are collapsed.

A call done is one entry. A refused call is one entry too — the first refusal of a principal's method
through a door in a minute, written as it happens — and the refusals of that principal's method through
that door after it in the same minute are counted, not written: when the minute is over (or the gateway stops) they become one entry
`{…, ok: false, count, until}` (`at` the first of them, `until` the last). So a token refused 5,000 times
a second writes two entries a minute, not 5,000, and every attempt is still counted. What is held meanwhile
is one small record per principal, audited method and door.

An entry names only what the method's schema took (`agent`, `target`): a refusal before its params were
valid names none of them.

An entry that cannot be written because the store cannot be reached (the database is away, a disk
error) is held in memory, in order, and written when the store answers again: tried every HELD_RETRY_S.
What is held is bounded (HELD_MAX entries, HELD_MAX_BYTES of their JSON): past it the oldest is dropped,
counted. The outage is said twice, with counts: `audit_entries_held` when the first entry is held,
`audit_entries_written` when the last is written (how many were held, how many dropped).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

import orjson
import structlog

from .errors import storage_unreachable
from .timeutil import now_iso

log = structlog.get_logger("gateway.calls")

TIDY_PAST = 1000  # records held before those of past minutes with no count are let go
Append = Callable[[dict[str, Any]], Awaitable[None]]
HELD_MAX = 10_000  # entries held while the store cannot be reached, at most …
HELD_MAX_BYTES = 8 << 20  # … and this many bytes of their JSON; past either the oldest is dropped
HELD_RETRY_S = 1.0  # how often the held entries are tried while the store is away


@dataclass
class _Repeats:
    """The refusals of one principal's method through one door in one minute after its first (written as it happened)."""

    minute: str  # the first refusal's `at` up to the minute ("2026-11-28T17:05")
    count: int = 0
    first: str = ""
    last: str = ""


class AuditRecorder:
    def __init__(self, append: Append):
        self.append = append  # the storage's AuditLog.append (an engine may be swapped: looked up each time)
        self._repeats: dict[tuple[str, str, str], _Repeats] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._held: collections.deque[tuple[dict[str, Any], int]] = collections.deque()  # (entry, its bytes)
        self._held_bytes = 0
        self._held_count = 0  # held since the outage began (written or dropped)
        self._dropped = 0  # of those, dropped to stay within the bounds
        self._writer: asyncio.Task[None] | None = None

    async def record(self, entry: dict[str, Any]) -> None:
        """Write `entry` ({at, principal, method, door, ok, agent?, target?}), or count it: a refusal
        repeated within its minute."""
        if entry["ok"]:
            await self._write(entry)
            return
        key = (entry["principal"], entry["method"], entry["door"])
        minute = entry["at"][:16]
        seen = self._repeats.get(key)
        if seen is not None and seen.minute == minute:
            seen.count += 1
            seen.first = seen.first or entry["at"]
            seen.last = entry["at"]
            self._start_flusher()
            return
        if seen is not None and seen.count:
            await self._write(self._summary(key, seen))
        if seen is None and len(self._repeats) >= TIDY_PAST:
            now = now_iso()[:16]
            self._repeats = {k: r for k, r in self._repeats.items() if r.count or r.minute >= now}
        self._repeats[key] = _Repeats(minute)
        await self._write(entry)

    async def flush(self, everything: bool = False) -> None:
        """Write the counts of minutes that are over (`everything`: of this one too: the gateway stops)."""
        now = now_iso()[:16]
        for key, seen in list(self._repeats.items()):
            if everything or seen.minute < now:
                del self._repeats[key]
                if seen.count:
                    await self._write(self._summary(key, seen))

    async def close(self) -> None:
        """Write every count held; stop the flusher; try once more the entries held (an outage)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
            self._flusher = None
        await self.flush(everything=True)
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
            self._writer = None
        if self._held:
            await self._write_held()
            if self._held:
                log.warning("audit entries not written", held=len(self._held), dropped=self._dropped)

    @property
    def held(self) -> int:
        """Entries waiting for the store to answer again."""
        return len(self._held)

    @staticmethod
    def _summary(key: tuple[str, str, str], seen: _Repeats) -> dict[str, Any]:
        principal, method, door = key
        return {
            "at": seen.first,
            "principal": principal,
            "method": method,
            "door": door,
            "ok": False,
            "count": seen.count,
            "until": seen.last,
        }

    def _start_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop(), name="audit-counts")

    async def _flush_loop(self) -> None:
        """Wake just after each minute ends while counts are held; write the finished minutes' counts."""
        while any(seen.count for seen in self._repeats.values()):
            now = datetime.now(timezone.utc)
            await asyncio.sleep(60.5 - now.second - now.microsecond / 1e6)
            await self.flush()

    async def _write(self, entry: dict[str, Any]) -> None:
        if self._held:  # the store is away: after those held, in order
            self._hold(entry)
            return
        try:
            await self.append(entry)
        except Exception as exc:  # noqa: BLE001 - a full disk or a database gone: said, never raised
            if not _passing(exc):
                log.warning("audit entry not written", method=entry["method"], error=type(exc).__name__)
                return
            log.warning("audit_entries_held", error=f"{type(exc).__name__}: {str(exc)[:200]}", max=HELD_MAX)
            self._hold(entry)

    def _hold(self, entry: dict[str, Any]) -> None:
        size = len(orjson.dumps(entry, default=str))
        self._held.append((entry, size))
        self._held_bytes += size
        self._held_count += 1
        while len(self._held) > HELD_MAX or self._held_bytes > HELD_MAX_BYTES:
            _, gone = self._held.popleft()
            self._held_bytes -= gone
            if not self._dropped:
                log.warning(
                    "audit_entries_dropped", reason="held past the bounds", max=HELD_MAX, max_bytes=HELD_MAX_BYTES
                )
            self._dropped += 1
        if self._writer is None or self._writer.done():
            with contextlib.suppress(RuntimeError):  # no running loop (a tool's): close() tries them
                self._writer = asyncio.get_running_loop().create_task(self._write_later(), name="audit-held")

    async def _write_later(self) -> None:
        """Every HELD_RETRY_S while entries are held: write them, oldest first, until one fails."""
        while self._held:
            await asyncio.sleep(HELD_RETRY_S)
            await self._write_held()

    async def _write_held(self) -> None:
        while self._held:
            entry, size = self._held[0]
            try:
                await self.append(entry)
            except Exception as exc:  # noqa: BLE001 - still away: tried again later
                if _passing(exc):
                    return
                log.warning("audit entry not written", method=entry["method"], error=type(exc).__name__)
            if self._held and self._held[0][0] is entry:  # (dropped meanwhile: past the bounds)
                self._held.popleft()
                self._held_bytes -= size
        log.warning("audit_entries_written", held=self._held_count, dropped=self._dropped)
        self._held_count = self._dropped = 0


def _passing(exc: BaseException) -> bool:
    """A failure that passes: the store cannot be reached (the database away, a timeout, a disk error)."""
    return storage_unreachable(exc) is not None or isinstance(exc, (OSError, asyncio.TimeoutError))
