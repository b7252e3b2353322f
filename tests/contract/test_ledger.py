"""RunLedger's contract: idempotency keys and active runs, the same on every engine.

Active runs: an engine whose records other gateways see (`shared`) lets one run hold a session at a
time among all of them; the files engine serves one gateway, whose chat service's own table of
runs is the whole truth, so its ledger claims nothing and holds nothing.
"""

from __future__ import annotations

import asyncio


async def test_an_idempotency_key_answers_with_its_run_until_it_expires(storage):
    ledger = storage.ledger("main")
    assert await ledger.seen("s", "k1") is None
    await ledger.remember("s", "k1", "run-1")
    assert await ledger.seen("s", "k1") == "run-1"
    assert await ledger.seen("s", "k2") is None and await ledger.seen("other", "k1") is None
    await ledger.remember("s", "k1", "run-2")  # remembered again: the newer run
    assert await ledger.seen("s", "k1") == "run-2"

    ledger.ttl = 1.0  # chat.idempotencyTtl's least
    await ledger.remember("s", "short", "run-3")
    assert await ledger.seen("s", "short") == "run-3"
    await asyncio.sleep(1.2)
    assert await ledger.seen("s", "short") is None


async def test_forgetting_a_session_drops_only_its_keys(storage):
    ledger = storage.ledger("main")
    await ledger.remember("gone", "k", "run-1")
    await ledger.remember("stays", "k", "run-2")
    await ledger.forget_session("gone")
    assert await ledger.seen("gone", "k") is None and await ledger.seen("stays", "k") == "run-2"


async def test_keys_outlive_the_ledger_of_a_closed_agent(storage):
    await storage.ledger("main").remember("s", "k", "run-1")
    assert await storage.ledger("main").seen("s", "k") == "run-1"  # an agent closed when idle, opened again
    assert await storage.ledger("other").seen("s", "k") is None


async def test_one_run_holds_a_session_at_a_time_where_the_ledger_is_shared(storage):
    ledger = storage.ledger("main")
    assert await ledger.claim("s", "run-1") is None
    if not ledger.shared:
        assert await ledger.claim("s", "run-2") is None and await ledger.holder("s") is None
        return
    assert await ledger.claim("s", "run-2") == "run-1"
    assert await storage.ledger("main").claim("s", "run-3") == "run-1"  # another agent object, same record
    run, instance = await ledger.holder("s")
    assert run == "run-1" and instance
    assert await ledger.claim("other", "run-4") is None
    await ledger.release("s", "run-2")  # not the holder: nothing changes
    assert (await ledger.holder("s"))[0] == "run-1"
    await ledger.release("s", "run-1")
    assert await ledger.holder("s") is None
    assert await ledger.claim("s", "run-2") is None
