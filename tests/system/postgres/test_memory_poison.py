"""Issue 29.3 on the PostgreSQL index: an embeddings server answering NaN or zero vectors once is
refused before anything reaches the shared cache or `memory_vectors` (pgvector refuses NaN outright,
which failed the whole sync), and the next sync embeds the notes. The scenario is the SQLite one."""

from __future__ import annotations

import pytest

from tests.fake_openai import FakeOpenAI
from tests.rpc.test_memory_poison import scenario_bad_answer_once, settings


@pytest.mark.parametrize("kind", ["nan", "zero"])
async def test_bad_vectors_once_are_refused_then_healed(start_gateway, postgres_url, tmp_path, kind):
    with FakeOpenAI() as api:
        gw = await start_gateway(
            **settings(api), **{"storage.url": postgres_url, "workspace": str(tmp_path / "workspace")}
        )
        await scenario_bad_answer_once(gw, api, kind)


async def test_vectors_stored_before_the_check_are_healed_by_a_forced_sync(start_gateway, postgres_url, tmp_path):
    """A zero vector among those stored (pgvector refuses NaN, not zeros) and NaN in the shared cache,
    as a version without the check could leave them: searches keep answering, and a forced sync drops
    both and embeds that chunk again."""
    import asyncpg
    import numpy as np

    from tests.rpc.test_memory_poison import search_all_modes
    from tests.rpc.test_memory_scan import write_notes

    with FakeOpenAI() as api:
        gw = await start_gateway(
            **settings(api), **{"storage.url": postgres_url, "workspace": str(tmp_path / "workspace")}
        )
        write_notes(gw.config.workspace_dir)
        c = await gw.client()
        await c.call("memory.sync", {})
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(
                "UPDATE memory_vectors SET embedding = $1::text::vector WHERE chunk_id IN "
                "(SELECT id FROM memory_chunks WHERE path = 'memory/garden.md')",
                "[" + ",".join(["0"] * 64) + "]",
            )
            await conn.execute(
                "UPDATE memory_embedding_cache SET embedding = $1", np.full(64, np.nan, np.float32).tobytes()
            )
            await search_all_modes(c)  # none fails
            before = api.count("/v1/embeddings")
            await c.call("memory.sync", {"force": True})
            assert api.count("/v1/embeddings") > before, "the NaN cache entry was used instead of re-embedding"
            vec = await search_all_modes(c)
            assert vec["mode"] == "vector" and "degraded" not in vec, vec
            assert vec["results"][0]["path"] == "memory/garden.md", vec
            for (blob,) in await conn.fetch("SELECT embedding FROM memory_embedding_cache"):
                v = np.frombuffer(blob, dtype=np.float32)
                assert np.isfinite(v).all() and v.any(), "a NaN cache entry was kept"
            assert await conn.fetchval("SELECT count(*) FROM memory_vectors WHERE vector_norm(embedding) = 0") == 0
        finally:
            await conn.close()
        await c.close()
