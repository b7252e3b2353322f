"""Issue 29.5 on the PostgreSQL index: the SQLite scenario (tests/rpc/test_memory_bigfile.py)."""

from __future__ import annotations

from tests.rpc.test_memory_bigfile import BIG, scenario_big_file


async def test_file_over_the_cap_is_skipped_and_shown(start_gateway, postgres_url, tmp_path):
    await scenario_big_file(
        await start_gateway(**BIG, **{"storage.url": postgres_url, "workspace": str(tmp_path / "workspace")})
    )
