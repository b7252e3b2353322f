"""Vector search on the PostgreSQL engine (memory/ports.py's VectorSearch), in the gateway, by the same
machinery as the files engine (storage/vectors/): PostgreSQL's `memory_vectors` stays the store of record
(`PgVectorRows`, that package's row-source port), the gateway holds derived data loaded from it.

- Below MATRIX_THRESHOLD vectors: exact SQL (pgvector's `<=>` over the agent's rows; no index).
- Above: the in-memory int8/float32 matrix (storage/vectors/matrix.py), loaded in the background at
  open (`warm`) or by the first search (exact SQL answers until it is loaded), re-scored exactly from
  the table's vectors. When the agent's generation moves (a sync here, or another gateway's), the rows
  above the highest chunk id the matrix holds are read and appended (chunk ids come from one sequence,
  and one agent's writes take turns on its advisory lock); deleted rows are passed over at re-score, and
  when they pass a quarter of the matrix it is loaded again whole.
- From `memory.search.annMinVectors`: the usearch HNSW graph (storage/vectors/ann.py, `by_id`), saved in
  the state dir as `memory/<agent>.pg.ann`, opened (caught up on newer rows) or built at open; its
  candidates are re-scored exactly from the table. A search at a generation it does not know first adds
  up to one batch of newer rows (a search right after a small write by any gateway finds it; a big one
  is caught up in the background). The matrix answers until it is ready, and is given
  back once it is.

pgvector's HNSW index is gone (db.py's v002): it was ~2/3 of the server's work of a first sync (~1.5 ms of
CPU per vector inserted incrementally; 1,761 s to build over 1.18M vectors) — docs/scaling.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from pathlib import Path
from typing import Any, AsyncGenerator

import asyncpg
import numpy as np

from ....tasks import log_failure
from ...vectors.ann import CANDIDATES_FACTOR, CANDIDATES_MIN, DEAD_SHARE, AnnIndex
from ...vectors.checked import fetcher, filtered_top
from ...vectors.matrix import (
    MATRIX_THRESHOLD,
    _Matrix,
    extend_matrix,
    load_matrix,
    matrix_knn,
)
from ...vectors.rows import VectorBatch
from .agent import search_filter
from .vectors import sent_vectors, vector_text

FETCH_BATCH = 8_192  # ids per statement when reading exact vectors


class PgVectorRows:
    """One agent's vectors of one dimension count in `memory_vectors`, through storage/vectors' port."""

    def __init__(self, pool: asyncpg.Pool, agent_id: str, dims: int):
        self.pool, self.agent_id, self.dims = pool, agent_id, int(dims)

    async def count(self) -> int:
        return int(
            await self.pool.fetchval(
                "SELECT count(*) FROM memory_vectors WHERE agent_id = $1 AND dims = $2", self.agent_id, self.dims
            )
        )

    async def scan(self, size: int, after: int = 0) -> AsyncGenerator[VectorBatch, None]:
        """By `seq` (db.py's v003: every insert takes the next; one agent's writes take turns on its
        advisory lock, so they commit in that order) from `after`, `size` rows a statement (keyset: no
        transaction held across them). A vector stored later for an older chunk id comes after."""
        while True:
            rows = await self.pool.fetch(
                "SELECT chunk_id, source, session_key, vector_send(embedding), seq FROM memory_vectors "
                "WHERE agent_id = $1 AND dims = $2 AND seq > $3 ORDER BY seq LIMIT $4",
                self.agent_id,
                self.dims,
                after,
                size,
            )
            if not rows:
                return
            batch = self._batch(rows)
            batch.pos = after = int(rows[-1][4])
            yield batch
            if len(rows) < size:
                return

    async def fetch(self, ids: list[int]) -> VectorBatch:
        rows: list[Any] = []
        for a in range(0, len(ids), FETCH_BATCH):
            rows += await self.pool.fetch(
                "SELECT chunk_id, source, session_key, vector_send(embedding) FROM memory_vectors "
                "WHERE chunk_id = ANY($1::bigint[]) AND agent_id = $2 AND dims = $3",
                list(ids[a : a + FETCH_BATCH]),
                self.agent_id,
                self.dims,
            )
        return self._batch(rows)

    def _batch(self, rows: list[Any]) -> VectorBatch:
        k = len(rows)
        return VectorBatch(
            np.fromiter((r[0] for r in rows), dtype=np.int64, count=k),
            [r[1] for r in rows],
            [r[2] for r in rows],
            sent_vectors([r[3] for r in rows], self.dims),
        )


async def store_position(pool: asyncpg.Pool) -> tuple[str, int]:
    """What a saved graph records of the database: its identity (v003's `jarvis_identity`, and the
    table's oid, which a pg_dump restore makes anew) and how far its vectors' sequence went (a restore
    rewinds it). A graph file that matches neither is rebuilt, not caught up."""
    row = await pool.fetchrow(
        "SELECT (SELECT id FROM jarvis_identity LIMIT 1) || ':' || 'memory_vectors'::regclass::oid::text, "
        "(SELECT last_value FROM memory_vectors_seq)"
    )
    return str(row[0]), int(row[1])


def ann_path(state_dir: Path, agent_id: str) -> Path:
    """Where an agent's graph is saved (AnnIndex adds `.ann` and `.ann.json`): derived data, per gateway."""
    return state_dir / "memory" / f"{agent_id}.pg"


class PgMatrixSearch:
    def __init__(
        self,
        pool: asyncpg.Pool,
        agent_id: str,
        dims: int,
        matrix: str = "auto",
        ann: AnnIndex | None = None,
        ann_min: int = 0,
    ):
        self.pool, self.agent_id, self.dims = pool, agent_id, int(dims)
        self.rows = PgVectorRows(pool, agent_id, dims)
        self.matrix = matrix  # memory.search.vectorMatrix
        self.ann, self.ann_min = ann, ann_min
        self.last_path: str | None = None  # "ann", "matrix" or "sql"
        self.unusable: set[int] = set()  # chunk ids whose stored vector is NaN or zero
        self._matrix: _Matrix | None = None
        self._loading: asyncio.Task | None = None
        self._fetch = fetcher(self.rows, self.dims)

    @property
    def matrix_form(self) -> str | None:
        return self._matrix.form if self._matrix is not None else None

    def _use_ann(self, count: int) -> bool:
        return self.ann is not None and 0 < self.ann_min <= count

    # ---- the derived data ----------------------------------------------------------------------------
    async def _load(self, generation: str, count: int) -> _Matrix:
        m = self._matrix
        if m is None or len(m.ids) > count * (1 + DEAD_SHARE) + 1_000:  # first, or deleted rows dominate
            m, unusable = await load_matrix(self.rows, self.dims, generation, self.matrix)
            self.unusable = set(unusable)
        else:  # rows stored since (by `seq`, which every insert advances): appended, or replacing
            m, unusable, read = await extend_matrix(m, self.rows, generation)
            self.unusable = (self.unusable - {int(i) for i in read}) | set(unusable)  # stored again
        self._matrix = m
        return m

    def _start_load(self, generation: str, count: int) -> None:
        if self._loading is None or self._loading.done():
            self._loading = asyncio.create_task(self._load(generation, count))
            self._loading.add_done_callback(log_failure("memory_vector_matrix_load_failed"))

    async def warm(self, generation: str, count: int) -> None:
        """The graph opened or built (from annMinVectors), else the matrix loaded, now."""
        ann = self.ann if self._use_ann(count) else None
        if ann is not None:
            ann.start(self.rows, generation, count)
            await ann.wait_tried()
        if (ann is None or not ann.ready) and count > MATRIX_THRESHOLD:
            if self._matrix is None or self._matrix.generation != generation:
                self._start_load(generation, count)  # one load at a time: a search's may be under way
                if self._loading is not None:
                    await asyncio.shield(self._loading)
        if ann is not None:
            await ann.wait()
            if ann.ready and (self._loading is None or self._loading.done()):
                self._matrix = None  # the graph answers now: ~0.3 GB at a million vectors given back

    async def close(self, generation: str | None = None, count: int = 0) -> None:
        task, self._loading = self._loading, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.ann is not None:
            await self.ann.close(generation, count)

    # ---- search -------------------------------------------------------------------------------------
    async def knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, generation: str, count: int
    ) -> list[tuple[int, float]]:
        q = np.ascontiguousarray(q, dtype=np.float32)
        ann = self.ann
        if ann is not None and self._use_ann(count):
            if not ann.started:
                ann.start(self.rows, generation, count)
            elif ann.ready:
                await ann.follow_now(self.rows, generation, count)
                hits = await self._ann_knn(ann, q, n, sources, session_key)
                if hits is not None:
                    if self._matrix is not None and (self._loading is None or self._loading.done()):
                        self._matrix = None  # the graph answers: the matrix is given back for good
                    self.last_path = "ann"
                    return hits
                if self._matrix is None:  # a narrow filter: exact in SQL over what it leaves, no matrix load
                    self.last_path = "sql"
                    return await self._sql_knn(q, n, sources, session_key)
        m = self._matrix
        if count > MATRIX_THRESHOLD or m is not None:
            if m is None or m.generation != generation:
                self._start_load(generation, count)  # answer from what we have meanwhile
            if m is not None:
                self.last_path = "matrix"
                return await matrix_knn(m, q, n, sources, session_key, self._fetch)
        self.last_path = "sql"
        return await self._sql_knn(q, n, sources, session_key)

    async def _ann_knn(
        self, ann: AnnIndex, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
    ) -> list[tuple[int, float]] | None:
        if n <= 0:
            return []
        cand = await asyncio.to_thread(ann.search, q, n)
        if cand.size == 0:
            return None
        whole = len(ann.index) <= max(CANDIDATES_FACTOR * n, CANDIDATES_MIN)  # every row was a candidate
        return filtered_top(await self.rows.fetch(np.sort(cand).tolist()), q, n, sources, session_key, whole)

    async def _sql_knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
    ) -> list[tuple[int, float]]:
        """Exact, in the server: every row of the agent's of these dims (no index) — a small index, or
        until the matrix is loaded."""
        d = self.dims
        where = ["agent_id = $2", f"dims = {d}"]
        params: list[Any] = [vector_text(q), self.agent_id]
        search_filter(where, params, sources, session_key, "")
        params.append(int(n))
        rows = await self.pool.fetch(
            f"SELECT chunk_id, embedding::vector({d}) <=> $1::text::vector({d}) AS dist FROM memory_vectors "
            f"WHERE {' AND '.join(where)} ORDER BY dist LIMIT ${len(params)}",
            *params,
        )
        # A zero vector stored before providers' answers were checked has a NaN distance: passed over.
        self.unusable = {int(r[0]) for r in rows if r[1] is None or not math.isfinite(r[1])}
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows if r[1] is not None and math.isfinite(r[1])]
