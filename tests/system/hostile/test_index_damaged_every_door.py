"""A damaged memory index at every door (issue 46's leftovers): the file is cut short or has pages of its
vector table, its full-text table or its header overwritten while a real gateway serves; then every door
that reads the index — memory.search in each mode, memory.status — answers results or the retryable
-32050 "damaged … being rebuilt", never -32603; the gateway sets the file aside and rebuilds it, and the
rebuilt index answers as before the damage. Vectors come from a local OpenAI-compatible server
(tests/fake_openai.py), so the vector table is sqlite-vec's (or numpy's) over a real file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError, wait_for

MODES = ("hybrid", "fts", "vector")
QUERIES = ("lantern harbour 7", "violet gulls 42", "number 99 orchard")
PAGE = 4096


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


def write_notes(workspace: Path) -> None:
    notes = workspace / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    words = ("lantern", "harbour", "violet", "gulls", "orchard", "copper", "tide", "fern")
    for i in range(120):
        body = " ".join(f"{words[(i + j) % len(words)]} {i}" for j in range(40))
        (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\nnumber {i} {body}\n")


async def answers(c) -> dict[tuple[str, str], list[str]]:
    out = {}
    for mode in MODES:
        for q in QUERIES:
            found = await c.call("memory.search", {"query": q, "mode": mode, "sources": ["memory"], "k": 5})
            out[mode, q] = [r["path"] for r in found["results"]]
    return out


def root_pages(db: Path, like: str) -> list[int]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT rootpage FROM sqlite_master WHERE name LIKE ? AND rootpage > 0", (like,))
        return sorted(int(r[0]) for r in rows)
    finally:
        conn.close()


def checkpoint(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        conn.close()


def overwrite(db: Path, pages: list[int]) -> None:
    with open(db, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * PAGE)
            fh.write(b"\xa5" * PAGE)


async def every_door(c) -> bool:
    """Every door once: True when each answered results (or status) with no damage said."""
    clean = True
    for mode in MODES:
        for q in QUERIES:
            try:
                found = await c.call("memory.search", {"query": q, "mode": mode, "sources": ["memory"], "k": 5})
                clean = clean and bool(found["results"]) and "damaged" not in (found.get("degraded") or "")
            except RpcError as e:
                assert e.code == -32050 and "damaged" in e.message, (e.code, e.message)
                clean = False
    try:
        status = await c.call("memory.status")
        clean = clean and not status.get("rebuilding")
    except RpcError as e:
        assert e.code == -32050 and "damaged" in e.message, (e.code, e.message)
        clean = False
    return clean


@pytest.mark.parametrize("damage", ["vector-pages", "fts-pages", "header", "cut-half", "cut-header"])
async def test_every_door_answers_results_or_the_damage_error_and_the_rebuilt_index_answers_the_same(
    start_gateway, damage
):
    with FakeOpenAI() as api:
        gw = await start_gateway(**settings(api))
        write_notes(gw.config.workspace_dir)
        c = await gw.client()
        await c.call("memory.sync", {})
        before = await answers(c)
        assert all(before.values())
        db = next(gw.config.state_dir.rglob("memory.sqlite"))
        checkpoint(db)
        size = db.stat().st_size
        if damage == "vector-pages":
            pages = root_pages(db, "%vector%") + root_pages(db, "%vec%chunks%")
            assert pages
            overwrite(db, sorted(set(pages)))
        elif damage == "fts-pages":
            overwrite(db, root_pages(db, "chunks_fts%"))
        elif damage == "header":
            overwrite(db, [1])
        else:
            with open(db, "r+b") as fh:
                fh.truncate(size // 2 if damage == "cut-half" else 100)
        # Every door, until they all answer cleanly again (the file set aside and rebuilt, or the damage
        # never read: pages the gateway's caches hold answer as before).
        await wait_for(lambda: every_door(c), timeout=60)
        await c.call("memory.sync", {})
        assert await answers(c) == before
        assert len((await c.call("memory.status"))["corrupt"]) == 1  # met, set aside once, rebuilt
