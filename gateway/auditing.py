"""What the one path of a call (dispatcher.py) writes to the audit log, and how refusals are collapsed.

A call done is one entry. A refused call is one entry too — the first refusal of a principal's method
through a door in a minute, written as it happens — and the refusals of that principal's method through
that door after it in the same minute are counted, not written: when the minute is over (or the gateway stops) they become one entry
`{…, ok: false, count, until}` (`at` the first of them, `until` the last). So a token refused 5,000 times
a second writes two entries a minute, not 5,000, and every attempt is still counted. What is held meanwhile
is one small record per principal, audited method and door.

An entry names only what the method's schema took (`agent`, `target`): a refusal before its params were
valid names none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

import structlog

from .timeutil import now_iso

log = structlog.get_logger("gateway.calls")

TIDY_PAST = 1000  # records held before those of past minutes with no count are let go
Append = Callable[[dict[str, Any]], Awaitable[None]]


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
        """Write every count held; stop the flusher."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
            self._flusher = None
        await self.flush(everything=True)

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
        try:
            await self.append(entry)
        except Exception as exc:  # noqa: BLE001 - a full disk or a database gone: said, never raised
            log.warning("audit entry not written", method=entry["method"], error=type(exc).__name__)
