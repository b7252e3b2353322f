"""Issue 29.2 on the PostgreSQL index, which every gateway on the database shares: one gateway that
cannot read its workspace must not empty it for all of them. The scenarios are the SQLite ones
(tests/rpc/test_memory_scan.py)."""

from __future__ import annotations

from tests.rpc.test_memory_scan import (SETTINGS, scenario_descriptors_exhausted, scenario_folder_blinks,
                                        scenario_real_deletion, scenario_workspace_gone)


def pg(postgres_url, tmp_path, **extra):
    return {**SETTINGS, "storage.url": postgres_url, "workspace": str(tmp_path / "workspace"), **extra}


async def test_descriptors_exhausted_fail_the_sync(start_gateway, postgres_url, tmp_path):
    await scenario_descriptors_exhausted(await start_gateway(**pg(postgres_url, tmp_path)))


async def test_missing_workspace_fails_the_sync(start_gateway, postgres_url, tmp_path):
    await scenario_workspace_gone(await start_gateway(**pg(postgres_url, tmp_path)))


async def test_folder_away_for_a_moment_removes_nothing(start_gateway, postgres_url, tmp_path):
    await scenario_folder_blinks(await start_gateway(**pg(postgres_url, tmp_path, **{"memory.sync.recheckMs": 4000})))


async def test_real_deletion_still_removes(start_gateway, postgres_url, tmp_path):
    await scenario_real_deletion(await start_gateway(**pg(postgres_url, tmp_path, **{"memory.sync.recheckMs": 50})))
