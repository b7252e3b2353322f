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
        gw = await start_gateway(**settings(api), **{"storage.url": postgres_url,
                                                     "workspace": str(tmp_path / "workspace")})
        await scenario_bad_answer_once(gw, api, kind)
