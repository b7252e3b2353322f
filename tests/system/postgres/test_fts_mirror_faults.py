"""The FTS5 mirror of PostgreSQL's chunks (storage/postgres/memory/fts_mirror.py, fts_file.py) where a review
of issue 47 found it failing: without the vector migrations, with no vectors stored, after deletions
by another gateway or by this one, after a transient database error, and its file's permissions.

Real gateways on one embedded PostgreSQL, driven through the WebSocket; the mirror's state read from
`memory.status` (`fts.mirror`).
"""

from __future__ import annotations

import stat

import asyncpg

from tests.helpers import wait_for
from tests.system.postgres.test_memory import chat, pair

QUIET = {
    "memory.sync.onStart": False,
    "memory.sync.onSearch": False,
    "memory.sync.watch": False,
    "memory.sync.sessionDebounceMs": 600_000,
}


async def _mirror(client) -> dict:
    return (await client.call("memory.status"))["fts"]["mirror"]


async def _ready(client, chunks: int | None = None) -> dict:
    async def check():
        m = await _mirror(client)
        return m["state"] == "ready" and (chunks is None or m["chunks"] == chunks) and m

    return await wait_for(check, timeout=60)


async def _chunks(client) -> int:
    return int((await client.call("memory.status"))["chunks"])


async def test_ready_without_embeddings_and_private(start_gateway, postgres_url, tmp_path):
    """Embeddings off (no vector migrations ran): the database still has its identity (core migration
    0018), so the mirror gets ready and answers; the file is the owner's alone, as is its folder; the
    catch-up reads by the (agent_id, id) index (0019)."""
    gw = await start_gateway(
        "a",
        **{
            "storage.url": postgres_url,
            "memory": True,
            "workspace": str(tmp_path / "ws"),
            "memory.embeddings.provider": "none",
            "memory.sync.sessionDebounceMs": 50,
        },
    )
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        await chat(c, key, "My sister Alejandra keeps bees in Oaxaca.")

        async def indexed():
            return (await c.call("memory.status"))["sources"]["sessions"]["files"] >= 1

        await wait_for(indexed, timeout=30)
        m = await _ready(c)
        assert m["rebuilds"] == 0 and "error" not in m, m
        q = {"query": "Where does Alejandra keep bees?", "mode": "fts", "sources": ["sessions"]}
        res = await c.call("memory.search", q)
        assert res["results"][0]["path"] == f"sessions/{key}.jsonl"
        assert (await _mirror(c))["answered"]["mirror"] >= 1
        folder = gw.config.state_dir / "memory"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        for f in folder.glob("main.pg.fts*"):
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        conn = await asyncpg.connect(postgres_url)
        try:
            assert await conn.fetchval("SELECT count(*) FROM jarvis_identity") == 1
            assert await conn.fetchval("SELECT 1 FROM pg_indexes WHERE indexname = 'memory_chunks_by_id'") == 1
        finally:
            await conn.close()
    finally:
        await c.close()


async def test_no_rebuild_at_new_generations_with_no_vectors_stored(start_gateway, postgres_url, tmp_path):
    """The embedding provider is down, so no vector is stored and each search at a new generation makes
    a new searcher: it has the index's chunk count (not 0), and the mirror is never built again for it."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(1100):
        (ws / "memory" / f"n{i}.md").write_text(f"# Note {i}\n\nThe kayak number {i} is kept by the pier.\n")
    common = {
        "storage.url": postgres_url,
        "memory": True,
        "workspace": str(ws),
        "memory.embeddings.provider": "openai",
        "memory.embeddings.baseUrl": "http://127.0.0.1:9/v1",
        "memory.embeddings.apiKey": "test",
        "memory.embeddings.maxRetries": 0,
        "memory.embeddings.dims": 64,
        **QUIET,
    }
    ga = await start_gateway("a", **{"storage.instanceId": "a", **common})
    gb = await start_gateway("b", **{"storage.instanceId": "b", **common})
    a, b = await ga.client(), await gb.client()
    q = {"query": "kayak pier", "mode": "fts", "k": 5}
    try:
        await a.call("memory.sync")
        await b.call("memory.search", q)
        await _ready(b)
        await b.call("memory.search", q)
        before = await _mirror(b)
        for i in range(3):  # each: a new generation (one note more), then a full-text search on B
            (ws / "memory" / f"extra{i}.md").write_text(f"# Extra {i}\n\nA canoe named extra{i}.\n")
            await a.call("memory.sync")
            res = await b.call("memory.search", q)
            assert res["results"], res
        after = await _mirror(b)
        assert after["rebuilds"] == before["rebuilds"] and after["state"] == "ready", (before, after)
        assert after["answered"]["mirror"] == before["answered"]["mirror"] + 3, (before, after)
    finally:
        await a.close()
        await b.close()


async def test_deletions_by_either_gateway_never_shorten_an_answer(start_gateway, postgres_url, tmp_path):
    """A removes most of the notes that match (they rank first: shorter). B's file still holds them: its
    answers are the live notes all the same, and a sweep drops the dead rows from B's file. A's own
    mirror drops them as A's sync deletes them, before any search. A big write after: B's search does
    not wait for it (PostgreSQL answers), the mirror catches up in the background."""
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    for i in range(300):
        (ws / "memory" / f"dead{i:03}.md").write_text(f"kayak {i}\n")
    live = [f"memory/live{i}.md" for i in range(10)]
    for i, p in enumerate(live):
        (ws / p).write_text(f"The kayak {i} rests on a wooden rack in the old boathouse by the lake shore.\n")
    a, b = await pair(start_gateway, postgres_url, tmp_path, a=QUIET, b=QUIET)
    ca, cb = await a.client(), await b.client()
    q = {"query": "kayak", "mode": "fts", "sources": ["memory"], "k": 10}
    try:
        await ca.call("memory.sync")
        total = await _chunks(ca)
        await _ready(ca)
        await ca.call("memory.search", q)  # A's mirror caught up
        await _ready(cb)
        await cb.call("memory.search", q)  # B's mirror caught up (fewer rows than a search reads)
        await _ready(cb, total)
        first = [r["path"] for r in (await cb.call("memory.search", q))["results"]]
        assert all(p.startswith("memory/dead") for p in first), first  # the short notes rank first
        for i in range(300):
            (ws / "memory" / f"dead{i:03}.md").unlink()
        await ca.call("memory.sync")
        left = await _chunks(ca)
        assert left == total - 300
        assert (await _mirror(ca))["chunks"] == left  # told by its own sync, no search needed
        for _ in range(4):
            res = await cb.call("memory.search", q)
            assert sorted(r["path"] for r in res["results"]) == sorted(live), res
        m = await _ready(cb, left)  # the dead rows dropped (by the searches, the sweep), none rebuilt
        assert m["rebuilds"] == 0, m
        res = await cb.call("memory.search", q)
        assert sorted(r["path"] for r in res["results"]) == sorted(live), res
        assert (await _mirror(cb))["answered"]["mirror"] == m["answered"]["mirror"] + 1

        for i in range(600):  # a big write through A: more rows than a search reads while it waits
            (ws / "memory" / f"more{i:03}.md").write_text(f"A canoe {i} named Bramble.\n")
        await ca.call("memory.sync")
        now = await _chunks(ca)
        before = await _mirror(cb)
        res = await cb.call("memory.search", {"query": "canoe Bramble", "mode": "fts", "k": 3})
        assert len(res["results"]) == 3
        after = await _mirror(cb)
        assert after["answered"]["postgresql"] == before["answered"]["postgresql"] + 1, (before, after)
        await _ready(cb, now)
    finally:
        await ca.close()
        await cb.close()


async def test_a_database_error_at_open_keeps_the_file(start_gateway, postgres_url, tmp_path):
    """A failure that is not the file's (here: the identity table missing for a while) fails the fill,
    says why in the status, and keeps the file: once the database answers, the same file is opened."""
    cfg = {
        "storage.url": postgres_url,
        "memory": True,
        "workspace": str(tmp_path / "ws"),
        "memory.embeddings.provider": "none",
        "memory.sync.sessionDebounceMs": 50,
    }
    gw = await start_gateway("a", **cfg)
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    await chat(c, key, "Grandfather Tobiah repairs clocks in his workshop in Lviv.")

    async def indexed():
        return (await c.call("memory.status"))["sources"]["sessions"]["files"] >= 1

    await wait_for(indexed, timeout=30)
    q = {"query": "Who repairs clocks in Lviv?", "mode": "fts", "sources": ["sessions"]}
    await _ready(c)
    await c.call("memory.search", q)
    held = (await _mirror(c))["chunks"]
    await c.close()
    await gw.stop()
    path = gw.config.state_dir / "memory" / "main.pg.fts"
    size = path.stat().st_size
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("ALTER TABLE jarvis_identity RENAME TO jarvis_identity_away")
        await gw.restart()
        c = await gw.client()
        try:

            async def failed():
                m = await _mirror(c)
                return "error" in m and m

            m = await wait_for(failed, timeout=30)
            assert m["state"] == "filling" and "jarvis_identity" in m["error"], m
            res = await c.call("memory.search", q)  # PostgreSQL answers meanwhile
            assert res["results"][0]["path"] == f"sessions/{key}.jsonl"
            assert path.exists() and path.stat().st_size >= size
            await conn.execute("ALTER TABLE jarvis_identity_away RENAME TO jarvis_identity")

            async def back():
                await c.call("memory.search", q)  # a search starts the fill again, after its back-off
                m = await _mirror(c)
                return m["state"] == "ready" and m

            m = await wait_for(back, timeout=60, interval=0.5)
            assert m["rebuilds"] == 0 and m["chunks"] == held and "error" not in m, m
        finally:
            await c.close()
    finally:
        await conn.close()


async def test_a_database_rewound_while_the_gateway_runs_is_noticed(start_gateway, postgres_url, tmp_path):
    """The database rewound under a running gateway (as a restore of an older dump does: the chunk ids'
    sequence behind the file's highest id). The next search at a new generation sees it and builds the
    file again; the rows written after are found through the mirror (the catch-up reads above the
    highest id held, so a file left as it was would never read them)."""
    gw = await start_gateway(
        "a",
        **{
            "storage.url": postgres_url,
            "memory": True,
            "workspace": str(tmp_path / "ws"),
            "memory.embeddings.provider": "none",
            **QUIET,
        },
    )
    notes = tmp_path / "ws" / "memory"
    notes.mkdir(parents=True)
    for i in range(20):
        (notes / f"n{i}.md").write_text(f"The kayak number {i} is kept by the pier.\n")
    c = await gw.client()
    q = {"query": "kayak pier", "mode": "fts", "k": 3}
    try:
        await c.call("memory.sync")
        await _ready(c)
        assert (await c.call("memory.search", q))["results"]
        held = await _ready(c, 20)
        conn = await asyncpg.connect(postgres_url)
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM memory_chunks WHERE agent_id = 'main'")
                await conn.execute("DELETE FROM memory_files WHERE agent_id = 'main'")
                await conn.execute("ALTER SEQUENCE memory_chunks_id_seq RESTART WITH 1")
        finally:
            await conn.close()
        for f in notes.glob("n1*.md"):  # what the rewound database is given again: fewer notes
            f.unlink()
        (notes / "canoe.md").write_text("The red canoe Bramble is kept by the pier.\n")
        await c.call("memory.sync")
        assert await _chunks(c) == 10
        await c.call("memory.search", q)  # a new generation: the rewind is seen, the file built again

        async def rebuilt():
            await c.call("memory.search", q)
            m = await _mirror(c)
            return m["state"] == "ready" and m["rebuilds"] == held["rebuilds"] + 1 and m

        await wait_for(rebuilt, timeout=60, interval=0.2)
        res = await c.call("memory.search", {"query": "red canoe Bramble", "mode": "fts", "k": 3})
        assert res["results"][0]["path"] == "memory/canoe.md", res
        m = await _mirror(c)
        assert m["chunks"] == 10 and m["answered"]["mirror"] > held["answered"]["mirror"], m
    finally:
        await c.close()
