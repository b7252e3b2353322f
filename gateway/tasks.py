"""Background tasks that must not fail silently: `task.add_done_callback(log_failure("event"))`."""

from __future__ import annotations

import asyncio
from typing import Callable

import structlog

log = structlog.get_logger("gateway.tasks")


def log_failure(event: str) -> Callable[[asyncio.Task], None]:
    """A done-callback that logs `event` (a warning with the error) when the task raised."""

    def done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.warning(event, error=repr(task.exception()))

    return done
