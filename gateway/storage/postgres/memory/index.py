"""PgMemoryIndex: the PostgreSQL engine's memory index (memory/ports.py's MemoryIndex), one per agent
for every gateway on the database: the memory pipeline (memory/index/pipeline.py) over this package's
PgIndexStore, the searcher (memory/search/searcher.py) over its PgFullText, PgMatrixSearch, PgChunkReader.

What differs from the files engine's index (storage/files/memory/):

- no `memory.sqlite`, no users flock, no rebuild-and-swap, no corruption set-aside (PostgreSQL keeps
  its own data safe): a changed index signature deletes the agent's rows and re-syncs
  (`PgIndexStore.reset`), under the agent's advisory lock;
- syncs of one agent by several gateways take turns on that lock; the second finds the files' hashes
  unchanged and writes nothing but their stats;
- a session deleted through any gateway loses its chunks for every gateway (`forget_session`);
- the counts follow the index's `generation`, which any gateway may move (`refresh`, and each search).

All gateways on one database must use the same memory settings (embedding provider, model, chunking)
and the same workspace folder: the index is one per agent, so differing settings would rebuild it in
turn, and a memory file one gateway lacks is removed by that gateway's sync.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, AsyncIterator, Mapping, Sequence

import numpy as np
import structlog

from ....config import Config
from ....memory.hit import Found, Hit
from ....memory.index.lifecycle import IndexLifecycle
from ....memory.index.pipeline import IndexPipeline
from ....memory.index.settings import SyncStats
from ....memory.index.sources import session_path
from ....memory.ports import IndexContext, SearchPorts, Statement, VectorSearch
from ....memory.rerank import stored_vectors
from ....memory.search.request import SearchRequest
from ....memory.sync import SyncRequest
from ...vectors.ann import AnnIndex
from ..db import migrate_vectors
from .agent import get_meta, set_meta
from .cache import PgEmbeddingCache
from .fts_index import ensure_fulltext_index
from .fts_mirror import PgFtsMirror, mirror_path, sqlite_module
from .fulltext import FTS_CONFIG, PgFullText
from .ledger import read_statements
from .reader import PgChunkReader
from .store import PgIndexStore
from .vector_search import PgMatrixSearch, store_position, ann_path

if TYPE_CHECKING:  # pragma: no cover
    from ..instance import Postgres

log = structlog.get_logger("gateway.memory")


class PgMemoryIndex:
    shared = True  # every gateway on the database writes the agent's rows

    def __init__(self, config: Config, agent_id: str, pg: "Postgres"):
        self.life = IndexLifecycle(config, agent_id, self)  # the lifecycle, over this engine (memory/index/)
        self.cfg = config.memory
        self.agent_id = agent_id
        self.backend = "none"  # where the vectors are kept, set by open
        self.counts: dict[str, int] = {"files": 0, "chunks": 0, "vectors": 0, "missing": 0}
        self.last_sync_at: str | None = None
        self._generation = "0"  # the index's generation as the counts last read it
        self._counted = False  # the counts read at `_generation` (not again until it moves)
        self.corrupt_events: list[dict[str, str]] = []  # stays empty: PostgreSQL keeps its own data safe
        self.pool = pg.pool
        self.store: PgIndexStore | None = None
        self.pipeline: IndexPipeline | None = None
        self._vector_schema_problem: str | None = None
        self.state_dir = config.state_dir
        self.serving = pg.serving
        self.vsearch: PgMatrixSearch | None = None  # the vectors in memory, kept across re-binds of one dims
        self.fts_mirror: PgFtsMirror | None = None  # full text in the gateway (fts_mirror.py), serving only

    @property
    def rebuilding(self) -> bool:
        return self.life.rebuild_running or self.life.rebuild_due

    @property
    def degraded(self) -> str | None:
        return None

    @property
    def recovering(self) -> bool:
        return False

    # ---- what the lifecycle decides, as the memory service reads it -----------------------------------------
    @property
    def needs_rebuild(self) -> bool:
        return self.life.needs_rebuild

    async def search(self, req: SearchRequest) -> Found:
        return await self.life.search(req)

    async def sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        return await self.life.sync(req, progress)

    # ---- lifecycle ------------------------------------------------------------------------------------
    async def open(self, ctx: IndexContext) -> None:
        self.life.bind(ctx)
        self.backend = "none"
        self._counted = False  # the backend decides what "missing" counts
        if ctx.provider.enabled:
            self._vector_schema_problem = await migrate_vectors(self.pool)
            if self._vector_schema_problem:
                log.warning("memory_pgvector_unavailable", problem=self._vector_schema_problem)
            else:
                self.backend = "pgvector"
        async with self.pool.acquire() as conn:  # gone if a gateway died during a first bulk load
            if not await ensure_fulltext_index(conn):  # another gateway is loading or building it: no wait
                log.info("memory_fulltext_index_pending", note="another gateway builds it; searches scan meanwhile")
        settings = self.life.settings()
        self.store = PgIndexStore(self.pool, self.agent_id, ctx.provider, settings)
        self.pipeline = IndexPipeline(self.store, ctx.provider, settings)
        stored = await get_meta(self.pool, self.agent_id, "index_signature")
        has_chunks = await self.pool.fetchval("SELECT 1 FROM memory_chunks WHERE agent_id = $1 LIMIT 1", self.agent_id)
        if self.life.compare_signature(stored, bool(has_chunks), storage="postgresql"):
            await set_meta(self.pool, self.agent_id, "index_signature", self.life.signature())
        self._open_fts_mirror()
        await self.life.open_live_state()
        await self.refresh_counts()

    def _open_fts_mirror(self) -> None:
        """The agent's FTS5 mirror, opened (or built) in the background: in a serving gateway only (a tool's
        process leaves the gateway's file be), with a tokenizer FTS5 ranks alone (trigram's CJK bigrams
        read the text, which the file does not hold) and an SQLite that deletes from contentless tables."""
        if self.fts_mirror is not None or not self.serving:
            return
        tokenizer = self.life.tokenizer
        module = sqlite_module()
        if tokenizer == "trigram" or module is None:
            log.info("memory_fts_mirror_off", tokenizer=tokenizer, sqlite=module is not None)
            return
        path = mirror_path(self.state_dir, self.agent_id)
        self.fts_mirror = PgFtsMirror(self.pool, self.agent_id, path, tokenizer, self.cfg.search.context_weight, module)
        self.fts_mirror.start()

    async def close(self) -> None:
        """The vector search's load stopped and its graph saved (the pool is the engine's)."""
        fm, self.fts_mirror = self.fts_mirror, None
        if fm is not None:
            await fm.close()
        vs, self.vsearch = self.vsearch, None
        if vs is not None:
            await vs.close(self._generation, self.counts["vectors"])

    async def _drop_vectors_in_memory(self) -> None:
        """New settings: the matrix and the graph (and its saved file) hold the old model's vectors."""
        vs, self.vsearch = self.vsearch, None
        if vs is not None:
            await vs.close()  # no generation: nothing saved
            if vs.ann is not None:
                for f in (vs.ann.meta_path, vs.ann.path):
                    f.unlink(missing_ok=True)

    def backend_problem(self) -> str | None:
        return self._vector_schema_problem

    async def stored_vector_layout(self) -> tuple[str, int] | None:
        dims = await self.pool.fetchval("SELECT dims FROM memory_vectors WHERE agent_id = $1 LIMIT 1", self.agent_id)
        return None if dims is None else (self.backend, int(dims))

    async def bind_vectors(self, dims: int) -> VectorSearch:
        """The in-memory search (vector_search.py) of `dims`-d vectors: the one already bound, if of those."""
        if self.vsearch is not None and self.vsearch.dims == dims:
            return self.vsearch
        if self.vsearch is not None:
            await self.vsearch.close()
        s = self.cfg.search
        ann = AnnIndex(ann_path(self.state_dir, self.agent_id), dims, by_id=True) if s.ann_min_vectors else None
        if ann is not None:
            ann.path.parent.mkdir(parents=True, exist_ok=True)
            ann.store_id, ann.seq_ceiling = await store_position(self.pool)
            ann.saves = self.serving  # `jarvis memory search` beside the gateway leaves the gateway's file be
        self.vsearch = PgMatrixSearch(self.pool, self.agent_id, dims, s.vector_matrix, ann, s.ann_min_vectors)
        return self.vsearch

    def search_ports(self, vectors: VectorSearch | None) -> SearchPorts:
        return SearchPorts(
            self.fts_mirror or PgFullText(self.pool, self.agent_id, self.cfg.search.context_weight),
            PgChunkReader(self.pool, self.agent_id),
        )

    async def warm(self) -> None:
        """The full text's FTS5 mirror caught up (fts_mirror.py); the vectors' graph opened or built, or their
        matrix loaded (vector_search.py)."""
        if self.vsearch is not None:
            await self.refresh_counts()
        await asyncio.gather(  # side by side: the mirror mostly waits on the database, the graph on the CPU
            self.fts_mirror.warm() if self.fts_mirror is not None else asyncio.sleep(0),
            self.vsearch.warm(self._generation, self.counts["vectors"])
            if self.vsearch is not None
            else asyncio.sleep(0),
        )

    # ---- the writer ---------------------------------------------------------------------------------
    async def run_sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        async with self.life.write_lock:
            assert self.pipeline is not None
            try:
                stats = await self.pipeline.sync(
                    force=req.force, memory=req.memory, sessions=req.sessions, progress=progress
                )
            finally:
                await self._tell_mirror()
        await self.life.after_sync(stats)
        return stats

    async def _tell_mirror(self) -> None:
        """The chunks this gateway deleted (committed) dropped from its FTS5 mirror now."""
        if self.store is not None:
            ids = self.store.deleted()
            if self.fts_mirror is not None:
                await self.fts_mirror.deleted(ids)

    async def run_rebuild(self, progress: Any) -> SyncStats:
        """New settings: drop the agent's rows, then index everything again (no file to swap)."""
        assert self.store is not None and self.pipeline is not None
        self.life.rebuild_running = True
        self.life.marks.clear()
        try:
            async with self.life.write_lock:
                await self.store.reset(self.life.signature())
                self.store.deleted()  # every id is gone: the mirror is built again
                await self._drop_vectors_in_memory()
                if self.fts_mirror is not None:  # every id it holds is gone
                    await self.fts_mirror.close()
                    self.fts_mirror.start(rebuild=True)
                self.life.rebuild_due = False
                self.life.old_vectors_ok = True
                await self.life.open_live_state()
                try:
                    stats = await self.pipeline.sync(force=True, memory=True, sessions=True, progress=progress)
                finally:
                    await self._tell_mirror()
        finally:
            self.life.rebuild_running = False
        log.info("memory_index_rebuilt", files=stats.indexed, duration_ms=stats.duration_ms, storage="postgresql")
        await self.life.after_sync(stats)
        return stats

    async def forget_session(self, session_key: str, busy: bool) -> bool:
        """For every gateway; while a sync of the agent runs (here, or on any gateway: it holds the agent's
        lock and may have read the transcript before it went), False: a sync queued behind it drops them."""
        if self.store is None:
            return True
        if self.life.rebuild_running or busy or self.life.write_lock.locked():
            return False
        async with self.life.write_lock:
            gone = await self.store.forget([session_path(session_key)], wait=False)
            await self._tell_mirror()
        if gone is None:
            return False
        await self.refresh_counts()
        return True

    async def refresh_counts(self, delta: dict[str, int] | None = None) -> None:
        """Counted whole, `delta` or not: other gateways write the same rows. Not counted again while the
        generation is the one last counted at (every change of rows moves it, in its transaction): a
        no-op re-sync at 1.18M chunks counted 1.6M rows for nothing."""
        if self.store is None:
            return
        if self._counted:
            gen, self.last_sync_at = await self.pool.fetchrow(
                "SELECT (SELECT value FROM memory_meta WHERE agent_id = $1 AND key = 'generation'), "
                "(SELECT value FROM memory_meta WHERE agent_id = $1 AND key = 'last_sync_at')",
                self.agent_id,
            )
            if (gen or "0") == self._generation:
                if self.life.searcher is not None:
                    self.life.searcher.total_chunks = self.counts["chunks"]
                return
        row = await self.pool.fetchrow(
            "SELECT (SELECT count(*) FROM memory_files WHERE agent_id = $1), "
            "(SELECT count(*) FROM memory_chunks WHERE agent_id = $1), "
            "(SELECT count(*) FROM memory_chunks WHERE agent_id = $1 AND NOT embedded), "
            "(SELECT value FROM memory_meta WHERE agent_id = $1 AND key = 'generation'), "
            "(SELECT value FROM memory_meta WHERE agent_id = $1 AND key = 'last_sync_at')",
            self.agent_id,
        )
        files, chunks = int(row[0]), int(row[1])
        missing = int(row[2]) if self.backend != "none" else 0
        self.counts = {"files": files, "chunks": chunks, "vectors": chunks - missing, "missing": missing}
        if self.life.searcher is not None:
            self.life.searcher.total_chunks = chunks
        self._generation = row[3] or "0"
        self.last_sync_at = row[4]
        self._counted = True

    async def statements(self, subjects: Sequence[str] | None = None) -> list[Statement]:
        return await read_statements(self.pool, self.agent_id, subjects)

    async def generation(self) -> str | None:
        # Moved in the transaction of every change, by any gateway, and never reset (agent.py).
        if self.store is None:
            return None
        return await get_meta(self.pool, self.agent_id, "generation", "0") or "0"

    async def refresh(self) -> None:
        if self.store is None:
            return
        try:
            gen = await get_meta(self.pool, self.agent_id, "generation", "0") or "0"
            if gen != self._generation:
                await self.refresh_counts()
        except Exception:  # health answers with the last counts while the database is away
            log.debug("memory_health_counts_failed", exc_info=True)

    # ---- the reader ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[str]:
        """The index's generation; moved since the counts (another gateway, or this one, changed it): the
        counts read again, and vectors that were stored meanwhile bound for search."""
        gen = await get_meta(self.pool, self.agent_id, "generation", "0") or "0"
        if gen != self._generation:
            await self.refresh_counts()
            await self.life.bind_stored_vectors()
        yield gen

    async def stored_vectors(
        self, results: list[Hit], ids: Mapping[tuple[str, int, int], int] | None = None
    ) -> dict[int, np.ndarray] | None:
        if self.life.searcher is None or self.life.searcher.vectors is None:
            return None
        return await stored_vectors(self.life.searcher.rows, results, ids)

    async def status_counts(self) -> tuple[dict[str, int], dict[str, int], int, int]:
        if self.store is None:
            return {}, {}, 0, 0
        await self.refresh_counts()
        files_by = {
            r[0]: int(r[1])
            for r in await self.pool.fetch(
                "SELECT source, count(*) FROM memory_files WHERE agent_id = $1 GROUP BY source", self.agent_id
            )
        }
        chunks_by = {
            r[0]: int(r[1])
            for r in await self.pool.fetch(
                "SELECT source, count(*) FROM memory_chunks WHERE agent_id = $1 GROUP BY source", self.agent_id
            )
        }
        cache = int(await self.pool.fetchval("SELECT count(*) FROM memory_embedding_cache"))
        dims = 0
        if self.backend == "pgvector":
            dims = int(
                await self.pool.fetchval("SELECT dims FROM memory_vectors WHERE agent_id = $1 LIMIT 1", self.agent_id)
                or 0
            )
        return files_by, chunks_by, cache, dims

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vector": {
                "available": self.life.searcher is not None and self.life.searcher.vectors is not None,
                "matrix": self.vsearch.matrix_form if self.vsearch is not None else None,
                "ann": self.vsearch.ann.status()
                if self.vsearch is not None and self.vsearch.ann is not None and self.vsearch.ann.started
                else None,
            },
            "fts": {"tokenizer": FTS_CONFIG, "engine": "postgresql"}
            if self.fts_mirror is None or self.fts_mirror.state != "ready"
            else {"tokenizer": self.fts_mirror.tokenizer, "engine": "fts5-mirror"},
        }
        if self.fts_mirror is not None:
            out["fts"]["mirror"] = self.fts_mirror.status()
        if self._vector_schema_problem:
            out["error"] = self._vector_schema_problem
        return out

    def embedding_cache(self, provider: str, model: str, max_entries: int) -> PgEmbeddingCache:
        return PgEmbeddingCache(self.pool, provider, model, max_entries)
