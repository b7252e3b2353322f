"""Full text on a big index (issue 27): the words' document counts that choose what to search are kept
per index generation, and a search's postings are bounded."""

from __future__ import annotations

import pytest

from gateway.memory.search import searcher as search_mod
from gateway.memory.search.query import query_terms
from gateway.memory.service import MemoryManager
from tests.unit.test_memory import make_cfg, paths, write


@pytest.fixture
async def manager(tmp_path, monkeypatch):
    """A MemoryManager with no embedding model, whose index counts as big (common words are pruned)."""
    monkeypatch.setattr(search_mod, "PRUNE_MIN_CHUNKS", 10)
    m = MemoryManager(make_cfg(tmp_path, **{"memory.embeddings.provider": "none"}))
    await m.open()
    yield m
    await m.close()


async def test_word_counts_are_kept_until_the_index_changes(manager):
    m = manager
    ws = m.config.workspace_dir
    for i in range(40):
        write(ws / "memory" / f"c{i}.md", f"Weekly meeting notes, week {i}.\n")
    write(ws / "memory" / "rare.md", "Weekly meeting about the zeppelin budget.\n")
    await m.sync()
    terms = query_terms("weekly meeting zeppelin")
    res = await m.search("weekly meeting zeppelin", mode="fts")
    assert paths(res)[0] == "memory/rare.md"
    s = m.searcher
    gen = m._generation
    assert s._counts_generation == gen and set(s._counts) == set(terms)
    assert await s.prune_common(terms, gen) == ["zeppelin"]

    # Zeppelins everywhere now: the next search counts again, and "weekly" is the rarest word.
    for i in range(60):
        write(ws / "memory" / f"z{i}.md", f"The zeppelin hangar, bay {i}.\n")
    write(ws / "memory" / "rare.md", "Weekly zeppelin.\n")
    await m.sync()
    assert m._generation != gen
    for i in range(40):
        (ws / "memory" / f"c{i}.md").write_text(f"Monthly notes {i}.\n")
    await m.sync()
    assert await s.prune_common(["weekly", "zeppelin"], m._generation) == ["weekly"]
    assert s._counts_generation == m._generation
    res = await m.search("weekly zeppelin", mode="fts")
    assert paths(res)[0] == "memory/rare.md"
    # Without a generation nothing is kept (a caller that cannot tell when the index changes).
    assert await s.prune_common(["weekly", "zeppelin"]) == ["weekly"] and s._counts == {}
