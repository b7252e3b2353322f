"""SyncOrchestrator: every trigger of a memory sync goes through here, and all of them coalesce.

Triggers (config `memory.sync.*`):

| trigger | key | what runs |
|---|---|---|
| start | `onStart` | memory files + all transcripts, once, in the background |
| file watch | `watch`, `watchDebounceMs` | memory files, after the watcher's debounce |
| after `chat.final` | `sessionDebounceMs` | that session's transcript, debounced per session |
| session start | `onSessionStart` | what is dirty, in the background, when a session is created |
| search | `onSearch` | what is dirty, before the search answers |
| interval | `intervalMinutes` (0 = off) | memory files + all transcripts, every N minutes |
| flush after compaction | `forceOnFlush` | memory files + that transcript, forced (re-read even if size/mtime match) |
| `memory.sync` | — | everything, forced when asked |

Coalescing: at most one sync runs at a time. Requests arriving while it runs merge into ONE pending
request (the union of what they ask for; `force` if any asked for it), which runs right after the
current one — so N concurrent triggers cause at most two runs, and a forced request is never dropped.
Every caller gets the result of the run that covered its request.

What a run does is the owner's business (`run` callback); so is dirtiness (`is_dirty`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import structlog

from ..errors import JarvisError, Unavailable
from ..tasks import log_failure
from ..timeutil import now_iso
from .watcher import WatchState, watch_memory

log = structlog.get_logger("gateway.memory")


def _summary(stats: Any) -> dict[str, Any]:
    """A run's figures for its log line: files indexed / removed / unchanged, chunks embedded."""
    return {
        "files_indexed": getattr(stats, "indexed", None),
        "files_removed": getattr(stats, "removed", None),
        "files_unchanged": getattr(stats, "unchanged", None),
        "chunks_embedded": getattr(stats, "chunks_embedded", None),
        "chunks_from_cache": getattr(stats, "cache_hits", None),
        "compare_ms": getattr(stats, "compare_ms", None),  # what changed (scan_ms of it: the files on disk)
        "scan_ms": getattr(stats, "scan_ms", None),
    }


@dataclass
class SyncRequest:
    """What one run must cover. `sessions` is True (all), a set of session keys, or False."""

    future: asyncio.Future
    force: bool = False
    memory: bool = False
    sessions: bool | set[str] = False
    progress: list[Callable[[int, int], None]] = field(default_factory=list)
    reasons: set[str] = field(default_factory=set)

    def add(self, force: bool, memory: bool, sessions: bool | set[str], progress, reason: str) -> None:
        self.force = self.force or force
        self.memory = self.memory or memory
        if sessions is True or self.sessions is True:
            self.sessions = True
        elif isinstance(sessions, set):
            self.sessions = (self.sessions if isinstance(self.sessions, set) else set()) | sessions
        if progress is not None:
            self.progress.append(progress)
        self.reasons.add(reason)


class DirtyMarks:
    """What changed since the index last covered it: the memory files, every transcript, some sessions.

    A run clears the marks it covers before it starts (`covered`), so changes during the run mark
    them again; `pending` is the request that would bring the index up to date."""

    def __init__(self) -> None:
        self.memory = False
        self.all_sessions = False
        self.sessions: set[str] = set()

    def __bool__(self) -> bool:
        return self.memory or self.all_sessions or bool(self.sessions)

    def mark_all(self) -> None:
        self.memory = self.all_sessions = True

    def clear(self) -> None:
        self.memory = self.all_sessions = False
        self.sessions.clear()

    def covered(self, memory: bool, sessions: bool | set[str]) -> None:
        if memory:
            self.memory = False
        if sessions is True:
            self.all_sessions = False
            self.sessions.clear()
        elif isinstance(sessions, set):
            self.sessions -= sessions

    def uncovered(self, memory: bool, sessions: bool | set[str]) -> None:
        """A run that failed covered nothing: its marks back, so the next trigger tries again."""
        self.memory = self.memory or memory
        if sessions is True:
            self.all_sessions = True
        elif isinstance(sessions, set):
            self.sessions |= sessions

    def pending(self) -> dict[str, Any]:
        """The `memory` and `sessions` of a request that covers every mark."""
        sessions: bool | set[str] = True if self.all_sessions else set(self.sessions)
        return {"memory": self.memory, "sessions": sessions or False}


class SyncOrchestrator:
    def __init__(
        self,
        run: Callable[[SyncRequest], Awaitable[Any]],
        *,
        sync_cfg: Any,
        unavailable: Callable[[], str | None] = lambda: None,
        said_elsewhere: Callable[[BaseException], object] = lambda exc: None,
    ):
        """`run(req)` performs one sync; `unavailable()` returns why no sync can run now (or None);
        `said_elsewhere(exc)`: not None for a failure someone else logs (the database gone away: its
        outage is said once, not a traceback per failed sync)."""
        self._run_one = run
        self.cfg = sync_cfg
        self._unavailable = unavailable
        self._said_elsewhere = said_elsewhere
        self._away = False  # the last run failed for an outage said elsewhere: runs start quietly until one works
        self._pending: SyncRequest | None = None
        self._runner: asyncio.Task | None = None
        self._running: SyncRequest | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._closed = False
        self.runs = 0  # syncs started
        self.requests = 0  # requests received (runs ≤ requests: the rest coalesced)
        self.last_reasons: list[str] = []
        self.last_error: dict[str, str] | None = None  # the last run's failure, until a run succeeds
        self.watch = WatchState()

    # ---- the core: request and run ---------------------------------------------------------------
    def request(
        self,
        *,
        force: bool = False,
        memory: bool = False,
        sessions: bool | set[str] = False,
        progress=None,
        reason: str = "explicit",
    ) -> SyncRequest:
        problem = "sync orchestrator is closed" if self._closed else self._unavailable()
        if problem:
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(Unavailable(problem, retryable=False))
            fut.exception()
            return SyncRequest(fut)
        self.requests += 1
        if self._pending is None:
            fut = asyncio.get_running_loop().create_future()
            fut.add_done_callback(_consume)
            self._pending = SyncRequest(fut)
        self._pending.add(force, memory, sessions, progress, reason)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._loop())
        return self._pending

    async def sync(self, **kw: Any) -> Any:
        """Request a sync and wait for the run that covers it (the wait is cancellable; the run is not)."""
        return await asyncio.shield(self.request(**kw).future)

    async def _loop(self) -> None:
        while self._pending is not None and not self._closed:
            req, self._pending = self._pending, None
            self._running = req
            self.runs += 1
            self.last_reasons = sorted(req.reasons)
            scope = {
                "memory": req.memory,
                "sessions": req.sessions if isinstance(req.sessions, bool) else len(req.sessions),
            }
            (log.debug if self._away else log.info)(
                "memory_sync_started", reasons=self.last_reasons, force=req.force, **scope
            )
            t0 = time.perf_counter()
            try:
                result = await self._run_one(req)
            except asyncio.CancelledError:
                if not req.future.done():
                    req.future.set_exception(Unavailable("memory sync cancelled: the gateway is stopping"))
                raise
            except Exception as exc:
                self._away = self._said_elsewhere(exc) is not None
                if self._away:
                    pass  # the database's outage: said when it began and when it ends (gateway/outage.py)
                elif isinstance(exc, JarvisError):  # said for the client (a folder that cannot be read)
                    log.warning("memory_sync_failed", reasons=self.last_reasons, error=str(exc))
                else:
                    log.exception("memory_sync_failed", reasons=self.last_reasons)
                self.last_error = {"at": now_iso(), "error": str(exc)}
                if not req.future.done():
                    req.future.set_exception(exc)
            else:
                self.last_error = None
                self._away = False
                log.info("memory_sync_finished", seconds=round(time.perf_counter() - t0, 3), **_summary(result))
                if not req.future.done():
                    req.future.set_result(result)
            finally:
                self._running = None

    @property
    def running(self) -> bool:
        return self._running is not None

    @property
    def pending(self) -> bool:
        return self._pending is not None

    # ---- triggers -------------------------------------------------------------------------------------
    def start(self, workspace: Path | None, on_memory_change: Callable[[], None]) -> None:
        """Start the background triggers: file watch (`watch`) and the interval (`intervalMinutes`)."""
        if self.cfg.watch and workspace is not None:
            self._spawn(
                watch_memory(
                    workspace,
                    on_memory_change,
                    self._stop,
                    self.cfg.watch_debounce_ms,
                    mode=self.cfg.watch_mode,
                    poll_ms=self.cfg.watch_poll_ms,
                    state=self.watch,
                )
            )
        if self.cfg.interval_minutes > 0:
            self._spawn(self._interval(self.cfg.interval_minutes * 60.0))

    def _spawn(self, coro) -> None:
        t = asyncio.create_task(coro)
        t.add_done_callback(log_failure("memory_background_task_failed"))
        self._tasks.append(t)

    async def _interval(self, seconds: float) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=seconds)
            if self._stop.is_set():
                return
            self.request(memory=True, sessions=True, reason="interval")

    def debounce(self, key: str, delay_s: float, fire: Callable[[], None]) -> None:
        """Call `fire` once, `delay_s` after the last call with this key."""
        if self._closed:
            return
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()

        def go() -> None:
            self._timers.pop(key, None)
            fire()

        self._timers[key] = asyncio.get_running_loop().call_later(delay_s, go)

    def cancel_debounce(self, key: str) -> None:
        h = self._timers.pop(key, None)
        if h is not None:
            h.cancel()

    @property
    def busy(self) -> bool:
        """A sync runs or waits, or a debounced one (after chat.final, a file change) is due."""
        return self.running or self.pending or bool(self._timers)

    def status(self) -> dict[str, Any]:
        out = {
            "running": self.running,
            "pending": self.pending,
            "runs": self.runs,
            "requests": self.requests,
            "lastReasons": self.last_reasons,
            "intervalMinutes": self.cfg.interval_minutes,
            "watcher": self.watch.to_dict(),
        }
        if self.last_error is not None:
            out["lastError"] = self.last_error
        return out

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        for t in self._tasks:
            try:
                await asyncio.wait_for(t, timeout=5)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                t.cancel()
        if self._runner is not None and not self._runner.done():
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._runner
        if self._pending is not None and not self._pending.future.done():
            self._pending.future.set_exception(Unavailable("memory sync cancelled: the memory index was closed"))
        self._pending = None


def _consume(fut: asyncio.Future) -> None:
    """Mark a sync result's exception as seen (callers that do not wait still get it logged)."""
    if not fut.cancelled():
        fut.exception()
