"""The in-memory vector matrix is int8, and searching it gives exactly what an exact float32 search gives.

Real SQLite files (vec0 when sqlite-vec loads, else the numpy backend's plain table), random unit vectors,
and a brute-force float32 search over the same vectors as the reference."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.storage.vectors import matrix as vectors_mod
from gateway.storage.files.memory.db import Database, pick_driver
from gateway.storage.files.memory.migrations import SchemaParams, ensure_vector_table, migrate
from gateway.storage.files.memory.vectors import VectorStore

DIMS = 256
N = 20_000
K = 10
DRIVER = pick_driver()
BACKENDS = ["numpy"] + (["sqlite-vec"] if DRIVER.vec else [])


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def corpus(seed: int = 1) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """ids (not 0..N: gaps, as after deletions), unit vectors, sources, session keys. Some rows are
    near-copies of others (dense neighbourhoods, where int8 rounding could swap neighbours)."""
    rng = np.random.default_rng(seed)
    vecs = unit(rng.standard_normal((N, DIMS), dtype=np.float32))
    near = rng.choice(N, 2_000, replace=False)
    vecs[near] = unit(vecs[rng.choice(N, 2_000)] + 0.05 * rng.standard_normal((2_000, DIMS), dtype=np.float32))
    ids = np.arange(N, dtype=np.int64) * 3 + 7
    sources = ["sessions" if i % 3 else "memory" for i in range(N)]
    keys = [f"s{i % 50}" if s == "sessions" else "" for i, s in enumerate(sources)]
    return ids, vecs, sources, keys


def exact_top(ids, vecs, q, k, allowed=None) -> list[tuple[int, float]]:
    sims = vecs @ q
    if allowed is not None:
        sims = np.where(allowed, sims, -np.inf)
    order = np.argsort(-sims, kind="stable")[:k]
    return [(int(ids[i]), float(sims[i])) for i in order if sims[i] != -np.inf]


async def open_store(tmp_path, backend: str, rows, matrix: str = "int8") -> tuple[Database, VectorStore]:
    db = await Database(tmp_path / "v.db", DRIVER, use_vec=backend == "sqlite-vec").open()
    await migrate(db, SchemaParams())
    async with db.transaction():
        await ensure_vector_table(db, backend, DIMS)
        store = VectorStore(db, backend, DIMS, matrix)
        await store.insert(rows)
    await store.warm("g1", len(rows))
    return db, store


def rows_of(ids, vecs, sources, keys):
    return [(int(i), s, k or None, v) for i, v, s, k in zip(ids, vecs, sources, keys)]


def queries(vecs: np.ndarray, seed: int = 2) -> np.ndarray:
    """Random directions, and perturbed copies of stored vectors (a query whose neighbours are close)."""
    rng = np.random.default_rng(seed)
    qs = [unit(rng.standard_normal(DIMS, dtype=np.float32)) for _ in range(10)]
    qs += [unit(vecs[i] + 0.3 * rng.standard_normal(DIMS, dtype=np.float32)) for i in rng.choice(N, 10)]
    return np.stack(qs)


def assert_same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    assert np.allclose([g[1] for g in got], [w[1] for w in want], rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_matrix_is_int8(tmp_path, backend):
    ids, vecs, sources, keys = corpus()
    db, store = await open_store(tmp_path, backend, rows_of(ids, vecs, sources, keys))
    try:
        m = store._matrix
        assert m is not None and store.matrix_form == "int8"
        assert m.mat.dtype == np.int8 and m.mat.shape == (N, DIMS) and m.mat.nbytes == N * DIMS
        assert m.scale.dtype == np.float32 and m.err.dtype == np.float32
        # Everything numeric the matrix keeps: under a third of the float32 matrix alone.
        held = m.mat.nbytes + m.scale.nbytes + m.err.nbytes + m.ids.nbytes + m.is_session.nbytes
        assert held < vecs.nbytes / 3
        # Symmetric per-row quantisation: dequantised rows are within the stored error of the originals.
        deq = m.mat.astype(np.float32) * m.scale[:, None]
        order = np.argsort(m.ids)
        assert np.abs(m.mat).max() == 127
        assert np.allclose(np.linalg.norm(deq[order] - vecs, axis=1), m.err[order], atol=1e-6)
        # Rows of one session share one key object (one str a row: ~45 MB of the bench's keys at 1.18M chunks).
        assert list(m.session_keys[order]) == keys and len({id(k) for k in m.session_keys}) == len(set(keys))
    finally:
        await db.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_quantised_search_equals_exact_float_search(tmp_path, backend):
    ids, vecs, sources, keys = corpus()
    db, store = await open_store(tmp_path, backend, rows_of(ids, vecs, sources, keys))
    is_ses = np.array([s == "sessions" for s in sources])
    key_arr = np.array(keys, dtype=object)
    try:
        for q in queries(vecs):
            for srcs, key, allowed in (
                (("memory", "sessions"), None, None),
                (("memory",), None, ~is_ses),
                (("sessions",), "s7", is_ses & (key_arr == "s7")),
                (("memory", "sessions"), "s7", ~is_ses | (key_arr == "s7")),
            ):
                got = await store.knn(q, K, srcs, key, "g1", N)
                assert_same(got, exact_top(ids, vecs, q, K, allowed))
        # A larger n (the searcher asks for k × candidateMultiplier), and n beyond a filtered set.
        q = queries(vecs, seed=5)[0]
        assert_same(await store.knn(q, 40, ("memory", "sessions"), None, "g1", N), exact_top(ids, vecs, q, 40))
        allowed = is_ses & (key_arr == "s3")
        got = await store.knn(q, 1_000, ("sessions",), "s3", "g1", N)
        assert len(got) == int(allowed.sum())
        assert_same(got, exact_top(ids, vecs, q, 1_000, allowed))
    finally:
        await db.close()


async def test_the_error_bound_keeps_it_exact_with_a_tiny_shortlist(tmp_path, monkeypatch):
    """With a shortlist of n rows, int8 order alone would miss true neighbours; the per-row error bound
    must find and re-score them."""
    monkeypatch.setattr(vectors_mod, "SHORTLIST_FACTOR", 1)
    monkeypatch.setattr(vectors_mod, "SHORTLIST_MIN", 1)
    ids, vecs, sources, keys = corpus(seed=3)
    db, store = await open_store(tmp_path, "numpy", rows_of(ids, vecs, sources, keys))
    try:
        m = store._matrix
        misses = 0
        for q in queries(vecs, seed=4):
            got = await store.knn(q, K, ("memory", "sessions"), None, "g1", N)
            want = exact_top(ids, vecs, q, K)
            assert_same(got, want)
            approx = (m.mat.astype(np.float32) @ q) * m.scale
            misses += len(set(int(i) for i in m.ids[np.argsort(-approx)[:K]]) ^ {w[0] for w in want}) > 0
        assert misses > 0, "int8 order alone should differ from the exact order somewhere (else this tests nothing)"
    finally:
        await db.close()


async def test_rows_deleted_since_the_load_are_dropped_and_replaced(tmp_path):
    ids, vecs, sources, keys = corpus(seed=6)
    db, store = await open_store(tmp_path, "numpy", rows_of(ids, vecs, sources, keys))
    try:
        q = queries(vecs, seed=7)[0]
        want = exact_top(ids, vecs, q, 300)
        gone = [w[0] for w in want[:250]]  # more than the shortlist: the search must look further
        await db.execute(f"DELETE FROM chunks_vec WHERE chunk_id IN ({','.join('?' * len(gone))})", gone)
        got = await store.knn(q, K, ("memory", "sessions"), None, "g1", N)  # same generation: no reload
        assert_same(got, want[250 : 250 + K])
    finally:
        await db.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_auto_keeps_a_smaller_matrix_in_float32_and_searches_it_exactly(tmp_path, backend):
    """Below INT8_MIN_ROWS ("auto"), memory is cheap and an exact sgemv is faster than re-scoring."""
    ids, vecs, sources, keys = corpus()
    db, store = await open_store(tmp_path, backend, rows_of(ids, vecs, sources, keys), matrix="auto")
    try:
        assert store.matrix_form == "float32" and store._matrix.mat.dtype == np.float32
        for q in queries(vecs):
            got = await store.knn(q, 10, ("memory", "sessions"), None, "g1", N)
            assert_same(got, exact_top(ids, vecs, q, 10))
    finally:
        await db.close()


@pytest.mark.parametrize("matrix", ["int8", "float32", "sql"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_nan_and_zero_rows_are_passed_over(tmp_path, backend, matrix):
    """Rows stored before providers' answers were checked (issue 29.3): a NaN and a zero vector never
    fail a search nor come back as results, in the int8 and float32 matrices and in SQL (sqlite-vec
    gives them NULL distances), and the store says which they are (`unusable`)."""
    if matrix == "sql" and backend != "sqlite-vec":
        pytest.skip("only sqlite-vec searches in SQL")
    rng = np.random.default_rng(3)
    n = 200 if matrix == "sql" else 6_000  # SQL below MATRIX_THRESHOLD, a matrix above it
    vecs = unit(rng.standard_normal((n, DIMS), dtype=np.float32))
    vecs[5] = np.nan
    vecs[9] = 0.0
    ids = np.arange(n, dtype=np.int64) + 1
    rows = rows_of(ids, vecs, ["memory"] * n, [""] * n)
    db, store = await open_store(tmp_path, backend, rows, "int8" if matrix == "sql" else matrix)
    try:
        for q in unit(rng.standard_normal((5, DIMS), dtype=np.float32)):
            got = await store.knn(q, n, ("memory", "sessions"), None, "g1", n)
            assert {cid for cid, _ in got}.isdisjoint({6, 10}) and len(got) == n - 2
            assert all(np.isfinite(s) for _, s in got)
            assert store.unusable == {6, 10}
            if matrix != "sql":
                assert store.matrix_form == matrix
    finally:
        await db.close()
