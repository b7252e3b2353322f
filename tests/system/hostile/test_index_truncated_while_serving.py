"""The memory index file truncated while the gateway serves (a bad copy or `cp` of a backup over the live
file, a dying disk): a search's read past the new end is a short read, which SQLite reports as damage, so the
file is set aside and rebuilt while the gateway goes on serving (docs/reliability.md #2). Issue 46's eighth
round mapped the reading connections' file (`PRAGMA mmap_size`): the same read was then a memory access past
the end of a mapping — SIGBUS, the whole gateway killed. This runs a real `jarvis serve` so that such a
death is a dead child process, not a dead test run."""

from __future__ import annotations

import asyncio
import sqlite3

from tests.helpers import GatewayProcess, RpcError, connect_client, wait_for

CONFIG = (
    '[memory]\nenabled = true\n[memory.embeddings]\nprovider = "none"\n[memory.sync]\nonSearch = false\nwatch = false\n'
)
# Searched first after the cut: their pages are in no cache of the gateway's, so they are read from the file.
QUERIES = ("harbour words number 250", "gulls number 299", "number 123", "harbour words number 7")


async def test_a_gateway_whose_index_is_truncated_while_it_serves_survives_and_rebuilds(tmp_path):
    state = tmp_path / "state"
    notes = state / "workspace" / "memory"
    notes.mkdir(parents=True)
    for i in range(300):
        (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\n" + f"harbour words number {i} gulls " * 60 + "\n")
    with GatewayProcess.running(state, CONFIG) as gp:
        assert gp.proc is not None
        c = await connect_client(gp.url, gp.token)
        try:
            await c.call("memory.sync")
            found = await c.call("memory.search", {"query": "harbour words number 7"})
            assert found["results"][0]["path"] == "memory/note-007.md"
            db = state / "agents" / "main" / "memory.sqlite"
            # The synced pages copied from the WAL into the file (as the writer's own checkpoints do every
            # 32 MiB), so that searches read them from the file that is then cut short.
            outside = sqlite3.connect(db)
            try:
                outside.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                outside.close()
            # A search after that reads the grown file (a mapping of it, on a tree that maps it, is sized now).
            found = await c.call("memory.search", {"query": "harbour words number 8"})
            assert found["results"][0]["path"] == "memory/note-008.md"
            assert db.stat().st_size > 1_000_000
            with open(db, "r+b") as fh:
                fh.truncate(100_000)

            async def rebuilt() -> bool:
                assert gp.proc is not None and gp.proc.poll() is None, f"the gateway died: {gp.proc.poll()}"
                try:
                    answers = [await c.call("memory.search", {"query": q}) for q in QUERIES]
                except RpcError as e:
                    assert e.code == -32050 and "damaged" in e.message, e.message  # damage said, not a crash
                    return False
                if not all(a["results"] and "damaged" not in a.get("degraded", "") for a in answers):
                    return False
                try:
                    return bool((await c.call("memory.status"))["corrupt"])  # set aside, rebuilt
                except RpcError:
                    return False  # (memory.status reads the damaged file too until it is set aside)

            await wait_for(rebuilt, timeout=60)
            assert any(p.name.startswith("memory.sqlite.corrupt-") for p in db.parent.iterdir())
            found = await c.call("memory.search", {"query": "harbour words number 250"})
            assert found["results"][0]["path"] == "memory/note-250.md"
            assert (await c.call("system.health"))["status"] == "ok"
            assert gp.proc.poll() is None
        finally:
            await asyncio.shield(c.close())
