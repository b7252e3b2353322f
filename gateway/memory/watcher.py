"""Watch the workspace's memory files (watchfiles) and call back, debounced, when one changes.

The callback runs on the event loop and only schedules a sync. The loop ends when `stop` is set.
A missing workspace is created (0700) so that memory files added later are seen.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

from watchfiles import Change, awatch
import structlog

from .sources import ROOT_FILES

log = structlog.get_logger("gateway.memory")


def memory_filter(workspace: Path) -> Callable[[Change, str], bool]:
    root = str(workspace.resolve())
    prefix = root.rstrip("/") + "/"

    def accept(change: Change, path: str) -> bool:
        if not path.startswith(prefix):
            return False
        rel = path[len(prefix):]
        return rel in ROOT_FILES or rel == "memory" or (rel.startswith("memory/") and
                                                        (rel.endswith(".md") or "." not in rel.rsplit("/", 1)[-1]))

    return accept


async def watch_memory(workspace: Path, on_change: Callable[[], None], stop: asyncio.Event,
                       debounce_ms: int = 500) -> None:
    try:
        workspace.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        log.warning("memory_watcher_no_workspace", workspace=str(workspace), error=str(exc))
        return
    try:
        async for _changes in awatch(workspace, watch_filter=memory_filter(workspace), debounce=max(debounce_ms, 1),
                                     stop_event=stop, recursive=True, rust_timeout=1000,
                                     ignore_permission_denied=True):
            if stop.is_set():
                break
            on_change()
    except Exception as exc:  # e.g. inotify watch limit reached: memory still syncs on other triggers
        if not stop.is_set():
            log.warning("memory_watcher_stopped", error=str(exc))
