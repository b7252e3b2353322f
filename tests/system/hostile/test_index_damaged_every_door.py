"""A damaged memory index at every door (issue 46's leftovers): the file is cut short or has pages of its
vector table, its full-text table or its header overwritten while a real gateway serves; then every door
that reads the index — memory.search in each mode, memory.status, memory.recall, memory.profile, memory.get, MCP's
memory_search at /mcp — answers results or the retryable -32050 "damaged … being rebuilt", never -32603;
the gateway sets the file aside and rebuilds it, and the rebuilt index answers as before the damage. A real
`jarvis serve` (a crash is a dead child process, not a dead test run); vectors come from a local
OpenAI-compatible server (tests/fake_openai.py), so the vector table is sqlite-vec's over a real file.
(The OpenAI-compatible door's recall never fails a turn: chat/recall.py answers [] on any error.)"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.fake_openai import FakeOpenAI, bag_of_words_vector
from tests.helpers import GatewayProcess, RpcError, connect_client, examples, wait_for
from tests.rpc.test_mcp import http_client, text

MODES = ("hybrid", "fts", "vector")
QUERIES = ("lantern harbour 7", "violet gulls 42", "number 99 orchard")
PAGE = 4096
# A word whose vector (the fake server's hashed bag of words, 64 dims) shares no dimension with the
# queries': a note of it alone is no answer to any of them in any mode, however often it is rewritten.
_TAKEN = {i for q in QUERIES for i, v in enumerate(bag_of_words_vector(q, 64)) if v}
CHURN = next(
    w
    for w in (f"zzchurn{i}" for i in range(1000))
    if not _TAKEN & {i for i, v in enumerate(bag_of_words_vector(w, 64)) if v}
)


def config(api: FakeOpenAI) -> str:
    return (
        "[memory]\nenabled = true\n"
        f'[memory.embeddings]\nprovider = "openai"\nbaseUrl = "{api.base_url}"\napiKey = "test"\n'
        "dims = 64\nmaxRetries = 0\n"
        "[memory.sync]\nonStart = false\nwatch = false\nonSearch = false\n"
        "[memory.recall]\nenabled = false\n"
    )


@contextlib.asynccontextmanager
async def serving(tmp_path: Path):
    """A real `jarvis serve` over 120 synced notes: its process, WebSocket client, index file and the answers
    before any damage."""
    state = tmp_path / "state"
    write_notes(state / "workspace")
    with FakeOpenAI() as api, GatewayProcess.running(state, config(api)) as gp:
        c = await connect_client(gp.url, gp.token)
        try:
            await c.call("memory.sync", {})
            yield gp, c, state / "agents" / "main" / "memory.sqlite", await answers(c)
        finally:
            await c.close()


def write_notes(workspace: Path) -> None:
    notes = workspace / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    words = ("lantern", "harbour", "violet", "gulls", "orchard", "copper", "tide", "fern")
    for i in range(120):
        body = " ".join(f"{words[(i + j) % len(words)]} {i}" for j in range(40))
        (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\nnumber {i} {body}\n")
    (notes / "churn.md").write_text(CHURN + "\n")


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
    """The synced pages copied from the WAL into the file, so that damage to the file is damage to them
    (a file left damaged by an earlier example whose damage no read met has nothing to copy)."""
    conn = sqlite3.connect(db)
    try:
        with contextlib.suppress(sqlite3.DatabaseError):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()


def overwrite(db: Path, pages: list[int]) -> None:
    with open(db, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * PAGE)
            fh.write(b"\xa5" * PAGE)


def said(e: RpcError) -> None:
    assert e.code == -32050 and "damaged" in e.message, (e.code, e.message)


async def every_door(gp: GatewayProcess, c) -> bool:
    """Every door once: True when each answered results (or status) with no damage said."""
    assert gp.proc is not None and gp.proc.poll() is None, f"the gateway died: {gp.proc and gp.proc.poll()}"
    clean = True
    for mode in MODES:
        for q in QUERIES:
            try:
                found = await c.call("memory.search", {"query": q, "mode": mode, "sources": ["memory"], "k": 5})
                clean = clean and bool(found["results"]) and "damaged" not in (found.get("degraded") or "")
            except RpcError as e:
                said(e)
                clean = False
    for method, params in (("memory.status", {}), ("memory.recall", {"query": QUERIES[0]}), ("memory.profile", {})):
        try:
            got = await c.call(method, params)
            clean = clean and not got.get("rebuilding")
        except RpcError as e:
            said(e)
            clean = False
    try:  # a note is read from its file, never from the index
        assert "lantern" in (await c.call("memory.get", {"path": "memory/note-007.md"}))["text"]
    except RpcError as e:
        said(e)
    async with http_client(gp) as mcp:  # (its own each time: an MCP client's task group stays in one task)
        tool = await mcp.call_tool("memory_search", {"query": QUERIES[1], "k": 5})
    if tool.is_error:
        assert "damaged" in text(tool) and "internal" not in text(tool), text(tool)
        clean = False
    else:
        clean = clean and "note-" in text(tool)
    return clean


@pytest.mark.parametrize("damage", ["vector-pages", "fts-pages", "header", "cut-half", "cut-header"])
async def test_every_door_answers_results_or_the_damage_error_and_the_rebuilt_index_answers_the_same(tmp_path, damage):
    async with serving(tmp_path) as (gp, c, db, before):
        assert all(before.values())
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
        await wait_for(lambda: every_door(gp, c), timeout=60)
        # A sync's commit drops the readers' caches: damage they held over is met now, if not before.
        await c.call("memory.sync", {})
        await wait_for(lambda: every_door(gp, c), timeout=60)
        assert await answers(c) == before
        assert len((await c.call("memory.status")).get("corrupt", [])) == 1  # met, set aside once, rebuilt
        assert (await c.call("system.health"))["status"] == "ok"


@pytest.fixture
async def served(tmp_path):
    """One gateway over a synced index and its answers, for every example of the property below."""
    async with serving(tmp_path) as ready:
        yield ready


# A cut at a fraction of the file, or `count` pages from a fraction of it overwritten.
DAMAGE = st.one_of(
    st.tuples(st.just("cut"), st.floats(0.0, 0.999), st.just(0)),
    st.tuples(st.just("overwrite"), st.floats(0.0, 0.999), st.integers(1, 8)),
)


@settings(max_examples=examples(12), deadline=None, suppress_health_check=list(HealthCheck))
@given(damage=DAMAGE)
async def test_any_cut_or_overwritten_page_range_is_answered_or_said_and_rebuilt_to_the_same_answers(served, damage):
    """Every door answers results or the damage error, whatever the damage. Damage a read meets is set
    aside once and the rebuilt index answers as before it. Damage no read meets (a page that is free, or
    held in a cache, or a vector's or a text's bytes, which SQLite keeps no checksum of) is put back after
    the doors are asked, so that the next example starts from the same file."""
    gp, c, db, before = served
    checkpoint(db)
    size = db.stat().st_size
    met = len((await c.call("memory.status")).get("corrupt", []))
    kind, at, count = damage
    with open(db, "r+b") as fh:
        if kind == "cut":
            fh.seek(int(size * at))
            kept, start = fh.read(), int(size * at)
            fh.truncate(start)
        else:
            start = int(size // PAGE * at) * PAGE
            fh.seek(start)
            kept = fh.read(count * PAGE)
            fh.seek(start)
            fh.write(b"\xa5" * len(kept))
    churn = db.parents[2] / "workspace" / "memory" / "churn.md"
    churn.write_text(churn.read_text() + CHURN + "\n")
    try:  # its sync's commit drops the readers' caches: the doors below read the file, not what they held
        await c.call("memory.sync", {})
    except RpcError as e:
        said(e)
    await wait_for(lambda: every_door(gp, c), timeout=60)
    if len((await c.call("memory.status")).get("corrupt", [])) == met:  # no read met it: the bytes put back
        event("damage no read met")
        with open(db, "r+b") as fh:
            fh.seek(start)
            fh.write(kept)
        return
    event("damage met: set aside, rebuilt")
    assert len((await c.call("memory.status")).get("corrupt", [])) == met + 1  # set aside once
    await c.call("memory.sync", {})
    assert await answers(c) == before
