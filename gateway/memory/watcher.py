"""Watch the workspace's memory files (watchfiles) and call back, debounced, when one changes.

The callback runs on the event loop and only schedules a sync. The loop ends when `stop` is set.
A missing workspace is created (0700) so that memory files added later are seen. Native watching that
fails (inotify instances or watches exhausted) falls back to polling; `WatchState` says which runs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable

from watchfiles import Change, awatch
import structlog

from .layout import NOTES_DIR, ROOT_FILES

log = structlog.get_logger("gateway.memory")


def memory_filter(workspace: Path) -> Callable[[Change, str], bool]:
    root = str(workspace.resolve())
    prefix = root.rstrip("/") + "/"

    def accept(change: Change, path: str) -> bool:
        if not path.startswith(prefix):
            return False
        rel = path[len(prefix) :]
        return (
            rel in ROOT_FILES
            or rel == NOTES_DIR
            or (rel.startswith(NOTES_DIR + "/") and (rel.endswith(".md") or "." not in rel.rsplit("/", 1)[-1]))
        )

    return accept


def _undecodable(exc: BaseException) -> bool:
    """watchfiles could not make a changed path a str (a name that is not UTF-8): that change is lost,
    not the watcher — it watches on (a sync finds the file, and leaves it out: sources.Scan.unnamable)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_undecodable(e) for e in exc.exceptions)
    return "Unable to decode path" in str(exc)


class WatchState:
    """What the watcher is doing, for memory.status and system.health.

    mode: "native" (inotify and friends), "polling" (stat every pollMs: the fallback when native
    watching cannot start or dies — inotify instances or watches run out — or by choice, for network
    filesystems), "stopped" (neither works: files are synced only on other triggers), "off"."""

    def __init__(self) -> None:
        self.mode = "off"
        self.error: str | None = None
        self.since: float | None = None

    def set(self, mode: str, error: str | None = None) -> None:
        self.mode, self.since = mode, time.time()
        if error is not None:
            self.error = error

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode}
        if self.error:
            out["error"] = self.error
        return out


async def watch_memory(
    workspace: Path,
    on_change: Callable[[], None],
    stop: asyncio.Event,
    debounce_ms: int = 500,
    *,
    mode: str = "auto",
    poll_ms: int = 2000,
    state: WatchState | None = None,
) -> None:
    """Call `on_change` (debounced) when a memory file changes, until `stop` is set.

    mode "auto": native watching, falling back to polling when it fails; "polling": poll only. A
    watcher that fails marks memory changed, since edits may have been missed meanwhile."""
    state = state or WatchState()
    try:
        workspace.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        log.warning("memory_watcher_no_workspace", workspace=str(workspace), error=str(exc))
        state.set("stopped", f"workspace unusable: {exc}")
        return
    tries = ["native", "polling"] if mode == "auto" else ["polling"]
    said: set[str] = set()
    for how in tries:
        while True:
            state.set(how)
            try:
                async for _changes in awatch(
                    workspace,
                    watch_filter=memory_filter(workspace),
                    debounce=max(debounce_ms, 1),
                    stop_event=stop,
                    recursive=True,
                    rust_timeout=1000,
                    ignore_permission_denied=True,
                    force_polling=how == "polling",
                    poll_delay_ms=poll_ms,
                ):
                    if stop.is_set():
                        break
                    on_change()
                return  # stopped on purpose
            except Exception as exc:  # e.g. inotify instances or watches ran out ("Too many open files")
                if stop.is_set():
                    return
                if _undecodable(exc):  # a changed file's name is not UTF-8: watched on, the sync says which
                    if str(exc) not in said:
                        said.add(str(exc))
                        log.info("memory_watcher_restarted", mode=how, reason="a file name that is not UTF-8")
                    on_change()  # the changes of that moment: the sync finds them
                    continue
                log.warning(
                    "memory_watcher_failed",
                    mode=how,
                    error=str(exc),
                    next="polling" if how != tries[-1] else "none: memory files sync on other triggers",
                )
                state.error = f"{how} watching failed: {exc}"
                on_change()  # edits may have been missed while it failed
                break
    state.set("stopped")
