"""The PostgreSQL engine's FTS5 mirror file (storage/postgres/memory/fts_mirror.py) damaged: cut short, its
header or its full-text pages overwritten. It is derived from `memory_chunks`, so every door that reads it
(memory.search fts and hybrid, memory.status) answers results — PostgreSQL's own full text while the file is
built again — or the retryable -32050, never -32603; damage a read meets (now, or at the next start) has the
file built again once, and it then answers as before the damage."""

from __future__ import annotations

import sqlite3

import pytest

from tests.helpers import RpcError, wait_for
from tests.system.hostile.test_index_damaged_every_door import PAGE, QUERIES, write_notes


def settings(postgres_url: str, workspace) -> dict:
    return {
        "storage.url": postgres_url,
        "memory": True,
        "workspace": str(workspace),
        "memory.embeddings.provider": "none",
        "memory.sync.onStart": False,
        "memory.sync.onSearch": False,
        "memory.sync.watch": False,
    }


async def mirror(c) -> dict:
    return (await c.call("memory.status"))["fts"]["mirror"]


async def answers(c) -> dict[tuple[str, str], list[str]]:
    out = {}
    for mode in ("fts", "hybrid"):
        for q in QUERIES:
            found = await c.call("memory.search", {"query": q, "mode": mode, "sources": ["memory"], "k": 5})
            out[mode, q] = [r["path"] for r in found["results"]]
    return out


async def every_door(c) -> bool:
    """Each door once: results or the damage error (never -32603); True once the mirror answers again."""
    for mode in ("fts", "hybrid"):
        for q in QUERIES:
            try:
                found = await c.call("memory.search", {"query": q, "mode": mode, "sources": ["memory"], "k": 5})
                assert found["results"], (mode, q)
            except RpcError as e:
                assert e.code == -32050 and "damaged" in e.message, (e.code, e.message)
    return (await mirror(c))["state"] == "ready"


def fts_pages(path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT rootpage FROM sqlite_master WHERE name LIKE 'chunks_fts%' AND rootpage > 0")
        return sorted(int(r[0]) for r in rows)
    finally:
        conn.close()


@pytest.mark.parametrize("damage", ["header", "fts-pages", "cut-half", "cut-header"])
async def test_a_damaged_mirror_file_is_answered_around_and_built_again(start_gateway, postgres_url, tmp_path, damage):
    write_notes(tmp_path / "ws")
    gw = await start_gateway("a", **settings(postgres_url, tmp_path / "ws"))
    c = await gw.client()
    await c.call("memory.sync", {})
    await wait_for(lambda: every_door(c), timeout=60)
    before = await answers(c)
    assert all(before.values())
    path = gw.config.state_dir / "memory" / "main.pg.fts"
    checkpoint = sqlite3.connect(path)
    try:
        checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        checkpoint.close()
    pages = [1] if damage == "header" else fts_pages(path)
    with open(path, "r+b") as fh:
        if damage.startswith("cut"):
            fh.truncate(path.stat().st_size // 2 if damage == "cut-half" else 100)
        else:
            for page in pages:
                fh.seek((page - 1) * PAGE)
                fh.write(b"\xa5" * PAGE)
    await wait_for(lambda: every_door(c), timeout=60)  # met now, or held in the connection's cache
    built = (await mirror(c))["rebuilds"]
    await c.close()
    await gw.restart()  # a fresh connection reads the file: damage no read met so far is met at the latest now
    c = await gw.client()
    try:
        await wait_for(lambda: every_door(c), timeout=60)
        assert built + (await mirror(c))["rebuilds"] == 1, (built, await mirror(c))  # built again once
        assert await answers(c) == before
        assert (await mirror(c))["answered"]["mirror"] >= 1
    finally:
        await c.close()
