"""The memory ports' contract (memory/ports.py): what the one pipeline and the one searcher ask of an
engine, the same on every engine.

Driven through the ports themselves — each engine's index holds its IndexStore as `store` and its
Searcher (FullText, VectorSearch, ChunkReader) as `searcher` — over an index a real sync filled (real
notes and a real transcript, the local embedding model), and batches written as the pipeline plans them
(`reading.chunk_diff` against what the store says is stored), on arbitrary earlier contents."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.memory.index.chunking import make_chunk
from gateway.memory.index.reading import chunk_diff
from gateway.memory.index.settings import SyncStats
from gateway.memory.index.sources import MEMORY, SESSIONS, SOURCES, SourceFile, session_path, signature
from gateway.memory.ports import IndexStore, NewChunk, VectorRow, WriteBatch
from tests.contract.test_memory_index import BOAT, GARDEN, Opened, talk, write_note

CONFIG = {"memory.embeddings.provider": "local"}  # tests/contract/conftest.py's `storage` reads it
CAP = 1 << 20


@pytest.fixture
async def mem(storage):
    async with Opened(storage) as m:
        yield m


def ports(m: Opened) -> IndexStore:
    store = m.index.store  # type: ignore[attr-defined]
    assert store is not None
    return store


def note(path: str, size: int = 10, mtime: int = 1) -> SourceFile:
    """A memory file as a scan gives it (nothing on disk: only the rows are written)."""
    return SourceFile(path, "/nowhere/" + path, MEMORY, None, size, mtime)


def batch_for(file: SourceFile, texts: list[tuple[int, str]], vector=None):
    """The pipeline's plan for one file whose chunks are now `texts` ((start line, text) each)."""
    chunks = [make_chunk(start, start + 1, text) for start, text in texts]

    def plan(stored):
        gone, new = chunk_diff(stored.get(file.path, {}), chunks)
        return WriteBatch(
            "2030-01-01T00:00:00.000Z",
            stale=gone,
            chunks=[NewChunk(file, c, vector) for c in new],
            files=[(file, "h-" + file.path, len(chunks))],
        )

    return {(c.start_line, c.end_line, c.hash) for c in chunks}, plan


async def test_file_rows_give_the_signatures_of_what_a_sync_indexed(storage, sessions, mem):
    write_note(storage, "MEMORY.md", BOAT)
    write_note(storage, "memory/garden.md", GARDEN)
    key = await talk(sessions, "Where is the boat moored?", "In the harbour of Kiel.")
    await mem.sync()
    rows = ports(mem).files
    ws, sd = storage.config.agent_workspace("main"), sessions.dir
    on_disk = {
        "MEMORY.md": os.stat(ws / "MEMORY.md"),
        "memory/garden.md": os.stat(ws / "memory/garden.md"),
        session_path(key): os.stat(sd / f"{key}.jsonl"),
    }
    want = {signature(st.st_size, st.st_mtime_ns, path) for path, st in on_disk.items()}

    every = await rows.indexed(True, True, CAP)
    assert (every.signatures, every.sources, every.files, every.total) == (want, set(SOURCES), 3, None)
    # A memory file over the size cap has no signature (the sync skips it and drops its chunks)...
    small = await rows.indexed(True, True, on_disk["MEMORY.md"].st_size - 1)
    assert small.signatures == want - {
        signature(on_disk["MEMORY.md"].st_size, on_disk["MEMORY.md"].st_mtime_ns, "MEMORY.md")
    }
    assert small.files == 3
    # ...and a scope of one session counts its own files, and enough of the index for the removal guard.
    one = await rows.indexed(False, {key}, CAP)
    assert (one.files, one.sources) == (1, {SESSIONS}) and one.total is not None and one.total >= 3
    assert (await rows.indexed(False, {"no-such-session"}, CAP)).files == 0

    stats = await rows.rows_of(["MEMORY.md", "memory/nothing.md", session_path(key)])
    assert set(stats) == {"MEMORY.md", session_path(key)}
    size, mtime, digest = stats["MEMORY.md"]
    assert (size, mtime) == (on_disk["MEMORY.md"].st_size, on_disk["MEMORY.md"].st_mtime_ns) and len(digest) == 64
    assert await rows.paths_in_scope(True, False) == {"MEMORY.md", "memory/garden.md"}
    assert await rows.paths_in_scope(False, {key}) == {session_path(key)}
    assert await rows.paths_in_scope(True, True) == set(on_disk)

    # Notes always go when their file has, and can always be read (transcripts are the engine's call).
    assert await rows.confirm_gone(["memory/garden.md"]) == ["memory/garden.md"]
    garden = note("memory/garden.md")
    assert await rows.ready([garden]) == [garden]
    assert await rows.remove(["memory/garden.md", "memory/never.md"]) == 1
    assert await rows.rows_of(["memory/garden.md"]) == {}
    assert await ports(mem).chunks.stored(["memory/garden.md"]) == {}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writes=st.lists(
        st.tuples(
            st.sampled_from(["memory/a.md", "memory/b.md"]),
            st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["alpha", "beta", "gamma"])), max_size=5),
        ),
        min_size=1,
        max_size=4,
    )
)
async def test_a_written_batch_leaves_exactly_the_planned_chunks(storage, mem, writes):
    """Whatever the index held (earlier examples' rows stay), a file written with chunks S holds S after:
    the chunks kept are the stored ones with the same lines and hash, and no identity is stored twice."""
    store = ports(mem)
    for path, texts in writes:
        file = note(path, size=len(texts))
        want, plan = batch_for(file, texts)
        await store.chunks.write([path], plan)
        assert (await store.chunks.stored([path])).get(path, set()) == want
        assert (await store.files.rows_of([path]))[path] == (len(texts), 1, "h-" + path)
        # Nothing was embedded: each new chunk waits for a vector, once.
        waiting = [r for r in await store.chunks.unembedded(0, 10_000) if r.source == MEMORY]
        assert len({r.id for r in waiting}) == len(waiting)


async def test_vectors_are_filled_for_chunks_still_there_and_unusable_ones_dropped(storage, mem):
    write_note(storage, "MEMORY.md", BOAT)
    await mem.sync()
    store, dims = ports(mem), int(mem.provider.dims)
    file = note("memory/plain.md")
    _, plan = batch_for(file, [(1, "the first line"), (3, "the second line"), (5, "the third line")])
    await store.chunks.write([file.path], plan)
    waiting = await store.chunks.unembedded(0, 100)
    assert [r.text for r in waiting] == ["the first line", "the second line", "the third line"]
    assert [r.id for r in waiting] == sorted(r.id for r in waiting)
    assert [r.text for r in await store.chunks.unembedded(waiting[0].id, 1)] == ["the second line"]
    assert await store.chunks.count_unembedded() == 3

    # One of them goes (a forget between the sync's read and its write): only the two still there are filled.
    gone = waiting[2]
    _, plan = batch_for(file, [(1, "the first line"), (3, "the second line")])
    await store.chunks.write([file.path], plan)
    await store.chunks.ready_vectors(dims)
    unit = np.eye(dims, dtype=np.float32)
    rows = [VectorRow(r.id, r.source, r.session_key, unit[i]) for i, r in enumerate(waiting)]
    assert await store.chunks.add_vectors(rows) == 2
    assert await store.chunks.count_unembedded() == 0
    assert await store.chunks.add_vectors(rows[:1]) == 0  # it has one now
    assert gone.id not in {r.id for r in await store.chunks.unembedded(0, 100)}

    # A zero vector (stored before providers' answers were checked) is dropped, and its chunk waits again.
    bad = note("memory/bad.md")
    _, plan = batch_for(bad, [(1, "a vector of zeros")], vector=np.zeros(dims, dtype=np.float32))
    await store.chunks.write([bad.path], plan)
    assert await store.chunks.count_unembedded() == 0
    assert await store.chunks.drop_unusable() == 1
    assert [r.text for r in await store.chunks.unembedded(0, 100)] == ["a vector of zeros"]
    assert await store.chunks.drop_unusable() == 0


async def test_the_search_ports_rank_filter_and_show_the_chunks(storage, sessions, mem):
    write_note(storage, "MEMORY.md", BOAT)
    write_note(storage, "memory/garden.md", GARDEN)
    key = await talk(sessions, "My bicycle is blue and has a basket.", "A blue bicycle with a basket, noted.")
    await mem.sync()
    s = mem.index.life.searcher
    text, reader, vectors = s.text, s.rows, s.vectors
    total = mem.index.counts["chunks"]

    hits = await text.search(["harbour", "kiel"], 5, SOURCES, None, generation=None, total=total)
    assert hits and [h[1] for h in hits] == sorted(h[1] for h in hits)  # lower ranks first (BM25's sign)
    rows = {r.id: r for r in await reader.chunk_rows([h[0] for h in hits])}
    assert rows[hits[0][0]].path == "MEMORY.md" and "Kiel" in rows[hits[0][0]].text
    undated = rows[hits[0][0]]  # a note's chunk without a date of its own: its file's mtime is its date
    assert not undated.date and int(undated.mtime_ns or 0) > 0
    assert await text.search(["harbour"], 5, ("sessions",), None, generation=None, total=total) == []
    assert await text.search(["xylophone"], 5, SOURCES, None, generation=None, total=total) == []
    found = await text.search(["bicycle"], 5, SOURCES, key, generation=None, total=total)
    assert found and await text.search(["bicycle"], 5, SOURCES, "another-session", generation=None, total=total) == []

    (row,) = await reader.chunk_rows([found[0][0]])
    assert (row.path, row.source, row.session_key) == (session_path(key), SESSIONS, key)
    assert row.start_line >= 1 and row.end_line >= row.start_line and "bicycle" in row.text
    assert row.spans and (row.date or "").startswith("2030-01-01T10:00:0")
    assert row.mtime_ns is None  # a dated chunk: the file's mtime is not read (both engines)
    assert await reader.chunk_rows([-1]) == []

    at = (row.path, row.start_line, row.end_line)
    stored = await reader.vectors_at([at, ("memory/none.md", 1, 2)])
    assert list(stored) == [at] and stored[at].shape == (int(mem.provider.dims),)
    by_id = await reader.vectors_of([row.id, row.id, -1])  # by chunk id: the same vector, unknown ids left out
    assert list(by_id) == [row.id] and np.array_equal(by_id[row.id], stored[at])
    assert await reader.vectors_of([]) == {}
    assert vectors is not None
    near = await vectors.knn(stored[at], 3, SOURCES, None, mem.index._generation, mem.index.counts["vectors"])
    assert near[0][0] == row.id and abs(near[0][1] - 1.0) < 1e-4
    assert [h[1] for h in near] == sorted((h[1] for h in near), reverse=True)
    only_notes = await vectors.knn(stored[at], 3, (MEMORY,), None, mem.index._generation, mem.index.counts["vectors"])
    assert row.id not in {h[0] for h in only_notes} and only_notes


async def test_the_embedding_cache_keeps_usable_vectors_by_text_hash(storage, mem):
    cache = mem.index.embedding_cache("remote", "model-1", 100)
    v = np.full(8, 0.5, dtype=np.float32)
    await cache.put_many({"h1": v, "h0": np.zeros(8, dtype=np.float32)})
    got = await cache.get_many(["h1", "h0", "h-missing"])
    assert set(got) == {"h1"} and np.array_equal(got["h1"], v)  # a zero vector is never handed back
    assert await mem.index.embedding_cache("remote", "model-2", 100).get_many(["h1"]) == {}


async def test_a_sync_session_loads_and_finishes(storage, mem):
    """The session around a sync (locks, a reader, a deferred index) and its end (the time of the sync,
    the generation when something changed), as the pipeline uses them."""
    store = ports(mem)
    before = mem.index.last_sync_at
    async with store.syncing():
        async with store.loading(2000):
            _, plan = batch_for(note("memory/x.md"), [(1, "loaded in a session")])
            await store.chunks.write(["memory/x.md"], plan)
            assert (await store.chunks.stored(["memory/x.md"]))["memory/x.md"]
        await store.finish(SyncStats(indexed=1, changed=True))
    await mem.index.refresh()
    await mem.index.status_counts()  # counted again on either engine
    assert mem.index.last_sync_at and mem.index.last_sync_at != before
    assert mem.index.counts["files"] == 1


async def test_a_batch_naming_one_path_twice_keeps_the_last_file_row(storage, mem):
    """The file rows of a batch are upserted in one statement on PostgreSQL (`ON CONFLICT DO UPDATE`, which
    refuses to touch a row twice): a path named twice is written once, as its last entry says, on every
    engine; so is a path named twice among the files whose content did not change."""
    store = ports(mem)
    first, last = note("memory/twice.md", size=10, mtime=1), note("memory/twice.md", size=20, mtime=2)
    _, plan = batch_for(first, [(1, "the first reading")])

    def twice(stored):
        batch = plan(stored)
        batch.files = [(first, "h-first", 1), (last, "h-last", 1)]
        return batch

    await store.chunks.write([first.path], twice)
    assert (await store.files.rows_of([first.path]))[first.path] == (20, 2, "h-last")

    touched = [note("memory/twice.md", size=30, mtime=3), note("memory/twice.md", size=40, mtime=4)]
    await store.chunks.write([], lambda stored: WriteBatch("2030-01-01T00:00:00.000Z", touched=touched))
    assert (await store.files.rows_of([first.path]))[first.path] == (40, 4, "h-last")
