"""MemoryManager with its index in PostgreSQL (`storage.url`): one index per agent for every gateway.

The facade, triggers, sync coalescing, search backends and re-ranking are MemoryManager's; what differs:

- no `memory.sqlite`, no users flock, no rebuild-and-swap, no corruption set-aside (PostgreSQL keeps
  its own data safe): a changed index signature deletes the agent's rows and re-syncs (pgindex.py,
  `PgIndexer.reset`), under the agent's advisory lock;
- syncs of one agent by several gateways take turns on that lock; the second finds the files' hashes
  unchanged and writes nothing but their stats;
- a session deleted through any gateway loses its chunks for every gateway (`forget_session`).

All gateways on one database must use the same memory settings (embedding provider, model, chunking)
and the same workspace folder: the index is one per agent, so differing settings would rebuild it in
turn, and a memory file one gateway lacks is removed by that gateway's sync.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from ..config import Config
from .index.indexer import SyncStats
from .index.sources import session_path
from .pgindex import (FTS_CONFIG, PgEmbeddingCache, PgIndexer, PgSearcher, PgVectorStore, ensure_dims_index,
                      ensure_vector_schema, get_meta, parse_vector, set_meta)
from ..storage.postgres.keyed import PgKeyedStore
from .rebuild import same_embeddings
from .search.snippets import Exclude
from .service import MemoryManager
from .sync import SyncRequest

if TYPE_CHECKING:  # pragma: no cover
    from ..storage.postgres import Postgres

log = structlog.get_logger("gateway.memory")


class PgMemoryManager(MemoryManager):
    def __init__(self, config: Config, agent_id: str | None, pg: "Postgres"):
        super().__init__(config, agent_id)
        self.pg = pg
        self.pool = pg.pool
        self._vector_schema_problem: str | None = None
        self.keyed: PgKeyedStore = PgKeyedStore(pg, self.agent_id, self.workspace)  # the record of memory.set & co.

    async def open(self) -> None:
        if self._opened:
            return
        self._opened = True
        self._make_provider()
        if not self.cfg.enabled:
            return
        self.backend = "none"
        if self.provider.enabled:
            self._vector_schema_problem = await ensure_vector_schema(self.pool)
            if self._vector_schema_problem:
                log.warning("memory_pgvector_unavailable", problem=self._vector_schema_problem)
            else:
                self.backend = "pgvector"
        await self._open_index()
        self._start_triggers()

    async def _open_index(self) -> None:
        assert self.provider is not None
        self.tokenizer = self.cfg.search.fts_tokenizer
        self.indexer = PgIndexer(self.pool, self.agent_id, self.provider, self._settings(),  # type: ignore[assignment]
                                 vectors_ok=self.backend == "pgvector")
        sig = self._signature()
        stored = await get_meta(self.pool, self.agent_id, "index_signature")
        has_chunks = await self.pool.fetchval("SELECT 1 FROM memory_chunks WHERE agent_id = $1 LIMIT 1", self.agent_id)
        self._old_vectors_ok = True
        if stored is None and not has_chunks:
            await set_meta(self.pool, self.agent_id, "index_signature", sig)
        elif stored != sig:
            self._needs_rebuild = True
            self._dirty.mark_all()
            self._old_vectors_ok = same_embeddings(stored, sig)
            log.info("memory_index_rebuild_needed", reason="index settings changed", storage="postgresql")
        await self._open_live_state()
        await self._refresh_counts()

    async def _open_live_state(self) -> None:
        assert self.provider is not None
        problem = None
        vectors = None
        if self.backend == "none":
            problem = (self._vector_schema_problem or self.provider_problem
                       or "embeddings are disabled (memory.embeddings.provider = none)")
        elif self._needs_rebuild and not self._old_vectors_ok:
            problem = "index is being rebuilt for a new embedding model; full-text results until it is done"
        else:
            dims = await self.pool.fetchval("SELECT dims FROM memory_vectors WHERE agent_id = $1 LIMIT 1",
                                            self.agent_id)
            if dims is None:
                problem = (f"embedding provider unavailable: {self._embed_error}" if self._embed_error
                           else "no vectors stored yet")
            elif self.provider.dims and dims != self.provider.dims:
                problem = "stored vectors do not match the embedding provider; the index will be rebuilt"
                self._needs_rebuild = True
            else:
                vectors = PgVectorStore(self.pool, self.agent_id, int(dims))
                async with self.pool.acquire() as conn:  # gone if a gateway died during a first bulk load
                    await ensure_dims_index(conn, int(dims))
        self.searcher = PgSearcher(self.pool, self.agent_id, self.provider, self._options(), vectors, problem,
                                   self._hidden_sessions)

    # ---- sync -----------------------------------------------------------------------------------------
    async def _run_one(self, req: SyncRequest) -> SyncStats:
        hidden = set(self._hidden_sessions)
        if self._needs_rebuild:
            stats = await self._rebuild(self._progress(req))
            self._hidden_sessions -= hidden
            return stats
        self._dirty.covered(req.memory, req.sessions)
        if req.memory:  # the keyed rows and this gateway's mirror files, before the files are indexed
            try:
                await self.keyed.reconcile()
            except Exception as exc:  # the files are indexed as they are; the next sync tries again
                log.warning("memory_keyed_reconcile_failed", error=str(exc) or type(exc).__name__)
        try:
            async with self._write_lock:
                assert self.indexer is not None
                stats = await self.indexer.sync(force=req.force, memory=req.memory, sessions=req.sessions,
                                                progress=self._progress(req))
        except Exception:
            self._dirty.uncovered(req.memory, req.sessions)
            raise
        if req.sessions:
            self._hidden_sessions -= hidden if req.sessions is True else hidden & req.sessions
        await self._after_sync(stats)
        return stats

    async def keyed_changed(self, key: str | None = None) -> None:
        """Another gateway wrote or deleted keyed memory `key` (None: maybe any, notifications were
        missed): update the mirror files, re-index."""
        if self._closed or not self.cfg.enabled:
            return
        await self.keyed.reconcile(key)
        self._on_memory_change()

    async def forget_session(self, session_key: str) -> None:
        """After `sessions.delete` here or through another gateway: drop the session's chunks for every
        gateway now — or, while a sync of the agent runs (here, or on any gateway: it holds the agent's
        lock and may have read the transcript before it went), leave the session out of search at once
        and let a sync queued behind it drop them."""
        if not self.cfg.enabled or self.indexer is None:
            return
        self.orchestrator.cancel_debounce(session_key)
        self._dirty.sessions.discard(session_key)
        if not (self._rebuilding or self.orchestrator.running or self._write_lock.locked()):
            assert isinstance(self.indexer, PgIndexer)
            async with self._write_lock:
                gone = await self.indexer.forget([session_path(session_key)], wait=False)
            if gone is not None:
                await self._refresh_counts()
                return
        self._hidden_sessions.add(session_key)
        self._request(force=False, memory=False, sessions={session_key}, reason="sessions.delete")

    async def _rebuild(self, progress) -> SyncStats:
        """New settings: drop the agent's rows, then index everything again (no file to swap)."""
        assert isinstance(self.indexer, PgIndexer)
        self._rebuilding = True
        self._forgotten.clear()
        self._dirty.clear()
        try:
            async with self._write_lock:
                await self.indexer.reset(self._signature())
                self._needs_rebuild = False
                self._old_vectors_ok = True
                await self._open_live_state()
                stats = await self.indexer.sync(force=True, memory=True, sessions=True, progress=progress)
        finally:
            self._rebuilding = False
        log.info("memory_index_rebuilt", files=stats.indexed, duration_ms=stats.duration_ms, storage="postgresql")
        await self._after_sync(stats)
        return stats

    async def _refresh_counts(self) -> None:
        if self.indexer is None:
            return
        row = await self.pool.fetchrow(
            "SELECT (SELECT count(*) FROM memory_files WHERE agent_id = $1), "
            "(SELECT count(*) FROM memory_chunks WHERE agent_id = $1), "
            "(SELECT count(*) FROM memory_chunks WHERE agent_id = $1 AND NOT embedded), "
            "(SELECT value FROM memory_meta WHERE agent_id = $1 AND key = 'generation'), "
            "(SELECT value FROM memory_meta WHERE agent_id = $1 AND key = 'last_sync_at')", self.agent_id)
        files, chunks = int(row[0]), int(row[1])
        missing = int(row[2]) if self.backend != "none" else 0
        self._counts = {"files": files, "chunks": chunks, "vectors": chunks - missing, "missing": missing}
        if self.searcher is not None:
            self.searcher.total_chunks = chunks
        self._generation = row[3] or "0"
        self._last_sync_at = row[4]

    # ---- search and status ------------------------------------------------------------------------------
    async def _index_search(self, query: str, *, k: int, min_score: float, sources: tuple[str, ...],
                            session_key: str | None, mode: str, exclude: Exclude | None = None) -> dict:
        gen = await get_meta(self.pool, self.agent_id, "generation", "0") or "0"
        if gen != self._generation:  # another gateway (or this one) changed the index since the counts
            await self._refresh_counts()
            if self.searcher is not None and self.searcher.vectors is None and self.backend != "none" \
                    and not self._needs_rebuild:
                await self._open_live_state()  # vectors stored meanwhile, by whichever gateway
        assert self.searcher is not None
        return await self.searcher.search(
            query, k=k, min_score=min_score, sources=sources, session_key=session_key, mode=mode,
            generation=gen, vector_count=self._counts["vectors"], missing_vectors=self._counts["missing"],
            exclude=exclude)

    async def _status_counts(self) -> tuple[dict[str, int], dict[str, int], int, tuple[str, int] | None]:
        if not self.cfg.enabled or self.indexer is None:
            return {}, {}, 0, None
        await self._refresh_counts()
        files_by = {r[0]: int(r[1]) for r in await self.pool.fetch(
            "SELECT source, count(*) FROM memory_files WHERE agent_id = $1 GROUP BY source", self.agent_id)}
        chunks_by = {r[0]: int(r[1]) for r in await self.pool.fetch(
            "SELECT source, count(*) FROM memory_chunks WHERE agent_id = $1 GROUP BY source", self.agent_id)}
        cache = int(await self.pool.fetchval("SELECT count(*) FROM memory_embedding_cache"))
        vt = None
        if self.backend == "pgvector":
            dims = await self.pool.fetchval("SELECT dims FROM memory_vectors WHERE agent_id = $1 LIMIT 1",
                                            self.agent_id)
            vt = ("pgvector", int(dims)) if dims else None
        return files_by, chunks_by, cache, vt

    async def _stored_vectors(self, results: list[dict]) -> dict[int, Any] | None:
        if not results or self.searcher is None or self.searcher.vectors is None:
            return None
        rows = await self.pool.fetch(
            "SELECT c.path, c.start_line, c.end_line, v.embedding::text FROM memory_chunks c "
            "JOIN memory_vectors v ON v.chunk_id = c.id WHERE c.agent_id = $1 AND c.path = ANY($2::text[])",
            self.agent_id, sorted({r["path"] for r in results}))
        vecs = {(r[0], int(r[1]), int(r[2])): parse_vector(r[3]) for r in rows}
        out = {i: vecs[(r["path"], r["startLine"], r["endLine"])] for i, r in enumerate(results)
               if (r["path"], r["startLine"], r["endLine"]) in vecs}
        return out or None

    async def refresh_health(self) -> None:
        if not self.cfg.enabled or self.indexer is None or self._closed:
            return
        try:
            gen = await get_meta(self.pool, self.agent_id, "generation", "0") or "0"
            if gen != self._generation:
                await self._refresh_counts()
        except Exception:  # health answers with the last counts while the database is away
            log.debug("memory_health_counts_failed", exc_info=True)

    def embedding_caches(self, provider: str, model: str, max_entries: int) -> tuple[Any, Any]:
        cache = PgEmbeddingCache(self.pool, provider, model, max_entries)
        return cache, cache

    async def status(self) -> dict:
        out: dict[str, Any] = await super().status()
        out["fts"] = {"tokenizer": FTS_CONFIG, "engine": "postgresql"}
        if self._vector_schema_problem and "error" not in out["embeddings"]:
            out["embeddings"]["error"] = self._vector_schema_problem
        return out
