"""NaN and zero vectors must not poison search (issue 29.3).

An OpenAI-compatible embeddings server (tests/fake_openai.py) answers one batch with NaN, all-zero or
null vectors, then is healthy again: that batch is refused at the provider boundary (never cached or
stored, the error names the provider and the problem), the notes stay found by full text, and the next
sync embeds them. Vectors stored or cached before this check existed are passed over by searches (which
say so in `degraded`) and embedded again by `memory.sync --force`. The PostgreSQL index runs the first
scenario too (tests/system/postgres/test_memory_poison.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from gateway.storage.files.memory.db import Database, pick_driver
from tests.fake_openai import FakeOpenAI
from tests.helpers import RunningGateway
from tests.rpc.test_memory_scan import write_notes

QUERY = "When does the apricot tree give fruit?"
PROBLEM = {"nan": "NaN or infinite", "zero": "all zeros", "null": "malformed"}


def settings(api: FakeOpenAI) -> dict:
    return {
        "memory": True,
        "memory.embeddings.provider": "openai",
        "memory.embeddings.baseUrl": api.base_url,
        "memory.embeddings.apiKey": "test",
        "memory.embeddings.dims": 64,
        "memory.embeddings.maxRetries": 0,
        "memory.sync.onStart": False,
        "memory.sync.watch": False,
        "memory.sync.onSearch": False,
        "memory.recall.enabled": False,
    }


async def search_all_modes(c) -> dict:
    """Every mode answers (none fails); the vector mode's answer."""
    out = {}
    for mode in ("hybrid", "fts", "vector"):
        out[mode] = await c.call("memory.search", {"query": QUERY, "mode": mode, "sources": ["memory"]})
    assert out["fts"]["results"][0]["path"] == "memory/garden.md"
    assert out["hybrid"]["results"][0]["path"] == "memory/garden.md"
    return out["vector"]


async def scenario_bad_answer_once(gw: RunningGateway, api: FakeOpenAI, kind: str) -> None:
    write_notes(gw.config.workspace_dir)
    c = await gw.client()
    api.script(("vectors", kind))
    stats = await c.call("memory.sync", {})
    assert stats["indexed"] == 5 and stats["chunksEmbedded"] == 0, stats
    st = await c.call("memory.status")
    error = st["embeddings"].get("error", "")
    assert "openai" in error and PROBLEM[kind] in error and "none were stored" in error, error
    assert st["vector"]["missing"] == st["chunks"] > 0, st["vector"]
    assert st["cache"]["entries"] == 0, "an unusable answer was cached"
    vec = await search_all_modes(c)  # no -32603: the notes are found by full text meanwhile
    assert "no vector yet" in vec.get("degraded", "") or vec["mode"] == "fts", vec

    stats = await c.call("memory.sync", {})  # the provider is healthy again
    st = await c.call("memory.status")
    assert st["vector"]["missing"] == 0 and "error" not in st["embeddings"], st
    assert st["cache"]["entries"] == st["chunks"]
    vec = await search_all_modes(c)
    assert vec["mode"] == "vector" and "degraded" not in vec, vec
    assert vec["results"][0]["path"] == "memory/garden.md"
    await c.close()


@pytest.mark.parametrize("kind", ["nan", "zero", "null"])
async def test_bad_vectors_once_are_refused_then_healed(start_gateway, kind):
    with FakeOpenAI() as api:
        await scenario_bad_answer_once(await start_gateway(**settings(api)), api, kind)


async def test_vectors_stored_before_the_check_are_passed_over_and_healed(start_gateway):
    """An index written before providers' answers were checked: a NaN and a zero vector among those
    stored, and the cache holding NaN for every text. Searches skip the two rows and say so; a forced
    sync drops them and the bad cache entries, and embeds those chunks again."""
    with FakeOpenAI() as api:
        gw = await start_gateway(**settings(api))
        write_notes(gw.config.workspace_dir)
        c = await gw.client()
        await c.call("memory.sync", {})
        await c.close()
        await gw.stop()
        db = await Database(gw.config.memory_db(), pick_driver()).open()
        try:
            ids = [
                r[0]
                for r in await db.fetchall(
                    "SELECT id FROM chunks WHERE path IN ('memory/garden.md', 'memory/car.md') ORDER BY path"
                )
            ]
            assert len(ids) == 2
            for cid, v in zip(ids, (np.full(64, np.nan, np.float32), np.zeros(64, np.float32))):
                await db.execute("UPDATE chunks_vec SET embedding = ? WHERE chunk_id = ?", (v.tobytes(), cid))
            await db.execute("UPDATE embedding_cache SET embedding = ?", (np.full(64, np.nan, np.float32).tobytes(),))
        finally:
            await db.close()
        await gw.start()
        c = await gw.client()
        vec = await search_all_modes(c)
        assert "2 stored vectors are unusable" in vec.get("degraded", ""), vec
        assert all(r["path"] not in ("memory/garden.md", "memory/car.md") for r in vec["results"]), vec
        before = api.count("/v1/embeddings")
        stats = await c.call("memory.sync", {"force": True})
        assert stats["indexed"] == 5, stats
        assert api.count("/v1/embeddings") > before, "the NaN cache entries were used instead of re-embedding"
        st = await c.call("memory.status")
        assert st["vector"]["missing"] == 0 and "error" not in st["embeddings"], st
        vec = await search_all_modes(c)
        assert vec["mode"] == "vector" and "degraded" not in vec, vec
        assert vec["results"][0]["path"] == "memory/garden.md"
        await c.close()
        await gw.stop()
        db = await Database(gw.config.memory_db(), pick_driver()).open()
        try:
            for (blob,) in await db.fetchall("SELECT embedding FROM embedding_cache"):
                v = np.frombuffer(blob, dtype=np.float32)
                assert np.isfinite(v).all() and v.any(), "a NaN cache entry was kept"
            # The NaN entries went; the two chunks embedded again are cached anew (the others kept
            # their stored vectors, so nothing asked for theirs).
            assert len(await db.fetchall("SELECT 1 FROM embedding_cache")) == 2
        finally:
            await db.close()
