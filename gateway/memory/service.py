"""The memory service the rest of the gateway uses: `MemoryService(config, agent_id, index, keyed)`,
engine-neutral above the engine's MemoryIndex (memory/ports.py; gateway/compose.py's `memory_service` makes one).

Lifecycle: `open()` picks the embedding provider and opens the index, and in the background runs the
on-start sync and watches the workspace's memory files; `close()` stops every background task and
closes the index.

Sync requests from every trigger (start, file change, after `chat.final`, session start, before a search
when dirty, the interval, a compaction flush, `memory.sync`) go through one SyncOrchestrator
(sync.py) and coalesce: while one sync runs, later requests merge into a single pending one
(a `force` is kept), and each caller gets the result of the run that covered its request. The index
runs each (or the rebuild a change of settings needs, or the recovery from a damaged index).

What it answers a reader (memory.search, memory.profile, memory.get) is answers.py's; memory.status and
the health counts are status.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import structlog

from ..config import Config
from ..tasks import log_failure
from .embeddings import EmbeddingProvider, create_provider
from .answers import MemoryAnswers
from .index.settings import SyncStats
from .index.workers import TRIM_AFTER_BYTES, trim_heap
from .search.backends import BuiltinBackend, SearchBackend
from .ledger.cache import FactsCache
from .ledger.distill import DistillSettings, Distiller, openai_complete
from .ledger.recall import LedgerRecall
from .status import MemoryStatus
from .ports import IndexContext, KeyedMemories, MemoryIndex, NoteRecord
from .sync import DirtyMarks, SyncOrchestrator, SyncRequest

log = structlog.get_logger("gateway.memory")

MODES = ("hybrid", "fts", "vector")
RETRY_MIN_S, RETRY_MAX_S = 15.0, 600.0


class MemoryService(MemoryAnswers, MemoryStatus):
    def __init__(
        self,
        config: Config,
        agent_id: str,
        index: MemoryIndex,
        keyed: KeyedMemories,
        notes: NoteRecord,
        unreachable: Callable[[BaseException], object] = lambda exc: None,
    ):
        """`unreachable(exc)`: not None when `exc` is the engine's storage gone away, which the engine says
        once for the whole outage (Storage.unreachable): a sync failing for it is not logged again."""
        self.config = config
        self.cfg = config.memory
        self.agent_id = agent_id
        self._unreachable = unreachable
        self.workspace: Path = config.agent_workspace(agent_id)  # each agent indexes its own files
        self.sessions_dir: Path = config.sessions_dir(agent_id)
        self.index = index
        self.keyed = keyed  # memory.set & co. (notes/service.py), reconciled before a sync indexes them
        self.notes = notes  # memory.write & co.: the folder, or rows it mirrors (reconciled likewise)
        self.provider: EmbeddingProvider | None = None
        self.provider_problem: str | None = None
        self._skipped: dict[str, int] = {}  # memory files left out for their size: path → bytes
        self._unnamable: dict[str, str] = {}  # memory files and folders left out for their names: → why
        self.orchestrator = SyncOrchestrator(
            self._run_one, sync_cfg=self.cfg.sync, unavailable=self._sync_unavailable, said_elsewhere=unreachable
        )
        self.search_backend: SearchBackend = BuiltinBackend(self.index.search)
        self._backend_update: asyncio.Task | None = None
        self._health_refresh: asyncio.Task | None = None
        self._backend_update_again = False
        self.decay_now: datetime | None = None  # time decay's "now"; None = the current time
        self._retry: asyncio.TimerHandle | None = None
        self._retry_delay = RETRY_MIN_S
        # Deleted sessions whose chunks a sync must still drop: searches leave them out meanwhile.
        self._hidden_sessions: set[str] = set()
        self._dirty = DirtyMarks()
        self._ledger: LedgerRecall | None = None  # made with the provider (ledger/recall.py)
        self.facts = FactsCache()  # the ledger's facts, per index generation (ledger/cache.py)
        self.distiller: Distiller | None = None  # with a chat model configured (ledger/distill.py)
        self._distill_close: Any = None
        self._covering: asyncio.Future | None = None  # the running sync's, when it covers dirty marks
        self._embed_error: str | None = None
        self._opened = False
        self._index_open = False
        self._closed = False
        self._startup: asyncio.Future | None = None
        self._warm_task: asyncio.Task | None = None

    # ---- lifecycle ------------------------------------------------------------------------------------
    async def open(self) -> None:
        if self._opened:
            return
        self._opened = True
        self.provider, self.provider_problem = create_provider(self.config)
        if self.provider_problem:
            log.warning("memory_embeddings_problem", problem=self.provider_problem)
        if not self.cfg.enabled:
            return
        self._index_open = True  # closed by close() even when opening fails half way
        await self.index.open(
            IndexContext(self.provider, self.provider_problem, self._dirty, self._hidden_sessions, self._resync)
        )
        self._start_triggers()
        self._start_distiller()

    def _resync(self, reason: str) -> None:
        self._request(force=True, memory=True, sessions=True, reason=reason)

    def _start_triggers(self) -> None:
        """With the index open: the on-start sync (or dirty marks), the search backend, the watcher."""
        if self.cfg.sync.on_start:
            # Searches wait for this first sync (see _sync_if_dirty): right after a start the index
            # may lag the files, and the first chat turn should recall what is on disk.
            self._startup = self._request(force=False, memory=True, sessions=True, reason="start").future
            self._warm_task = asyncio.create_task(self._warm_after(self._startup))
            self._warm_task.add_done_callback(log_failure("memory_background_task_failed"))
        else:
            self._dirty.mark_all()
            # Load the vector matrix (and the ANN graph) now: the first searches otherwise scan the
            # whole vector table in SQL while it loads (~0.5 s a search at a million chunks).
            self._warm_task = asyncio.create_task(self.warm())
            self._warm_task.add_done_callback(log_failure("memory_background_task_failed"))
        self.search_backend = self._make_backend()
        if not isinstance(self.search_backend, BuiltinBackend):
            self._update_backend()
        self.orchestrator.start(self.workspace, self._on_memory_change)

    def _update_backend(self) -> None:
        """After a sync: let an external backend re-read the files, in the background, one at a time."""
        if self._closed:
            return
        if self._backend_update is not None and not self._backend_update.done():
            self._backend_update_again = True
            return

        async def go() -> None:
            while True:
                self._backend_update_again = False
                await self.search_backend.after_sync()
                if not self._backend_update_again or self._closed:
                    return

        self._backend_update = asyncio.create_task(go())
        self._backend_update.add_done_callback(log_failure("memory_background_task_failed"))

    def _start_distiller(self) -> None:
        """The model's distillation of finished conversations, when a chat model is configured."""
        lc = self.cfg.ledger
        if not lc.distill or lc.max_calls_per_hour == 0 or self.config.chat_provider != "openai":
            return
        c = self.config.chat
        complete, self._distill_close = openai_complete(c.api_key, c.base_url, c.model, lc.timeout_s)

        async def written() -> None:
            self._on_memory_change()

        self.distiller = Distiller(
            DistillSettings(lc.distill_after_s, lc.timeout_s, lc.max_calls_per_hour, lc.max_input_chars),
            complete,
            self.workspace,
            self.sessions_dir,
            self.index.statements,
            written,
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.distiller is not None:
            await self.distiller.close()
        if self._distill_close is not None:
            with contextlib.suppress(Exception):
                await self._distill_close()
        if self._retry is not None:
            self._retry.cancel()
        for task in (self._warm_task, self._backend_update, self._health_refresh):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.orchestrator.close()
        if self._index_open:
            await self.index.close()
        if self.provider is not None:
            with contextlib.suppress(Exception):
                await self.provider.close()

    async def _warm_after(self, fut: asyncio.Future) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(fut)
        if not self._closed:
            await self.warm()

    async def warm(self) -> None:
        """Load what searches need (the local model, the vector matrix of a large index) ahead of the
        first search. Safe to call any time; cheap when already warm."""
        if self._closed or not self.cfg.enabled or self.provider is None:
            return
        await self.provider.warm()
        await self.index.warm()

    # ---- sync orchestration ------------------------------------------------------------------------
    def _sync_unavailable(self) -> str | None:
        if self._closed:
            return "memory manager is closed"
        return None if self.cfg.enabled else "memory is disabled"

    def _request(
        self, *, force: bool, memory: bool, sessions: bool | set[str], progress=None, reason: str = "explicit"
    ) -> SyncRequest:
        return self.orchestrator.request(
            force=force, memory=memory, sessions=sessions, progress=progress, reason=reason
        )

    def _progress(self, req: SyncRequest):
        if not req.progress:
            return None

        def cb(done: int, total: int) -> None:
            for p in req.progress:
                try:
                    p(done, total)
                except Exception:  # a progress display must never break a sync
                    log.debug("memory_progress_callback_failed", exc_info=True)

        return cb

    async def _run_one(self, req: SyncRequest) -> SyncStats:
        # Sessions deleted before this run starts have no transcript left to read: a run that covers them
        # drops their chunks, and searches may show them again. (One deleted during the run may have been
        # read before it went, so it stays hidden until the next run.)
        hidden = set(self._hidden_sessions)
        whole = self.index.rebuilding  # a rebuild or a recovery: everything, whatever was asked
        if req.memory:  # where the files mirror a record (keyed memories): in line before they are indexed
            try:
                await self.keyed.reconcile()
            except Exception as exc:  # the files are indexed as they are; the next sync tries again
                if self._unreachable(exc) is None:  # an outage is said once, by the engine
                    log.warning("memory_keyed_reconcile_failed", error=str(exc) or type(exc).__name__)
            try:
                await self.notes.reconcile()
            except Exception as exc:  # likewise
                if self._unreachable(exc) is None:
                    log.warning("memory_notes_reconcile_failed", error=str(exc) or type(exc).__name__)
        if not whole:
            # Clear the dirty marks this run covers before it starts: changes during the run re-mark them.
            if self._dirty:  # it covers marks a search may be waiting to see (read-your-writes)
                self._covering = req.future
            self._dirty.covered(req.memory, req.sessions)
        try:
            stats = await self.index.sync(req, self._progress(req))
        except Exception:
            if not whole and not self.index.rebuilding:
                self._dirty.uncovered(req.memory, req.sessions)
            raise
        # Files the sync found gone (twice, where many): so are their notes. Also after a forget_gone that
        # could not read the folder: the files it missed are gone from the index, not from the record.
        if req.memory and (stats.removed or self.notes.forget_owed):
            try:
                await self.notes.forget_gone()
            except Exception as exc:  # the next sync that removes files tries again
                log.warning("memory_notes_forget_failed", error=str(exc) or type(exc).__name__)
        if whole:
            self._hidden_sessions -= hidden
        elif req.sessions:
            self._hidden_sessions -= hidden if req.sessions is True else hidden & req.sessions
        await self._after_sync(stats)
        return stats

    async def _after_sync(self, stats: SyncStats) -> None:
        self._embed_error = stats.embed_error
        if stats.skipped is not None:  # the memory files were scanned
            cap = self.cfg.max_file_bytes
            for path, size in stats.skipped.items():
                if self._skipped.get(path) != size:  # logged once per file and size, not every sync
                    log.warning(
                        "memory_file_skipped",
                        path=path,
                        bytes=size,
                        max_file_bytes=cap,
                        reason="larger than memory.maxFileBytes",
                    )
            self._skipped = stats.skipped
        if stats.unnamable is not None:
            for path, why in stats.unnamable.items():
                if self._unnamable.get(path) != why:  # logged once per name, not every sync
                    log.warning("memory_file_skipped", path=path, reason=why)
            self._unnamable = stats.unnamable
        if stats.bytes_read >= TRIM_AFTER_BYTES or stats.removed:
            await asyncio.to_thread(trim_heap)
        if stats.embed_error and self.index.counts["missing"]:
            self._schedule_retry(stats.retry_after)
        else:
            self._retry_delay = RETRY_MIN_S
        if not isinstance(self.search_backend, BuiltinBackend):
            self._update_backend()

    def _schedule_retry(self, retry_after: float | None) -> None:
        if self._closed or (
            self._retry is not None
            and not self._retry.cancelled()
            and self._retry.when() > asyncio.get_running_loop().time()
        ):
            return
        delay = max(self._retry_delay, retry_after or 0.0)
        self._retry_delay = min(RETRY_MAX_S, self._retry_delay * 2)
        loop = asyncio.get_running_loop()
        self._retry = loop.call_later(
            delay, lambda: self._request(force=False, memory=False, sessions=False, reason="embed-retry")
        )

    @property
    def dirty(self) -> bool:
        if self.orchestrator.watch.mode == "stopped":  # nothing sees note edits: the index may lag them
            self._dirty.memory = True
        return bool(self.index.needs_rebuild or self._dirty)

    # ---- triggers ------------------------------------------------------------------------------------
    def _on_memory_change(self) -> None:
        self._dirty.memory = True
        self._request(force=False, memory=True, sessions=False, reason="watch")

    def schedule_session_sync(self, session_key: str) -> None:
        """After a `chat.final`: re-index this session's transcript once things settle (debounced)."""
        if self._closed or not self.cfg.enabled:
            return
        self._dirty.sessions.add(session_key)

        def fire() -> None:
            if session_key in self._dirty.sessions:
                self._request(force=False, memory=False, sessions={session_key}, reason="chat.final")

        self.orchestrator.debounce(session_key, self.cfg.sync.session_debounce_ms / 1000.0, fire)
        if self.distiller is not None:
            self.distiller.finished(session_key)

    def session_started(self, session_key: str) -> None:
        """A session was created (`sync.onSessionStart`): bring a dirty index up to date in the
        background, so the session's first turn recalls what is on disk."""
        if self._closed or not self.cfg.enabled or not self.cfg.sync.on_session_start or not self.dirty:
            return
        if self.index.needs_rebuild:
            self._request(force=False, memory=True, sessions=True, reason="session-start")
            return
        self._request(force=False, reason="session-start", **self._dirty.pending())

    async def sync_after_flush(self, session_key: str) -> dict:
        """After a compaction flushed a session into memory/YYYY-MM-DD.md: index the flush and the
        session's transcript now, forced when `sync.forceOnFlush` (re-read even if size/mtime match)."""
        req = self._request(force=self.cfg.sync.force_on_flush, memory=True, sessions={session_key}, reason="flush")
        stats: SyncStats = await asyncio.shield(req.future)
        return stats.result()

    async def keyed_changed(self, key: str | None = None) -> None:
        """Another gateway wrote or deleted keyed memory `key` (None: maybe any, notifications were
        missed): bring the files in line with the record, re-index. (Only where gateways share storage.)"""
        if self._closed or not self.cfg.enabled:
            return
        await self.keyed.reconcile(key)
        self._on_memory_change()

    async def note_changed(self, path: str | None = None) -> None:
        """Another gateway wrote note `path` (None: maybe any, notifications were missed): bring the folder
        in line with the record, re-index. (Only where gateways share storage.)"""
        if self._closed or not self.cfg.enabled:
            return
        if await self.notes.reconcile(path):
            self._on_memory_change()

    async def forget_session(self, session_key: str) -> None:
        """After `sessions.delete` (here, or through another gateway on shared storage; its transcript is
        gone): drop the session's chunks now — or, while a sync holds the index (a full one can take many
        seconds, and may have read the transcript before it went), leave the session out of search at
        once and let a sync queued behind the running one drop them."""
        if not self.cfg.enabled or not self._index_open:
            return
        self.orchestrator.cancel_debounce(session_key)
        self._dirty.sessions.discard(session_key)
        if not await self.index.forget_session(session_key, busy=self.orchestrator.running):
            self._hidden_sessions.add(session_key)
            self._request(force=False, memory=False, sessions={session_key}, reason="sessions.delete")

    async def session_restored(self, session_key: str) -> None:
        """After `sessions.restore`: index the session's transcript again, now (searchable when this
        returns)."""
        if not self.cfg.enabled or not self._index_open:
            return
        self._hidden_sessions.discard(session_key)
        req = self._request(force=False, memory=False, sessions={session_key}, reason="sessions.restore")
        await asyncio.shield(req.future)

    # ---- the facade ------------------------------------------------------------------------------------
    async def sync(self, force: bool = False, progress=None) -> dict:
        req = self._request(force=force, memory=True, sessions=True, progress=progress, reason="memory.sync")
        stats: SyncStats = await asyncio.shield(req.future)
        return stats.result()

    async def sync_memory(self) -> dict:
        """Re-index the memory files now (not the transcripts) and return when the index holds what is
        on disk — for writers that must answer only once a change (or a delete) is searchable. Coalesces
        with other syncs like every trigger does."""
        req = self._request(force=False, memory=True, sessions=False, reason="write")
        stats: SyncStats = await asyncio.shield(req.future)
        return stats.result()

    async def refresh_health(self) -> None:
        """Bring the counts health() reports up to date where another process may change the index
        (the PostgreSQL index); this one's own syncs keep them current."""
        if self.cfg.enabled and self._index_open and not self._closed:
            await self.index.refresh()

    def _refresh_health_soon(self) -> None:
        """One refresh at a time, in the background: health never waits for the database."""
        if self.index.shared and not self._closed and (self._health_refresh is None or self._health_refresh.done()):
            self._health_refresh = asyncio.create_task(self.refresh_health())
            self._health_refresh.add_done_callback(log_failure("memory_background_task_failed"))

    def health(self) -> dict:
        """The counts as last read; on a shared index a refresh starts for the next caller."""
        self._refresh_health_soon()
        counts = self.index.counts
        return {
            "files": counts["files"],
            "chunks": counts["chunks"],
            "dirty": self.dirty,
            "watcher": self.orchestrator.watch.mode,
        }
