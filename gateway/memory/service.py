"""The memory facade the rest of the gateway uses: `MemoryManager(config, agent_id)`.

Lifecycle: `open()` opens the index (migrations), and in the background runs the on-start sync and
watches the workspace's memory files; `close()` stops every background task and closes the database.

Sync requests from every trigger (start, file change, after `chat.final`, session start, before a search
when dirty, the interval, a compaction flush, `memory.sync`) go through one SyncOrchestrator
(sync.py) and coalesce: while one sync runs, later requests merge into a single pending one
(a `force` is kept), and each caller gets the result of the run that covered its request.

Searches go to the configured backend (search/backends.py: the built-in index, or QMD with the built-in index
as fallback), then through the optional re-ranking of rerank.py (MMR, time decay).

A change of embedding provider/model/dims, chunking, FTS tokenizer or vector backend changes the index
signature: the index is then rebuilt into `<db>.rebuild` (the embedding cache is copied over first) and
swapped in with one rename. Searches keep answering from the old index meanwhile (full text only when
its vectors no longer match the query embeddings) and wait only for the swap itself.

Three connections: a writer (sync) and two readers (search: full text and the rest on one, vector
search's reads on the other), so searches never wait for a sync's transaction, and a hybrid search's
vector reads run beside its full-text query instead of after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog

from ..config import Config
from ..errors import Invalid, Unavailable
from ..storage.base import KeyedStore
from ..storage.files.keyed import FileKeyedStore
from ..tasks import log_failure
from .embeddings import EmbeddingProvider, create_provider
from .embeddings.cache import EmbeddingCache
from .index.chunking import CHARS_PER_TOKEN
from .index.db import Database, index_driver, is_corruption
from .index.indexer import TRIM_AFTER_BYTES, Indexer, IndexSettings, SyncStats, trim_heap
from .index.migrations import SchemaParams, get_meta, migrate, set_meta, vector_table
from .index.sources import SOURCES, read_lines, resolve_readable, session_path
from .index.ann import AnnIndex
from .index.vectors import VectorStore
from .rebuild import IndexUsers, build_fresh, index_signature, same_embeddings, set_aside, swap_in
from .rerank import apply_time_decay, mmr_rerank, result_dates, stored_vectors
from .search.backends import BuiltinBackend, CircuitBreaker, FallbackBackend, SearchBackend
from .search.fusion import spread_over_files
from .search.qmd import QmdBackend
from .search.searcher import SearchOptions, Searcher
from .search.snippets import Exclude
from .sync import DirtyMarks, SyncOrchestrator, SyncRequest

log = structlog.get_logger("gateway.memory")

MODES = ("hybrid", "fts", "vector")
RETRY_MIN_S, RETRY_MAX_S = 15.0, 600.0
# The vector read connection's page cache: it reads ~40 vectors a search (and streams the table once when
# it loads a matrix), so the 32 MB of the others would only hold pages read once.
VECTOR_READER_CACHE_KB = 8000
SET_ASIDE_WAIT_S = 30.0  # for other processes to close a damaged index before it is moved aside
SKIPPED_SHOWN = 20  # memory.status `skipped`: the largest files left out for their size, at most this many


class _Gate:
    """Many searches at once, or one index swap."""

    def __init__(self) -> None:
        self._readers = 0
        self._swapping = False
        self._cond = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def shared(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._swapping)
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._swapping)
            self._swapping = True
            await self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._swapping = False
                self._cond.notify_all()


class MemoryManager:
    def __init__(self, config: Config, agent_id: str | None = None):
        self.config = config
        self.cfg = config.memory
        self.agent_id = agent_id or config.agent_id
        self.db_path: Path = config.memory_db(self.agent_id)
        self.workspace: Path = config.agent_workspace(self.agent_id)  # each agent indexes its own files
        self.sessions_dir: Path = config.sessions_dir(self.agent_id)
        self.keyed: KeyedStore = FileKeyedStore(self.workspace)  # memory.set & co.: the workspace files
        self.provider: EmbeddingProvider | None = None
        self.provider_problem: str | None = None
        self.backend = "none"
        self.writer: Database | None = None
        self.reader: Database | None = None
        # Vector search's own read connection: its reads (the ANN candidates' vectors, the matrix load)
        # run beside full text's statements on `reader` instead of queued behind them (issue 27).
        self.vector_reader: Database | None = None
        self.indexer: Indexer | None = None
        self._skipped: dict[str, int] = {}  # memory files left out for their size: path → bytes
        self.searcher: Searcher | None = None
        self.tokenizer = self.cfg.search.fts_tokenizer
        self._gate = _Gate()
        self._write_lock = asyncio.Lock()
        self._users = IndexUsers(self.db_path, self.agent_id)
        self.orchestrator = SyncOrchestrator(self._run_one, sync_cfg=self.cfg.sync, unavailable=self._sync_unavailable)
        self.search_backend: SearchBackend = BuiltinBackend(self._index_search)
        self._backend_update: asyncio.Task | None = None
        self._backend_update_again = False
        self.decay_now: datetime | None = None  # time decay's "now"; None = the current time
        self._retry: asyncio.TimerHandle | None = None
        self._retry_delay = RETRY_MIN_S
        self._needs_rebuild = False
        self._rebuilding = False
        self._forgotten: set[str] = set()
        # Deleted sessions whose chunks a sync must still drop: searches leave them out meanwhile.
        self._hidden_sessions: set[str] = set()
        self._dirty = DirtyMarks()
        self._counts: dict[str, int] = {"files": 0, "chunks": 0, "vectors": 0, "missing": 0}
        self._generation = "0"
        self._last_sync_at: str | None = None
        self._embed_error: str | None = None
        self._opened = False
        self._closed = False
        self._startup: asyncio.Future | None = None
        self._warm_task: asyncio.Task | None = None
        self._old_vectors_ok = True
        self._corrupt: BaseException | None = None  # a damaged index met while serving; the next run rebuilds
        self._recovering = False  # that rebuild is under way: searches answer, saying they are incomplete
        self.corrupt_events: list[dict[str, str]] = []  # indexes set aside since this manager opened (memory.status)

    # ---- configuration-derived -----------------------------------------------------------------------
    def _settings(self) -> IndexSettings:
        return IndexSettings.from_config(self.cfg, self.workspace, self.sessions_dir, self.backend)

    def _signature(self) -> str:
        assert self.provider is not None
        return index_signature(self.cfg, self.provider, self.backend)

    def _options(self) -> SearchOptions:
        return SearchOptions.from_config(self.cfg.search, self.tokenizer)

    # ---- lifecycle ------------------------------------------------------------------------------------
    def _make_provider(self) -> None:
        """The configured embedding provider (or its fallback, with the reason kept for status)."""
        self.provider, self.provider_problem = create_provider(self.config)
        if self.provider_problem:
            log.warning("memory_embeddings_problem", problem=self.provider_problem)

    async def open(self) -> None:
        if self._opened:
            return
        self._opened = True
        self._make_provider()
        want = self.cfg.search.vector_backend
        driver = index_driver(want)
        if not self.provider.enabled:
            self.backend = "none"
        elif driver.vec and want != "numpy":
            self.backend = "sqlite-vec"
        else:
            self.backend = "numpy"
            if want == "sqlite-vec":
                log.warning("memory_sqlite_vec_unavailable", using="numpy")
        self._driver = driver
        if not self.cfg.enabled:
            return
        await self._users.hold()
        try:
            await self._open_index()
        except Exception as exc:
            if not is_corruption(exc):
                raise
            await self._set_aside(exc)
            await self._open_index()
        self._start_triggers()

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

    async def _open_index(self) -> None:
        """Open the live index (migrations), check its signature, bind search, read its counts."""
        await self._open_live()
        sig = self._signature()
        stored = await get_meta(self.writer, "index_signature")
        has_chunks = bool(await self.writer.scalar("SELECT 1 FROM chunks LIMIT 1"))
        self._old_vectors_ok = True
        if stored is None and not has_chunks:
            await set_meta(self.writer, "index_signature", sig)
        elif stored != sig:
            self._needs_rebuild = True
            self._dirty.mark_all()
            self._old_vectors_ok = same_embeddings(stored, sig)
            log.info("memory_index_rebuild_needed", reason="index settings changed")
        await self._open_live_state()
        await self._refresh_counts()  # reads every page of files and chunks: finds most damage now

    async def _set_aside(self, exc: BaseException) -> None:
        """The index file is damaged. It is derived data: move it (and its WAL) aside, keep it for a
        post-mortem, and start an empty one that the next sync fills from the notes and transcripts.
        The embedding cache lived in the same file; a remote provider re-embeds what it needs."""
        with contextlib.suppress(Exception):
            await self._close_index()
        self.reader = self.writer = None
        self.searcher = None  # searches say the index is being rebuilt until it is open again
        async with self._users.alone_within(SET_ASIDE_WAIT_S, "the memory index is damaged and must be set aside"):
            stamp, aside = await set_aside(self.db_path)
        log.error("memory_index_corrupt", error=str(exc), moved_to=str(aside),
                  action="rebuilding from memory files and transcripts")
        self.corrupt_events.append({"at": stamp, "movedTo": str(aside), "error": str(exc)[:200]})
        self._needs_rebuild = False
        self._dirty.mark_all()

    async def _recover(self, exc: BaseException) -> SyncStats:
        """A sync or search met a damaged index while serving: swap in an empty one, index everything."""
        self._recovering = True
        try:
            async with self._write_lock:
                async with self._gate.exclusive():
                    await self._set_aside(exc)
                    await self._open_index()
                self._corrupt = None
                self._dirty.clear()
                assert self.indexer is not None
                stats = await self.indexer.sync(force=True, memory=True, sessions=True)
        finally:
            self._recovering = False
        self._hidden_sessions.clear()
        await self._after_sync(stats)
        return stats

    def _make_backend(self) -> SearchBackend:
        builtin = BuiltinBackend(self._index_search)
        b = self.cfg.backend
        if b.kind == "builtin":
            return builtin
        q = b.qmd
        qmd = QmdBackend(command=q.command, collection=q.collection or f"jarvis-{self.agent_id}",
                         workspace=self.workspace, timeout_s=q.timeout_ms / 1000.0,
                         update_timeout_s=q.update_timeout_ms / 1000.0, embed=q.embed,
                         hybrid_command=q.hybrid_command, snippet_chars=self.cfg.search.snippet_chars)
        return FallbackBackend(qmd, builtin, retries=b.retries, backoff_ms=b.retry_backoff_ms,
                               breaker=CircuitBreaker(b.breaker_failures, b.breaker_open_seconds),
                               file_diversity=self.cfg.search.file_diversity)

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

    async def _open_db(self, path: Path) -> Database:
        return await Database(path, self._driver, use_vec=self.backend == "sqlite-vec").open()

    async def _open_live(self) -> None:
        self.writer = await self._open_db(self.db_path)
        await migrate(self.writer, SchemaParams(tokenizer=self.cfg.search.fts_tokenizer))
        self.tokenizer = await get_meta(self.writer, "fts_tokenizer", self.cfg.search.fts_tokenizer) or "unicode61"
        self.reader = await self._open_db(self.db_path)
        self.indexer = Indexer(self.writer, self.provider, self._settings())
        self.searcher = Searcher(self.reader, self.provider, self._options(), None,
                                 "index is being rebuilt for new settings", self._hidden_sessions)

    async def _close_index(self) -> None:
        """Close the live index's connections, after stopping what still reads through them in the
        background (a vector matrix load). Raises the first failure, after trying every connection."""
        if self.searcher is not None and self.searcher.vectors is not None:
            await self.searcher.vectors.close()
            if (ann := self.searcher.vectors.ann) is not None:
                await ann.close(self._generation)
        failed: BaseException | None = None
        vector_reader, self.vector_reader = self.vector_reader, None
        for db in (vector_reader, self.reader, self.writer):
            if db is not None:
                try:
                    await db.close()
                except Exception as exc:
                    failed = failed or exc
        if failed is not None:
            raise failed

    async def _open_live_state(self) -> None:
        """Bind vector search to the live index (when its vectors fit the current provider)."""
        assert self.reader is not None and self.provider is not None
        problem = None
        vectors = None
        vt = await vector_table(self.reader)
        if self.backend == "none":
            problem = self.provider_problem or "embeddings are disabled (memory.embeddings.provider = none)"
        elif self._needs_rebuild and not self._old_vectors_ok:
            problem = "index is being rebuilt for a new embedding model; full-text results until it is done"
        elif vt is None:
            problem = (f"embedding provider unavailable: {self._embed_error}" if self._embed_error
                       else "no vectors stored yet")
        elif vt[0] != self.backend or (self.provider.dims and vt[1] != self.provider.dims):
            problem = "stored vectors do not match the embedding provider; the index will be rebuilt"
            self._needs_rebuild = True
        else:
            ann = AnnIndex(self.db_path, vt[1]) if self.cfg.search.ann_min_vectors else None
            if self.vector_reader is None:
                self.vector_reader = await self._open_db(self.db_path)
                await self.vector_reader.execute(f"PRAGMA cache_size = -{VECTOR_READER_CACHE_KB}")
            vectors = VectorStore(self.vector_reader, self.backend, vt[1], self.cfg.search.vector_matrix,
                                  ann, self.cfg.search.ann_min_vectors)
            if self.indexer is not None:  # the sync's writes keep the graph up to date
                self.indexer.ann = ann
                if self.indexer.vectors is not None:
                    self.indexer.vectors.ann = ann
        self.searcher = Searcher(self.reader, self.provider, self._options(), vectors, problem,
                                 self._hidden_sessions)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        for task in (self._warm_task, self._backend_update):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.orchestrator.close()
        self._users.release()
        with contextlib.suppress(Exception):
            await self._close_index()
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
        warm_model = getattr(self.provider, "warm", None)
        if warm_model is not None:
            await warm_model()
        async with self._gate.shared():
            vectors = self.searcher.vectors if self.searcher is not None else None
            if vectors is None or self.reader is None:
                return
            gen = await get_meta(self.reader, "generation", "0") or "0"
            await self._ann_tick()
            ann = vectors.ann if vectors.ann is not None and vectors.ann.started else None
            if ann is not None:
                await ann.wait_tried()  # its saved file opened, or a build begun
            if ann is None or not ann.ready:  # the exact search answers until the graph is built
                await vectors.warm(gen, self._counts["vectors"])
        if ann is not None:  # outside the gate: a build takes minutes at a million vectors
            await ann.wait()
            if ann.ready:
                vectors.drop_matrix()  # the graph answers now: ~0.3 GB at a million vectors given back

    # ---- sync orchestration ------------------------------------------------------------------------
    def _sync_unavailable(self) -> str | None:
        if self._closed:
            return "memory manager is closed"
        return None if self.cfg.enabled else "memory is disabled"

    def _request(self, *, force: bool, memory: bool, sessions: bool | set[str], progress=None,
                 reason: str = "explicit") -> SyncRequest:
        return self.orchestrator.request(force=force, memory=memory, sessions=sessions, progress=progress,
                                         reason=reason)

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
        if self._corrupt is not None:
            return await self._recover(self._corrupt)
        if self._needs_rebuild:
            stats = await self._rebuild(self._progress(req))
            self._hidden_sessions -= hidden
            return stats
        # Clear the dirty marks this run covers before it starts: changes during the run re-mark them.
        self._dirty.covered(req.memory, req.sessions)
        try:
            async with self._write_lock:
                assert self.indexer is not None
                stats = await self.indexer.sync(force=req.force, memory=req.memory, sessions=req.sessions,
                                                progress=self._progress(req))
        except Exception as exc:
            if not is_corruption(exc):
                self._dirty.uncovered(req.memory, req.sessions)
                raise
            return await self._recover(exc)
        if req.sessions:
            self._hidden_sessions -= hidden if req.sessions is True else hidden & req.sessions
        await self._after_sync(stats)
        return stats

    async def _after_sync(self, stats: SyncStats) -> None:
        self._embed_error = stats.embed_error
        if stats.skipped is not None:  # the memory files were scanned
            cap = self.cfg.max_file_bytes
            for path, size in stats.skipped.items():
                if self._skipped.get(path) != size:  # logged once per file and size, not every sync
                    log.warning("memory_file_skipped", path=path, bytes=size, max_file_bytes=cap,
                                reason="larger than memory.maxFileBytes")
            self._skipped = stats.skipped
        if stats.bytes_read >= TRIM_AFTER_BYTES or stats.removed:
            await asyncio.to_thread(trim_heap)
        if self.searcher is not None and self.searcher.vectors is None and self.backend != "none" \
                and not self._needs_rebuild:
            await self._open_live_state()
        await self._refresh_counts()
        if stats.embed_error and self._counts["missing"]:
            self._schedule_retry(stats.retry_after)
        else:
            self._retry_delay = RETRY_MIN_S
        if not isinstance(self.search_backend, BuiltinBackend):
            self._update_backend()

    def _schedule_retry(self, retry_after: float | None) -> None:
        if self._closed or (self._retry is not None and not self._retry.cancelled()
                            and self._retry.when() > asyncio.get_running_loop().time()):
            return
        delay = max(self._retry_delay, retry_after or 0.0)
        self._retry_delay = min(RETRY_MAX_S, self._retry_delay * 2)
        loop = asyncio.get_running_loop()
        self._retry = loop.call_later(delay, lambda: self._request(force=False, memory=False, sessions=False,
                                                                    reason="embed-retry"))

    async def _rebuild(self, progress) -> SyncStats:
        """Index everything into a fresh database next to the live one, then swap it in (rebuild.py)."""
        assert self.provider is not None and self.writer is not None
        with self._users.alone():
            return await self._rebuild_alone(progress)

    async def _rebuild_alone(self, progress) -> SyncStats:
        self._rebuilding = True
        self._forgotten.clear()
        self._dirty.clear()
        try:
            tmp, tdb, indexer, stats = await build_fresh(
                self.db_path, self._open_db, self.cfg.search.fts_tokenizer, self._signature(), self.provider,
                self._settings(), progress)
            try:
                async with self._write_lock:
                    if self._forgotten:
                        await indexer.forget([session_path(k) for k in self._forgotten])
                    await tdb.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    await tdb.close()
                    async with self._gate.exclusive():
                        await self._close_index()
                        swap_in(tmp, self.db_path)
                        self._needs_rebuild = False
                        await self._open_live()
                        await self._open_live_state()
            except BaseException:
                with contextlib.suppress(Exception):
                    await tdb.close()
                raise
        finally:
            self._rebuilding = False
        log.info("memory_index_rebuilt", files=stats.indexed, duration_ms=stats.duration_ms)
        await self._after_sync(stats)
        return stats

    async def _refresh_counts(self) -> None:
        db = self.reader
        if db is None:
            return
        files = int(await db.scalar("SELECT count(*) FROM files", default=0))
        chunks = int(await db.scalar("SELECT count(*) FROM chunks", default=0))
        missing = int(await db.scalar("SELECT count(*) FROM chunks WHERE embedded = 0", default=0)) \
            if self.backend != "none" else 0
        self._counts = {"files": files, "chunks": chunks, "vectors": chunks - missing, "missing": missing}
        if self.searcher is not None:
            self.searcher.total_chunks = chunks
        self._generation = await get_meta(db, "generation", "0") or "0"
        self._last_sync_at = await get_meta(db, "last_sync_at")
        await self._ann_tick()

    async def _ann_tick(self) -> None:
        """Open or build the ANN graph once the index is big enough for it; after a sync, save it now
        and then (or rebuild it when deleted rows dominate)."""
        vectors = self.searcher.vectors if self.searcher is not None else None
        ann = vectors.ann if vectors is not None else None
        if ann is None or self.reader is None or self._counts["vectors"] < self.cfg.search.ann_min_vectors:
            return
        if not ann.started:
            ann.start(self.reader, self._generation, self._counts["vectors"])
        else:
            await ann.after_sync(self.reader, self._generation, self._counts["vectors"])

    @property
    def dirty(self) -> bool:
        if self.orchestrator.watch.mode == "stopped":  # nothing sees note edits: the index may lag them
            self._dirty.memory = True
        return bool(self._needs_rebuild or self._dirty)

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

    def session_started(self, session_key: str) -> None:
        """A session was created (`sync.onSessionStart`): bring a dirty index up to date in the
        background, so the session's first turn recalls what is on disk."""
        if self._closed or not self.cfg.enabled or not self.cfg.sync.on_session_start or not self.dirty:
            return
        if self._needs_rebuild:
            self._request(force=False, memory=True, sessions=True, reason="session-start")
            return
        self._request(force=False, reason="session-start", **self._dirty.pending())

    async def sync_after_flush(self, session_key: str) -> dict:
        """After a compaction flushed a session into memory/YYYY-MM-DD.md: index the flush and the
        session's transcript now, forced when `sync.forceOnFlush` (re-read even if size/mtime match)."""
        req = self._request(force=self.cfg.sync.force_on_flush, memory=True, sessions={session_key},
                            reason="flush")
        stats: SyncStats = await asyncio.shield(req.future)
        return stats.result()

    async def keyed_changed(self, key: str | None = None) -> None:
        """Another gateway changed keyed memory `key`: none shares this state dir, so never called here
        (the files engine's watcher sees edits of the files themselves)."""

    async def forget_session(self, session_key: str) -> None:
        """After `sessions.delete` (its transcript is gone): drop the session's chunks now — or, while a
        sync holds the index (a full one can take many seconds), leave the session out of search at once
        and let a sync queued behind the running one drop them."""
        if not self.cfg.enabled or self.indexer is None:
            return
        self.orchestrator.cancel_debounce(session_key)
        self._dirty.sessions.discard(session_key)
        if self._rebuilding:
            self._forgotten.add(session_key)
        elif self.orchestrator.running or self._write_lock.locked():
            self._hidden_sessions.add(session_key)
            self._request(force=False, memory=False, sessions={session_key}, reason="sessions.delete")
            return
        async with self._write_lock:
            try:
                await self.indexer.forget([session_path(session_key)])
            except Exception:
                if not self._rebuilding:
                    raise
                log.debug("memory_forget_old_index_failed", exc_info=True)
        await self._refresh_counts()

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
            if not self._startup.done() and not self._needs_rebuild:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._startup)
            self._startup = None
        if not self.dirty:
            return
        if self._needs_rebuild:
            self._request(force=False, memory=True, sessions=True, reason="search")  # in the background
            return
        req = self._request(force=False, reason="search", **self._dirty.pending())
        try:
            await asyncio.shield(req.future)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("memory_search_presync_failed", exc_info=True)

    async def search(self, query: str, k: int = 6, min_score: float = 0.0, sources: list[str] | None = None,
                     session_key: str | None = None, mode: str | None = None,
                     exclude: Exclude | None = None) -> dict:
        # The params were validated by the method's schema (memory.search, and the CLI through it).
        mode = mode or self.cfg.search.mode
        srcs = tuple(sorted(set(sources))) if sources else SOURCES
        if not self.cfg.enabled or self.searcher is None:
            why = "memory is disabled" if not self.cfg.enabled else "the memory index is being rebuilt after damage"
            return {"results": [], "mode": mode, "embeddings": self._embeddings_brief(), "degraded": why}
        await self._sync_if_dirty()
        if self._recovering:
            res = await self.search_backend.search(query, k=int(k), min_score=float(min_score), sources=srcs,
                                                   session_key=session_key, mode=mode, exclude=exclude)
            res["degraded"] = ("the memory index was damaged and is being rebuilt from the memory files and "
                               "transcripts; results are incomplete until it is done")
            return res
        s = self.cfg.search
        if not (s.mmr or s.time_decay):
            return await self.search_backend.search(query, k=int(k), min_score=float(min_score), sources=srcs,
                                                    session_key=session_key, mode=mode, exclude=exclude)
        # Re-ranking: a pool a few times k, re-scored / re-ordered, then cut to k and minScore.
        res = await self.search_backend.search(query, k=min(100, max(3 * int(k), 20)), min_score=0.0,
                                               sources=srcs, session_key=session_key, mode=mode, exclude=exclude)
        res["results"] = await self._rerank(res["results"], int(k), float(min_score))
        return res

    async def _index_search(self, query: str, *, k: int, min_score: float, sources: tuple[str, ...],
                            session_key: str | None, mode: str, exclude: Exclude | None = None) -> dict:
        """The built-in backend: this manager's SQLite index."""
        try:
            async with self._gate.shared():
                assert self.searcher is not None
                gen = await get_meta(self.reader, "generation", "0") or "0"
                return await self.searcher.search(
                    query, k=k, min_score=min_score, sources=sources, session_key=session_key, mode=mode,
                    generation=gen, vector_count=self._counts["vectors"], missing_vectors=self._counts["missing"],
                    exclude=exclude)
        except Exception as exc:
            if not is_corruption(exc):
                raise
            if self._corrupt is None:
                self._corrupt = exc
                self._request(force=True, memory=True, sessions=True, reason="corrupt-index")
            raise Unavailable("the memory index is damaged; it is being rebuilt from the memory files "
                                      "and transcripts — retry shortly", retryable=True, retry_after_ms=2000) from None

    async def _rerank(self, results: list[dict], k: int, min_score: float) -> list[dict]:
        s = self.cfg.search
        if s.time_decay and results:
            dates = await asyncio.to_thread(result_dates, results, self.workspace, self.sessions_dir)
            now = self.decay_now or datetime.now(timezone.utc)
            results = apply_time_decay(results, dates, now, s.half_life_days)
        results = [r for r in results if r["score"] >= min_score]
        if s.mmr:
            return mmr_rerank(results, k, s.mmr_lambda, await self._stored_vectors(results))
        # Decay re-sorted by score: spread over files again, as the searcher did.
        return spread_over_files(results, k, s.file_diversity, score=lambda r: r["score"], path=lambda r: r["path"])

    async def _stored_vectors(self, results: list[dict]) -> dict[int, Any] | None:
        """The results' stored vectors (index in `results` → vector) for MMR, when vectors are in use."""
        if self.searcher is not None and self.searcher.vectors is not None and self.reader is not None:
            async with self._gate.shared():
                return await stored_vectors(self.reader, results)
        return None

    async def get(self, path: str, from_: int = 1, lines: int = 120) -> dict:
        if from_ < 1:
            raise Invalid("must be >= 1", field="from")
        if lines < 1:
            raise Invalid("must be >= 1", field="lines")
        target = await asyncio.to_thread(resolve_readable, path, self.workspace, self.sessions_dir)
        got, more = await asyncio.to_thread(read_lines, target, from_, lines)
        out: dict[str, Any] = {"path": path, "text": "\n".join(got), "from": from_, "lines": len(got),
                               "truncated": more}
        if more:
            out["nextFrom"] = from_ + max(1, len(got))
        return out

    def embedding_caches(self, provider: str, model: str, max_entries: int) -> tuple[Any, Any]:
        """The embedding cache through the reader and through the writer (for image vectors)."""
        return (EmbeddingCache(self.reader, provider, model, max_entries),
                EmbeddingCache(self.writer, provider, model, max_entries))

    def _embeddings_brief(self) -> dict:
        p = self.provider
        return {"provider": p.name if p else self.cfg.embeddings.provider, "model": p.model if p else ""}

    async def _status_counts(self) -> tuple[dict[str, int], dict[str, int], int, tuple[str, int] | None]:
        """Files and chunks by source, cache entries, and the stored vectors' (backend, dims)."""
        if self.cfg.enabled and self.reader is not None:
            async with self._gate.shared():
                await self._refresh_counts()
                rows = await self.reader.fetchall("SELECT source, count(*) FROM files GROUP BY source")
                files_by = {r[0]: int(r[1]) for r in rows}
                rows = await self.reader.fetchall("SELECT source, count(*) FROM chunks GROUP BY source")
                chunks_by = {r[0]: int(r[1]) for r in rows}
                cache = int(await self.reader.scalar("SELECT count(*) FROM embedding_cache", default=0))
                vt = await vector_table(self.reader)
            return files_by, chunks_by, cache, vt
        return {}, {}, 0, None

    async def status(self) -> dict:
        files_by, chunks_by, cache, vt = await self._status_counts()
        p = self.provider
        dims = (vt[1] if vt else 0) or (p.dims if p else 0)
        vec: dict[str, Any] = {
            "backend": self.backend,
            "available": bool(self.searcher is not None and self.searcher.vectors is not None),
            "missing": self._counts["missing"],
            # The in-memory form vector searches use ("int8"), or None while they run in SQL.
            "matrix": self.searcher.vectors.matrix_form
            if self.searcher is not None and self.searcher.vectors is not None else None,
            # The ANN graph of a big index: {"ready", "rows", "origin": "file" | "built"}; None below
            # memory.search.annMinVectors.
            "ann": self.searcher.vectors.ann.status()
            if self.searcher is not None and self.searcher.vectors is not None
            and self.searcher.vectors.ann is not None and self.searcher.vectors.ann.started else None,
        }
        out: dict[str, Any] = {
            "files": sum(files_by.values()), "chunks": sum(chunks_by.values()),
            "sources": {s: {"files": files_by.get(s, 0), "chunks": chunks_by.get(s, 0)} for s in SOURCES},
            "dirty": self.dirty,
            "lastSyncAt": self._last_sync_at,
            "embeddings": {**self._embeddings_brief(), "dims": dims},
            "vector": vec,
            "fts": {"tokenizer": self.tokenizer},
            "cache": {"entries": cache},
            "backend": self.search_backend.status(),
            "ranking": {"mmr": self.cfg.search.mmr, "mmrLambda": self.cfg.search.mmr_lambda,
                        "timeDecay": self.cfg.search.time_decay, "halfLifeDays": self.cfg.search.half_life_days},
            "sync": self.orchestrator.status(),
        }
        if self._rebuilding or self._needs_rebuild or self._corrupt is not None or self._recovering:
            out["rebuilding"] = True
        if self.corrupt_events:
            out["corrupt"] = self.corrupt_events[-5:]
        if self._skipped:
            reason = f"larger than memory.maxFileBytes ({self.cfg.max_file_bytes} bytes)"
            big = sorted(self._skipped.items(), key=lambda kv: (-kv[1], kv[0]))[:SKIPPED_SHOWN]
            out["skipped"] = [{"path": p, "bytes": b, "reason": reason} for p, b in big]
        problem = self._embed_error or self.provider_problem
        if problem:
            out["embeddings"]["error"] = problem
        return out

    async def recall_for_turn(self, query: str, session_key: str | None = None) -> list[dict]:
        """The best few results for a chat turn, within the recall budget. Never raises.
        `session_key`: the session of the turn; its message `query` (the one being answered, already in
        the transcript) is never recalled as its own answer."""
        rc = self.cfg.recall
        if not (rc.enabled and self.cfg.enabled) or rc.max_results == 0 or not query.strip():
            return []
        try:
            exclude = Exclude(session_path(session_key), query) if session_key else None
            res = await self.search(query[:2000], k=rc.max_results, min_score=rc.min_score, exclude=exclude)
        except Exception:
            log.warning("memory_recall_failed", exc_info=True)
            return []
        budget = rc.max_tokens * CHARS_PER_TOKEN
        out = []
        for r in res["results"]:
            if budget <= 0:
                break
            snip = r["snippet"][:budget]
            budget -= len(snip)
            out.append({"path": r["path"], "startLine": r["startLine"], "endLine": r["endLine"],
                        "score": r["score"], "snippet": snip})
        return out

    async def refresh_health(self) -> None:
        """Bring the counts health() reports up to date where another process may change the index
        (the PostgreSQL index); this one's own syncs keep them current."""

    def health(self) -> dict:
        return {"files": self._counts["files"], "chunks": self._counts["chunks"], "dirty": self.dirty,
                "watcher": self.orchestrator.watch.mode}
