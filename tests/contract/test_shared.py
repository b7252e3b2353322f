"""What two stores of one agent on the same storage see of each other: two gateways on one database,
or a gateway and a CLI on one state dir. Once the writer has flushed and the reader has been told
(`grown`: what a `lines` notification does), the reader's answers and its local transcript agree."""

from __future__ import annotations

import asyncio

import orjson

from gateway.sessions import transcript as tx


async def test_a_second_store_sees_sessions_messages_and_deletes_of_the_first(storage, sessions):
    other = storage.sessions("main")
    await other.open()
    try:
        await sessions.create(key="both", label="shared")
        hello = tx.message_record("m1", "user", "hello", timestamp="2030-01-01T00:00:00.000Z")
        await sessions.append_messages("both", hello)
        await sessions.flush()
        await other.grown("both")
        meta = await other.get("both")
        assert (meta["label"], meta["messageCount"], meta["updatedAt"]) == ("shared", 1, "2030-01-01T00:00:00.000Z")
        lines = (await other.local_transcript("both")).read_bytes().splitlines()
        assert [orjson.loads(line)["type"] for line in lines] == ["session", "message"]
        assert [m["content"] for m in (await other.history("both", 10, None))["messages"]] == ["hello"]

        await other.delete("both")
        await sessions.gone("both")
        assert not await sessions.exists("both")
    finally:
        await other.close()


async def test_concurrent_appends_are_all_kept_each_once_and_counted(sessions):
    await sessions.create(key="busy")
    ids = [f"m{i}" for i in range(20)]
    await asyncio.gather(*(sessions.append_messages("busy", tx.message_record(i, "user", i)) for i in ids))
    await sessions.flush()
    assert (await sessions.get("busy"))["messageCount"] == 20
    seen = [m["id"] for m in (await sessions.history("busy", 50, None))["messages"]]
    assert sorted(seen) == sorted(ids)


async def test_a_keyed_memory_set_through_one_store_is_read_through_another(storage):
    first, second = storage.keyed("main"), storage.keyed("main")
    entry, _, _ = await first.set("shared-fact", "Both see this.", "facts")
    assert (await second.get("shared-fact")).full() == entry.full()
    assert [m["key"] for m in (await second.list(None, 10, 0))["memories"]] == ["shared-fact"]
    await second.delete("shared-fact")
    assert await first.find("shared-fact") is None
    again, replaced, _ = await first.set("shared-fact", "Back.", None)
    assert replaced is False and again.category == "general"
