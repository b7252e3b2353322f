"""The memory facade the rest of the gateway uses: `MemoryManager(config, agent_id)`.

Lifecycle: `open()` opens the index (migrations), and in the background runs the on-start sync and
watches the workspace's memory files; `close()` stops every background task and closes the database.

Sync requests from every trigger (start, file change, after `chat.final`, before a search when dirty,
`memory.sync`) are coalesced: while one sync runs, later requests merge into a single pending one
(a `force` is kept), and each caller gets the result of the run that covered its request.

A change of embedding provider/model/dims, chunking, FTS tokenizer or vector backend changes the index
signature: the index is then rebuilt into `<db>.rebuild` (the embedding cache is copied over first) and
swapped in with one rename. Searches keep answering from the old index meanwhile (full text only when
its vectors no longer match the query embeddings) and wait only for the swap itself.

Two connections: a writer (sync) and a reader (search), so searches never wait for a sync's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson
import structlog

from ..config import Config
from ..errors import InvalidParams
from .chunking import CHARS_PER_TOKEN, CHUNKER_VERSION
from .db import Database, pick_driver
from .embeddings import EmbeddingProvider, create_provider
from .indexer import Indexer, IndexSettings, SyncStats
from .schema import SchemaParams, get_meta, migrate, set_meta, vector_table
from .search import SearchOptions, Searcher
from .sources import SESSIONS, SOURCES, read_lines, resolve_readable, session_path
from .vectors import VectorStore
from .watcher import watch_memory

log = structlog.get_logger("gateway.memory")

MODES = ("hybrid", "fts", "vector")
RETRY_MIN_S, RETRY_MAX_S = 15.0, 600.0


@dataclass
class _Request:
    future: asyncio.Future
    force: bool = False
    memory: bool = False
    sessions: bool | set[str] = False
    progress: list[Callable[[int, int], None]] = field(default_factory=list)

    def add(self, force: bool, memory: bool, sessions: bool | set[str], progress) -> None:
        self.force = self.force or force
        self.memory = self.memory or memory
        if sessions is True or self.sessions is True:
            self.sessions = True
        elif isinstance(sessions, set):
            self.sessions = (self.sessions if isinstance(self.sessions, set) else set()) | sessions
        if progress is not None:
            self.progress.append(progress)


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
        self.provider: EmbeddingProvider | None = None
        self.provider_problem: str | None = None
        self.backend = "none"
        self.writer: Database | None = None
        self.reader: Database | None = None
        self.indexer: Indexer | None = None
        self.searcher: Searcher | None = None
        self.tokenizer = self.cfg.search.fts_tokenizer
        self._gate = _Gate()
        self._write_lock = asyncio.Lock()
        self._pending: _Request | None = None
        self._runner: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._watch_task: asyncio.Task | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._retry_delay = RETRY_MIN_S
        self._needs_rebuild = False
        self._rebuilding = False
        self._forgotten: set[str] = set()
        self._dirty_memory = False
        self._dirty_all_sessions = False
        self._dirty_sessions: set[str] = set()
        self._counts: dict[str, int] = {"files": 0, "chunks": 0, "vectors": 0, "missing": 0}
        self._generation = "0"
        self._last_sync_at: str | None = None
        self._embed_error: str | None = None
        self._opened = False
        self._closed = False
        self._startup: asyncio.Future | None = None
        self._warm_task: asyncio.Task | None = None
        self._old_vectors_ok = True

    # ---- configuration-derived -----------------------------------------------------------------------
    def _settings(self) -> IndexSettings:
        c = self.cfg.chunking
        return IndexSettings(
            workspace=self.workspace, sessions_dir=self.sessions_dir, tokens=c.tokens, overlap=c.overlap,
            session_tokens=c.session_tokens, session_overlap=c.session_overlap, session_context=c.session_context,
            vector_backend=self.backend, cache_max_entries=self.cfg.embeddings.cache_max_entries)

    def _signature(self) -> str:
        c = self.cfg.chunking
        p = self.provider
        assert p is not None
        return orjson.dumps({
            "provider": p.name, "model": p.model,
            "dims": self.cfg.embeddings.dims if p.name == "openai" else p.dims,
            "tokenizer": self.cfg.search.fts_tokenizer, "vectorBackend": self.backend,
            "chunking": [c.tokens, c.overlap, c.session_tokens, c.session_overlap, c.session_context,
                         CHUNKER_VERSION],
        }, option=orjson.OPT_SORT_KEYS).decode()

    def _options(self) -> SearchOptions:
        s = self.cfg.search
        return SearchOptions(mode=s.mode, fusion=s.fusion, rrf_k=s.rrf_k, text_weight=s.text_weight,
                             vector_weight=s.vector_weight, candidate_multiplier=s.candidate_multiplier,
                             snippet_chars=s.snippet_chars, tokenizer=self.tokenizer,
                             context_weight=s.context_weight, segment_weight=s.segment_weight)

    # ---- lifecycle ------------------------------------------------------------------------------------
    async def open(self) -> None:
        if self._opened:
            return
        self._opened = True
        self.provider, self.provider_problem = create_provider(self.config)
        if self.provider_problem:
            log.warning("memory_embeddings_problem", problem=self.provider_problem)
        want = self.cfg.search.vector_backend
        driver = pick_driver(want_vec=want in ("auto", "sqlite-vec"))
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
        await self._open_live()
        sig = self._signature()
        stored = await get_meta(self.writer, "index_signature")
        has_chunks = bool(await self.writer.scalar("SELECT 1 FROM chunks LIMIT 1"))
        self._old_vectors_ok = True
        if stored is None and not has_chunks:
            await set_meta(self.writer, "index_signature", sig)
        elif stored != sig:
            self._needs_rebuild = True
            self._dirty_memory = self._dirty_all_sessions = True
            self._old_vectors_ok = _embedding_part(stored) == _embedding_part(sig)
            log.info("memory_index_rebuild_needed", reason="index settings changed")
        await self._open_live_state()
        await self._refresh_counts()
        if self.cfg.sync.on_start:
            # Searches wait for this first sync (see _sync_if_dirty): right after a start the index
            # may lag the files, and the first chat turn should recall what is on disk.
            self._startup = self._request(force=False, memory=True, sessions=True).future
            self._warm_task = asyncio.create_task(self._warm_after(self._startup))
            self._warm_task.add_done_callback(_log_task_failure)
        else:
            self._dirty_memory = self._dirty_all_sessions = True
        if self.cfg.sync.watch:
            self._watch_task = asyncio.create_task(
                watch_memory(self.workspace, self._on_memory_change, self._stop, self.cfg.sync.watch_debounce_ms))
            self._watch_task.add_done_callback(_log_task_failure)

    async def _open_live(self) -> None:
        self.writer = await Database(self.db_path, self._driver, use_vec=self.backend == "sqlite-vec").open()
        await migrate(self.writer, SchemaParams(tokenizer=self.cfg.search.fts_tokenizer))
        self.tokenizer = await get_meta(self.writer, "fts_tokenizer", self.cfg.search.fts_tokenizer) or "unicode61"
        self.reader = await Database(self.db_path, self._driver, use_vec=self.backend == "sqlite-vec").open()
        self.indexer = Indexer(self.writer, self.provider, self._settings())
        self.searcher = Searcher(self.reader, self.provider, self._options(), None,
                                 "index is being rebuilt for new settings")

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
            vectors = VectorStore(self.reader, self.backend, vt[1])
        self.searcher = Searcher(self.reader, self.provider, self._options(), vectors, problem)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        if self._retry is not None:
            self._retry.cancel()
        if self._watch_task is not None:
            try:
                await asyncio.wait_for(self._watch_task, timeout=5)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                self._watch_task.cancel()
        if self._warm_task is not None and not self._warm_task.done():
            self._warm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._warm_task
        if self._runner is not None and not self._runner.done():
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._runner
        if self._pending is not None and not self._pending.future.done():
            self._pending.future.set_exception(RuntimeError("memory manager closed"))
            self._pending.future.exception()
        self._pending = None
        for db in (self.reader, self.writer):
            if db is not None:
                with contextlib.suppress(Exception):
                    await db.close()
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
            if self.searcher is not None and self.searcher.vectors is not None and self.reader is not None:
                gen = await get_meta(self.reader, "generation", "0") or "0"
                await self.searcher.vectors.warm(gen, self._counts["vectors"])

    # ---- sync orchestration ------------------------------------------------------------------------
    def _request(self, *, force: bool, memory: bool, sessions: bool | set[str], progress=None) -> _Request:
        if self._closed or not self.cfg.enabled:
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(RuntimeError("memory manager is closed" if self._closed else "memory is disabled"))
            fut.exception()
            return _Request(fut)
        if self._pending is None:
            fut = asyncio.get_running_loop().create_future()
            fut.add_done_callback(_consume)
            self._pending = _Request(fut)
        self._pending.add(force, memory, sessions, progress)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return self._pending

    async def _run(self) -> None:
        while self._pending is not None and not self._closed:
            req, self._pending = self._pending, None
            try:
                stats = await self._run_one(req)
            except asyncio.CancelledError:
                if not req.future.done():
                    req.future.set_exception(RuntimeError("memory sync cancelled"))
                raise
            except Exception as exc:
                log.exception("memory_sync_failed")
                if not req.future.done():
                    req.future.set_exception(exc)
            else:
                if not req.future.done():
                    req.future.set_result(stats)

    def _progress(self, req: _Request):
        if not req.progress:
            return None

        def cb(done: int, total: int) -> None:
            for p in req.progress:
                try:
                    p(done, total)
                except Exception:  # a progress display must never break a sync
                    log.debug("memory_progress_callback_failed", exc_info=True)
        return cb

    async def _run_one(self, req: _Request) -> SyncStats:
        if self._needs_rebuild:
            return await self._rebuild(self._progress(req))
        # Clear the dirty marks this run covers before it starts: changes during the run re-mark them.
        if req.memory:
            self._dirty_memory = False
        if req.sessions is True:
            self._dirty_all_sessions = False
            self._dirty_sessions.clear()
        elif isinstance(req.sessions, set):
            self._dirty_sessions -= req.sessions
        async with self._write_lock:
            assert self.indexer is not None
            stats = await self.indexer.sync(force=req.force, memory=req.memory, sessions=req.sessions,
                                            progress=self._progress(req))
        await self._after_sync(stats)
        return stats

    async def _after_sync(self, stats: SyncStats) -> None:
        self._embed_error = stats.embed_error
        if self.searcher is not None and self.searcher.vectors is None and self.backend != "none" \
                and not self._needs_rebuild:
            await self._open_live_state()
        await self._refresh_counts()
        if stats.embed_error and self._counts["missing"]:
            self._schedule_retry(stats.retry_after)
        else:
            self._retry_delay = RETRY_MIN_S

    def _schedule_retry(self, retry_after: float | None) -> None:
        if self._closed or (self._retry is not None and not self._retry.cancelled()
                            and self._retry.when() > asyncio.get_running_loop().time()):
            return
        delay = max(self._retry_delay, retry_after or 0.0)
        self._retry_delay = min(RETRY_MAX_S, self._retry_delay * 2)
        loop = asyncio.get_running_loop()
        self._retry = loop.call_later(delay, lambda: self._request(force=False, memory=False, sessions=False))

    async def _rebuild(self, progress) -> SyncStats:
        """Index everything into a fresh database next to the live one, then swap it in."""
        assert self.provider is not None and self.writer is not None
        self._rebuilding = True
        self._forgotten.clear()
        self._dirty_memory = self._dirty_all_sessions = False
        self._dirty_sessions.clear()
        tmp = self.db_path.with_name(self.db_path.name + ".rebuild")
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(tmp) + suffix)
        tdb = await Database(tmp, self._driver, use_vec=self.backend == "sqlite-vec").open()
        try:
            await migrate(tdb, SchemaParams(tokenizer=self.cfg.search.fts_tokenizer))
            await tdb.execute("ATTACH DATABASE ? AS live", (str(self.db_path),))
            try:
                await tdb.execute(
                    "INSERT OR IGNORE INTO embedding_cache(provider, model, hash, dims, embedding) "
                    "SELECT provider, model, hash, dims, embedding FROM live.embedding_cache ORDER BY rowid")
            finally:
                await tdb.execute("DETACH DATABASE live")
            await set_meta(tdb, "index_signature", self._signature())
            indexer = Indexer(tdb, self.provider, self._settings())
            stats = await indexer.sync(force=True, memory=True, sessions=True, progress=progress)
            async with self._write_lock:
                if self._forgotten:
                    await indexer.forget([session_path(k) for k in self._forgotten])
                await tdb.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                await tdb.close()
                async with self._gate.exclusive():
                    for db in (self.reader, self.writer):
                        if db is not None:
                            await db.close()
                    os.replace(tmp, self.db_path)
                    for suffix in ("-wal", "-shm"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(str(self.db_path) + suffix)
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(str(tmp) + suffix)
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

    @property
    def dirty(self) -> bool:
        return bool(self._needs_rebuild or self._dirty_memory or self._dirty_all_sessions or self._dirty_sessions)

    # ---- triggers ------------------------------------------------------------------------------------
    def _on_memory_change(self) -> None:
        self._dirty_memory = True
        self._request(force=False, memory=True, sessions=False)

    def schedule_session_sync(self, session_key: str) -> None:
        """After a `chat.final`: re-index this session's transcript once things settle (debounced)."""
        if self._closed or not self.cfg.enabled:
            return
        self._dirty_sessions.add(session_key)
        old = self._timers.pop(session_key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        delay = self.cfg.sync.session_debounce_ms / 1000.0

        def fire() -> None:
            self._timers.pop(session_key, None)
            if session_key in self._dirty_sessions:
                self._request(force=False, memory=False, sessions={session_key})

        self._timers[session_key] = loop.call_later(delay, fire)

    async def forget_session(self, session_key: str) -> None:
        """After `sessions.delete`: drop the session's chunks now."""
        if not self.cfg.enabled or self.indexer is None:
            return
        h = self._timers.pop(session_key, None)
        if h is not None:
            h.cancel()
        self._dirty_sessions.discard(session_key)
        if self._rebuilding:
            self._forgotten.add(session_key)
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
        req = self._request(force=force, memory=True, sessions=True, progress=progress)
        stats: SyncStats = await asyncio.shield(req.future)
        return stats.result()

    async def sync_memory(self) -> dict:
        """Re-index the memory files now (not the transcripts) and return when the index holds what is
        on disk — for writers that must answer only once a change (or a delete) is searchable. Coalesces
        with other syncs like every trigger does."""
        req = self._request(force=False, memory=True, sessions=False)
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
            self._request(force=False, memory=True, sessions=True)  # in the background; answer now
            return
        sessions: bool | set[str] = True if self._dirty_all_sessions else set(self._dirty_sessions)
        req = self._request(force=False, memory=self._dirty_memory, sessions=sessions or False)
        try:
            await asyncio.shield(req.future)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("memory_search_presync_failed", exc_info=True)

    async def search(self, query: str, k: int = 6, min_score: float = 0.0, sources: list[str] | None = None,
                     session_key: str | None = None, mode: str | None = None) -> dict:
        if not isinstance(query, str) or not query.strip():
            raise InvalidParams("params.query: must not be empty", field="params.query")
        if len(query) > 2000:
            raise InvalidParams(f"params.query: must be at most 2000 characters, got {len(query)}",
                                field="params.query")
        if not 1 <= int(k) <= 50:
            raise InvalidParams(f"params.k: must be between 1 and 50, got {k}", field="params.k")
        mode = mode or self.cfg.search.mode
        if mode not in MODES:
            raise InvalidParams(f"params.mode: must be one of {', '.join(MODES)}", field="params.mode")
        srcs = tuple(sorted(set(sources))) if sources else SOURCES
        for s in srcs:
            if s not in SOURCES:
                raise InvalidParams(f"params.sources: unknown source {s!r} (memory, sessions)",
                                    field="params.sources")
        if not self.cfg.enabled or self.searcher is None:
            return {"results": [], "mode": mode, "embeddings": self._embeddings_brief(),
                    "degraded": "memory is disabled"}
        await self._sync_if_dirty()
        async with self._gate.shared():
            assert self.searcher is not None
            gen = await get_meta(self.reader, "generation", "0") or "0"
            return await self.searcher.search(
                query, k=int(k), min_score=float(min_score), sources=srcs, session_key=session_key, mode=mode,
                generation=gen, vector_count=self._counts["vectors"], missing_vectors=self._counts["missing"])

    async def get(self, path: str, from_: int = 1, lines: int = 120) -> dict:
        if from_ < 1:
            raise InvalidParams("params.from: must be >= 1", field="params.from")
        if lines < 1:
            raise InvalidParams("params.lines: must be >= 1", field="params.lines")
        target = await asyncio.to_thread(resolve_readable, path, self.workspace, self.sessions_dir)
        got, more = await asyncio.to_thread(read_lines, target, from_, lines)
        out: dict[str, Any] = {"path": path, "text": "\n".join(got), "from": from_, "lines": len(got),
                               "truncated": more}
        if more:
            out["nextFrom"] = from_ + max(1, len(got))
        return out

    def _embeddings_brief(self) -> dict:
        p = self.provider
        return {"provider": p.name if p else self.cfg.embeddings.provider, "model": p.model if p else ""}

    async def status(self) -> dict:
        if self.cfg.enabled and self.reader is not None:
            async with self._gate.shared():
                await self._refresh_counts()
                rows = await self.reader.fetchall("SELECT source, count(*) FROM files GROUP BY source")
                files_by = {r[0]: int(r[1]) for r in rows}
                rows = await self.reader.fetchall("SELECT source, count(*) FROM chunks GROUP BY source")
                chunks_by = {r[0]: int(r[1]) for r in rows}
                cache = int(await self.reader.scalar("SELECT count(*) FROM embedding_cache", default=0))
                vt = await vector_table(self.reader)
        else:
            files_by, chunks_by, cache, vt = {}, {}, 0, None
        p = self.provider
        dims = (vt[1] if vt else 0) or (p.dims if p else 0)
        vec: dict[str, Any] = {
            "backend": self.backend,
            "available": bool(self.searcher is not None and self.searcher.vectors is not None),
            "missing": self._counts["missing"],
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
        }
        if self._rebuilding or self._needs_rebuild:
            out["rebuilding"] = True
        problem = self._embed_error or self.provider_problem
        if problem:
            out["embeddings"]["error"] = problem
        return out

    async def recall(self, query: str) -> list[dict]:
        """The best few results for a chat turn, within the recall budget. Never raises."""
        rc = self.cfg.recall
        if not (rc.enabled and self.cfg.enabled) or rc.max_results == 0 or not query.strip():
            return []
        try:
            res = await self.search(query[:2000], k=rc.max_results, min_score=rc.min_score)
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

    def health(self) -> dict:
        return {"files": self._counts["files"], "chunks": self._counts["chunks"], "dirty": self.dirty}


def _embedding_part(signature: str | None) -> tuple:
    try:
        d = orjson.loads(signature or "{}")
    except orjson.JSONDecodeError:
        return ()
    return (d.get("provider"), d.get("model"), d.get("dims"), d.get("vectorBackend"))


def _consume(fut: asyncio.Future) -> None:
    """Mark a sync result's exception as seen (callers that do not wait still get it logged)."""
    if not fut.cancelled():
        fut.exception()


def _log_task_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("memory_background_task_failed", error=repr(task.exception()))
