"""The memory service the rest of the gateway uses: `MemoryService(config, agent_id, index, keyed)`,
engine-neutral above the engine's MemoryIndex (memory/ports.py; `Storage.memory(agent_id)` makes one).

Lifecycle: `open()` picks the embedding provider and opens the index, and in the background runs the
on-start sync and watches the workspace's memory files; `close()` stops every background task and
closes the index.

Sync requests from every trigger (start, file change, after `chat.final`, session start, before a search
when dirty, the interval, a compaction flush, `memory.sync`) go through one SyncOrchestrator
(sync.py) and coalesce: while one sync runs, later requests merge into a single pending one
(a `force` is kept), and each caller gets the result of the run that covered its request. The index
runs each (or the rebuild a change of settings needs, or the recovery from a damaged index).

Searches go to the configured backend (search/backends.py: the built-in index, or QMD with the built-in index
as fallback), then through the optional re-ranking of rerank.py (MMR, time decay).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import structlog

from ..config import Config
from ..errors import Invalid
from ..tasks import log_failure
from .embeddings import EmbeddingProvider, create_provider
from .index.settings import SyncStats
from .index.workers import TRIM_AFTER_BYTES, trim_heap
from .index.sources import SOURCES, read_lines, resolve_readable
from .rerank import apply_time_decay, decay_dates, mmr_rerank
from .search.backends import BuiltinBackend, CircuitBreaker, FallbackBackend, SearchBackend
from .search.qmd import QmdBackend
from .search.searcher import RESULT_VECTORS
from .search.timeline import arrange
from .ledger.cache import FactsCache
from .ledger.profile import HISTORY_LIMIT, PROFILE_LIMIT, subject_family
from .ledger.profile import page as ledger_page
from .ledger.distill import DistillSettings, Distiller, openai_complete
from .ledger.placement import lead, outdated, prefer_statements
from .ledger.recall import LedgerRecall, as_of_time, embed_with
from .present import shape
from .ports import IndexContext, KeyedMemories, MemoryIndex, NoteRecord
from .search.snippets import Exclude
from .sync import DirtyMarks, SyncOrchestrator, SyncRequest
from .search.request import SearchRequest

log = structlog.get_logger("gateway.memory")

MODES = ("hybrid", "fts", "vector")
RETRY_MIN_S, RETRY_MAX_S = 15.0, 600.0
SKIPPED_SHOWN = 20  # memory.status `skipped`: the largest files left out for their size, at most this many


# A search waits at most this long for a sync already under way to index what was dirty when it began.
READ_YOUR_WRITES_S = 10.0
# A search asks its backend for this many results beyond k, ranked as for k: room for the arrangement
# (repeats folded into one leave places to fill) and the optional re-ranking.
POOL_SPARE = 5
AS_OF_SPARE = 20  # and this many more with asOf: the hits said after it are dropped from them


class MemoryService:
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

    def _make_backend(self) -> SearchBackend:
        builtin = BuiltinBackend(self.index.search)
        b = self.cfg.backend
        if b.kind == "builtin":
            return builtin
        q = b.qmd
        qmd = QmdBackend(
            command=q.command,
            collection=q.collection or f"jarvis-{self.agent_id}",
            workspace=self.workspace,
            timeout_s=q.timeout_ms / 1000.0,
            update_timeout_s=q.update_timeout_ms / 1000.0,
            embed=q.embed,
            hybrid_command=q.hybrid_command,
            snippet_chars=self.cfg.search.snippet_chars,
        )
        return FallbackBackend(
            qmd,
            builtin,
            retries=b.retries,
            backoff_ms=b.retry_backoff_ms,
            breaker=CircuitBreaker(b.breaker_failures, b.breaker_open_seconds),
            file_diversity=self.cfg.search.file_diversity,
        )

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
        if req.memory and stats.removed:  # files the sync found gone (twice, where many): so are their notes
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

    async def _sync_if_dirty(self) -> None:
        if not self.cfg.sync.on_search:
            return
        if self._startup is not None:
            # Not for a rebuild: the old index answers meanwhile.
            if not self._startup.done() and not self.index.needs_rebuild:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._startup)
            self._startup = None
        if not self.dirty:
            # Nothing left to mark — but a sync that started with marks (a turn just said, a note just
            # written) may still be writing them: what was written before this search is what it finds.
            covering = self._covering
            if covering is not None and not covering.done():
                with contextlib.suppress(Exception, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(covering), READ_YOUR_WRITES_S)
            return
        if self.index.needs_rebuild:
            self._request(force=False, memory=True, sessions=True, reason="search")  # in the background
            return
        req = self._request(force=False, reason="search", **self._dirty.pending())
        try:
            await asyncio.shield(req.future)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._unreachable(exc) is None:  # an outage is said once, by the engine
                log.warning("memory_search_presync_failed", exc_info=True)

    async def search(
        self,
        query: str,
        k: int = 6,
        min_score: float = 0.0,
        sources: list[str] | None = None,
        session_key: str | None = None,
        mode: str | None = None,
        exclude: Exclude | None = None,
        as_of: str | None = None,
    ) -> dict:
        """`as_of` (ISO 8601 UTC, as `parse_as_of` writes it): memory as it stood then — nothing said after
        it, the ledger's value valid then first, relative dates in the query resolved against it."""
        # The params were validated by the method's schema (memory.search, and the CLI through it).
        mode = mode or self.cfg.search.mode
        srcs = tuple(sorted(set(sources))) if sources else SOURCES
        why = "memory is disabled" if not self.cfg.enabled else self.index.degraded
        if why:
            return {"results": [], "mode": mode, "embeddings": self._embeddings_brief(), "degraded": why}
        await self._sync_if_dirty()
        recovering = self.index.recovering
        # A pool a few times k, arranged by what was said when (search/timeline.py), re-ranked if so
        # configured, then cut to k and minScore.
        # The question's subjects (ledger/recall.py: an embedding when no cue word names one) are found
        # while the backend searches.
        subjects = asyncio.ensure_future(self._ledger_subjects(query))
        try:
            res = await self._backend_search(query, k, recovering, min_score, srcs, session_key, mode, exclude, as_of)
        except BaseException:
            subjects.cancel()
            raise
        if as_of:  # nothing said after it (an undated hit is the file's: its time is known)
            res["results"] = [r for r in res["results"] if str(r.get("date") or "") <= as_of]
        known = res.pop(RESULT_VECTORS, None)  # the results' stored vectors, when the search read them
        for r in res["results"]:  # as every reader gets a hit (present.py: a keyed memory's value)
            shape(r)
        if recovering:  # no re-ranking either: results are incomplete
            subjects.cancel()
            res["degraded"] = (
                "the memory index was damaged and is being rebuilt from the memory files and "
                "transcripts; results are incomplete until it is done"
            )
            return res
        res["results"] = await self._rerank(query, res["results"], int(k), float(min_score), known)
        res["results"] = prefer_statements(query, res["results"])  # ties: who states beats who mentions
        res["results"] = await self._ledger_first(query, res["results"], int(k), as_of, exclude, await subjects)
        if as_of:
            res["asOf"] = as_of
        return res

    async def _backend_search(
        self,
        query: str,
        k: int,
        recovering: bool,
        min_score: float,
        srcs: tuple[str, ...],
        session_key: str | None,
        mode: str,
        exclude: Exclude | None,
        as_of: str | None,
    ) -> dict:
        return await self.search_backend.search(
            SearchRequest(
                query=query,
                k=int(k),
                spare=(0 if recovering else self._spare(int(k))) + (AS_OF_SPARE if as_of else 0),
                min_score=float(min_score) if recovering else 0.0,
                sources=srcs,
                session_key=session_key,
                mode=mode,
                exclude=exclude,
            )
        )

    def _ledger_recall(self) -> LedgerRecall:
        if self._ledger is None:
            # A local model only: the subjects' descriptions and statements are never sent to an API.
            local = self.provider is not None and not self.provider.remote and self.index.backend != "none"
            embed = embed_with(self.provider) if local else None
            self._ledger = LedgerRecall(embed)
        return self._ledger

    async def _ledger_subjects(self, query: str) -> list[str]:
        """The subjects of the person's life a query asks about ([] when the ledger cannot tell)."""
        try:
            return await self._ledger_recall().subjects(query)
        except Exception:
            log.warning("memory_ledger_recall_failed", exc_info=True)
            return []

    async def _ledger_first(
        self,
        query: str,
        results: list[dict],
        k: int,
        as_of: str | None,
        exclude: Exclude | None = None,
        subjects: list[str] | None = None,
    ) -> list[dict]:
        """The ledger's statement for the question first (ledger/recall.py); the results as they were when
        the question names no subject or the ledger cannot be read (derived data never fails a search)."""
        try:
            recall = self._ledger_recall()
            if subjects is None:
                subjects = await recall.subjects(query)
            if not subjects:
                return results
            drop = None
            if exclude is not None:  # a chat turn's own message is never recalled as its answer
                said = " ".join(exclude.text.split())
                drop = (exclude.path, lambda s: " ".join(s.text.split()) in said)
            known = await self.facts.facts(subjects, await self.index.generation(), self.index.statements, as_of, drop)
            picked = await recall.pick(query, known, as_of_time(as_of))
        except Exception:
            log.warning("memory_ledger_recall_failed", exc_info=True)
            return results
        if picked is None:
            return results
        fact, period, q = picked
        if q.asked == "present" and period.sayings:
            try:
                vectors = await self.index.stored_vectors(results) if results else None
                if outdated(results, vectors, await recall.vector(period.statement.text), fact, period):
                    return results
            except Exception:
                log.warning("memory_ledger_recall_failed", exc_info=True)
                return results
        return lead(results, fact, period, q, k)

    async def profile(
        self,
        limit: int = PROFILE_LIMIT,
        cursor: str | None = None,
        subject: str | None = None,
        history: int = HISTORY_LIMIT,
    ) -> dict:
        """memory.profile: what the ledger holds now — each subject's current value with its evidence and
        history, the most recently changed first, a page at a time (ledger/profile.py)."""
        family = [subject_family(subject)] if subject is not None else None  # (checked before any sync)
        await self._sync_if_dirty()
        known = await self.facts.facts(family, await self.index.generation(), self.index.statements)
        return ledger_page(known, limit, cursor, subject, history)

    def _spare(self, k: int) -> int:
        """Results asked beyond k: POOL_SPARE, or the pool MMR and time decay choose from (3k, at least 20)."""
        s = self.cfg.search
        return min(100, max(3 * k, 20)) - k if (s.mmr or s.time_decay) else POOL_SPARE

    async def _rerank(
        self, query: str, results: list[dict], k: int, min_score: float, known: dict | None = None
    ) -> list[dict]:
        s = self.cfg.search
        if s.time_decay and results:
            now = self.decay_now or datetime.now(timezone.utc)
            results = apply_time_decay(results, decay_dates(results), now, s.half_life_days)
        vectors = None
        if len(results) > 1:
            keys = [(r["path"], r["startLine"], r["endLine"]) for r in results]
            if known is not None and all(key in known for key in keys):
                vectors = {i: known[key] for i, key in enumerate(keys)}  # (the search read them: no second trip)
            else:
                vectors = await self.index.stored_vectors(results)
        results = [r for r in arrange(results, query, vectors) if r["score"] >= min_score]
        if s.mmr:
            return mmr_rerank(results, k, s.mmr_lambda, await self.index.stored_vectors(results))
        return results[:k]

    async def get(self, path: str, from_: int = 1, lines: int = 120) -> dict:
        if from_ < 1:
            raise Invalid("must be >= 1", field="from")
        if lines < 1:
            raise Invalid("must be >= 1", field="lines")
        target = await asyncio.to_thread(resolve_readable, path, self.workspace, self.sessions_dir)
        got, more = await asyncio.to_thread(read_lines, target, from_, lines)
        out: dict[str, Any] = {
            "path": path,
            "text": "\n".join(got),
            "from": from_,
            "lines": len(got),
            "truncated": more,
        }
        if more:
            out["nextFrom"] = from_ + max(1, len(got))
        return out

    def _embeddings_brief(self) -> dict:
        p = self.provider
        return {"provider": p.name if p else self.cfg.embeddings.provider, "model": p.model if p else ""}

    async def status(self) -> dict:
        if self.cfg.enabled and self._index_open:
            files_by, chunks_by, cache, dims = await self.index.status_counts()
        else:
            files_by, chunks_by, cache, dims = {}, {}, 0, 0
        p = self.provider
        engine = self.index.status()
        vec: dict[str, Any] = {
            "backend": self.index.backend,
            "missing": self.index.counts["missing"],
            **engine["vector"],
        }
        out: dict[str, Any] = {
            "files": sum(files_by.values()),
            "chunks": sum(chunks_by.values()),
            "sources": {s: {"files": files_by.get(s, 0), "chunks": chunks_by.get(s, 0)} for s in SOURCES},
            "dirty": self.dirty,
            "lastSyncAt": self.index.last_sync_at,
            "embeddings": {**self._embeddings_brief(), "dims": dims or (p.dims if p else 0)},
            "vector": vec,
            "fts": engine["fts"],
            "cache": {"entries": cache},
            "backend": self.search_backend.status(),
            "ranking": {
                "mmr": self.cfg.search.mmr,
                "mmrLambda": self.cfg.search.mmr_lambda,
                "timeDecay": self.cfg.search.time_decay,
                "halfLifeDays": self.cfg.search.half_life_days,
            },
            "sync": self.orchestrator.status(),
        }
        if self.index.rebuilding:
            out["rebuilding"] = True
        if self.index.corrupt_events:
            out["corrupt"] = self.index.corrupt_events[-5:]
        if self._skipped:
            reason = f"larger than memory.maxFileBytes ({self.cfg.max_file_bytes} bytes)"
            big = sorted(self._skipped.items(), key=lambda kv: (-kv[1], kv[0]))[:SKIPPED_SHOWN]
            out["skipped"] = [{"path": p, "bytes": b, "reason": reason} for p, b in big]
        problem = self._embed_error or self.provider_problem or engine.get("error")
        if problem:
            out["embeddings"]["error"] = problem
        if self.distiller is not None:  # the model's distillation (ledger/distill.py): what it did so far
            out["ledger"] = {"distill": dict(self.distiller.stats)}
        return out

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
