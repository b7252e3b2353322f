"""asyncio helpers: background tasks that must not fail silently
(`task.add_done_callback(log_failure("event"))`), and locks by key that leave nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable

import structlog

log = structlog.get_logger("gateway.tasks")


def log_failure(event: str) -> Callable[[asyncio.Task], None]:
    """A done-callback that logs `event` (a warning with the error) when the task raised."""

    def done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.warning(event, error=repr(task.exception()))

    return done


class KeyedLocks:
    """One asyncio.Lock per key, kept only while somebody holds it or waits for it, so keys a client
    makes up (a `sessions.delete` of a session that never existed) leave nothing behind."""

    def __init__(self) -> None:
        self._locks: dict[str, list[Any]] = {}  # key → [lock, holders + waiters]

    @contextlib.asynccontextmanager
    async def hold(self, key: str):
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._locks.get(key) is entry:
                del self._locks[key]

    def __len__(self) -> int:
        return len(self._locks)
