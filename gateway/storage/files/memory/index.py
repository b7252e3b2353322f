"""FilesMemoryIndex: the files engine's memory index (storage/base.py's MemoryIndex), one SQLite file per agent.

Three connections: a writer (sync) and two readers (search: full text and the rest on one, vector
search's reads on the other), so searches never wait for a sync's transaction, and a hybrid search's
vector reads run beside its full-text query instead of after it; a gate lets many searches in at once,
or one swap of the file.

A change of embedding provider/model/dims, chunking, FTS tokenizer or vector backend changes the index
signature: the index is then rebuilt into `<db>.rebuild` (the embedding cache is copied over first) and
swapped in with one rename (rebuild.py). Searches keep answering from the old index meanwhile
(full text only when its vectors no longer match the query embeddings) and wait only for the swap itself.

A damaged file (at open, or met while serving) is derived data: it is set aside for a post-mortem and
an empty index is filled again from the notes and transcripts. Other processes that hold the file open
(`jarvis memory` beside a gateway) are seen through a shared flock (rebuild.IndexUsers).

A big index gets an ANN graph (ann.py, beside this module), opened or built at warm-up and saved after syncs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

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
from .counts import count_all, counts_by_source, counts_of
from .db import Database, index_driver, is_corruption
from ...fts5 import Fts5Search
from .ledger import read_statements
from .gate import Gate, GatedCache, being_rebuilt
from .migrations import SchemaParams, get_meta, migrate, set_meta, vector_table
from .reader import SqliteChunkReader
from .rebuild import IndexUsers, rebuild_aside, set_aside
from .store import SqliteIndexStore
from .vectors import SqliteVectorRows, VectorStore

log = structlog.get_logger("gateway.memory")

# The reading connections' page caches (SQLite's own; a page found there is not read with pread() and
# copied into it). In WAL mode a reader keeps its cache until another connection commits, so between syncs
# the pages that searches share stay cached. Caps, not allocations: anonymous memory grows as pages are read.
# Sized at 118k chunks (docs/performance.md, issue 46 ninth round): the reader (full text, rows) 64 MB, the
# vector reader (the graph's candidates' stored vectors; 116 MB of them at 118k) 128 MB — +~100 MB of
# anonymous RSS there over 32 / 8 MB, at most +152 MB at any size. Not `mmap_size`: a file cut short under
# a mapping is SIGBUS, the gateway killed, where a short read is damage that is set aside and rebuilt.
READER_CACHE_KB = 64_000
VECTOR_READER_CACHE_KB = 128_000
SET_ASIDE_WAIT_S = 30.0  # for other processes to close a damaged index before it is moved aside
# A sync of at most this many sessions and no notes (the one after a chat turn, which the next turn's recall
# waits for) counts the rows of its own files before and after instead of the whole index (~40 ms at 1M).
SCOPED_COUNT_MAX = 64


class FilesMemoryIndex:
    shared = False  # only this process writes the file (the users lock)

    def __init__(self, config: Config, agent_id: str):
        self.life = IndexLifecycle(config, agent_id, self)  # the lifecycle, over this engine (memory/index/)
        self.cfg = config.memory
        self.agent_id = agent_id
        self.backend = "none"  # where the vectors are kept, set by open
        self.counts: dict[str, int] = {"files": 0, "chunks": 0, "vectors": 0, "missing": 0}
        self.last_sync_at: str | None = None
        self._generation = "0"  # the index's generation as the counts last read it
        self.corrupt_events: list[dict[str, str]] = []  # indexes set aside as damaged since open
        self.db_path: Path = config.memory_db(agent_id)
        self.writer: Database | None = None
        self.reader: Database | None = None
        # Vector search's own read connection: its reads (the ANN candidates' vectors, the matrix load)
        # run beside full text's statements on `reader` instead of queued behind them (issue 27).
        self.vector_reader: Database | None = None
        self.store: SqliteIndexStore | None = None  # the writer's side of the index, as the pipeline writes it
        # (store, its bumps) when `_generation` was read: while they stand, no write has begun since.
        self._generation_of: tuple[SqliteIndexStore | None, int] | None = None
        self.pipeline: IndexPipeline | None = None
        self.vectors: VectorStore | None = None  # the search side's vectors (None: not usable now)
        self._gate = Gate(self._damaged)
        self._epoch = 0  # openings of the file (generation)
        self._users = IndexUsers(self.db_path, agent_id)
        self._resync: Callable[[str], None] = lambda reason: None
        self._forgotten: set[str] = set()
        self._corrupt: BaseException | None = None  # a damaged index met while serving; the next run rebuilds
        self._recovering = False  # that rebuild is under way: searches answer, saying they are incomplete

    # ---- state the service reads ------------------------------------------------------------------------
    @property
    def rebuilding(self) -> bool:
        return self.life.rebuild_running or self.life.rebuild_due or self._corrupt is not None or self._recovering

    @property
    def degraded(self) -> str | None:
        return None if self.life.searcher is not None else "the memory index is being rebuilt after damage"

    @property
    def recovering(self) -> bool:
        return self._recovering

    # ---- what the lifecycle decides, as the memory service reads it -----------------------------------------
    @property
    def needs_rebuild(self) -> bool:
        return self.life.needs_rebuild

    async def search(self, req: SearchRequest) -> Found:
        return await self.life.search(req)

    # ---- lifecycle ------------------------------------------------------------------------------------
    async def open(self, ctx: IndexContext) -> None:
        self.life.bind(ctx)
        self._resync = ctx.resync
        provider = ctx.provider
        want = self.cfg.search.vector_backend
        driver = index_driver(want)
        if not provider.enabled:
            self.backend = "none"
        elif driver.vec and want != "numpy":
            self.backend = "sqlite-vec"
        else:
            self.backend = "numpy"
            if want == "sqlite-vec":
                log.warning("memory_sqlite_vec_unavailable", using="numpy")
        self._driver = driver
        await self._users.hold()
        try:
            await self._open_index()
        except Exception as exc:
            if not is_corruption(exc):
                raise
            await self._set_aside(exc)
            await self._open_index()

    async def _open_index(self) -> None:
        """Open the live index (migrations), check its signature, bind search, read its counts."""
        await self._open_live()
        assert self.writer is not None
        stored = await get_meta(self.writer, "index_signature")
        has_chunks = bool(await self.writer.scalar("SELECT 1 FROM chunks LIMIT 1"))
        if self.life.compare_signature(stored, has_chunks):
            await set_meta(self.writer, "index_signature", self.life.signature())
        await self._open_live_state()
        await self.refresh_counts()  # reads every page of files and chunks: finds most damage now

    async def _set_aside(self, exc: BaseException) -> None:
        """The index file is damaged. It is derived data: move it (and its WAL) aside, keep it for a
        post-mortem, and start an empty one that the next sync fills from the notes and transcripts.
        The embedding cache lived in the same file; a remote provider re-embeds what it needs."""
        with contextlib.suppress(Exception):
            await self._close_index()
        self.reader = self.writer = None
        self.life.searcher = None  # searches say the index is being rebuilt until it is open again
        async with self._users.alone_within(SET_ASIDE_WAIT_S, "the memory index is damaged and must be set aside"):
            stamp, aside = await set_aside(self.db_path)
        log.error(
            "memory_index_corrupt",
            error=str(exc),
            moved_to=str(aside),
            action="rebuilding from memory files and transcripts",
        )
        self.corrupt_events.append({"at": stamp, "movedTo": str(aside), "error": str(exc)[:200]})
        self.life.rebuild_due = False
        self.life.marks.mark_all()

    async def _recover(self, exc: BaseException) -> SyncStats:
        """A sync or search met a damaged index while serving: swap in an empty one, index everything."""
        self._recovering = True
        try:
            async with self.life.write_lock:
                async with self._gate.exclusive():
                    await self._set_aside(exc)
                    await self._open_index()
                self._corrupt = None
                self.life.marks.clear()
                assert self.pipeline is not None
                stats = await self.pipeline.sync(force=True, memory=True, sessions=True)
        finally:
            self._recovering = False
        self.life.hidden.clear()
        await self.life.after_sync(stats)
        return stats

    async def _open_db(self, path: Path) -> Database:
        return await Database(path, self._driver, use_vec=self.backend == "sqlite-vec").open()

    async def _open_live(self) -> None:
        self.writer = await self._open_db(self.db_path)
        await migrate(self.writer, SchemaParams(tokenizer=self.cfg.search.fts_tokenizer))
        self.life.tokenizer = await get_meta(self.writer, "fts_tokenizer", self.cfg.search.fts_tokenizer) or "unicode61"
        self.reader = await self._open_db(self.db_path)
        await self.reader.execute(f"PRAGMA cache_size = -{READER_CACHE_KB}")
        self._epoch += 1
        assert self.life.provider is not None
        settings = self.life.settings()
        self.store = SqliteIndexStore(self.writer, self.life.provider, settings)
        self.pipeline = IndexPipeline(self.store, self.life.provider, settings)
        self.vectors = None
        self.life.searcher = self.life.make_searcher(None, "index is being rebuilt for new settings")

    def search_ports(self, vectors: VectorSearch | None) -> SearchPorts:
        assert self.reader is not None
        text = Fts5Search(self.reader, self.life.tokenizer, self.cfg.search.context_weight)
        recent = (lambda: vectors.recent) if isinstance(vectors, VectorStore) else None
        return SearchPorts(text, SqliteChunkReader(self.reader, vectors is not None, recent))

    async def _close_index(self) -> None:
        """Close the live index's connections, after stopping what still reads through them in the
        background (a vector matrix load). Raises the first failure, after trying every connection."""
        if self.vectors is not None:
            await self.vectors.close()
            if (ann := self.vectors.ann) is not None:
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
        self.vectors = None  # bound again below when the stored vectors fit the provider
        await self.life.open_live_state()

    def backend_problem(self) -> str | None:
        return None  # (no vectors: none asked, or the provider's problem)

    async def stored_vector_layout(self) -> tuple[str, int] | None:
        assert self.reader is not None
        return await vector_table(self.reader)

    async def bind_vectors(self, dims: int) -> VectorStore:
        ann = AnnIndex(self.db_path, dims) if self.cfg.search.ann_min_vectors else None
        if self.vector_reader is None:
            self.vector_reader = await self._open_db(self.db_path)
            await self.vector_reader.execute(f"PRAGMA cache_size = -{VECTOR_READER_CACHE_KB}")
        s = self.cfg.search
        self.vectors = VectorStore(self.vector_reader, self.backend, dims, s.vector_matrix, ann, s.ann_min_vectors)
        if self.store is not None:  # the sync's writes keep the graph up to date
            self.store.ann = ann
        return self.vectors

    async def close(self) -> None:
        self._users.release()
        with contextlib.suppress(Exception):
            await self._close_index()

    async def warm(self) -> None:
        async with self._gate.shared():
            vectors = self.vectors
            if vectors is None or self.reader is None:
                return
            gen = await get_meta(self.reader, "generation", "0") or "0"
            await self._ann_tick()
            ann = vectors.ann if vectors.ann is not None and vectors.ann.started else None
            if ann is not None:
                await ann.wait_tried()  # its saved file opened, or a build begun
            if ann is None or not ann.ready:  # the exact search answers until the graph is built
                await vectors.warm(gen, self.counts["vectors"])
        if ann is not None:  # outside the gate: a build takes minutes at a million vectors
            await ann.wait()
            if ann.ready:
                vectors.drop_matrix()  # the graph answers now: ~0.3 GB at a million vectors given back

    # ---- the writer ---------------------------------------------------------------------------------
    async def sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        if self._corrupt is not None:  # damage met while serving: recovered before anything else
            return await self._recover(self._corrupt)
        return await self.life.sync(req, progress)

    async def run_sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        scope = None
        if not req.memory and isinstance(req.sessions, set) and len(req.sessions) <= SCOPED_COUNT_MAX:
            scope = [session_path(key) for key in sorted(req.sessions)]
        try:
            async with self.life.write_lock:
                assert self.pipeline is not None and self.writer is not None
                before = await counts_of(self.writer, scope) if scope else None
                stats = await self.pipeline.sync(
                    force=req.force, memory=req.memory, sessions=req.sessions, progress=progress
                )
                after = await counts_of(self.writer, scope) if scope else None
        except Exception as exc:
            if not is_corruption(exc):
                raise
            return await self._recover(exc)
        delta = {k: after[k] - before[k] for k in after} if before is not None and after is not None else None
        if delta is None and not stats.changed and not req.force:  # nothing written: the counts stand
            delta = {"files": 0, "chunks": 0, "missing": 0}
        try:  # the counts, the generation and the ANN graph read the file after the write: damage there too
            await self.life.after_sync(stats, delta)
            return stats
        except Exception as exc:
            if not is_corruption(exc):
                raise
            return await self._recover(exc)

    async def run_rebuild(self, progress: Any) -> SyncStats:
        """Index everything into a fresh database next to the live one, then swap it in (rebuild.py), with
        no other process holding the file."""
        with self._users.alone():
            return await rebuild_aside(self, progress)

    async def forget_session(self, session_key: str, busy: bool) -> bool:
        if self.store is None:
            return True
        if self.life.rebuild_running:
            self._forgotten.add(session_key)
        elif busy or self.life.write_lock.locked():
            return False
        try:
            async with self.life.write_lock:
                try:
                    await self.store.files.remove([session_path(session_key)])
                except Exception:
                    if not self.life.rebuild_running:
                        raise
                    log.debug("memory_forget_old_index_failed", exc_info=True)
            await self.refresh_counts()
        except Exception as exc:  # damage: set aside, rebuilt from the sources (the session no longer in them)
            if self._damaged(exc) is None:
                raise
            return False  # meanwhile the service hides the session and asks for a sync
        return True

    async def refresh_counts(self, delta: dict[str, int] | None = None) -> None:
        """Count the index whole, or add `delta`: only this process writes the file (the users lock), and
        every open, rebuild, forced sync and full sync that wrote something counts whole."""
        db = self.reader
        if db is None:
            return
        if delta is not None:
            files = self.counts["files"] + delta["files"]
            chunks = self.counts["chunks"] + delta["chunks"]
            missing = self.counts["missing"] + delta["missing"] if self.backend != "none" else 0
        else:
            files, chunks, missing = await count_all(db, self.backend != "none")
        self.counts = {"files": files, "chunks": chunks, "vectors": chunks - missing, "missing": missing}
        if self.life.searcher is not None:
            self.life.searcher.total_chunks = chunks
        # Kept for searches only while no write is under way (status during a sync reads the counts too):
        # a bump inside a write's open transaction is not the file's generation until it commits.
        seen = (
            None if self.life.write_lock.locked() else (self.store, self.store.bumps if self.store is not None else 0)
        )
        self._generation = await get_meta(db, "generation", "0") or "0"
        self._generation_of = seen
        self.last_sync_at = await get_meta(db, "last_sync_at")
        await self._ann_tick()

    async def _ann_tick(self) -> None:
        """Open or build the ANN graph once the index is big enough for it; after a sync, save it now
        and then (or rebuild it when deleted rows dominate)."""
        ann = self.vectors.ann if self.vectors is not None else None
        if ann is None or self.reader is None or self.counts["vectors"] < self.cfg.search.ann_min_vectors:
            return
        rows = SqliteVectorRows(self.reader, ann.dims)
        if not ann.started:
            ann.start(rows, self._generation, self.counts["vectors"])
        else:
            await ann.after_sync(rows, self._generation, self.counts["vectors"])

    async def refresh(self) -> None:
        """Nothing: only this process writes the file, and its syncs keep the counts current."""

    async def statements(self, subjects: Sequence[str] | None = None) -> list[Statement]:
        async with self._gate.shared():
            if self.reader is None:
                return []
            return await read_statements(self.reader, subjects)

    async def generation(self) -> str | None:
        # Each opening of the file is an epoch of its own: a file rebuilt or set aside counts from 0 again.
        async with self._gate.shared():
            if self.reader is None:
                return None
            return f"{self._epoch}:{await get_meta(self.reader, 'generation', '0') or '0'}"

    # ---- the reader ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[str]:
        """A search's hold on the file (shared, never with a swap), its generation; damage: the gate's `_damaged`."""
        async with self._gate.shared():
            if self.reader is None:  # set aside, not open again yet
                raise being_rebuilt()
            store = self.store
            if store is not None and self._generation_of == (store, store.bumps):
                yield self._generation  # read after the last write: no trip to the SQLite thread (issue 46)
            else:  # a sync under way, or one that failed: the file says
                yield await get_meta(self.reader, "generation", "0") or "0"

    def _damaged(self, exc: BaseException) -> BaseException | None:
        """What a read under the gate raises instead of `exc`: None (not damage), or Unavailable (marked for recovery)."""
        if not is_corruption(exc):
            return None
        if self._corrupt is None:
            self._corrupt = exc
            self._resync("corrupt-index")  # which recovers
        return being_rebuilt()

    async def stored_vectors(
        self, results: list[Hit], ids: Mapping[tuple[str, int, int], int] | None = None
    ) -> dict[int, np.ndarray] | None:
        async with self._gate.shared():  # (asked inside: a swap the gate waited out may have closed them)
            searcher = self.life.searcher
            if searcher is None or self.vectors is None:
                return None
            return await stored_vectors(searcher.rows, results, ids)

    async def status_counts(self) -> tuple[dict[str, int], dict[str, int], int, int]:
        async with self._gate.shared():
            if self.reader is None:  # set aside, not open again yet
                return {}, {}, 0, 0
            await self.refresh_counts()
            return await counts_by_source(self.reader)

    def status(self) -> dict[str, Any]:
        vectors = self.vectors
        return {
            "vector": {
                "available": vectors is not None,
                # The in-memory form vector searches use ("int8"), or None while they run in SQL.
                "matrix": vectors.matrix_form if vectors is not None else None,
                # The ANN graph of a big index: {"ready", "rows", "origin": "file" | "built"}; None below
                # memory.search.annMinVectors.
                "ann": vectors.ann.status()
                if vectors is not None and vectors.ann is not None and vectors.ann.started
                else None,
            },
            "fts": {"tokenizer": self.life.tokenizer},
        }

    def embedding_cache(self, provider: str, model: str, max_entries: int) -> GatedCache:
        return GatedCache(
            self._gate, self.life.write_lock, lambda: self.reader, lambda: self.writer, provider, model, max_entries
        )
