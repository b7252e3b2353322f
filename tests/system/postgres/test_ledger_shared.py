"""The ledger's facts on a shared PostgreSQL index (memory/ledger/cache.py): gateway B keeps the facts it
read, and a statement gateway A indexed is what B's very next memory.search and memory.profile answer
with — B follows the index's generation, which A's sync moved; B never syncs itself."""

from __future__ import annotations

from tests.helpers import wait_for
from tests.system.postgres.test_memory import chat, pair

QUIET = {
    "memory.sync.onStart": False,
    "memory.sync.onSearch": False,
    "memory.sync.watch": False,
    "memory.sync.sessionDebounceMs": 600_000,
}
ASK = {"query": "Who am I going out with these days?", "sources": ["sessions"]}


async def test_b_answers_with_the_statement_a_indexed_at_once(start_gateway, postgres_url, tmp_path):
    a, b = await pair(start_gateway, postgres_url, tmp_path, b=QUIET)
    ca, cb = await a.client(), await b.client()
    try:
        old = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, old, "I've been seeing someone, her name is Elin.")

        async def indexed(files: int):  # A's sync of the chat, done (A's own search would use A's cache)
            st = await ca.call("memory.status")
            return st["sources"]["sessions"]["files"] >= files and st["vector"]["missing"] == 0

        await wait_for(lambda: indexed(1))
        for _ in range(2):  # B reads the facts once and keeps them
            res = await cb.call("memory.search", ASK)
            assert res["results"][0]["path"] == f"sessions/{old}.jsonl", res
        partner = next(f for f in (await cb.call("memory.profile"))["facts"] if f["subject"] == "partner")
        assert partner["evidence"]["path"] == f"sessions/{old}.jsonl"

        new = (await ca.call("sessions.create"))["sessionKey"]
        await chat(ca, new, "Noor and I made it official, she's my girlfriend now.")
        await wait_for(lambda: indexed(2))
        res = await cb.call("memory.search", ASK)  # at once, on B
        assert res["results"][0]["path"] == f"sessions/{new}.jsonl", res
        assert res["results"][0]["fact"]["subject"] == "partner"
        assert all(r.get("supersededBy") for r in res["results"] if r["path"] == f"sessions/{old}.jsonl")
        partner = next(f for f in (await cb.call("memory.profile"))["facts"] if f["subject"] == "partner")
        assert partner["evidence"]["path"] == f"sessions/{new}.jsonl" and len(partner["history"]) == 1
        assert (await cb.call("memory.status"))["sync"]["runs"] == 0  # B indexed nothing itself
    finally:
        await ca.close()
        await cb.close()
