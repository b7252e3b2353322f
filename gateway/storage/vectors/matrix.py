"""The in-memory vector matrix of a big index, shared by both storage engines (behind rows.py's port:
the engine's table stays the store of record, the matrix is derived data loaded from it).

The matrix is float32 — searched exactly, row by row (`np.vecdot`: no BLAS, see `_exact`) — until it
would take FLOAT32_MAX_BYTES (256 MiB: 262,144 vectors at 256-d, 65,536 at 1,024-d); from there it is int8 (`memory.search.vectorMatrix` =
"auto"; "float32" or "int8" force one). An int8 row v is round(v / scale) with scale = max|v| / 127
(symmetric, one float32 scale a row), and ‖v − scale·q8‖, its rounding error. A 256-d row takes 256 + 4
+ 4 bytes instead of 1,024: 1M vectors ~281 MB with ids and filters instead of ~1.04 GB. Each batch is
quantised as it is read, so no float32 copy of the whole matrix ever exists.

A search first ranks every row approximately: numpy has no int8 BLAS, so MATRIX_BLOCK_BYTES (4 MiB) of
rows at a time are converted into one float32 buffer and dotted row by row (`np.vecdot`, one sdot a
row — one multi-threaded sgemv per block would be faster alone, but on a busy two-core machine OpenBLAS
then took up to a second for a few hundred blocks); above PARALLEL_MIN_ROWS two threads take half each.
The conversion, not memory, bounds this pass: 1.1–1.2× the time of the float32 sgemv it replaced.

Then the best max(2n, 16) rows are re-scored from the float32 vectors of the store of record, by the
same row-by-row product as an exact search, so their scores are the exact ones. The order is exact too, not merely
likely: by Cauchy–Schwarz an approximate score is within err·‖query‖ (plus float rounding) of the exact
one, so every row outside the shortlist whose approximate score plus that bound still reaches the n-th
exact score is re-scored as well (a second round; on the bench's 118k chunks the bound leaves about 2n
rows in all). Rows that left the table since the matrix was loaded are passed over (`matrix_knn`).
A matrix may be extended by rows stored after it was loaded (`extend`: PostgreSQL's new rows by id).
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Awaitable, Callable

import numpy as np

from ...memory.embeddings.base import usable
from .rows import VectorBatch, VectorRows

MATRIX_THRESHOLD = 4_096
LOAD_BATCH = 16_384  # rows per fetch while loading the matrix
FLOAT32_MAX_BYTES = 256 << 20  # "auto": a matrix whose float32 form would take this much or more is int8
INT8_MIN_ROWS = FLOAT32_MAX_BYTES // (256 * 4)  # the same bound at 256-d
MATRIX_BLOCK_BYTES = 4 << 20  # float32 bytes dequantised at a time (fastest measured: 2–8 MiB)
SHORTLIST_FACTOR, SHORTLIST_MIN = 2, 16  # rows re-scored exactly: max(2n, 16), then what the bound asks for
FETCH_BATCH = 8_192  # ids per statement when reading exact vectors
_U = 2.0**-24  # float32 unit roundoff
_vecdot = getattr(np, "vecdot", None)  # numpy >= 2.0; einsum before (also BLAS-free)
INLINE_MAX_VALUES = 1 << 23  # a float32 matrix this small (32k 256-d rows) is searched on the event loop
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
    pos: int = 0  # the scan position of the last row read (rows.py's VectorBatch.last)

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
        self.read: list[np.ndarray] = []  # ids of every row read (usable or not): extend replaces them
        self.pos = 0

    def add(self, batch: VectorBatch) -> None:
        v, ids, srcs, keys = batch.vecs, batch.ids, batch.sources, batch.keys
        self.pos = max(self.pos, batch.last) if len(batch) else self.pos
        self.read.append(ids)
        ok = usable(v)
        if not ok.all():  # NaN or zero vectors stored before providers' answers were checked: left out
            self.unusable.extend(int(i) for i, good in zip(ids, ok) if not good)
            ids, v = ids[ok], v[ok]
            srcs = [s for s, good in zip(srcs, ok) if good]
            keys = [k for k, good in zip(keys, ok) if good]
        k = len(ids)
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
        self.ids[a:b] = ids
        self.is_session[a:b] = np.fromiter((s == "sessions" for s in srcs), dtype=bool, count=k)
        same = self.key_of.setdefault
        self.keys[a:b] = [same(x, x) for x in (y or "" for y in keys)]
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
                self.pos,
            )
        return _Matrix(generation, self.ids, self.mat, scale, err, self.is_session, self.keys, self.pos)


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
    """vecs · q row by row (`np.vecdot`, no BLAS), as a float32 matrix search computes every row: a row's
    score does not depend on the rows beside it, so a re-score gives bit for bit the exact search's.
    (OpenBLAS's multi-threaded sgemv took ~22 ms for 23,600 × 256 on the busy two-core VM, where this
    takes ~1 ms; its ragged tails also summed differently.)"""
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    out = np.empty(vecs.shape[0], dtype=np.float32)
    if vecs.shape[0]:
        _rowdot(vecs, q, out)
    return out


def _float_sims(mat: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Every row's exact similarity (a float32 matrix), by `_exact`; a big one in two halves on two threads."""
    n = mat.shape[0]
    if n < PARALLEL_MIN_ROWS or _HELPERS is None:
        return _exact(mat, q)
    half = n // 2
    other = _HELPERS.submit(_exact, mat[half:], q)
    first = _exact(mat[:half], q)
    return np.concatenate([first, other.result()])


def _float_knn(
    m: _Matrix, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None
) -> list[tuple[int, float]]:
    """A float32 matrix: exact similarities of every row, the best n."""
    if m.mat.shape[0] == 0:
        return []
    sims = _float_sims(m.mat, q)
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


def _extended(m: _Matrix, more: _Matrix, read: np.ndarray, generation: str) -> _Matrix:
    """`m` with the rows of `more` (built in the same form) after its own, at `generation`; a row of `m`
    whose chunk id was `read` again (stored again: a new vector, or an unusable one) is dropped."""
    keep = ~np.isin(m.ids, read)
    if not keep.all():
        m = _Matrix(
            m.generation,
            m.ids[keep],
            m.mat[keep],
            None if m.scale is None else m.scale[keep],
            None if m.err is None else m.err[keep],
            m.is_session[keep],
            m.session_keys[keep],
            m.pos,
        )

    def cat(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        return None if a is None or b is None else np.concatenate([a, b])

    ids = np.concatenate([m.ids, more.ids])
    mat = np.concatenate([m.mat, more.mat])
    scale, err = cat(m.scale, more.scale), cat(m.err, more.err)
    return _Matrix(
        generation,
        ids,
        mat,
        scale,
        err,
        np.concatenate([m.is_session, more.is_session]),
        np.concatenate([m.session_keys, more.session_keys]),
        max(m.pos, more.pos),
    )


def int8_form(choice: str, rows: int, dims: int = 256) -> bool:
    """`memory.search.vectorMatrix`: int8 when asked, or ("auto") once float32 would take FLOAT32_MAX_BYTES,
    whatever the dims."""
    return choice == "int8" or (choice == "auto" and rows * dims * 4 >= FLOAT32_MAX_BYTES)


async def load_matrix(
    rows: VectorRows, dims: int, generation: str, choice: str = "auto", after: int = 0, expected: int | None = None
) -> tuple[_Matrix, list[int]]:
    """A matrix of every stored vector with a chunk id above `after` (and the ids of unusable ones): read
    LOAD_BATCH rows at a time, each batch quantised in a thread as it comes."""
    if expected is None:
        expected = await rows.count()
    builder = _MatrixBuilder(dims, expected, int8_form(choice, expected, dims))
    async for batch in rows.scan(LOAD_BATCH, after):
        await asyncio.to_thread(builder.add, batch)
    return builder.build(generation), builder.unusable


async def extend_matrix(m: _Matrix, rows: VectorRows, generation: str) -> tuple[_Matrix, list[int], np.ndarray]:
    """`m` with the rows stored after its scan position (an insertion order every write advances:
    PostgreSQL's `seq`), a row it held for a chunk id stored again replaced; and the ids read."""
    builder = _MatrixBuilder(m.mat.shape[1], 0, m.form == "int8")
    async for batch in rows.scan(LOAD_BATCH, m.pos):
        await asyncio.to_thread(builder.add, batch)
    read = np.concatenate(builder.read) if builder.read else np.empty(0, dtype=np.int64)
    if read.size == 0:
        same = _Matrix(generation, m.ids, m.mat, m.scale, m.err, m.is_session, m.session_keys, m.pos)
        return same, builder.unusable, read
    more = builder.build(generation)
    return await asyncio.to_thread(_extended, m, more, read, generation), builder.unusable, read


Fetch = Callable[[np.ndarray], Awaitable[tuple[np.ndarray, np.ndarray]]]  # ids → (found, their vectors)


async def matrix_knn(
    m: _Matrix, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, fetch: Fetch
) -> list[tuple[int, float]]:
    """Shortlist by the int8 matrix (in a thread), re-score it exactly from the stored vectors; a float32
    matrix answers exactly at once."""
    if n <= 0:
        return []
    if m.form == "float32":
        return await _checked_float_knn(m, q, n, sources, session_key, fetch)
    sims, rows = await asyncio.to_thread(_shortlist, m, q, n, sources, session_key)
    r = _Rescore(m, sims, q, n, rows.shape[0])
    for _ in range(64):  # one round; a second when the error bound cannot rule out every other row
        if rows.size == 0:
            break
        rows = np.sort(rows)  # load order, i.e. ascending chunk ids: neighbouring pages of the table
        found, vecs = await fetch(m.ids[rows])
        rows = await asyncio.to_thread(r.add, rows, found, vecs)
    return _top(r.ids, r.exact, n)


async def _checked_float_knn(
    m: _Matrix, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, fetch: Fetch
) -> list[tuple[int, float]]:
    """A float32 matrix's best rows, over-fetched by a margin and checked against the table in one
    statement: a row deleted or replaced since the matrix was loaded is dropped or re-scored from what is
    stored (the matrix may hold dead rows until it is loaded again); the margin doubles when too few are
    still stored."""
    k = n + max(n, SHORTLIST_MIN)
    ids = np.empty(0, dtype=np.int64)
    exact = np.empty(0, dtype=np.float32)
    seen: set[int] = set()
    while True:
        if m.mat.size <= INLINE_MAX_VALUES:  # ~1 ms of work: less than a hop to a thread on a busy machine
            hits = _float_knn(m, q, k, sources, session_key)
        else:
            hits = await asyncio.to_thread(_float_knn, m, q, k, sources, session_key)
        cand = np.array([i for i, _ in hits if i not in seen], dtype=np.int64)  # (ties may reorder)
        seen.update(cand.tolist())
        if cand.size:
            cand = np.sort(cand)
            found, vecs = await fetch(cand)
            ids = np.concatenate([ids, cand[found]])
            exact = np.concatenate([exact, _exact(vecs, q)])
        good = np.isfinite(exact)
        if int(good.sum()) >= n or len(hits) < k:  # enough, or every row that passes the filter was seen
            return _top(ids[good], exact[good], n)
        k *= 2
