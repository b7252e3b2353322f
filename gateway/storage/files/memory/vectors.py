"""Vector storage and exact KNN (cosine) over `chunks_vec`.

Backends (reported as `memory.status.vector.backend`):

- `sqlite-vec`: a vec0 table (`source` and `session_key` metadata columns). Small indexes are
  searched in SQL. sqlite-vec scans every vector on each query (about 0.5 µs per 256-d vector here), so
  above MATRIX_THRESHOLD (4,096) vectors the search uses an in-memory matrix loaded from the same table
  (numpy, ~10× faster), reloaded in the background when the index generation changes; SQL answers until
  the first load is done.
- `numpy`: float32 BLOBs in a plain table, always searched with the in-memory matrix.
- `none`: no vectors (no embedding provider).

The in-memory matrix (`memory.status.vector.matrix`) and the ANN graph are storage/vectors/ (shared
with the PostgreSQL engine), reading `chunks_vec` through `SqliteVectorRows` (that package's port).
Re-scoring reads the exact vectors by point lookups: a vec0 point lookup walks its chunk blob's overflow
pages, ~22 µs a row with 64 vectors a chunk (migrations.VEC_CHUNK_SIZE; ~127 µs in an index made before,
with vec0's default of 1,024: ~5 ms for n = 24; the numpy backend's plain table: ~5 µs); ids go in one
statement through json_each (vec0 answers `chunk_id IN (…)` of more than one id with a full scan).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any, AsyncGenerator, Sequence

import numpy as np
import structlog

from ....tasks import log_failure
from ...vectors.ann import AnnIndex
from ...vectors.matrix import (
    MATRIX_THRESHOLD,
    _exact,
    _Matrix,
    _top,
    load_matrix,
    matrix_knn,
)
from ...vectors.rows import VectorBatch
from .db import Database, batches

log = structlog.get_logger("gateway.memory")

__all__ = ["MATRIX_THRESHOLD", "SqliteVectorRows", "VectorStore", "read_vectors"]

FETCH_BATCH = 8_192  # ids per statement when reading exact vectors

# The stored vectors of the chunk ids in a JSON array (?), by point lookups (see read_vectors).
VECTORS_OF = "SELECT v.chunk_id, v.embedding FROM json_each(?) AS j CROSS JOIN chunks_vec AS v ON v.chunk_id = j.value"


async def read_vectors(db: Database, ids: Sequence[int]) -> dict[int, bytes]:
    """The stored vectors (float32 BLOBs) of these chunk ids, by id; ids without one are left out. Point
    lookups, FETCH_BATCH ids a statement: vec0 answers `chunk_id IN (…)` of more than one id with a full
    scan, a join on json_each looks each id up."""
    blobs: dict[int, bytes] = {}
    for a in range(0, len(ids), FETCH_BATCH):
        for cid, blob in await db.fetchall(VECTORS_OF, [json.dumps(list(ids[a : a + FETCH_BATCH]))]):
            blobs[int(cid)] = blob
    return blobs


class SqliteVectorRows:
    """`chunks_vec` through storage/vectors/rows.py's port (for the matrix and the ANN graph)."""

    def __init__(self, db: Database, dims: int):
        self.db, self.dims = db, dims

    async def count(self) -> int:
        return int(await self.db.scalar("SELECT count(*) FROM chunks_vec", default=0))

    async def scan(self, size: int, after: int = 0) -> AsyncGenerator[VectorBatch, None]:
        sql = "SELECT chunk_id, source, session_key, embedding FROM chunks_vec"
        async with self.db.c.execute(sql + (" WHERE chunk_id > ?" if after else ""), [after] if after else []) as cur:
            async for rows in batches(cur, size):
                yield self._batch(rows)

    async def fetch(self, ids: list[int]) -> VectorBatch:
        sql = (
            "SELECT v.chunk_id, v.source, v.session_key, v.embedding FROM json_each(?) AS j "
            "CROSS JOIN chunks_vec AS v ON v.chunk_id = j.value"
        )
        rows: list[tuple] = []
        for a in range(0, len(ids), FETCH_BATCH):
            rows += await self.db.fetchall(sql, [json.dumps(list(ids[a : a + FETCH_BATCH]))])
        return self._batch(rows)

    def _batch(self, rows: list[tuple]) -> VectorBatch:
        k = len(rows)
        return VectorBatch(
            np.fromiter((r[0] for r in rows), dtype=np.int64, count=k),
            [r[1] for r in rows],
            [r[2] for r in rows],
            np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(k, self.dims),
        )


class VectorStore:
    def __init__(
        self, db: Database, backend: str, dims: int, matrix: str = "auto", ann: AnnIndex | None = None, ann_min: int = 0
    ):
        self.db, self.backend, self.dims = db, backend, dims
        self.rows = SqliteVectorRows(db, dims)  # what the matrix and the graph read
        self.matrix = matrix  # memory.search.vectorMatrix: "auto", "float32" or "int8"
        self.ann, self.ann_min = ann, ann_min  # the graph searches use from ann_min vectors (0: never)
        self.last_path: str | None = None  # how the last search was answered: "ann", "matrix" or "sql"
        self._matrix: _Matrix | None = None
        self._loading: asyncio.Task | None = None
        # The stored vectors (float32 BLOBs by chunk id) the last graph search read to re-score its
        # candidates, and the index generation it searched: the chunk reader takes them instead of
        # reading them again for the pool's rows (issue 46), while the file's generation is still that one.
        self.recent: tuple[str | None, dict[int, bytes]] = (None, {})
        # Chunk ids whose stored vector is unusable (NaN, zero: stored before providers' answers were
        # checked), seen by the last matrix load or SQL search: passed over, and said in `degraded`.
        self.unusable: set[int] = set()

    async def insert(self, rows: Sequence[tuple[int, str, str | None, np.ndarray]]) -> None:
        """rows: (chunk_id, source, session_key, unit vector). Call inside a write transaction."""
        if not rows:
            return
        vecs = np.stack([v for *_, v in rows])
        await self.db.insert_rows(
            "INSERT INTO chunks_vec(chunk_id, source, session_key, embedding)",
            [(cid, src, key or "") for cid, src, key, _ in rows],
            vecs,
        )
        if self.ann is not None:  # the graph follows the sync (rows of a batch rolled back are re-scored away)
            await asyncio.to_thread(self.ann.add, np.array([r[0] for r in rows], dtype=np.int64), vecs)

    # ---- search --------------------------------------------------------------------------------
    async def _load(self, generation: str) -> _Matrix:
        m, unusable = await load_matrix(self.rows, self.dims, generation, self.matrix)
        # The table's pages the load streamed through the connection's cache (up to index.py's
        # VECTOR_READER_CACHE_KB) are not read again while the matrix answers: given back.
        await self.rows.db.execute("PRAGMA shrink_memory")
        self._matrix = m
        self.unusable = set(unusable)
        return m

    async def warm(self, generation: str, count: int) -> None:
        """Load the matrix now if searches will use it (so the first search does not wait or scan)."""
        if self.backend == "numpy" or count > MATRIX_THRESHOLD:
            if self._matrix is None or self._matrix.generation != generation:
                await self._load(generation)

    def drop_matrix(self) -> None:
        """Give the matrix's memory back (the ANN graph answers); a search that needs it loads it again."""
        if self._loading is None or self._loading.done():
            self._matrix = None

    def _start_load(self, generation: str) -> None:
        if self._loading is None or self._loading.done():
            self._loading = asyncio.create_task(self._load(generation))
            self._loading.add_done_callback(log_failure("memory_vector_matrix_load_failed"))

    async def close(self) -> None:
        """Stop a matrix load under way: its connection is about to close (the manager closing, an index
        swap or set-aside), and a load reading on a closed connection fails."""
        task, self._loading = self._loading, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def matrix_form(self) -> str | None:
        """`memory.status.vector.matrix`: the in-memory form searches use; None while they run in SQL
        (sqlite-vec below MATRIX_THRESHOLD vectors, or until the first load is done)."""
        if self._matrix is not None:
            return self._matrix.form
        return None

    async def knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, generation: str, count: int
    ) -> list[tuple[int, float]]:
        """The n nearest chunks as (chunk_id, cosine similarity), best first."""
        q = np.ascontiguousarray(q, dtype=np.float32)
        m = self._matrix
        if self.ann is not None and self.ann.ready and 0 < self.ann_min <= count:
            self.ann.follow(self.rows, generation, count)
            hits = await self._ann_knn(q, n, sources, session_key, generation)
            if hits is not None:
                self.last_path = "ann"
                return hits
        if self.backend == "numpy":
            # Concurrent searches after a sync share one load (each would otherwise copy the matrix).
            for _ in range(2):  # a load under way may be for the previous generation: then one more
                if m is not None and m.generation == generation:
                    break
                self._start_load(generation)
                assert self._loading is not None
                m = await asyncio.shield(self._loading)
            assert m is not None
            self.last_path = "matrix"
            return await self._matrix_knn(m, q, n, sources, session_key)
        if count > MATRIX_THRESHOLD or m is not None:
            if m is None or m.generation != generation:
                self._start_load(generation)  # answer from what we have meanwhile
            if m is not None and count > MATRIX_THRESHOLD // 2:
                self.last_path = "matrix"
                return await self._matrix_knn(m, q, n, sources, session_key)
        self.last_path = "sql"
        self.unusable = set()  # what this search passes over
        return await self._sql_knn(q, n, sources, session_key)

    async def _matrix_knn(
        self, m: _Matrix, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
    ) -> list[tuple[int, float]]:
        return await matrix_knn(m, q, n, sources, session_key, self._vectors)

    async def _ann_knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, generation: str | None = None
    ) -> list[tuple[int, float]] | None:
        """Candidates from the graph, re-scored exactly from the table and filtered there; None when the
        filter leaves fewer than n of them (a narrow filter: the exact search answers)."""
        if n <= 0:
            return []
        ann = self.ann
        assert ann is not None

        def candidates(conn: Any) -> tuple[np.ndarray, list[tuple]]:
            """The graph's candidates and their rows, in one trip to the reading connection's thread (the
            graph's search releases the GIL as it would in a thread of its own; issue 46: one hop less)."""
            cand = ann.search(q, n)
            if cand.size == 0:
                return cand, []
            sql = (
                "SELECT v.chunk_id, v.source, v.session_key, v.embedding FROM json_each(?) AS j "
                "CROSS JOIN chunks_vec AS v ON v.chunk_id = j.value"
            )
            return cand, conn.execute(sql, [json.dumps(np.sort(cand).tolist())]).fetchall()

        cand, rows = await self.db.call(candidates)
        if cand.size == 0:
            return None
        self.recent = (generation, {int(r[0]): r[3] for r in rows})
        keep = [
            r for r in rows if r[1] in sources and (session_key is None or r[1] != "sessions" or r[2] == session_key)
        ]
        if len(keep) < n:
            return None
        ids = np.fromiter((r[0] for r in keep), dtype=np.int64, count=len(keep))
        vecs = np.frombuffer(b"".join(r[3] for r in keep), dtype=np.float32).reshape(-1, self.dims)
        scores = _exact(vecs, q)  # a few dozen rows: microseconds, less than a hop to a thread and back
        good = np.isfinite(scores)
        return _top(ids[good], scores[good], n)

    async def _vectors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which of `ids` are in the table, their float32 vectors)."""
        blobs = await read_vectors(self.db, ids.tolist())
        found = np.fromiter((int(i) in blobs for i in ids), dtype=bool, count=len(ids))
        data = b"".join(blobs[int(i)] for i in ids if int(i) in blobs)
        return found, np.frombuffer(data, dtype=np.float32).reshape(-1, self.dims)

    async def _sql_knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
    ) -> list[tuple[int, float]]:
        where, params = ["embedding MATCH ?", "k = ?"], [q.tobytes(), int(n)]
        if len(sources) == 1:
            where.append("source = ?")
            params.append(sources[0])
        if session_key is not None:
            if sources == ("sessions",):
                where.append("session_key = ?")
                params.append(session_key)
            else:
                # memory rows carry session_key ''; vec0 filters cannot say "memory, or this session",
                # so search each source on its own and merge.
                mem = await self._sql_knn(q, n, ("memory",), None) if "memory" in sources else []
                ses = await self._sql_knn(q, n, ("sessions",), session_key) if "sessions" in sources else []
                return sorted(mem + ses, key=lambda r: -r[1])[:n]
        rows = await self.db.fetchall(
            f"SELECT chunk_id, distance FROM chunks_vec WHERE {' AND '.join(where)} ORDER BY distance", params
        )
        out = []
        for cid, dist in rows:  # sqlite-vec gives a NULL (or NaN) distance to a NaN or zero vector
            if dist is None or not math.isfinite(dist):
                self.unusable.add(int(cid))
            else:
                out.append((int(cid), 1.0 - float(dist)))
        return out
