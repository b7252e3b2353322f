"""The memory index in PostgreSQL (storage.url): one index per agent, shared by every gateway.

Gateways A and B on one database (the `postgres_url` fixture) with one workspace folder, as
docs/scaling.md asks of gateways sharing the index.
"""

from __future__ import annotations


import asyncio

import numpy as np
import pytest

from gateway.memory.hit import Hit

from tests.helpers import RpcError, wait_for

NOTES = """# Notes

## Garden
The apricot tree by the shed was planted in March 2021 and gives fruit in July.

## Car
The car is a blue Volvo V70; its next inspection is due in October.

## Music
Lena practises the cello every Tuesday evening with her teacher Mr Okafor.
"""

HOSTILE = [
    "'",
    "''",
    '"',
    "a & b",
    "x | y",
    "!cello",
    "cello:*",
    "(cello",
    "cello)",
    "(a & !b) | c:*",
    "it's Lena's cello",
    "<-> <2> cello",
    "\\'; DROP TABLE memory_chunks; --",
    "&|!():*'",
    "   ",
    "the and of",
    "Mr. O'Kafor's (cello) & apricot | !tree:*",
]


async def pair(start_gateway, postgres_url, tmp_path, a: dict | None = None, b: dict | None = None):
    common = {
        "storage.url": postgres_url,
        "memory": True,
        "workspace": str(tmp_path / "workspace"),
        "memory.embeddings.provider": "local",
        "memory.sync.sessionDebounceMs": 50,
    }
    ga = await start_gateway("a", **{"storage.instanceId": "a", **common, **(a or {})})
    gb = await start_gateway("b", **{"storage.instanceId": "b", **common, **(b or {})})
    return ga, gb


async def chat(client, key: str, message: str) -> None:
    run = await client.call("chat.send", {"sessionKey": key, "message": message})
    assert (await client.run_to_end(run["runId"]))[-1]["method"] == "chat.final"


async def test_b_finds_what_a_indexed_without_indexing_it(start_gateway, postgres_url, tmp_path):
    # B never syncs on its own: no start sync, no sync before a search, chat.final debounce far away.
    quiet = {
        "memory.sync.onStart": False,
        "memory.sync.onSearch": False,
        "memory.sync.watch": False,
        "memory.sync.sessionDebounceMs": 600_000,
    }
    a, b = await pair(start_gateway, postgres_url, tmp_path, b=quiet)
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "My sister Alejandra keeps bees in Oaxaca.")

        async def indexed():
            st = await ca.call("memory.status")
            return st["sources"]["sessions"]["chunks"] > 0 and st["vector"]["missing"] == 0 and st

        st_a = await wait_for(indexed)
        for mode in ("hybrid", "fts", "vector"):
            res = await cb.call(
                "memory.search", {"query": "Where does Alejandra keep her bees?", "mode": mode, "sources": ["sessions"]}
            )
            assert res["mode"] == mode and "degraded" not in res, res
            assert res["results"][0]["path"] == f"sessions/{key}.jsonl", (mode, res)
            assert "Oaxaca" in res["results"][0]["snippet"]
        st_b = await cb.call("memory.status")
        assert st_b["sync"]["runs"] == 0  # B indexed nothing itself
        assert not b.config.memory_db().exists() and not a.config.memory_db().exists()
        assert st_b["vector"]["backend"] == st_a["vector"]["backend"] == "pgvector"
        st_a = await ca.call("memory.status")  # both read the same rows (A may have synced again meanwhile)
        assert st_b["sources"] == st_a["sources"] and st_b["chunks"] == st_a["chunks"] > 0
        assert st_b["embeddings"]["dims"] == 256 and st_b["vector"]["available"] is True
        # B's health counts follow the shared index, though B never synced it.
        before = (await cb.call("system.health"))["memory"]
        key2 = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key2, "Her bees make orange blossom honey.")

        async def grown():
            st = await ca.call("memory.status")
            return st["files"] > before["files"] and st["vector"]["missing"] == 0

        await wait_for(grown)
        now_a = await ca.call("memory.status")

        async def followed():  # health never waits for the database: each call refreshes for the next
            health = (await cb.call("system.health"))["memory"]
            return (health["files"], health["chunks"]) == (now_a["files"], now_a["chunks"])

        await wait_for(followed)
    finally:
        await ca.close()
        await cb.close()


@pytest.mark.parametrize("provider", ["local", "none"])
async def test_modes_get_status_and_a_second_sync(start_gateway, postgres_url, tmp_path, provider):
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "MEMORY.md").write_text(NOTES)
    a, b = await pair(
        start_gateway,
        postgres_url,
        tmp_path,
        a={"memory.embeddings.provider": provider},
        b={"memory.embeddings.provider": provider},
    )
    ca, cb = await a.client(), await b.client()
    try:
        first = await ca.call("memory.sync")
        st = await ca.call("memory.status")
        assert st["files"] >= 1 and st["sources"]["memory"]["chunks"] >= 1
        assert st["vector"]["backend"] == ("pgvector" if provider == "local" else "none")
        for c in (ca, cb):
            for mode in ("hybrid", "fts", "vector"):
                res = await c.call("memory.search", {"query": "when was the apricot tree planted", "mode": mode})
                top = res["results"][0]
                assert top["path"] == "MEMORY.md" and "apricot" in top["snippet"], (mode, res)
                assert 0 < top["score"] <= 1
                if provider == "none" and mode != "fts":  # no vectors: full text, saying why
                    assert res["mode"] == "fts" and "disabled" in res["degraded"]
                else:
                    assert res["mode"] == mode and "degraded" not in res
            got = await c.call("memory.get", {"path": top["path"], "from": top["startLine"], "lines": 40})
            assert "apricot tree" in got["text"]
        # Unrelated text finds nothing by full text.
        assert (await cb.call("memory.search", {"query": "zeppelin xylophone", "mode": "fts"}))["results"] == []
        # Nothing changed: a second sync (on either gateway) writes nothing and the counts stay.
        again = await ca.call("memory.sync")
        assert again["indexed"] == 0 and again["removed"] == 0, (first, again)
        on_b = await cb.call("memory.sync")
        assert on_b["indexed"] == 0 and on_b["removed"] == 0
        st2 = await cb.call("memory.status")
        assert (st2["files"], st2["chunks"], st2["sources"]) == (st["files"], st["chunks"], st["sources"])
        # Hostile query text is only ever words.
        for q in HOSTILE:
            for mode in ("hybrid", "fts", "vector"):
                res = await cb.call("memory.search", {"query": q, "mode": mode})
                assert isinstance(res["results"], list)
        res = await cb.call("memory.search", {"query": "Mr. O'Kafor's (cello) & !tuesday:*", "mode": "fts"})
        assert res["results"] and "cello" in res["results"][0]["snippet"]
    finally:
        await ca.close()
        await cb.close()


async def test_a_deleted_session_leaves_the_index_of_every_gateway(start_gateway, postgres_url, tmp_path):
    a, b = await pair(
        start_gateway,
        postgres_url,
        tmp_path,
        a={"memory.embeddings.provider": "none"},
        b={"memory.embeddings.provider": "none"},
    )
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "The harbour master in Tromsø is called Sigrid Halvorsen.")

        async def found():
            res = await cb.call("memory.search", {"query": "harbour master Tromsø", "sources": ["sessions"]})
            return res["results"]

        assert (await wait_for(found))[0]["sessionKey"] == key
        await cb.call("sessions.delete", {"sessionKey": key})
        # The gateway that deleted it leaves it out of search at once, whether or not a sync (of either
        # gateway: the chat's debounced one, the relayed lines') held the index then.
        res = await cb.call("memory.search", {"query": "harbour master Tromsø", "sources": ["sessions"]})
        assert res["results"] == []

        # A learns of it through the deletion's notification, and the shared index loses the chunks once
        # a sync that held it is done (docs/memory.md): both come after the answer, so they are waited for
        # (the deadline only catches a hang; a chunk left for good fails it).
        async def gone_everywhere():
            for c in (ca, cb):
                res = await c.call("memory.search", {"query": "harbour master Tromsø", "sources": ["sessions"]})
                if res["results"] or (await c.call("memory.status"))["sources"]["sessions"]["chunks"]:
                    return False
            return True

        await wait_for(gone_everywhere, timeout=120)
        with pytest.raises(RpcError):
            await ca.call("memory.get", {"path": f"sessions/{key}.jsonl"})
    finally:
        await ca.close()
        await cb.close()


async def test_syncs_of_one_agent_through_both_gateways_take_turns(start_gateway, postgres_url, tmp_path):
    import asyncio

    import asyncpg

    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(NOTES)
    for i in range(30):
        (ws / "memory" / f"note-{i}.md").write_text(f"# Note {i}\n\nThe locker code for box {i} is {1000 + i}.\n")
    a, b = await pair(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "Our neighbour Priyanka repairs old typewriters.")
        results = await asyncio.gather(*(c.call("memory.sync", {"force": True}) for c in (ca, cb, ca, cb)))
        assert all(r["indexed"] >= 0 for r in results)
        conn = await asyncpg.connect(postgres_url)
        try:
            dupes = await conn.fetchval(
                "SELECT count(*) FROM (SELECT agent_id, path, start_line, end_line, hash FROM memory_chunks "
                "GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1) d"
            )
            chunks = await conn.fetchval("SELECT count(*) FROM memory_chunks")
            vectors = await conn.fetchval("SELECT count(*) FROM memory_vectors")
            files = await conn.fetchval("SELECT count(*) FROM memory_files")
            hnsw = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'memory_vectors_hnsw%'")
        finally:
            await conn.close()
        assert dupes == 0 and chunks == vectors > 0 and files == 32 and hnsw == 0  # searched in the gateway
        mem = a.gw.services.memory  # the upkeep after a large sync (200+ files) runs as the owner
        async with mem.index.pool.acquire() as conn:
            await mem.index.store.maintain(conn)
            assert (
                await conn.fetchval("SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'memory_vectors'")
                is not None
            )
        for c in (ca, cb):
            st = await c.call("memory.status")
            assert (st["files"], st["chunks"], st["vector"]["missing"]) == (files, chunks, 0)
            res = await c.call("memory.search", {"query": "locker code box 17"})
            assert res["results"][0]["path"] == "memory/note-17.md"
    finally:
        await ca.close()
        await cb.close()


async def test_new_embedding_settings_rebuild_the_shared_index(start_gateway, postgres_url, tmp_path):
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "MEMORY.md").write_text(NOTES)
    common = {"storage.url": postgres_url, "memory": True, "workspace": str(ws)}
    a = await start_gateway("a", **{"storage.instanceId": "a", **common, "memory.embeddings.provider": "none"})
    ca = await a.client()
    try:
        await ca.call("memory.sync")
        before = await ca.call("memory.status")
        assert before["chunks"] > 0 and before["vector"]["backend"] == "none"
    finally:
        await ca.close()
    b = await start_gateway("b", **{"storage.instanceId": "b", **common, "memory.embeddings.provider": "local"})
    cb = await b.client()
    try:
        await cb.call("memory.sync")
        st = await cb.call("memory.status")
        assert st["chunks"] == before["chunks"] and st["vector"]["missing"] == 0 and st["vector"]["available"]
        res = await cb.call("memory.search", {"query": "when was the apricot tree planted", "mode": "vector"})
        assert res["mode"] == "vector" and res["results"][0]["path"] == "MEMORY.md"
    finally:
        await cb.close()


async def test_a_delete_while_a_sync_holds_the_agent_is_hidden_then_dropped(start_gateway, postgres_url, tmp_path):
    import asyncpg

    from gateway.storage.postgres.memory.agent import agent_lock

    a, b = await pair(
        start_gateway,
        postgres_url,
        tmp_path,
        a={"memory.embeddings.provider": "none"},
        b={"memory.embeddings.provider": "none"},
    )
    ca, cb = await a.client(), await b.client()
    holder = await asyncpg.connect(postgres_url)
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "The ferry to Vlieland leaves at seven.")

        async def found():
            return (await ca.call("memory.search", {"query": "ferry Vlieland", "sources": ["sessions"]}))["results"]

        await wait_for(found)
        # As if another gateway were in the middle of a long sync of this agent.
        await holder.execute("SELECT pg_advisory_lock($1)", agent_lock(a.config.agent_id))
        await ca.call("sessions.delete", {"sessionKey": key})
        assert (await ca.call("memory.search", {"query": "ferry Vlieland", "sources": ["sessions"]}))["results"] == []
        await holder.execute("SELECT pg_advisory_unlock($1)", agent_lock(a.config.agent_id))

        async def dropped():
            return (await cb.call("memory.status"))["sources"]["sessions"]["chunks"] == 0

        await wait_for(dropped)
    finally:
        await holder.close()
        await ca.close()
        await cb.close()


async def test_a_mirror_behind_the_database_never_undoes_the_index(start_gateway, postgres_url, tmp_path):
    a, b = await pair(
        start_gateway,
        postgres_url,
        tmp_path,
        a={"memory.embeddings.provider": "none"},
        b={"memory.embeddings.provider": "none", "memory.sync.sessionDebounceMs": 600_000},
    )
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "The spare key hangs behind the barometer.")
        await chat(ca, key, "And the boiler manual is in the blue folder.")

        async def indexed():
            res = await ca.call("memory.search", {"query": "boiler manual blue folder", "sources": ["sessions"]})
            return res["results"]

        await wait_for(indexed)
        before = await ca.call("memory.status")
        mirror = b.config.sessions_dir() / f"{key}.jsonl"

        import asyncpg

        conn = await asyncpg.connect(postgres_url)
        try:
            total = await conn.fetchval("SELECT line_count FROM sessions WHERE session_key = $1", key)
        finally:
            await conn.close()
        assert total >= 4

        async def mirrored():
            return mirror.exists() and mirror.read_bytes().count(b"\n") == total

        await wait_for(mirrored)
        # B's mirror lags (two lines short), then is missing: B's syncs leave A's rows as they are.
        lines = mirror.read_bytes().splitlines(keepends=True)
        mirror.write_bytes(b"".join(lines[:2]))
        assert (await cb.call("memory.sync"))["indexed"] == 0
        mirror.unlink()
        assert (await cb.call("memory.sync"))["removed"] == 0
        after = await cb.call("memory.status")
        assert after["sources"] == before["sources"]
        res = await cb.call("memory.search", {"query": "boiler manual blue folder", "sources": ["sessions"]})
        assert res["results"] and "boiler" in res["results"][0]["snippet"]
    finally:
        await ca.close()
        await cb.close()


async def test_jarvis_memory_commands_use_the_shared_index(start_gateway, postgres_url, tmp_path):
    import asyncio
    import os
    import subprocess
    import sys

    import orjson

    from tests.helpers import ROOT

    a = await start_gateway(
        "a",
        **{
            "storage.url": postgres_url,
            "storage.instanceId": "a",
            "memory": True,
            "workspace": str(tmp_path / "workspace"),
            "memory.sync.sessionDebounceMs": 50,
        },
    )
    ca = await a.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "The wifi password of the cabin is written under the kettle.")

        async def indexed():
            res = await ca.call("memory.search", {"query": "cabin wifi password", "sources": ["sessions"]})
            return res["results"]

        await wait_for(indexed)
    finally:
        await ca.close()
    state = tmp_path / "cli-state"  # another machine's state dir: no mirrors, no index of its own
    env = {
        **os.environ,
        "JARVIS_STATE_DIR": str(state),
        "JARVIS_DATABASE_URL": postgres_url,
        "JARVIS_WORKSPACE": str(tmp_path / "workspace"),
    }
    env.pop("OPENAI_API_KEY", None)

    def jarvis(*args):
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )

    r = await asyncio.to_thread(jarvis, "memory", "search", "cabin wifi password", "--json")
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout)["results"][0]["sessionKey"] == key
    r = await asyncio.to_thread(jarvis, "memory", "sync", "--json")  # its missing mirror removes nothing
    assert r.returncode == 0 and orjson.loads(r.stdout)["removed"] == 0, r.stderr
    r = await asyncio.to_thread(jarvis, "memory", "status", "--direct", "--json")
    st = orjson.loads(r.stdout)
    assert st["vector"]["backend"] == "pgvector" and st["sources"]["sessions"]["chunks"] > 0
    r = await asyncio.to_thread(jarvis, "memory", "status", "--direct")
    assert "index:      PostgreSQL postgresql://" in r.stdout and "PostgreSQL" in r.stdout, r.stdout
    assert not list(state.rglob("memory.sqlite*"))


async def test_full_text_ranks_a_rare_word_above_a_common_one(start_gateway, postgres_url, tmp_path):
    # As BM25 does on SQLite: the one note with the rare word beats notes repeating the common one.
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    for i in range(12):
        (ws / "memory" / f"garden-{i:02}.md").write_text(
            f"# Garden {i}\n\nThe garden path, the garden gate, the garden bench and the garden shed number {i}.\n"
        )
    (ws / "memory" / "veg.md").write_text("# Veg\n\nThe zucchini bed is at the back, by the compost.\n")
    a = await start_gateway(
        "a",
        **{
            "storage.url": postgres_url,
            "storage.instanceId": "a",
            "memory": True,
            "workspace": str(ws),
            "memory.embeddings.provider": "none",
        },
    )
    ca = await a.client()
    try:
        await ca.call("memory.sync")
        res = await ca.call("memory.search", {"query": "garden zucchini", "mode": "fts", "k": 3})
        assert res["results"][0]["path"] == "memory/veg.md", res
        assert 0 < res["results"][0]["score"] <= 1 and len(res["results"]) == 3
        # The full-text list itself (before the re-rank, which weighs rarity among the candidates too).
        import asyncpg

        from gateway.memory.index.sources import SOURCES
        from gateway.storage.postgres.memory.fulltext import PgFullText

        pool = await asyncpg.create_pool(postgres_url, min_size=1, max_size=2)
        try:
            text = PgFullText(pool, a.config.agent_id, a.config.memory.search.context_weight)
            hits = await text.search(["garden", "zucchini"], 5, SOURCES, None, generation=None, total=13)
            path = await pool.fetchval("SELECT path FROM memory_chunks WHERE id = $1", hits[0][0])
            assert path == "memory/veg.md" and len(hits) == 5 and all(h[1] < 0 for h in hits)
            assert [h[1] for h in hits] == sorted(h[1] for h in hits)
        finally:
            await pool.close()
    finally:
        await ca.close()


async def test_mmr_reads_the_stored_vectors_from_postgresql(start_gateway, postgres_url, tmp_path):
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    for i, text in enumerate(
        [
            "The cello lesson is on Tuesday.",
            "Lena's cello teacher is Mr Okafor.",
            "The cello case is in the hall.",
            "Tuesday is also bin day.",
        ]
    ):
        (ws / "memory" / f"n{i}.md").write_text(f"# Note {i}\n\n{text}\n")
    a = await start_gateway(
        "a",
        **{
            "storage.url": postgres_url,
            "storage.instanceId": "a",
            "memory": True,
            "workspace": str(ws),
            "memory.search.mmr": True,
        },
    )
    ca = await a.client()
    try:
        await ca.call("memory.sync")
        res = await ca.call("memory.search", {"query": "cello Tuesday", "k": 3})
        assert len(res["results"]) == 3 and len({r["path"] for r in res["results"]}) == 3
        mem = a.gw.services.memory
        hits = [
            Hit(r["path"], r["source"], r["startLine"], r["endLine"], r["score"], r["snippet"]) for r in res["results"]
        ]
        vecs = await mem.index.stored_vectors(hits)
        assert vecs is not None and sorted(vecs) == [0, 1, 2] and all(v.shape == (256,) for v in vecs.values())
    finally:
        await ca.close()


async def test_a_first_large_load_builds_the_fulltext_index_after_it(start_gateway, postgres_url, tmp_path):
    """Past BULK_LOAD_FILES files into an empty chunk table, the full-text GIN index is dropped for the load
    and built over the loaded rows at its end (the vectors have no index: the gateway searches them in
    memory); searches find the same things. The batches are prepared in worker processes. The vectors went in
    through COPY in pgvector's binary form: a chunk's text as the query finds it at cosine 1."""
    import asyncio
    import multiprocessing
    import random

    import asyncpg

    from gateway.storage.postgres.memory.store import BULK_LOAD_FILES

    rng = random.Random(5)
    words = (
        "apple bread cheese dentist email garden invoice jacket kettle ladder meeting nephew oven "
        "parcel quilt recipe salad ticket umbrella violin window yoghurt zipper"
    ).split()
    ws = tmp_path / "workspace"
    for i in range(BULK_LOAD_FILES + 10):
        d = ws / "memory" / f"{i // 200:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"n{i:04d}.md").write_text(f"# Note {i}\n\n{' '.join(rng.choice(words) for _ in range(12))}\n")
    (ws / "memory" / "boat.md").write_text("# Boat\n\nThe sailing boat is moored at the marina in Kiel.\n")
    # Two worker processes prepare the batches (the memory pipeline), as on a machine of 3+ cores.
    gw = await start_gateway(
        "a",
        **{
            "storage.url": postgres_url,
            "storage.instanceId": "a",
            "memory": True,
            "workspace": str(ws),
            "memory.sync.onStart": False,
            "memory.sync.watch": False,
            "memory.sync.processes": 2,
        },
    )
    c = await gw.client()
    conn = await asyncpg.connect(postgres_url)
    gin = "SELECT 'memory_chunks_fts'::regclass::oid"
    try:
        gin_before = await conn.fetchval(gin)
        workers: set[int] = set()

        async def watch_workers() -> None:
            while True:
                workers.update(p.pid for p in multiprocessing.active_children())
                await asyncio.sleep(0.05)

        watching = asyncio.create_task(watch_workers())
        res = await c.call("memory.sync")
        watching.cancel()
        assert len(workers) == 2, "two worker processes prepared the batches"
        assert res["indexed"] == BULK_LOAD_FILES + 11
        assert await conn.fetchval(gin) != gin_before, "dropped for the load and built again after it"
        assert await conn.fetchval("SELECT count(*) FROM memory_vectors") == BULK_LOAD_FILES + 11
        found = await c.call("memory.search", {"query": "where is the sailing boat moored", "mode": "vector"})
        assert found["results"] and found["results"][0]["path"] == "memory/boat.md", found
        found = await c.call("memory.search", {"query": "marina Kiel", "mode": "fts"})
        assert found["results"] and found["results"][0]["path"] == "memory/boat.md", found
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN (FORMAT TEXT) SELECT id FROM memory_chunks WHERE tsv @@ to_tsquery('english', 'marina')"
            )
        )
        assert "memory_chunks_fts" in plan, plan
        text = await conn.fetchval("SELECT text FROM memory_chunks WHERE path = 'memory/boat.md'")
        found = await c.call("memory.search", {"query": text, "mode": "vector", "k": 1})
        assert found["results"][0]["score"] > 0.999, found  # its own vector, as sent: cosine 1
    finally:
        await conn.close()
        await c.close()


async def test_a_full_text_index_a_dead_load_left_missing_is_made_at_open(start_gateway, postgres_url, tmp_path):
    """A gateway that died during a first bulk load leaves the chunk table without its GIN index (dropped
    for the load, built after it): the next gateway to open the agent's index makes it again, and full
    text finds through it."""
    import asyncpg

    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "MEMORY.md").write_text(NOTES)
    a, _ = await pair(start_gateway, postgres_url, tmp_path)
    ca = await a.client()
    try:
        await ca.call("memory.sync")
    finally:
        await ca.close()
    await a.stop()
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("DROP INDEX memory_chunks_fts")  # as the dead gateway's load left it
        c = await (
            await start_gateway(
                "c",
                **{
                    "storage.url": postgres_url,
                    "storage.instanceId": "c",
                    "memory": True,
                    "workspace": str(ws),
                    "memory.embeddings.provider": "local",
                },
            )
        ).client()
        try:
            res = await c.call("memory.search", {"query": "cello teacher", "mode": "fts"})
            assert res["results"] and "cello" in res["results"][0]["snippet"], res
        finally:
            await c.close()
        assert await conn.fetchval("SELECT to_regclass('memory_chunks_fts') IS NOT NULL")
    finally:
        await conn.close()


@pytest.mark.parametrize("path", ["ann", "matrix"])
async def test_two_gateways_find_each_others_new_vectors_in_memory(
    start_gateway, postgres_url, tmp_path, monkeypatch, path
):
    """The vectors are searched in each gateway's memory (the ANN graph, or the matrix), loaded from the
    database, the store of record: what A indexes after B loaded its copy, B finds too (its graph takes
    the rows above the highest id it holds, its matrix appends them), and B's vector search answers from
    memory, not SQL. No HNSW index is made in the database."""
    import asyncpg

    from gateway.storage.postgres.memory import vector_search

    monkeypatch.setattr(vector_search, "MATRIX_THRESHOLD", 0)  # a "big" index of a few chunks
    quiet = {"memory.sync.onStart": False, "memory.sync.onSearch": False, "memory.sync.watch": False}
    vec = {"memory.search.annMinVectors": 1 if path == "ann" else 0}
    a, b = await pair(start_gateway, postgres_url, tmp_path, a=vec, b={**quiet, **vec})
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key, "My sister Alejandra keeps bees in Oaxaca.")

        async def indexed(n: int):
            async def check():
                st = await ca.call("memory.status")
                return st["sources"]["sessions"]["files"] >= n and st["vector"]["missing"] == 0

            await wait_for(check)

        await indexed(1)
        q = {"mode": "vector", "sources": ["sessions"], "k": 3}

        async def in_memory():  # B's graph built / matrix loaded from the database, then answering
            res = await cb.call("memory.search", {"query": "Where does Alejandra keep her bees?", **q})
            st = (await cb.call("memory.status"))["vector"]
            ready = (st["ann"] or {}).get("ready") if path == "ann" else st["matrix"] is not None
            return ready and res["results"] and res

        res = await wait_for(in_memory)
        assert res["results"][0]["path"] == f"sessions/{key}.jsonl"
        key2 = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, key2, "The lighthouse keeper Ingvar paints seagulls on driftwood.")
        await indexed(2)

        async def found_new():
            res = await cb.call("memory.search", {"query": "Who paints seagulls on driftwood?", **q})
            return res["results"] and res["results"][0]["path"] == f"sessions/{key2}.jsonl" and res

        if path == "ann":  # the graph takes a small write's rows before it answers: the first search finds them
            assert await found_new()
        else:  # the matrix appends them in the background; the old one answers meanwhile
            await wait_for(found_new)
        assert b.gw.services.memory.index.vsearch.last_path == path
        conn = await asyncpg.connect(postgres_url)
        try:
            hnsw = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'memory_vectors_hnsw%'")
        finally:
            await conn.close()
        assert hnsw == 0
    finally:
        await ca.close()
        await cb.close()


async def test_the_hnsw_index_an_older_version_made_is_dropped(postgres_url):
    """Migration v002 drops the per-dimension HNSW indexes earlier versions made (the gateway searches the
    vectors in memory now)."""
    import asyncpg

    from gateway.storage.postgres.db import migrate, migrate_vectors

    pool = await asyncpg.create_pool(postgres_url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        assert await migrate_vectors(pool) is None
        async with pool.acquire() as conn:
            await conn.execute(
                "CREATE INDEX IF NOT EXISTS memory_vectors_hnsw_8 ON memory_vectors "
                "USING hnsw ((embedding::vector(8)) vector_cosine_ops) WHERE dims = 8"
            )
            await conn.execute("DELETE FROM jarvis_migrations WHERE name = 'v002_drop_hnsw'")
        assert await migrate_vectors(pool) is None
        gone = await pool.fetchval("SELECT to_regclass('memory_vectors_hnsw_8') IS NULL")
        assert gone
        # An old gateway of the same database (a rolling upgrade) makes it again, v002 recorded: the new
        # code finds it at open (a catalog check) and drops it.
        await pool.execute(
            "CREATE INDEX IF NOT EXISTS memory_vectors_hnsw_8 ON memory_vectors "
            "USING hnsw ((embedding::vector(8)) vector_cosine_ops) WHERE dims = 8"
        )
        assert await migrate_vectors(pool) is None
        assert await pool.fetchval("SELECT to_regclass('memory_vectors_hnsw_8') IS NULL")
    finally:
        await pool.close()


async def _vector_rows(pool, agent: str, vecs: dict[int, list[float] | None]) -> dict[int, int]:
    """Chunks k → their ids; a vector stored for those given one (None: a chunk left without, as after a
    provider failure)."""

    ids = {}
    for k, v in vecs.items():
        ids[k] = await pool.fetchval(
            "INSERT INTO memory_chunks(agent_id, path, source, start_line, end_line, hash, text) "
            "VALUES ($1, $2, 'memory', 1, 1, $3, $3) RETURNING id",
            agent,
            f"memory/{k}.md",
            f"chunk {k}",
        )
        if v is not None:
            await _store_vector(pool, agent, ids[k], v)
    return ids


async def _store_vector(pool, agent: str, chunk_id: int, v) -> None:
    from gateway.storage.postgres.memory.vectors import vector_text

    await pool.execute(
        "INSERT INTO memory_vectors(chunk_id, agent_id, source, dims, embedding) "
        "VALUES ($1, $2, 'memory', $3, $4::text::vector)",
        chunk_id,
        agent,
        len(v),
        vector_text(np.asarray(v, dtype=np.float32)),
    )


@pytest.mark.parametrize("path", ["ann", "matrix"])
async def test_a_vector_stored_later_for_an_older_chunk_is_searched(postgres_url, tmp_path, monkeypatch, path):
    """Issue 47: the matrix and the graph catch up by `seq` (every insert advances it), not by chunk id: a
    vector stored after them for an OLD chunk (fill_missing after a provider failure) is searched, a
    saved graph reopened holds it, a graph file of another database is rebuilt; a deleted chunk is never
    answered, though the float32 matrix still holds it."""
    import asyncpg

    from gateway.storage.postgres.db import migrate, migrate_vectors
    from gateway.storage.postgres.memory import vector_search
    from gateway.storage.postgres.memory.vector_search import PgMatrixSearch, store_position
    from gateway.storage.vectors.ann import AnnIndex

    monkeypatch.setattr(vector_search, "MATRIX_THRESHOLD", 0)
    pool = await asyncpg.create_pool(postgres_url, min_size=1, max_size=3)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        assert await migrate_vectors(pool) is None
        agent, d = f"seq-{path}", 8
        rng = np.random.default_rng(7)
        vecs = {k: (None if k == 10 else (rng.normal(size=d) / 3).tolist()) for k in range(60)}
        ids = await _vector_rows(pool, agent, vecs)
        store = await store_position(pool)

        def graph() -> AnnIndex | None:
            if path != "ann":
                return None
            ann = AnnIndex(tmp_path / f"{agent}.pg", d, by_id=True)
            ann.store_id, ann.seq_ceiling = store
            return ann

        s = PgMatrixSearch(pool, agent, d, ann=graph(), ann_min=1 if path == "ann" else 0)
        await s.warm("g1", 59)
        target = np.ones(d, dtype=np.float32) / np.sqrt(d)
        await _store_vector(pool, agent, ids[10], target)  # older than every id the structures hold
        hits = await s.knn(target, 3, ("memory",), None, "g2", 60)
        if path == "matrix":  # the old matrix answers while the rows stored since are read
            await s._loading
            hits = await s.knn(target, 3, ("memory",), None, "g2", 60)
        assert hits[0][0] == ids[10], hits
        assert s.last_path == path
        if path == "ann":  # the graph answers: no matrix held beside it, none loaded for a narrow filter
            warm_load = s._loading  # warm's, while the graph was built
            assert await s.knn(target, 3, ("sessions",), None, "g2", 60) == []
            assert s.last_path == "sql" and s._matrix is None and s._loading is warm_load
        # a deleted chunk: its row leaves the table; the structures still hold it until a rebuild/reload
        best = np.asarray(vecs[20], dtype=np.float32)
        await pool.execute("DELETE FROM memory_chunks WHERE id = $1", ids[20])
        hits = await s.knn(best, 3, ("memory",), None, "g3", 59)
        assert ids[20] not in [i for i, _ in hits] and len(hits) == 3
        await s.close("g3", 59)
        if path == "ann":  # reopened from its file: it holds chunk 10's vector
            store = await store_position(pool)  # as a gateway reads it at open
            s = PgMatrixSearch(pool, agent, d, ann=graph(), ann_min=1)
            await s.warm("g3", 59)
            assert s.ann.origin == "file"
            hits = await s.knn(target, 1, ("memory",), None, "g3", 59)
            assert hits[0][0] == ids[10]
            await s.close("g3", 59)
            for case in ("another database", "a restore: the file is past the sequence"):
                other = graph()
                if case == "another database":
                    other.store_id = case
                else:
                    other.seq_ceiling = 5
                s = PgMatrixSearch(pool, agent, d, ann=other, ann_min=1)
                await s.warm("g3", 59)
                assert s.ann.origin == "built"
                await s.close("g3", 59)
            # a tool's process (`jarvis memory search` beside the gateway: storage opened not to serve)
            # builds its graph but never writes the gateway's file
            saved = (other.path.read_bytes(), other.meta_path.read_text())
            tool = graph()
            tool.store_id, tool.saves = "another database", False
            s = PgMatrixSearch(pool, agent, d, ann=tool, ann_min=1)
            await s.warm("g3", 59)
            assert s.ann.origin == "built"
            s.ann.dirty = True
            await s.close("g3", 59)
            assert (other.path.read_bytes(), other.meta_path.read_text()) == saved
    finally:
        await pool.close()


async def test_a_search_during_warm_does_not_load_the_matrix_twice(postgres_url, monkeypatch):
    """Issue 47: warm() loads through the one `_loading` task, so a search arriving meanwhile (the service
    warms in the background at open) waits on that load instead of starting a second full one."""
    import asyncpg

    from gateway.storage.postgres.db import migrate, migrate_vectors
    from gateway.storage.postgres.memory import vector_search
    from gateway.storage.postgres.memory.vector_search import PgMatrixSearch

    monkeypatch.setattr(vector_search, "MATRIX_THRESHOLD", 0)
    pool = await asyncpg.create_pool(postgres_url, min_size=1, max_size=3)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        assert await migrate_vectors(pool) is None
        rng = np.random.default_rng(3)
        await _vector_rows(pool, "warm-once", {k: rng.normal(size=8).tolist() for k in range(30)})
        s = PgMatrixSearch(pool, "warm-once", 8)
        warm = asyncio.create_task(s.warm("g1", 30))
        await asyncio.sleep(0)  # one turn of the loop: warm has begun its load
        first = s._loading
        assert first is not None
        hits = await s.knn(rng.normal(size=8).astype(np.float32), 3, ("memory",), None, "g1", 30)
        assert s._loading is first and len(hits) == 3
        await warm
        assert s._loading is first and s.matrix_form == "float32"
        await s.close()
    finally:
        await pool.close()
