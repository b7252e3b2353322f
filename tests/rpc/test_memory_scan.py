"""A scan that cannot look is not a scan that found nothing (issue 29.2).

Every scenario runs on a real gateway with a real workspace; the PostgreSQL index runs the same ones
(tests/system/postgres/test_memory_scan.py), where one gateway emptying the index would empty it for all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import structlog.testing

from tests.helpers import RpcError, RunningGateway, descriptors_exhausted, wait_for

NOTES = {
    "memory/garden.md": "# Garden\n\nThe apricot tree by the shed gives fruit in July.\n",
    "memory/car.md": "# Car\n\nThe car is a blue Volvo; its inspection is due in October.\n",
    "memory/music.md": "# Music\n\nLena practises the cello every Tuesday evening.\n",
    "memory/people/okafor.md": "# Mr Okafor\n\nThe cello teacher lives on Baker Street.\n",
}
ROOT_NOTE = "# About me\n\nMy sailing boat is called Seahorse.\n"
# No embedding model: these tests are about which files the index holds.
SETTINGS = {
    "memory": True,
    "memory.embeddings.provider": "none",
    "memory.sync.onStart": False,
    "memory.sync.watch": False,
    "memory.sync.onSearch": False,
}


def write_notes(workspace) -> None:
    (workspace / "MEMORY.md").parent.mkdir(parents=True, exist_ok=True)
    (workspace / "MEMORY.md").write_text(ROOT_NOTE)
    for rel, text in NOTES.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text)


async def indexed_paths(c) -> set[str]:
    res = await c.call(
        "memory.search", {"query": "cello apricot Volvo Seahorse Okafor", "k": 50, "mode": "fts", "sources": ["memory"]}
    )
    return {r["path"] for r in res["results"]}


async def first_sync(gw: RunningGateway):
    write_notes(gw.config.workspace_dir)
    c = await gw.client()
    stats = await c.call("memory.sync", {})
    assert stats["indexed"] == 5 and stats["removed"] == 0, stats
    assert await indexed_paths(c) == {"MEMORY.md", *NOTES}
    return c


async def sync_or_error(c: Any, force: bool = False) -> Any:
    """memory.sync's result, or the RpcError it answered."""
    try:
        return await c.call("memory.sync", {"force": force})
    except RpcError as exc:
        return exc


def unmount(ws: Path) -> Path:
    """The share at `ws` not mounted: its content moved to a sibling `share` folder (→ that folder),
    the mount point left an empty folder."""
    away = ws.with_name("share")
    away.mkdir()
    for p in list(ws.iterdir()):
        p.rename(away / p.name)
    return away


async def scenario_descriptors_exhausted(gw: RunningGateway) -> None:
    """The issue's case: with no descriptor left, the memory folder cannot be listed. The sync must fail
    naming the folder and EMFILE, and remove nothing."""
    c = await first_sync(gw)
    with descriptors_exhausted():
        got = await sync_or_error(c, force=True)
    assert isinstance(got, RpcError), f"the sync read 'cannot list' as 'all deleted': {got}"
    assert got.code == -32050 and got.data["retryable"] is True, got.data
    assert got.data["errno"] == "EMFILE" and got.data["path"].endswith("memory"), got.data
    assert "EMFILE" in got.message and "nothing was removed" in got.message
    assert await indexed_paths(c) == {"MEMORY.md", *NOTES}
    st = await c.call("memory.status")
    assert st["files"] == 5 and "EMFILE" in st["sync"]["lastError"]["error"], st["sync"]
    assert st["dirty"] is True, "a failed sync covered nothing: the next trigger must try again"
    stats = await c.call("memory.sync", {})  # descriptors back: a normal sync, nothing lost
    assert stats["removed"] == 0 and stats["unchanged"] == 5, stats
    st = await c.call("memory.status")
    assert "lastError" not in st["sync"] and st["dirty"] is False, st
    await c.close()


async def scenario_workspace_gone(gw: RunningGateway) -> None:
    """A network-mounted workspace that is not there (unmounted, the mount point itself missing):
    the sync fails naming it; the index keeps every note; when it is back, nothing was lost."""
    c = await first_sync(gw)
    ws = gw.config.workspace_dir
    away = ws.with_name(ws.name + ".away")
    ws.rename(away)
    try:
        got = await sync_or_error(c)
    finally:
        away.rename(ws)
    assert isinstance(got, RpcError), f"a missing workspace read as every note deleted: {got}"
    assert got.code == -32050 and got.data["errno"] == "ENOENT" and got.data["path"] == str(ws), got.data
    assert await indexed_paths(c) == {"MEMORY.md", *NOTES}
    stats = await c.call("memory.sync", {})
    assert stats["removed"] == 0 and stats["unchanged"] == 5, stats
    await c.close()


async def scenario_mount_point_empty(gw: RunningGateway) -> None:
    """A share that is not mounted leaves its mount point: an empty folder. With notes of it indexed,
    that fails the sync (after the second look) instead of emptying the index; a file put in it says it
    is empty on purpose, and then the notes go."""
    c = await first_sync(gw)
    ws = gw.config.workspace_dir
    away = unmount(ws)
    try:
        got = await sync_or_error(c)
    finally:
        for p in list(away.iterdir()):
            p.rename(ws / p.name)
    assert isinstance(got, RpcError), f"an empty mount point read as every note deleted: {got}"
    assert got.data["errno"] == "ENOMEDIUM" and "not mounted" in got.message, got.data
    assert await indexed_paths(c) == {"MEMORY.md", *NOTES}
    for p in list(ws.iterdir()):
        p.rename(away / p.name)
    (ws / "MEMORY.md").write_text("")  # empty on purpose
    stats = await c.call("memory.sync", {})
    assert stats["removed"] == 4, stats
    assert await indexed_paths(c) == set()
    await c.close()


async def scenario_folder_blinks(gw: RunningGateway) -> None:
    """The memory folder is away for a moment (moved and back, a mount that blinked) while a sync
    scans: it would remove four of five files, so it looks again after `recheckMs` and removes none."""
    c = await first_sync(gw)
    mem = gw.config.workspace_dir / "memory"
    away = mem.with_name("memory.away")
    with structlog.testing.capture_logs() as logs:
        mem.rename(away)
        try:
            sync = asyncio.ensure_future(c.call("memory.sync", {}))

            async def looking_again() -> bool:  # the scan has run and found the folder away
                return any(e["event"] == "memory_sync_recheck" for e in list(logs))

            await wait_for(looking_again, timeout=60)  # the pause before the second look (recheckMs) is 4 s
        finally:
            away.rename(mem)
    stats = await sync
    assert stats["removed"] == 0 and stats["unchanged"] == 5, stats
    assert await indexed_paths(c) == {"MEMORY.md", *NOTES}
    await c.close()


async def scenario_real_deletion(gw: RunningGateway) -> None:
    """Deleting most notes for real still empties them out of the index (after the second look)."""
    c = await first_sync(gw)
    for rel in NOTES:
        (gw.config.workspace_dir / rel).unlink()
    stats = await c.call("memory.sync", {})
    assert stats["removed"] == 4 and stats["unchanged"] == 1, stats
    assert await indexed_paths(c) == {"MEMORY.md"}
    await c.close()


async def test_descriptors_exhausted_fail_the_sync(start_gateway):
    await scenario_descriptors_exhausted(await start_gateway(**SETTINGS))


async def test_missing_workspace_fails_the_sync(start_gateway):
    await scenario_workspace_gone(await start_gateway(**SETTINGS))


async def test_empty_mount_point_fails_the_sync(start_gateway):
    await scenario_mount_point_empty(await start_gateway(**SETTINGS, **{"memory.sync.recheckMs": 50}))


async def test_folder_away_for_a_moment_removes_nothing(start_gateway):
    await scenario_folder_blinks(await start_gateway(**SETTINGS, **{"memory.sync.recheckMs": 4000}))


async def test_real_deletion_still_removes(start_gateway):
    await scenario_real_deletion(await start_gateway(**SETTINGS, **{"memory.sync.recheckMs": 50}))
