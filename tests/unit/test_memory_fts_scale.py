"""Full text on a big index (issue 27): the words' document counts that choose what to search are kept
per index generation, and a search's postings are bounded."""

from __future__ import annotations

import pytest

from gateway.compose import memory_service
from gateway.memory.search import pruning
from gateway.memory.search.query import query_terms
from gateway.storage.files.engine import FilesStorage
from gateway.memory.search.request import SearchRequest
from tests.unit.test_memory import make_cfg, paths, write


@pytest.fixture
async def manager(tmp_path, monkeypatch, open_manager):
    """A MemoryService with no embedding model, whose index counts as big (common words are pruned)."""
    monkeypatch.setattr(pruning, "PRUNE_MIN_CHUNKS", 10)
    return await open_manager(make_cfg(tmp_path, **{"memory.embeddings.provider": "none"}))


async def test_word_counts_are_kept_until_the_index_changes(manager):
    m = manager
    ws = m.config.workspace_dir
    for i in range(40):
        write(ws / "memory" / f"c{i}.md", f"Weekly meeting notes, week {i}.\n")
    write(ws / "memory" / "rare.md", "Weekly meeting about the zeppelin budget.\n")
    await m.sync()
    terms = query_terms("weekly meeting zeppelin")
    res = await m.search(SearchRequest(query="weekly meeting zeppelin", mode="fts"))
    assert paths(res)[0] == "memory/rare.md"
    s = m.index.life.searcher.text  # the FTS5 full text: it keeps the words' counts
    total = m.index.life.searcher.total_chunks
    gen = m.index._generation
    # The search kept its phrases' row counts (fts5_topk.py) for this generation, and the FTS5 table's
    # version its snapshot showed.
    assert s._hits_generation.startswith(f"{gen}|") and set(s._hits) == {f'"{t}"' for t in terms}
    assert s.proven == 1 and s.unproven == 0
    assert await s.prune_common(terms, total, gen) == ["zeppelin"]

    # Zeppelins everywhere now: the next search counts again, and "weekly" is the rarest word.
    for i in range(60):
        write(ws / "memory" / f"z{i}.md", f"The zeppelin hangar, bay {i}.\n")
    write(ws / "memory" / "rare.md", "Weekly zeppelin.\n")
    await m.sync()
    assert m.index._generation != gen
    for i in range(40):
        (ws / "memory" / f"c{i}.md").write_text(f"Monthly notes {i}.\n")
    await m.sync()
    total = m.index.life.searcher.total_chunks
    assert await s.prune_common(["weekly", "zeppelin"], total, m.index._generation) == ["weekly"]
    assert s._counts_generation == m.index._generation
    res = await m.search(SearchRequest(query="weekly zeppelin", mode="fts"))
    assert paths(res)[0] == "memory/rare.md"
    # Without a generation nothing is kept (a caller that cannot tell when the index changes).
    assert await s.prune_common(["weekly", "zeppelin"], total) == ["weekly"] and s._counts == {}


async def test_vector_reads_do_not_wait_behind_full_text(tmp_path):
    """A hybrid search's vector reads go through their own connection: they answer while a long
    statement holds the full-text (search) connection, where before they queued behind it."""
    import asyncio
    import threading

    cfg = make_cfg(tmp_path, **{"memory.search.annMinVectors": "1"})
    topics = ["sailing boats on the lake", "baking sourdough bread", "repairing old bicycles"]
    for i in range(30):
        write(cfg.workspace_dir / "memory" / f"n{i:02d}.md", f"# Note {i}\n\nToday: {topics[i % 3]}, part {i}.\n")
    m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await m.open()
    try:
        await m.sync()
        await m.warm()
        vectors = m.index.vectors
        assert (
            vectors is m.index.life.searcher.vectors
            and vectors.db is not m.index.reader
            and vectors.db is m.index.vector_reader
        )
        q = await m.index.life.searcher.embed_query("bread baking")
        # The search connection's thread taken (a full-text query on a huge index) until the vector search
        # has answered: held on an event, not by a statement of about a second, which a search slowed by a
        # loaded machine could outlast (and a sleep stood for "the statement has begun").
        held, release = threading.Event(), threading.Event()

        def hold(_conn) -> None:
            held.set()
            release.wait(timeout=300)  # bounds a hang only

        busy = asyncio.ensure_future(m.index.reader.call(hold))
        try:
            assert await asyncio.to_thread(held.wait, 300)
            # Not behind the held connection: a search that read through it would wait for it (the bound).
            search = vectors.knn(q, 5, ("memory", "sessions"), None, m.index._generation, m.index.counts["vectors"])
            hits = await asyncio.wait_for(search, timeout=120)
            assert not busy.done()
            assert len(hits) == 5 and vectors.last_path == "ann"
        finally:
            release.set()
            await busy
    finally:
        await m.close()
    assert m.index.vector_reader is None  # closed with the index


def test_related_words_are_chosen_within_their_own_budget_and_none_is_kept_for_being_rarest():
    assert pruning.extra_within([5, 0, 3], 8) == [0, 1, 2]
    assert pruning.extra_within([5, 0, 3], 4) == [1, 2]  # rarest first, while the sum stays within it
    assert pruning.extra_within([50], 4) == []  # the main words' choice keeps the rarest always: not here
    assert pruning.rarest_within([50], 4) == [0]
    assert pruning.extra_within_budget([900, 1_000, 2_000], 100_000) == [0]  # EXTRA_BUDGET: 1% of the chunks


async def test_a_common_related_word_of_a_big_index_is_not_searched(manager, monkeypatch):
    """Issue 46: a query's related words are a second full-text search; on a big index a related word in
    more chunks than their budget allows is skipped, even alone (the query's own words keep their rarest)."""
    m = manager
    ws = m.config.workspace_dir
    for i in range(40):
        write(ws / "memory" / f"c{i}.md", f"The hallway color is grey, room {i}.\n")
    await m.sync()
    s = m.index.life.searcher.text
    total = m.index.life.searcher.total_chunks
    assert await s.prune_common(["color"], total, extra=True) == []  # 40 of 40 chunks: over 1%
    assert await s.prune_common(["color"], total) == ["color"]  # (a query's own word is searched)
    assert (
        paths(await m.search(SearchRequest(query="colour", mode="fts"))) == []
    )  # "colour" alone: only its related "color"
    assert paths(await m.search(SearchRequest(query="color", mode="fts")))  # the query's own word
    monkeypatch.setattr(pruning, "PRUNE_MIN_CHUNKS", 1_000)  # a small index searches every related word
    assert len(paths(await m.search(SearchRequest(query="colour", mode="fts", k=6)))) == 6
