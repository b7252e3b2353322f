"""MemoryIndex's contract: one agent's memory index, the same on every engine (storage/base.py).

Driven through the Protocol itself, as the memory service drives it: `open(IndexContext)`, one
`sync(SyncRequest)` at a time, `search`, `forget_session`, counts, stored vectors, the embedding cache.
Real notes and a real transcript (through the engine's own SessionStore) on disk, the local embedding
model (WordLlama) for vectors."""

from __future__ import annotations

import asyncio
import typing
import uuid

import numpy as np
import pytest

from gateway.compose import memory_service
from gateway.memory.hit import Found, SearchAnswer, WireHit
from gateway.memory.embeddings import create_provider
from gateway.memory.index.sources import SOURCES, session_path
from gateway.memory.search.request import SearchRequest
from gateway.memory.sync import DirtyMarks, SyncRequest
from gateway.sessions import transcript as tx
from gateway.storage.base import IndexContext, MemoryIndex, Storage

CONFIG = {"memory.embeddings.provider": "local"}  # tests/contract/conftest.py's `storage` reads it

BOAT = "# Boat\n\nMy sailing boat is painted teal and moored in the harbour of Kiel.\n"
GARDEN = "# Garden\n\nThe tomatoes grow by the south wall, next to the rosemary.\n"


class Opened:
    """An open index with the service's side of IndexContext: the dirty marks, hidden sessions, resyncs."""

    def __init__(self, storage: Storage, agent: str = "main"):
        self.storage, self.agent = storage, agent
        self.provider, self.problem = create_provider(storage.config)
        self.marks, self.hidden, self.resyncs = DirtyMarks(), set(), []
        self.index: MemoryIndex = storage.memory_index(agent)

    async def __aenter__(self) -> "Opened":
        await self.index.open(IndexContext(self.provider, self.problem, self.marks, self.hidden, self.resyncs.append))
        return self

    async def __aexit__(self, *exc) -> None:
        await self.index.close()
        await self.provider.close()

    async def sync(self, *, memory: bool = True, sessions: bool | set[str] = True, force: bool = False):
        req = SyncRequest(asyncio.get_running_loop().create_future(), force=force, memory=memory, sessions=sessions)
        return await self.index.sync(req, None)

    async def search(
        self, query: str, mode: str = "hybrid", k: int = 6, sources=SOURCES, session_key: str | None = None
    ) -> Found:
        return await self.index.search(
            SearchRequest(query=query, k=k, sources=tuple(sources), session_key=session_key, mode=mode)
        )

    async def paths(self, query: str, mode: str = "hybrid", **kw) -> list[str]:
        return [r.path for r in (await self.search(query, mode, **kw)).hits]


def write_note(storage: Storage, rel: str, text: str) -> None:
    path = storage.config.agent_workspace("main") / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def talk(sessions, *lines: str) -> str:
    """A session with these messages (user, assistant, …), its transcript on disk where the index reads it."""
    key = str(uuid.uuid4())
    await sessions.create(key=key)
    records = [
        tx.message_record(
            str(uuid.uuid4()), "user" if i % 2 == 0 else "assistant", text, timestamp=f"2030-01-01T10:00:{i:02d}.000Z"
        )
        for i, text in enumerate(lines)
    ]
    await sessions.append_messages(key, *records)
    await sessions.local_transcript(key)
    return key


@pytest.fixture
async def mem(storage):
    async with Opened(storage) as m:
        yield m


async def test_a_sync_indexes_the_notes_and_a_transcript_and_every_mode_finds_them(storage, sessions, mem):
    write_note(storage, "MEMORY.md", GARDEN)
    write_note(storage, "memory/boat.md", BOAT)
    key = await talk(sessions, "Where does my sister Ingrid live these days?", "Ingrid moved to Trondheim in May.")
    stats = await mem.sync()
    assert (stats.indexed, stats.removed) == (3, 0) and stats.embed_error is None
    assert mem.index.counts["files"] == 3 and mem.index.counts["chunks"] >= 3
    assert mem.index.counts["vectors"] == mem.index.counts["chunks"] and mem.index.counts["missing"] == 0
    assert mem.index.last_sync_at and not mem.index.needs_rebuild and not mem.index.rebuilding
    for mode in ("fts", "vector", "hybrid"):
        assert (await mem.paths("sailing boat harbour", mode))[0] == "memory/boat.md", mode
        res = await mem.search("Ingrid Trondheim", mode)
        assert res.hits[0].path == session_path(key), mode
        assert "Trondheim" in res.hits[0].snippet
    assert await mem.paths("tomatoes rosemary", "fts", sources=["memory"]) == ["MEMORY.md"]
    assert session_path(key) not in await mem.paths("Ingrid Trondheim", "fts", sources=["memory"])
    # An unchanged second sync reads nothing again.
    again = await mem.sync()
    assert (again.indexed, again.removed, again.unchanged) == (0, 0, 3)


async def test_a_changed_note_is_indexed_again_and_a_deleted_one_removed(storage, mem):
    write_note(storage, "memory/boat.md", BOAT)
    write_note(storage, "memory/garden.md", GARDEN)
    await mem.sync()
    assert await mem.paths("teal", "fts") == ["memory/boat.md"]
    write_note(
        storage, "memory/boat.md", "# Boat\n\nThe boat was repainted crimson last spring, with a long bowsprit.\n"
    )
    stats = await mem.sync(memory=True, sessions=False)
    assert (stats.indexed, stats.unchanged) == (1, 1)
    assert await mem.paths("teal", "fts") == []
    assert await mem.paths("crimson bowsprit", "fts") == ["memory/boat.md"]
    (storage.config.agent_workspace("main") / "memory/garden.md").unlink()
    stats = await mem.sync(memory=True, sessions=False)
    assert stats.removed == 1 and mem.index.counts["files"] == 1
    assert await mem.paths("tomatoes rosemary", "fts") == []
    assert await mem.paths("tomatoes rosemary", "vector") == []
    assert await mem.paths("boat repainted crimson", "vector") == ["memory/boat.md"]


async def test_forgetting_a_session_drops_its_chunks_unless_a_sync_is_running(storage, sessions, mem):
    gone = await talk(sessions, "My locker code at the gym is 4711.", "Noted: locker code 4711.")
    kept = await talk(sessions, "The plumber comes on Thursday.", "Thursday it is.")
    await mem.sync()
    assert mem.index.counts["files"] == 2
    # While a sync is running the caller must queue the forget (the running one may have read the transcript).
    assert await mem.index.forget_session(gone, busy=True) is False
    assert await mem.paths("locker code 4711", "fts") == [session_path(gone)]
    await sessions.delete(gone)
    assert await mem.index.forget_session(gone, busy=False) is True
    assert mem.index.counts["files"] == 1
    for mode in ("fts", "vector"):
        assert session_path(gone) not in await mem.paths("locker code 4711", mode)
    assert await mem.paths("plumber Thursday", "fts") == [session_path(kept)]


async def test_hidden_sessions_are_left_out_of_search_until_a_sync_drops_them(storage, sessions, mem):
    key = await talk(sessions, "My passport expires in March 2031.", "I'll remind you in January.")
    await mem.sync()
    mem.hidden.add(key)  # deleted while a sync held the index (MemoryService.forget_session)
    for mode in ("fts", "vector", "hybrid"):
        assert await mem.paths("passport expires March", mode) == [], mode
    await sessions.delete(key)
    stats = await mem.sync(memory=False, sessions={key})
    assert stats.removed == 1 and mem.index.counts["files"] == 0


async def test_search_filters_by_session_and_the_status_counts_by_source(storage, sessions, mem):
    write_note(storage, "memory/boat.md", BOAT)
    one = await talk(sessions, "The boat needs new sails before June.", "Sails before June, noted.")
    two = await talk(sessions, "The boat insurance renews in August.", "August renewal, noted.")
    await mem.sync()
    assert await mem.paths("boat", "fts", sources=["sessions"], session_key=two) == [session_path(two)]
    assert set(await mem.paths("boat", "fts", sources=["sessions"])) == {session_path(one), session_path(two)}
    files_by, chunks_by, cache, dims = await mem.index.status_counts()
    assert files_by == {"memory": 1, "sessions": 2}
    assert chunks_by["memory"] >= 1 and chunks_by["sessions"] >= 2
    assert sum(chunks_by.values()) == mem.index.counts["chunks"]
    assert dims == mem.provider.dims and cache >= 0
    st = mem.index.status()
    assert st["vector"]["available"] is True and "tokenizer" in st["fts"]
    assert mem.index.backend in ("sqlite-vec", "numpy", "pgvector")


async def test_stored_vectors_are_the_results_own_and_the_cache_keeps_what_is_put(storage, mem):
    write_note(storage, "memory/boat.md", BOAT)
    write_note(storage, "memory/garden.md", GARDEN)
    await mem.sync()
    results = (await mem.search("boat garden", "hybrid")).hits
    vecs = await mem.index.stored_vectors(results)
    assert vecs is not None and set(vecs) == set(range(len(results)))
    for i, r in enumerate(results):
        assert vecs[i].shape == (mem.provider.dims,)
        text_vec = (await mem.provider.embed([r.snippet]))[0]
        assert float(np.dot(vecs[i], text_vec)) > 0.5  # the chunk's own vector, not another's
    cache = mem.index.embedding_cache("contract", "m1", 100)
    v = np.arange(1, 9, dtype=np.float32)
    await cache.put_many({"h1": v})
    got = await cache.get_many(["h1", "h2"])
    assert list(got) == ["h1"] and np.array_equal(got["h1"], v)
    assert await mem.index.embedding_cache("contract", "m2", 100).get_many(["h1"]) == {}


async def test_the_results_vectors_by_the_searchs_ids_are_theirs_and_a_moved_chunk_is_left_out(storage, mem):
    """The timeline reads the few vectors it compares by the chunk ids the search found (Found.ids; issue
    46): the same vectors as by (path, lines); after a sync that changed a file, its old ids give nothing
    (a chunk id of SQLite may be taken again), the other results' still answer."""
    write_note(storage, "memory/boat.md", BOAT)
    write_note(storage, "memory/garden.md", GARDEN)
    await mem.sync()
    found = await mem.search("boat garden", "fts")
    results = found.hits
    assert len(results) >= 2 and found.ids is not None and set(found.ids) == {r.key for r in results}
    by_key = await mem.index.stored_vectors(results)
    by_id = await mem.index.stored_vectors(results, found.ids)
    assert by_key is not None and by_id is not None and set(by_id) == set(by_key) == set(range(len(results)))
    assert all(np.array_equal(by_id[i], by_key[i]) for i in by_key)
    write_note(storage, "memory/boat.md", "# Boat\n\nA short note now.\n\nIt is shorter than the first one was.\n")
    await mem.sync(memory=True, sessions=False)
    after = await mem.index.stored_vectors(results, found.ids) or {}
    moved = {i for i, r in enumerate(results) if r.path == "memory/boat.md"}
    assert moved and not moved & set(after)
    assert set(after) == set(range(len(results))) - moved


async def test_changed_settings_rebuild_the_index_and_it_answers_meanwhile(storage, mem):
    write_note(storage, "memory/boat.md", BOAT)
    await mem.sync()
    await mem.index.close()
    storage.config.memory.chunking.tokens = storage.config.memory.chunking.tokens // 2  # a new signature
    async with Opened(storage) as again:
        assert again.index.needs_rebuild and again.index.rebuilding and again.marks  # everything dirty
        assert await again.paths("sailing boat", "fts") == ["memory/boat.md"]  # the old index answers
        stats = await again.sync(memory=False, sessions=False)  # a rebuild covers everything anyway
        assert stats.indexed == 1 and not again.index.needs_rebuild and not again.index.rebuilding
        assert await again.paths("sailing boat", "vector") == ["memory/boat.md"]
        assert again.index.counts["files"] == 1


async def test_agents_have_their_own_index(storage, mem):
    write_note(storage, "memory/boat.md", BOAT)
    await mem.sync()
    async with Opened(storage, "other") as other:
        await other.sync()
        assert other.index.counts["files"] == 0
        assert await other.paths("sailing boat", "fts") == []
    assert await mem.paths("sailing boat", "fts") == ["memory/boat.md"]


def _misfits(value: dict, shape: type) -> list[str]:
    """What of `value` the TypedDict `shape` does not say: a key missing or unknown, a plain field's type."""
    hints = typing.get_type_hints(shape)
    out = [f"missing {k}" for k in shape.__required_keys__ if k not in value]
    out += [f"unknown {k}" for k in value if k not in hints]
    for k, v in value.items():
        want = typing.get_origin(hints.get(k)) or hints.get(k)
        if want in (str, int, float) and not isinstance(v, (int, float) if want is float else want):
            out.append(f"{k}: {v!r} is no {want.__name__}")
    return out


async def test_the_service_above_either_index_answers_the_same_shapes(storage, sessions):
    """MemoryService over the engine's index: sync, search and memory.status say the same things."""
    storage.config.memory.enabled = True
    storage.config.memory.sync.on_start = False
    write_note(storage, "memory/boat.md", BOAT)
    key = await talk(sessions, "My sister Ingrid lives in Trondheim.", "Trondheim, noted.")
    service = memory_service(storage.config, storage, "main")
    await service.open()
    try:
        assert service.health()["dirty"] is True
        assert (await service.sync())["indexed"] == 2
        res = await service.search(SearchRequest(query="Ingrid Trondheim", mode="fts"))
        assert res["results"][0]["path"] == session_path(key) and "degraded" not in res
        sister = await service.search(SearchRequest(query="Where does my sister live?", k=10))
        for answer in (res, sister):  # as memory/hit.py says
            assert _misfits(answer, SearchAnswer) == [] and answer["results"]
            assert [m for hit in answer["results"] for m in _misfits(hit, WireHit)] == []
        st = await service.status()
        assert (st["files"], st["dirty"], st["sources"]["memory"]["files"], st["sources"]["sessions"]["files"]) == (
            2,
            False,
            1,
            1,
        )
        assert st["vector"]["available"] is True and st["vector"]["missing"] == 0
        assert st["vector"]["backend"] == service.index.backend and st["embeddings"]["dims"] == service.provider.dims
        assert "rebuilding" not in st and "corrupt" not in st and st["lastSyncAt"]
        assert service.health() == {
            "files": 2,
            "chunks": st["chunks"],
            "dirty": False,
            "watcher": st["sync"]["watcher"]["mode"],
        }
        await sessions.delete(key)
        await service.forget_session(key)
        assert (await service.status())["sources"]["sessions"]["files"] == 0
    finally:
        await service.close()


async def test_every_hit_is_dated_by_when_it_was_said(storage, sessions, mem):
    """A transcript hit carries its newest core message's timestamp; a note its dated heading, its day
    file's name or its front matter; an undated note its modification time."""
    import os

    write_note(storage, "memory/log.md", "# Log\n\n## 2029-03-01\n\nThe kayak is painted ochre.\n")
    write_note(storage, "memory/2029-04-02.md", "# 2029-04-02\n\nThe canoe got a new seat.\n")
    write_note(
        storage,
        "memory/keyed/facts/bike.md",
        "---\nkey: bike\nupdated: 2029-05-03T08:00:00.000Z\n---\n# bike\n\nA steel gravel bike.\n",
    )
    write_note(storage, "memory/plain.md", "# Plain\n\nThe rowing machine lives in the cellar.\n")
    os.utime(storage.config.agent_workspace("main") / "memory/plain.md", (1_900_000_000, 1_900_000_000))
    await talk(sessions, "The dinghy is moored at pier nine.", "Pier nine, noted.")
    await mem.sync()

    async def date_of(query: str) -> str:
        hit = (await mem.search(query, mode="fts", k=1)).hits[0]
        assert hit.date is not None
        return hit.date

    assert await date_of("kayak ochre") == "2029-03-01T00:00:00.000Z"
    assert await date_of("canoe seat") == "2029-04-02T00:00:00.000Z"
    assert await date_of("gravel bike") == "2029-05-03T08:00:00.000Z"
    assert await date_of("rowing machine cellar") == "2030-03-17T17:46:40.000Z"  # its mtime
    assert await date_of("dinghy pier") == "2030-01-01T10:00:01.000Z"  # the newest core message


async def test_a_question_in_other_words_finds_the_statement_by_related_words(storage, mem):
    """'boss' finds 'manager' (search/related.py), after what the question's own words find."""
    write_note(storage, "memory/work.md", "# Work\n\nMy manager at the waterworks is Nadia Okafor.\n")
    write_note(storage, "memory/boss.md", "# Bossa nova\n\nThe boss of the band plays bossa nova.\n")
    write_note(storage, "memory/garden.md", GARDEN)
    await mem.sync()
    for mode in ("fts", "hybrid"):
        assert (await mem.paths("Who is my boss?", mode))[:2] == ["memory/boss.md", "memory/work.md"], mode
        assert (await mem.paths("Who's my supervisor?", mode))[:1] == ["memory/work.md"], mode
        assert await mem.paths("quantum chromodynamics", mode) == [], mode


async def test_full_text_adds_what_related_words_find_only_to_a_thin_first_pass(storage, mem):
    """Full text alone: the related words' hits fill a first pass of fewer than n (k × candidateMultiplier,
    4 × 4 here) hits; a full one is what the query's own words find (its related words' MATCH is then
    not run: issue 46)."""
    write_note(storage, "memory/work.md", "# Work\n\nMy manager at the waterworks is Nadia Okafor.\n")
    for i in range(3):
        write_note(storage, f"memory/band-{i}.md", f"# Band {i}\n\nThe boss of band {i} plays bossa nova.\n")
    await mem.sync()
    thin = await mem.paths("Who is my boss?", "fts", k=4)
    assert sorted(thin) == [f"memory/band-{i}.md" for i in range(3)] + ["memory/work.md"]
    for i in range(3, 16):
        write_note(storage, f"memory/band-{i}.md", f"# Band {i}\n\nThe boss of band {i} plays bossa nova.\n")
    await mem.sync()
    full = await mem.paths("Who is my boss?", "fts", k=4)
    assert len(full) == 4 and all(p.startswith("memory/band-") for p in full)
    assert (await mem.paths("Who is my supervisor?", "fts", k=4))[:1] == ["memory/work.md"]  # (thin: 0 hits)


async def test_a_big_index_skips_a_related_word_more_common_than_their_budget(storage, mem, monkeypatch):
    """Issue 46: on a big index the query's related words are searched within their own budget
    (pruning.EXTRA_BUDGET), and none for being the rarest: "colour" finds no "color" that 40 of 41 chunks
    hold; the query's own word is searched however common."""
    from gateway.memory.search import pruning

    monkeypatch.setattr(pruning, "PRUNE_MIN_CHUNKS", 10)
    for i in range(40):
        write_note(storage, f"memory/room-{i}.md", f"# Room {i}\n\nThe hallway color is grey in room {i}.\n")
    write_note(storage, "memory/garden.md", GARDEN)
    await mem.sync()
    assert await mem.paths("colour", "fts") == []
    assert len(await mem.paths("color", "fts")) == 6
    monkeypatch.setattr(pruning, "EXTRA_BUDGET", 1.0)  # within budget: found by the related word
    assert len(await mem.paths("colour", "fts")) == 6
