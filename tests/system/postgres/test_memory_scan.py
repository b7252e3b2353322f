"""Issue 29.2 on the PostgreSQL index, which every gateway on the database shares: one gateway that
cannot read its workspace must not empty it for all of them. The scenarios are the SQLite ones
(tests/rpc/test_memory_scan.py)."""

from __future__ import annotations

import shutil

from tests.helpers import RpcError
from tests.rpc.test_memory_scan import (
    NOTES,
    SETTINGS,
    first_sync,
    indexed_paths,
    scenario_descriptors_exhausted,
    scenario_folder_blinks,
    scenario_mount_point_empty,
    scenario_real_deletion,
    scenario_workspace_gone,
    sync_or_error,
    unmount,
)


def pg(postgres_url, tmp_path, **extra):
    return {**SETTINGS, "storage.url": postgres_url, "workspace": str(tmp_path / "workspace"), **extra}


async def test_descriptors_exhausted_fail_the_sync(start_gateway, postgres_url, tmp_path):
    await scenario_descriptors_exhausted(await start_gateway(**pg(postgres_url, tmp_path)))


async def test_missing_workspace_fails_the_sync(start_gateway, postgres_url, tmp_path):
    await scenario_workspace_gone(await start_gateway(**pg(postgres_url, tmp_path)))


async def test_empty_mount_point_fails_the_sync(start_gateway, postgres_url, tmp_path):
    await scenario_mount_point_empty(await start_gateway(**pg(postgres_url, tmp_path, **{"memory.sync.recheckMs": 50})))


async def test_folder_away_for_a_moment_removes_nothing(start_gateway, postgres_url, tmp_path):
    await scenario_folder_blinks(await start_gateway(**pg(postgres_url, tmp_path, **{"memory.sync.recheckMs": 4000})))


async def test_real_deletion_still_removes(start_gateway, postgres_url, tmp_path):
    await scenario_real_deletion(await start_gateway(**pg(postgres_url, tmp_path, **{"memory.sync.recheckMs": 50})))


async def test_keyed_mirrors_do_not_recreate_a_missing_workspace(start_gateway, postgres_url, tmp_path):
    """Before each sync of the memory files a PostgreSQL gateway writes the keyed memories' mirror files
    into its workspace. Into a workspace that is gone (an unmounted share) that made a fresh folder of
    mirrors only, which the scan then took for every note deleted."""
    gw = await start_gateway(**pg(postgres_url, tmp_path))
    c = await first_sync(gw)
    await c.call("memory.set", {"key": "boat", "value": "The boat is called Seahorse.", "category": "facts"})
    indexed = (await c.call("memory.status"))["files"]
    ws = gw.config.workspace_dir
    ws.rename(ws.with_name("workspace.away"))
    try:
        got = await sync_or_error(c)
        recreated = ws.exists()
    finally:
        if ws.exists():
            shutil.rmtree(ws)
        ws.with_name("workspace.away").rename(ws)
    assert isinstance(got, RpcError) and got.data["errno"] == "ENOENT", got
    assert not recreated, "the mirrors made a new workspace where the mount was"
    assert (await c.call("memory.status"))["files"] == indexed
    assert await indexed_paths(c) >= {"MEMORY.md", *NOTES}
    await c.close()


async def test_keyed_mirrors_do_not_fill_an_empty_mount_point(start_gateway, postgres_url, tmp_path):
    """The same with the share's empty mount point: mirrors written there would make it look mounted."""
    gw = await start_gateway(**pg(postgres_url, tmp_path, **{"memory.sync.recheckMs": 50}))
    c = await first_sync(gw)
    await c.call("memory.set", {"key": "boat", "value": "The boat is called Seahorse.", "category": "facts"})
    indexed = (await c.call("memory.status"))["files"]
    ws = gw.config.workspace_dir
    away = unmount(ws)
    try:
        got = await sync_or_error(c)
        written = sorted(str(p.relative_to(ws)) for p in ws.rglob("*"))
    finally:
        shutil.rmtree(ws)
        away.rename(ws)
    assert isinstance(got, RpcError) and got.data["errno"] == "ENOMEDIUM", got
    assert written == [], written
    assert (await c.call("memory.status"))["files"] == indexed
    await c.close()
