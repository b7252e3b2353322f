"""Vector storage and exact KNN (cosine) over `chunks_vec`.

Backends (reported as `memory.status.vector.backend`):

- `sqlite-vec`: a vec0 table (`source` and `session_key` metadata columns). Small indexes are
  searched in SQL. sqlite-vec scans every vector on each query (about 0.5 µs per 256-d vector here), so
  above MATRIX_THRESHOLD (4,096) vectors the search uses an in-memory matrix loaded from the same table
  (numpy, ~10× faster), reloaded in the background when the index generation changes; SQL answers until
  the first load is done.
- `numpy`: float32 BLOBs in a plain table, always searched with the in-memory matrix.
- `none`: no vectors (no embedding provider).

The in-memory matrix (`memory.status.vector.matrix`) is float32 — searched exactly by one sgemv —
until it would hold INT8_MIN_ROWS (262,144) vectors, where float32 takes 256 MB at 256-d; from there it
is int8 (`memory.search.vectorMatrix` = "auto"; "float32" or "int8" force one). An int8 row v is round(v / scale)
with scale = max|v| / 127 (symmetric, one float32 scale a row), and ‖v − scale·q8‖, its rounding error.
A 256-d row takes 256 + 4 + 4 bytes instead of 1,024: 1M vectors ~281 MB with ids and filters instead
of ~1.04 GB. Each batch is quantised as it is read, so no float32 copy of the whole matrix ever exists.

A search first ranks every row approximately: numpy has no int8 BLAS, so MATRIX_BLOCK_BYTES (4 MiB) of
rows at a time are converted into one float32 buffer and dotted row by row (`np.vecdot`, one sdot a
row — one multi-threaded sgemv per block would be faster alone, but on a busy two-core machine OpenBLAS
then took up to a second for a few hundred blocks); above PARALLEL_MIN_ROWS two threads take half each.
The conversion, not memory, bounds this pass: 1.1–1.2× the time of the float32 sgemv it replaced.

Then the best max(2n, 16) rows are re-scored from the float32 vectors in the table, by the same sgemv as
an exact search, so their scores are the exact ones. The order is exact too, not merely likely: by
Cauchy–Schwarz an approximate score is within err·‖query‖ (plus float rounding) of the exact one, so
every row outside the shortlist whose approximate score plus that bound still reaches the n-th exact
score is re-scored as well (a second round; on the bench's 118k chunks the bound leaves about 2n rows in
all). Reading is the cost: a vec0 point lookup walks its chunk blob's overflow pages, ~22 µs a row
with 64 vectors a chunk (migrations.VEC_CHUNK_SIZE; ~127 µs in an index made before, with vec0's default
of 1,024: ~5 ms for n = 24; the numpy backend's plain table: ~5 µs); ids go in one statement through
json_each (vec0 answers `chunk_id IN (…)` of more than one id with a full scan). Rows that left the
table since the matrix was loaded are passed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import structlog

from ....tasks import log_failure
from ....memory.embeddings.base import usable
from .ann import AnnIndex
from .db import Database, batches

log = structlog.get_logger("gateway.memory")

MATRIX_THRESHOLD = 4_096
LOAD_BATCH = 16_384  # rows per fetch while loading the matrix
INT8_MIN_ROWS = 262_144  # "auto": a matrix of this many vectors or more is int8
MATRIX_BLOCK_BYTES = 4 << 20  # float32 bytes dequantised at a time (fastest measured: 2–8 MiB)
SHORTLIST_FACTOR, SHORTLIST_MIN = 2, 16  # rows re-scored exactly: max(2n, 16), then what the bound asks for
FETCH_BATCH = 8_192  # ids per statement when reading exact vectors
_U = 2.0**-24  # float32 unit roundoff
_vecdot = getattr(np, "vecdot", None)  # numpy >= 2.0; einsum before (also BLAS-free)
PARALLEL_MIN_ROWS = 65_536  # from here the approximate pass runs on two threads
_HELPERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="vectors") if (os.cpu_count() or 1) > 1 else None


@dataclass
class _Matrix:
    generation: str
    ids: np.ndarray  # int64
    mat: np.ndarray  # int8 (n, dims): round(v / scale); or float32 (n, dims): the vectors themselves
    scale: np.ndarray | None  # int8: float32 (n,) max|v| / 127 (1 for a zero row)
    err: np.ndarray | None  # int8: float32 (n,) ‖v − scale·mat‖, the quantisation error of the row
    is_session: np.ndarray  # bool
    session_keys: np.ndarray  # object

    def __post_init__(self) -> None:
        n = len(self.ids)
        self.form = "int8" if self.mat.dtype == np.int8 else "float32"
        self.max_scale = float(self.scale.max()) if n and self.scale is not None else 0.0
        self.max_err = float(self.err.max()) if n and self.err is not None else 0.0


def _quantise(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 rows → (int8 rows, float32 scales, float32 error norms); one float32 temporary."""
    scale = np.abs(v).max(axis=1) / np.float32(127)
    scale[~(scale > 0)] = 1.0  # a zero row: any scale will do
    t = v / scale[:, None]
    np.rint(t, out=t)
    np.clip(t, -127, 127, out=t)
    q8 = t.astype(np.int8)
    t *= scale[:, None]  # the dequantised rows
    np.subtract(v, t, out=t)
    err = np.sqrt(np.einsum("ij,ij->i", t, t))
    return q8, scale, err


class _MatrixBuilder:
    """Fills a matrix batch by batch, so a load never holds every row as Python objects at once: at a
    million vectors the rows alone (bytes and tuples) took more memory than the matrix they became. Each
    batch is quantised as it comes: no float32 copy of the whole matrix is ever made."""

    def __init__(self, dims: int, expected: int, int8: bool = True):
        self.dims = dims
        self.int8 = int8
        self.n = 0
        cap = max(expected, 1)
        self.ids = np.empty(cap, dtype=np.int64)
        self.is_session = np.empty(cap, dtype=bool)
        self.keys = np.empty(cap, dtype=object)
        self.key_of: dict[str, str] = {}  # one str object per session key, not one per row
        self.mat = np.empty((cap, dims), dtype=np.int8 if int8 else np.float32)
        self.scale = np.empty(cap if int8 else 0, dtype=np.float32)
        self.err = np.empty(cap if int8 else 0, dtype=np.float32)
        self.unusable: list[int] = []  # chunk ids whose stored vector is NaN or zero

    def add(self, rows: list[tuple]) -> None:
        v = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), self.dims)
        ok = usable(v)
        if not ok.all():  # NaN or zero vectors stored before providers' answers were checked: left out
            self.unusable.extend(int(r[0]) for r, good in zip(rows, ok) if not good)
            rows, v = [r for r, good in zip(rows, ok) if good], v[ok]
        k = len(rows)
        if self.n + k > len(self.ids):  # more rows than counted (a sync committed meanwhile): grow
            cap = max(self.n + k, len(self.ids) * 5 // 4)
            self.ids = np.resize(self.ids, cap)
            self.is_session = np.resize(self.is_session, cap)
            self.keys = np.resize(self.keys, cap)
            self.mat = np.resize(self.mat, (cap, self.dims))
            if self.int8:
                self.scale = np.resize(self.scale, cap)
                self.err = np.resize(self.err, cap)
        a, b = self.n, self.n + k
        self.ids[a:b] = np.fromiter((r[0] for r in rows), dtype=np.int64, count=k)
        self.is_session[a:b] = np.fromiter((r[1] == "sessions" for r in rows), dtype=bool, count=k)
        same = self.key_of.setdefault
        self.keys[a:b] = [same(k, k) for k in (r[2] or "" for r in rows)]
        if self.int8:
            self.mat[a:b], self.scale[a:b], self.err[a:b] = _quantise(v)
        else:
            self.mat[a:b] = v
        self.n = b

    def build(self, generation: str) -> _Matrix:
        n = self.n
        scale, err = (self.scale, self.err) if self.int8 else (None, None)
        if n < len(self.ids):  # fewer rows than counted: trim (a copy only in that rare case)
            return _Matrix(
                generation,
                self.ids[:n].copy(),
                self.mat[:n].copy(),
                None if scale is None else scale[:n].copy(),
                None if err is None else err[:n].copy(),
                self.is_session[:n].copy(),
                self.keys[:n].copy(),
            )
        return _Matrix(generation, self.ids, self.mat, scale, err, self.is_session, self.keys)


def _rowdot(block: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:
    if _vecdot is not None:
        _vecdot(block, q, out=out)
    else:  # pragma: no cover - numpy 1.x
        np.einsum("ij,j->i", block, q, out=out)


def _approx_part(m: _Matrix, q: np.ndarray, sims: np.ndarray, lo: int, hi: int) -> None:
    """sims[lo:hi] = int8 rows · q, a block of rows at a time through one float32 buffer."""
    dims = m.mat.shape[1]
    step = max(1, MATRIX_BLOCK_BYTES // (4 * max(dims, 1)))
    buf = np.empty((min(step, hi - lo), dims), dtype=np.float32)
    for a in range(lo, hi, step):
        b = min(a + step, hi)
        blk = buf[: b - a]
        np.copyto(blk, m.mat[a:b], casting="unsafe")
        _rowdot(blk, q, sims[a:b])


def _approx_sims(m: _Matrix, q: np.ndarray) -> np.ndarray:
    """scale · (int8 rows · q) for every row; a big matrix in two halves on two threads (as the float32
    sgemv did), since the int8 → float32 conversion, not memory, bounds it."""
    n = m.mat.shape[0]
    sims = np.empty(n, dtype=np.float32)
    if n >= PARALLEL_MIN_ROWS and _HELPERS is not None:
        half = n // 2
        other = _HELPERS.submit(_approx_part, m, q, sims, half, n)
        try:
            _approx_part(m, q, sims, 0, half)
        finally:
            other.result()
    else:
        _approx_part(m, q, sims, 0, n)
    assert m.scale is not None  # an int8 matrix
    sims *= m.scale
    return sims


def _mask(m: _Matrix, sources: tuple[str, ...], session_key: str | None) -> np.ndarray | None:
    mask = None
    if set(sources) != {"memory", "sessions"}:
        mask = m.is_session if sources == ("sessions",) else ~m.is_session
    if session_key is not None:
        smask = (~m.is_session) | (m.session_keys == session_key)
        mask = smask if mask is None else (mask & smask)
    return mask


def _shortlist(
    m: _Matrix, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """(approximate similarity of every row, -inf where filtered out; the rows to re-score exactly)."""
    if m.mat.shape[0] == 0:
        return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.intp)
    sims = _approx_sims(m, q)
    mask = _mask(m, sources, session_key)
    if mask is not None:
        sims[~mask] = -np.inf
    size = min(max(SHORTLIST_FACTOR * n, SHORTLIST_MIN), sims.shape[0])
    idx = np.argpartition(-sims, size - 1)[:size] if size < sims.shape[0] else np.arange(sims.shape[0])
    return sims, idx[sims[idx] != -np.inf]


def _bound_misses(m: _Matrix, sims: np.ndarray, q: np.ndarray, done: np.ndarray, nth: float) -> np.ndarray:
    """Rows not in `done` whose exact similarity could still reach `nth`, by the per-row error bound:
    |v·q − scale·(q8·q)| ≤ err·‖q‖ (Cauchy–Schwarz), plus the float32 rounding of the block products
    (≤ dims·u·Σ|q8_j q_j|·scale ≤ dims·u·127·‖q‖₁·scale, doubled for the exact side's own)."""
    qn, q1 = float(np.linalg.norm(q)), float(np.abs(q).sum())
    rnd = 2 * m.mat.shape[1] * _U * 127 * q1
    cand = np.flatnonzero(sims >= nth - (m.max_err * qn + rnd * m.max_scale))
    if cand.size:
        assert m.err is not None and m.scale is not None  # an int8 matrix
        cand = cand[sims[cand] + m.err[cand] * qn + rnd * m.scale[cand] >= nth]
        cand = cand[~np.isin(cand, done)]
    return cand


def _exact(vecs: np.ndarray, q: np.ndarray) -> np.ndarray:
    """vecs · q by the same BLAS sgemv as a float32 matrix search, in whole groups of four rows (OpenBLAS
    sums the rows of a ragged tail differently): the scores are then bit for bit those of the exact
    search (measured: every row of 1–60, 200 and 1,001 random rows of 118k and 50,001-row matrices)."""
    k = vecs.shape[0]
    if k % 4:
        vecs = np.concatenate([vecs, np.zeros((4 - k % 4, vecs.shape[1]), dtype=np.float32)])
    return (vecs @ q)[:k] if k else np.empty(0, dtype=np.float32)


def _float_knn(
    m: _Matrix, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
) -> list[tuple[int, float]]:
    """A float32 matrix: exact similarities of every row in one sgemv, the best n."""
    if m.mat.shape[0] == 0:
        return []
    sims = m.mat @ q
    mask = _mask(m, sources, session_key)
    if mask is not None:
        sims = np.where(mask, sims, -np.inf)
    n = min(n, sims.shape[0])
    idx = np.argpartition(-sims, n - 1)[:n] if n < sims.shape[0] else np.arange(sims.shape[0])
    idx = idx[np.argsort(-sims[idx], kind="stable")]
    return [(int(m.ids[i]), float(sims[i])) for i in idx if sims[i] != -np.inf]


def _top(ids: np.ndarray, scores: np.ndarray, n: int) -> list[tuple[int, float]]:
    order = np.argsort(-scores, kind="stable")[:n]
    return [(int(ids[i]), float(scores[i])) for i in order]


class _Rescore:
    """Exact scores of the rows re-scored so far, and which rows to re-score next."""

    def __init__(self, m: _Matrix, sims: np.ndarray, q: np.ndarray, n: int, size: int):
        self.m, self.sims, self.q, self.n, self.size = m, sims, q, n, max(size, 1)
        self.done = np.empty(0, dtype=np.intp)
        self.ids = np.empty(0, dtype=np.int64)
        self.exact = np.empty(0, dtype=np.float32)

    def add(self, rows: np.ndarray, found: np.ndarray, vecs: np.ndarray) -> np.ndarray:
        """Take the exact vectors of `rows` (`found`: which are still in the table); the rows to do next:
        those the error bound cannot rule out, or — when fewer than n rows were found (deleted since the
        matrix was loaded) — the next best by approximation."""
        m, n = self.m, self.n
        self.done = np.concatenate([self.done, rows])
        self.ids = np.concatenate([self.ids, m.ids[rows[found]]])
        self.exact = np.concatenate([self.exact, _exact(vecs, self.q)])
        have = self.exact.shape[0]
        if have >= n:
            return _bound_misses(m, self.sims, self.q, self.done, float(np.partition(self.exact, have - n)[have - n]))
        rest = self.sims.copy()
        rest[self.done] = -np.inf
        live = int(np.count_nonzero(rest != -np.inf))
        if live == 0:
            return np.empty(0, dtype=np.intp)
        size = min(self.size, live)
        self.size *= 2  # rows keep vanishing (a big deletion): look twice as far each round
        idx = np.argpartition(-rest, size - 1)[:size]
        return idx[rest[idx] != -np.inf]


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


class VectorStore:
    def __init__(
        self, db: Database, backend: str, dims: int, matrix: str = "auto", ann: AnnIndex | None = None, ann_min: int = 0
    ):
        self.db, self.backend, self.dims = db, backend, dims
        self.matrix = matrix  # memory.search.vectorMatrix: "auto", "float32" or "int8"
        self.ann, self.ann_min = ann, ann_min  # the graph searches use from ann_min vectors (0: never)
        self.last_path: str | None = None  # how the last search was answered: "ann", "matrix" or "sql"
        self._matrix: _Matrix | None = None
        self._loading: asyncio.Task | None = None
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
        expected = int(await self.db.scalar("SELECT count(*) FROM chunks_vec", default=0))
        builder = _MatrixBuilder(self.dims, expected, self._int8(expected))
        async with self.db.c.execute("SELECT chunk_id, source, session_key, embedding FROM chunks_vec") as cur:
            async for rows in batches(cur, LOAD_BATCH):
                await asyncio.to_thread(builder.add, rows)
        m = builder.build(generation)
        self._matrix = m
        self.unusable = set(builder.unusable)
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

    def _int8(self, rows: int) -> bool:
        return self.matrix == "int8" or (self.matrix == "auto" and rows >= INT8_MIN_ROWS)

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
            self.ann.follow(self.db, generation, count)
            hits = await self._ann_knn(q, n, sources, session_key)
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
        """Shortlist by the int8 matrix (in a thread), re-score it exactly from the table's vectors; a
        float32 matrix answers exactly at once."""
        if n <= 0:
            return []
        if m.form == "float32":
            return await asyncio.to_thread(_float_knn, m, q, n, sources, session_key)
        sims, rows = await asyncio.to_thread(_shortlist, m, q, n, sources, session_key)
        r = _Rescore(m, sims, q, n, rows.shape[0])
        for _ in range(64):  # one round; a second when the error bound cannot rule out every other row
            if rows.size == 0:
                break
            rows = np.sort(rows)  # load order, i.e. ascending chunk ids: neighbouring pages of the table
            found, vecs = await self._vectors(m.ids[rows])
            rows = await asyncio.to_thread(r.add, rows, found, vecs)
        return _top(r.ids, r.exact, n)

    async def _ann_knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
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
