"""Full text on PostgreSQL searched in the gateway (storage/postgres/memory/fts_mirror.py): each gateway
keeps a derived FTS5 file of the agent's chunks in its state dir, filled from the database by chunk id.

Two gateways on one embedded PostgreSQL, each with its own state dir, one workspace folder (as
docs/scaling.md asks of gateways sharing the index), driven through the WebSocket.
"""

from __future__ import annotations

from tests.helpers import wait_for
from tests.system.postgres.test_memory import chat, pair

QUIET = {
    "memory.sync.onStart": False,
    "memory.sync.onSearch": False,
    "memory.sync.watch": False,
    "memory.sync.sessionDebounceMs": 600_000,
}
FTS = {"mode": "fts", "sources": ["sessions"], "k": 5}


async def _mirror(client) -> dict:
    return (await client.call("memory.status"))["fts"]["mirror"]


async def _indexed(client, files: int) -> None:
    async def check():
        st = await client.call("memory.status")
        return st["sources"]["sessions"]["files"] >= files and st["vector"]["missing"] == 0

    await wait_for(check, timeout=30)


async def _ready(client) -> dict:
    async def check():
        m = await _mirror(client)
        return m["state"] == "ready" and m

    return await wait_for(check, timeout=30)


async def test_b_finds_what_a_wrote_through_its_own_mirror(start_gateway, postgres_url, tmp_path):
    """A's writes reach B's file by chunk id: the first full-text search after A's small write answers
    from B's mirror (caught up before it answers), not from PostgreSQL's tsvector search."""
    a, b = await pair(start_gateway, postgres_url, tmp_path, b=QUIET)
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "My sister Alejandra keeps bees in Oaxaca.")
        await _indexed(ca, 1)
        await _ready(cb)
        res = await cb.call("memory.search", {"query": "Where does Alejandra keep her bees?", **FTS})
        assert res["results"][0]["path"] == f"sessions/{key}.jsonl" and "Oaxaca" in res["results"][0]["snippet"]
        before = await _mirror(cb)
        assert before["answered"]["mirror"] >= 1
        key2 = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key2, "The lighthouse keeper Ingvar paints seagulls on driftwood.")
        await _indexed(ca, 2)
        res = await cb.call("memory.search", {"query": "Who paints seagulls on driftwood?", **FTS})
        assert res["results"][0]["path"] == f"sessions/{key2}.jsonl", res
        after = await _mirror(cb)
        assert after["answered"]["mirror"] == before["answered"]["mirror"] + 1
        assert after["answered"]["postgresql"] == before["answered"]["postgresql"]
        assert after["chunks"] > before["chunks"] and after["rebuilds"] == 0
        assert (b.config.state_dir / "memory" / "main.pg.fts").exists()
        st = await cb.call("memory.status")
        assert st["fts"]["engine"] == "fts5-mirror"
    finally:
        await ca.close()
        await cb.close()


async def test_a_deleted_chunk_is_never_returned(start_gateway, postgres_url, tmp_path):
    """A session deleted through A loses its chunks in the database; B's file still holds them, and drops
    them when a search's candidates are checked against the table: they are never returned."""
    a, b = await pair(start_gateway, postgres_url, tmp_path, b=QUIET)
    ca, cb = await a.client(), await b.client()
    try:
        keep = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, keep, "The red kayak is stored in the boathouse by the pier.")
        gone = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, gone, "The yellow kayak is stored in the garage by the pier.")
        await _indexed(ca, 2)
        await _ready(cb)
        q = {"query": "Where is the kayak stored by the pier?", **FTS}
        paths = [r["path"] for r in (await cb.call("memory.search", q))["results"]]
        assert f"sessions/{gone}.jsonl" in paths and f"sessions/{keep}.jsonl" in paths
        held = (await _mirror(cb))["chunks"]
        await ca.call("sessions.delete", {"sessionKey": gone})

        async def dropped():
            st = await ca.call("memory.status")
            return st["sources"]["sessions"]["files"] == 1

        await wait_for(dropped, timeout=30)
        for _ in range(3):
            res = await cb.call("memory.search", q)
            paths = [r["path"] for r in res["results"]]
            assert f"sessions/{gone}.jsonl" not in paths and paths[0] == f"sessions/{keep}.jsonl", res
        m = await _mirror(cb)
        assert m["chunks"] < held and m["state"] == "ready"
    finally:
        await ca.close()
        await cb.close()


async def test_restart_reuses_the_file_and_a_damaged_or_missing_one_is_rebuilt(start_gateway, postgres_url, tmp_path):
    """The file outlives a restart (opened, not rebuilt). A damaged file, or none, is built again in the
    background, and search answers meanwhile (PostgreSQL's own full text) and after (the mirror)."""
    a, _b = await pair(start_gateway, postgres_url, tmp_path)
    ca = await a.client()
    key = (await ca.call("sessions.create"))["sessionKey"]
    await chat(ca, key, "Grandfather Tobiah repairs clocks in his workshop in Lviv.")
    await _indexed(ca, 1)
    q = {"query": "Who repairs clocks in Lviv?", **FTS}
    await _ready(ca)
    assert (await ca.call("memory.search", q))["results"][0]["path"] == f"sessions/{key}.jsonl"
    first = await _mirror(ca)  # the search caught the file up
    assert first["rebuilds"] == 0 and first["chunks"] > 0 and first["answered"]["mirror"] >= 1
    path = a.config.state_dir / "memory" / "main.pg.fts"
    await ca.close()

    async def restarted() -> dict:
        await a.restart()
        c = await a.client()
        try:
            res = await c.call("memory.search", q)  # answers whatever the file's state
            assert res["results"][0]["path"] == f"sessions/{key}.jsonl", res
            m = await _ready(c)
            res = await c.call("memory.search", q)
            assert res["results"][0]["path"] == f"sessions/{key}.jsonl", res
            assert (await _mirror(c))["answered"]["mirror"] >= 1
            return m
        finally:
            await c.close()

    again = await restarted()
    assert again["rebuilds"] == 0 and again["chunks"] == first["chunks"]
    await a.stop()
    for suffix in ("-wal", "-shm"):
        (path.parent / (path.name + suffix)).unlink(missing_ok=True)
    path.write_bytes(b"this is not an SQLite database" * 1000)
    damaged = await restarted()
    assert damaged["rebuilds"] == 1 and damaged["chunks"] == first["chunks"]
    await a.stop()
    path.unlink()
    missing = await restarted()
    assert missing["chunks"] == first["chunks"] and path.exists()
