"""The ANN graph (usearch HNSW) over a big vector table: its recall against the exact search, its file
(missing, damaged or stale: built again, while the exact search answers), and searches during a sync.

Real SQLite files (vec0 when sqlite-vec loads, else the numpy backend's plain table), a writer and a
reader connection as the manager has, and a brute-force float32 search as the reference."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.compose import memory_service
from gateway.storage.vectors.ann import AnnIndex
from gateway.storage.files.memory.db import Database, pick_driver
from gateway.storage.files.memory.migrations import SchemaParams, ensure_vector_table, migrate
from gateway.storage.files.memory.vectors import VectorStore
from gateway.memory.search.request import SearchRequest

DIMS = 256
N = 12_000
K = 10
DRIVER = pick_driver()
BACKEND = "sqlite-vec" if DRIVER.vec else "numpy"
ALL = ("memory", "sessions")


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def corpus(n: int = N, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Text-embedding-like vectors: topics (clusters) in a low-dimensional latent space mapped into 256-d,
    plus noise; ids with gaps, as after deletions."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((48, DIMS), dtype=np.float32)
    topics = rng.standard_normal((200, 48), dtype=np.float32)
    latent = topics[rng.integers(0, 200, n)] + 0.7 * rng.standard_normal((n, 48), dtype=np.float32)
    vecs = unit(latent @ basis + 0.5 * rng.standard_normal((n, DIMS), dtype=np.float32))
    return np.arange(n, dtype=np.int64) * 2 + 5, vecs


def queries(vecs: np.ndarray, count: int = 100, seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = vecs[rng.choice(len(vecs), count)]
    return unit(picks + 0.08 * rng.standard_normal(picks.shape, dtype=np.float32))


def rows_of(ids, vecs, first: int = 0):
    return [
        (int(i), "sessions" if (first + j) % 3 else "memory", f"s{(first + j) % 7}", v)
        for j, (i, v) in enumerate(zip(ids, vecs))
    ]


def exact_ids(ids, vecs, q, k=K) -> list[int]:
    sims = vecs @ q
    return [int(ids[i]) for i in np.argsort(-sims, kind="stable")[:k]]


async def open_pair(tmp_path, ann: AnnIndex, rows) -> tuple[Database, Database, VectorStore, VectorStore]:
    """(writer, reader, the sync's store, the searches' store), sharing one graph as the manager does."""
    path = tmp_path / "v.db"
    writer = await Database(path, DRIVER, use_vec=BACKEND == "sqlite-vec").open()
    await migrate(writer, SchemaParams())
    reader = await Database(path, DRIVER, use_vec=BACKEND == "sqlite-vec").open()
    wstore = VectorStore(writer, BACKEND, DIMS, ann=ann)
    async with writer.transaction():
        await ensure_vector_table(writer, BACKEND, DIMS)
        if rows:
            await wstore.insert(rows)
    return writer, reader, wstore, VectorStore(reader, BACKEND, DIMS, "auto", ann, 1)


async def close_all(*dbs: Database) -> None:
    for db in dbs:
        await db.close()


async def test_recall_at_10_against_exact_search(tmp_path):
    ids, vecs = corpus()
    ann = AnnIndex(tmp_path / "v.db", DIMS)
    writer, reader, _, store = await open_pair(tmp_path, ann, rows_of(ids, vecs))
    try:
        ann.start(store.rows, "1", N)
        await ann.wait()
        assert ann.ready and ann.origin == "built" and len(ann.index) == N
        recall, served = [], 0
        for q in queries(vecs):
            got = await store.knn(q, K, ALL, None, "1", N)
            served += store.last_path == "ann"
            want = exact_ids(ids, vecs, q)
            recall.append(len({g[0] for g in got} & set(want)) / K)
            # Scores are exact (re-scored from the table), whatever found the rows.
            sims = dict(zip(ids.tolist(), (vecs @ q).tolist()))
            assert all(abs(s - sims[i]) < 1e-5 for i, s in got)
            assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
        assert served == 100  # every one of them through the graph, not the exact fallback
        assert np.mean(recall) >= 0.95, np.mean(recall)
    finally:
        await close_all(reader, writer)


async def test_a_narrow_filter_falls_back_to_the_exact_search(tmp_path):
    ids, vecs = corpus(3_000)
    ann = AnnIndex(tmp_path / "v.db", DIMS)
    writer, reader, _, store = await open_pair(tmp_path, ann, rows_of(ids, vecs))
    try:
        ann.start(store.rows, "1", len(ids))
        await ann.wait()
        q = queries(vecs, 1)[0]
        got = await store.knn(q, K, ("sessions",), "s3", "1", len(ids))
        rows = rows_of(ids, vecs)
        allowed = np.array([r[1] == "sessions" and r[2] == "s3" for r in rows])
        assert [g[0] for g in got] == exact_ids(ids[allowed], vecs[allowed], q)
    finally:
        await close_all(reader, writer)


@pytest.mark.parametrize("damage", ["missing", "truncated", "flipped", "stale"])
async def test_a_missing_damaged_or_stale_file_is_built_again(tmp_path, damage):
    ids, vecs = corpus(4_000)
    ann = AnnIndex(tmp_path / "v.db", DIMS)
    writer, reader, _, store = await open_pair(tmp_path, ann, rows_of(ids, vecs))
    try:
        ann.start(store.rows, "7", len(ids))
        await ann.wait()
        await ann.close("7")
        assert ann.path.exists() and ann.meta_path.exists()

        again = AnnIndex(tmp_path / "v.db", DIMS)  # a restart: the saved graph is opened, not built
        again.start(store.rows, "7", len(ids))
        await again.wait()
        assert again.ready and again.origin == "file" and len(again.index) == len(ids)

        generation = "7"
        if damage == "missing":
            ann.path.unlink()
        elif damage == "truncated":
            with open(ann.path, "r+b") as f:
                f.truncate(ann.path.stat().st_size // 2)
        elif damage == "flipped":
            data = bytearray(ann.path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            ann.path.write_bytes(bytes(data))
        else:
            generation = "8"  # the index moved on without the graph (a crash before its save)
        third = AnnIndex(tmp_path / "v.db", DIMS)
        store.ann = third
        third.start(store.rows, generation, len(ids))
        # Until it is ready, the exact search answers.
        q = queries(vecs, 1)[0]
        want = exact_ids(ids, vecs, q)
        if not third.ready:
            got = await store.knn(q, K, ALL, None, generation, len(ids))
            assert [g[0] for g in got] == want and store.last_path != "ann"
        await third.wait()
        assert third.ready and third.origin == "built" and len(third.index) == len(ids)
        got = await store.knn(q, K, ALL, None, generation, len(ids))
        assert store.last_path == "ann" and len({g[0] for g in got} & set(want)) >= K - 1
        await third.close(generation)
        assert third.meta_path.exists()  # saved whole again
    finally:
        await close_all(reader, writer)


async def test_searches_during_a_sync_see_only_committed_rows_and_then_the_new_ones(tmp_path):
    ids, vecs = corpus(6_000)
    old_ids, old_vecs, new_ids, new_vecs = ids[:4_000], vecs[:4_000], ids[4_000:], vecs[4_000:]
    ann = AnnIndex(tmp_path / "v.db", DIMS)
    writer, reader, wstore, store = await open_pair(tmp_path, ann, rows_of(old_ids, old_vecs))
    try:
        ann.start(store.rows, "1", 4_000)
        await ann.wait()
        qs = queries(new_vecs, 20)
        async with writer.transaction():  # a sync writing: the graph already has the rows, the table not yet
            await wstore.insert(rows_of(new_ids, new_vecs, 4_000))
            await writer.execute(f"DELETE FROM chunks_vec WHERE chunk_id IN ({','.join(map(str, old_ids[:100]))})")
            for q in qs:
                got = await store.knn(q, K, ALL, None, "1", 4_000)
                assert {g[0] for g in got} <= set(old_ids.tolist())  # nothing uncommitted
                assert len({g[0] for g in got} & set(exact_ids(old_ids, old_vecs, q))) >= K - 1
        gone = set(old_ids[:100].tolist())
        live_ids, live_vecs = ids[100:], vecs[100:]
        recall = []
        for q in qs:
            got = await store.knn(q, K, ALL, None, "2", 5_900)
            assert store.last_path == "ann" and not ({g[0] for g in got} & gone)
            recall.append(len({g[0] for g in got} & set(exact_ids(live_ids, live_vecs, q))) / K)
        assert np.mean(recall) >= 0.95
        # A reused id (SQLite gives a deleted tail row's id to the next row) gets its new vector.
        last = int(ids[-1])
        async with writer.transaction():
            await writer.execute(f"DELETE FROM chunks_vec WHERE chunk_id = {last}")
            await wstore.insert([(last, "memory", None, vecs[0])])
        got = await store.knn(vecs[0], 2, ALL, None, "3", 5_900)
        assert last in {g[0] for g in got}
    finally:
        await close_all(reader, writer)


async def test_the_manager_builds_saves_and_reopens_the_graph(tmp_path):
    """Through MemoryService with the local embedder: the sync's index gets a graph at warm-up, searches
    use it and give what the exact search gives, a restart opens the saved file, a deleted one is built
    again, and a sync's new chunks are found through the graph."""
    from gateway.memory.service import MemoryService
    from gateway.storage.files.engine import FilesStorage
    from tests.unit.test_memory import make_cfg, write

    topics = [
        "sailing boats on the lake",
        "baking sourdough bread",
        "repairing old bicycles",
        "growing tomatoes in pots",
        "learning the cello",
        "hiking in the alps",
    ]
    cfg = make_cfg(tmp_path, **{"memory.search.annMinVectors": "1"})
    for i in range(60):
        write(cfg.workspace_dir / "memory" / f"n{i:02d}.md", f"# Note {i}\n\nToday: {topics[i % 6]}, part {i}.\n")

    async def opened() -> MemoryService:
        m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
        await m.open()
        return m

    m = await opened()
    try:
        await m.sync()
        await m.warm()
        vectors = m.index.life.searcher.vectors
        assert vectors.ann.ready and vectors.ann.origin == "built" and len(vectors.ann.index) == 60
        assert vectors.matrix_form is None  # the graph answers: no matrix held beside it
        assert (await m.status())["vector"]["ann"] == {"ready": True, "rows": 60, "origin": "built"}
        got = await m.search(SearchRequest(query="bread baking", k=5, mode="vector"))
        assert vectors.last_path == "ann" and got["results"]
        assert all("sourdough" in r["snippet"] for r in got["results"][:5])
        write(cfg.workspace_dir / "memory" / "new.md", "# New\n\nA harpsichord concert in Leipzig.\n")
        await m.sync()
        got = await m.search(SearchRequest(query="harpsichord concert", k=1, mode="vector"))
        assert vectors.last_path == "ann" and got["results"][0]["path"] == "memory/new.md"
    finally:
        await m.close()
    ann_file = cfg.memory_db(m.agent_id).with_name(cfg.memory_db(m.agent_id).name + ".ann")
    assert ann_file.exists()

    m = await opened()
    try:
        await m.warm()
        assert m.index.life.searcher.vectors.ann.origin == "file" and len(m.index.life.searcher.vectors.ann.index) == 61
    finally:
        await m.close()

    ann_file.unlink()
    m = await opened()
    try:
        await m.warm()
        assert (
            m.index.life.searcher.vectors.ann.origin == "built" and len(m.index.life.searcher.vectors.ann.index) == 61
        )
        got = await m.search(SearchRequest(query="harpsichord concert", k=1, mode="vector"))
        assert m.index.life.searcher.vectors.last_path == "ann" and got["results"][0]["path"] == "memory/new.md"
    finally:
        await m.close()


async def test_dead_rows_past_a_quarter_rebuild_the_graph_while_the_old_one_answers(tmp_path):
    ids, vecs = corpus(4_000)
    ann = AnnIndex(tmp_path / "v.db", DIMS)
    writer, reader, _, store = await open_pair(tmp_path, ann, rows_of(ids, vecs))
    try:
        ann.start(store.rows, "1", 4_000)
        await ann.wait()
        old = ann.index
        async with writer.transaction():
            await writer.execute(f"DELETE FROM chunks_vec WHERE chunk_id IN ({','.join(map(str, ids[:2_000]))})")
        await ann.after_sync(store.rows, "2", 2_000)
        assert ann.ready and ann.index is old  # answering while the new graph is built
        q = queries(vecs[2_000:], 1)[0]
        got = await store.knn(q, K, ALL, None, "2", 2_000)
        assert store.last_path == "ann" and {g[0] for g in got} <= set(ids[2_000:].tolist())
        await ann.wait()
        assert ann.index is not old and len(ann.index) == 2_000
        got = await store.knn(q, K, ALL, None, "2", 2_000)
        assert len({g[0] for g in got} & set(exact_ids(ids[2_000:], vecs[2_000:], q))) >= K - 1
    finally:
        await close_all(reader, writer)


async def test_a_sync_by_another_process_is_brought_in_by_a_rebuild(tmp_path):
    """`jarvis memory sync` beside the gateway writes rows the gateway's graph never saw: a search at a
    generation the graph does not know rebuilds it, the old graph answering meanwhile."""
    ids, vecs = corpus(5_000)
    ann = AnnIndex(tmp_path / "v.db", DIMS)
    writer, reader, wstore, store = await open_pair(tmp_path, ann, rows_of(ids[:4_000], vecs[:4_000]))
    try:
        ann.start(store.rows, "1", 4_000)
        await ann.wait()
        async with writer.transaction():  # this process's sync: the graph follows it, no rebuild
            await wstore.insert(rows_of(ids[4_000:4_500], vecs[4_000:4_500], 4_000))
            ann.written("1", "2")
        before = ann.index
        await store.knn(vecs[4_100], K, ALL, None, "2", 4_500)
        assert store.last_path == "ann" and ann.index is before and ann.known == ["1", "2"]
        other = VectorStore(writer, BACKEND, DIMS)  # another process: no graph
        async with writer.transaction():
            await other.insert(rows_of(ids[4_500:], vecs[4_500:], 4_500))
        got = await store.knn(vecs[4_900], 1, ALL, None, "3", 5_000)
        assert store.last_path == "ann" and ann.index is before  # the old graph answers during the rebuild
        await ann.wait()
        assert ann.index is not before and len(ann.index) == 5_000 and ann.known == ["3"]
        got = await store.knn(vecs[4_900], 1, ALL, None, "3", 5_000)
        assert got[0][0] == int(ids[4_900])
    finally:
        await close_all(reader, writer)


async def test_the_pool_takes_the_vectors_the_graph_search_read_only_while_the_generation_stands(tmp_path):
    """The graph search reads its candidates' stored vectors; the pool's rows take them instead of reading
    them again (issue 46) — those of the generation the file still has, never those of an earlier one."""
    from gateway.memory.service import MemoryService
    from gateway.storage.files.engine import FilesStorage
    from gateway.storage.files.memory.vectors import read_vectors
    from tests.unit.test_memory import make_cfg, write

    cfg = make_cfg(tmp_path, **{"memory.search.annMinVectors": "1"})
    for i in range(40):
        write(cfg.workspace_dir / "memory" / f"n{i:02d}.md", f"# Note {i}\n\nBaking sourdough bread, loaf {i}.\n")
    m: MemoryService = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await m.open()
    try:
        await m.sync()
        await m.warm()
        index = m.index
        vectors = index.life.searcher.vectors
        ask = SearchRequest(query="sourdough bread", k=5, mode="vector", sources=ALL)
        found = await index.search(ask)
        assert vectors.last_path == "ann" and found.hits and found.vectors
        generation, recent = vectors.recent
        assert generation is not None and recent
        # What the search answered with is what the table holds.
        rows = await index.reader.fetchall("SELECT id, path, start_line, end_line FROM chunks")
        by_key = {(p, a, b): int(cid) for cid, p, a, b in rows}
        stored = await read_vectors(index.reader, sorted(by_key[h.key] for h in found.hits))
        for h in found.hits:
            assert found.vectors[h.key].tobytes() == stored[by_key[h.key]]
        # Taken from the graph search's read: a BLOB it holds is what the next pool's row gets.
        first = found.hits[0]
        marked = np.full(len(found.vectors[first.key]), 0.5, dtype=np.float32).tobytes()
        vectors.recent = (generation, {**recent, by_key[first.key]: marked})
        again = await index.search(SearchRequest(query="sourdough bread", k=5, mode="fts", sources=ALL))
        assert again.vectors[first.key].tobytes() == marked
        # Not once the file's generation has moved on (a sync wrote since).
        write(cfg.workspace_dir / "memory" / "new.md", "# New\n\nA harpsichord concert in Leipzig.\n")
        await m.sync()
        vectors.recent = (generation, {**recent, by_key[first.key]: marked})
        later = await index.search(SearchRequest(query="sourdough bread", k=5, mode="fts", sources=ALL))
        key = first.key
        assert key not in (later.vectors or {})  # (none in hand: the timeline reads those it compares)
        assert later.ids is not None and later.ids[key] == by_key[key]
        read = await index.stored_vectors(later.hits, later.ids)
        assert read is not None
        assert read[[h.key for h in later.hits].index(key)].tobytes() == stored[by_key[key]]
    finally:
        await m.close()
