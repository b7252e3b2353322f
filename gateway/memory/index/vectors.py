"""Vector storage and exact KNN (cosine) over `chunks_vec`.

Backends (reported as `memory.status.vector.backend`):

- `sqlite-vec`: a vec0 table (`source` and `session_key` metadata columns). Small indexes are
  searched in SQL. sqlite-vec scans every vector on each query (about 0.5 µs per 256-d vector here), so
  above MATRIX_THRESHOLD (4,096) vectors the search uses an in-memory float32 matrix loaded from the same table
  (numpy, ~10× faster), reloaded in the background when the index generation changes; SQL answers until
  the first load is done.
- `numpy`: float32 BLOBs in a plain table, always searched with the in-memory matrix.
- `none`: no vectors (no embedding provider).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
import structlog

from ...tasks import log_failure
from .db import Database

log = structlog.get_logger("gateway.memory")

MATRIX_THRESHOLD = 4_096
LOAD_BATCH = 16_384  # rows per fetch while loading the matrix


@dataclass
class _Matrix:
    generation: str
    ids: np.ndarray  # int64
    mat: np.ndarray  # float32 (n, dims), unit rows
    is_session: np.ndarray  # bool
    session_keys: np.ndarray  # object


class _MatrixBuilder:
    """Fills a matrix batch by batch, so a load never holds every row as Python objects at once: at a
    million vectors the rows alone (bytes and tuples) took more memory than the matrix they became."""

    def __init__(self, dims: int, expected: int):
        self.dims = dims
        self.n = 0
        cap = max(expected, 1)
        self.ids = np.empty(cap, dtype=np.int64)
        self.is_session = np.empty(cap, dtype=bool)
        self.keys = np.empty(cap, dtype=object)
        self.mat = np.empty((cap, dims), dtype=np.float32)

    def add(self, rows: list[tuple]) -> None:
        k = len(rows)
        if self.n + k > len(self.ids):  # more rows than counted (a sync committed meanwhile): grow
            cap = max(self.n + k, len(self.ids) * 5 // 4)
            self.ids = np.resize(self.ids, cap)
            self.is_session = np.resize(self.is_session, cap)
            self.keys = np.resize(self.keys, cap)
            self.mat = np.resize(self.mat, (cap, self.dims))
        a, b = self.n, self.n + k
        self.ids[a:b] = np.fromiter((r[0] for r in rows), dtype=np.int64, count=k)
        self.is_session[a:b] = np.fromiter((r[1] == "sessions" for r in rows), dtype=bool, count=k)
        self.keys[a:b] = [r[2] or "" for r in rows]
        self.mat[a:b] = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(k, self.dims)
        self.n = b

    def build(self, generation: str) -> _Matrix:
        n = self.n
        if n < len(self.ids):  # fewer rows than counted: trim (a copy only in that rare case)
            return _Matrix(generation, self.ids[:n].copy(), self.mat[:n].copy(), self.is_session[:n].copy(),
                           self.keys[:n].copy())
        return _Matrix(generation, self.ids, self.mat, self.is_session, self.keys)


def _load_matrix_rows(rows: list[tuple], generation: str, dims: int) -> _Matrix:
    b = _MatrixBuilder(dims, len(rows))
    if rows:
        b.add(rows)
    return b.build(generation)


def _matrix_knn(m: _Matrix, q: np.ndarray, n: int, sources: tuple[str, ...],
                session_key: str | None) -> list[tuple[int, float]]:
    if m.mat.shape[0] == 0:
        return []
    sims = m.mat @ q
    mask = None
    if set(sources) != {"memory", "sessions"}:
        mask = m.is_session if sources == ("sessions",) else ~m.is_session
    if session_key is not None:
        smask = (~m.is_session) | (m.session_keys == session_key)
        mask = smask if mask is None else (mask & smask)
    if mask is not None:
        sims = np.where(mask, sims, -np.inf)
    n = min(n, sims.shape[0])
    idx = np.argpartition(-sims, n - 1)[:n] if n < sims.shape[0] else np.arange(sims.shape[0])
    idx = idx[np.argsort(-sims[idx], kind="stable")]
    return [(int(m.ids[i]), float(sims[i])) for i in idx if sims[i] != -np.inf]


class VectorStore:
    def __init__(self, db: Database, backend: str, dims: int):
        self.db, self.backend, self.dims = db, backend, dims
        self._matrix: _Matrix | None = None
        self._loading: asyncio.Task | None = None

    async def insert(self, rows: list[tuple[int, str, str | None, np.ndarray]]) -> None:
        """rows: (chunk_id, source, session_key, unit vector). Call inside a write transaction."""
        if not rows:
            return
        await self.db.insert_rows("INSERT INTO chunks_vec(chunk_id, source, session_key, embedding)",
                                  [(cid, src, key or "") for cid, src, key, _ in rows],
                                  np.stack([v for *_, v in rows]))

    # ---- search --------------------------------------------------------------------------------
    async def _load(self, generation: str) -> _Matrix:
        expected = int(await self.db.scalar("SELECT count(*) FROM chunks_vec", default=0))
        builder = _MatrixBuilder(self.dims, expected)
        async with self.db.c.execute("SELECT chunk_id, source, session_key, embedding FROM chunks_vec") as cur:
            while rows := await cur.fetchmany(LOAD_BATCH):
                await asyncio.to_thread(builder.add, rows)
        m = builder.build(generation)
        self._matrix = m
        return m

    async def warm(self, generation: str, count: int) -> None:
        """Load the matrix now if searches will use it (so the first search does not wait or scan)."""
        if self.backend == "numpy" or count > MATRIX_THRESHOLD:
            if self._matrix is None or self._matrix.generation != generation:
                await self._load(generation)

    def _start_load(self, generation: str) -> None:
        if self._loading is None or self._loading.done():
            self._loading = asyncio.create_task(self._load(generation))
            self._loading.add_done_callback(log_failure("memory_vector_matrix_load_failed"))

    async def knn(self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None,
                  generation: str, count: int) -> list[tuple[int, float]]:
        """The n nearest chunks as (chunk_id, cosine similarity), best first."""
        q = np.ascontiguousarray(q, dtype=np.float32)
        m = self._matrix
        if self.backend == "numpy":
            # Concurrent searches after a sync share one load (each would otherwise copy the matrix).
            for _ in range(2):  # a load under way may be for the previous generation: then one more
                if m is not None and m.generation == generation:
                    break
                self._start_load(generation)
                assert self._loading is not None
                m = await asyncio.shield(self._loading)
            return await asyncio.to_thread(_matrix_knn, m, q, n, sources, session_key)
        if count > MATRIX_THRESHOLD or m is not None:
            if m is None or m.generation != generation:
                self._start_load(generation)  # answer from what we have meanwhile
            if m is not None and count > MATRIX_THRESHOLD // 2:
                return await asyncio.to_thread(_matrix_knn, m, q, n, sources, session_key)
        return await self._sql_knn(q, n, sources, session_key)

    async def _sql_knn(self, q: np.ndarray, n: int, sources: tuple[str, ...],
                       session_key: str | None) -> list[tuple[int, float]]:
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
            f"SELECT chunk_id, distance FROM chunks_vec WHERE {' AND '.join(where)} ORDER BY distance", params)
        return [(int(cid), 1.0 - float(dist)) for cid, dist in rows]

