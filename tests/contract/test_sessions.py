"""SessionStore's contract: sessions and their transcripts, the same on every engine."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest

from gateway.errors import Conflict, Invalid, NotFound, SessionLimit
from gateway.sessions import transcript as tx


def msg(role: str, content: str, timestamp: str) -> dict:
    return tx.message_record(str(uuid.uuid4()), role, content, timestamp=timestamp)


async def test_a_created_session_is_listed_with_zero_messages_and_a_header_only_transcript(sessions):
    made = await sessions.create(label="groceries", key="shop")
    assert made["sessionKey"] == "shop" and made["label"] == "groceries" and made["messageCount"] == 0
    assert made["createdAt"] == made["updatedAt"]
    assert await sessions.get("shop") == made
    assert await sessions.all() == {"shop": made}
    assert await sessions.exists("shop") and not await sessions.exists("other")
    lines = (await sessions.local_transcript("shop")).read_bytes().splitlines()
    assert [orjson.loads(line)["type"] for line in lines] == ["session"]
    assert orjson.loads(lines[0])["sessionKey"] == "shop" and orjson.loads(lines[0])["agentId"] == "main"
    generated = await sessions.create()
    assert uuid.UUID(generated["sessionKey"])


async def test_the_same_key_twice_is_a_conflict_and_a_bad_key_is_invalid(sessions):
    await sessions.create(key="once")
    with pytest.raises(Conflict):
        await sessions.create(key="once")
    for bad in ("..", "a/b", "x" * 129, "spaces are not allowed"):
        with pytest.raises(Invalid) as err:
            await sessions.create(key=bad)
        assert err.value.data["field"] == "sessionKey"
    assert list(await sessions.all()) == ["once"]


async def test_past_max_sessions_create_is_refused_exactly_and_leaves_no_transcript(sessions):
    sessions.max = 3
    made = await asyncio.gather(*(sessions.create(key=f"s{i}") for i in range(8)), return_exceptions=True)
    refused = [r for r in made if isinstance(r, BaseException)]
    assert len(refused) == 5 and all(isinstance(r, SessionLimit) for r in refused), refused
    assert "sessions.max" in refused[0].message and refused[0].data == {"max": 3}
    kept = set(await sessions.all())
    assert len(kept) == 3
    assert {p.stem for p in sessions.dir.glob("*.jsonl")} == kept, "a refused create left its transcript"
    with pytest.raises(Conflict) as again:  # an existing key is still "already exists", not the limit
        await sessions.create(key=sorted(kept)[0])
    assert not isinstance(again.value, SessionLimit)
    await sessions.delete(sorted(kept)[0])
    assert (await sessions.create(key="after"))["sessionKey"] == "after"


async def test_settings_are_kept_only_when_set_and_an_empty_one_resets(sessions):
    made = await sessions.create(key="s", settings={"model": "big-model", "systemPrompt": ""})
    assert made["model"] == "big-model" and "systemPrompt" not in made
    changed = await sessions.update("s", label="renamed", systemPrompt="be brief")
    assert (changed["label"], changed["model"], changed["systemPrompt"]) == ("renamed", "big-model", "be brief")
    assert changed["updatedAt"] >= made["updatedAt"]
    reset = await sessions.update("s", model="")
    assert "model" not in reset and reset["systemPrompt"] == "be brief"
    assert await sessions.get("s") == reset


async def test_appended_messages_count_and_date_the_session_and_other_records_do_not(sessions):
    await sessions.create(key="talk")
    await sessions.append_messages(
        "talk",
        msg("user", "hello", "2030-01-01T10:00:00.000Z"),
        msg("assistant", "hi there", "2030-01-01T10:00:01.000Z"),
    )
    await sessions.append_records("talk", {"type": "compaction", "summary": "greetings"})
    await sessions.append_messages("talk", msg("user", "bye", "2030-01-01T10:00:02.000Z"))
    meta = await sessions.get("talk")
    assert meta["messageCount"] == 3 and meta["updatedAt"] == "2030-01-01T10:00:02.000Z"
    assert (await sessions.all())["talk"] == meta
    types = [orjson.loads(line)["type"] for line in (await sessions.local_transcript("talk")).read_bytes().splitlines()]
    assert types == ["session", "message", "message", "compaction", "message"]


async def test_history_pages_back_from_the_newest_message(sessions):
    await sessions.create(key="h")
    records = [
        msg("user" if i % 2 == 0 else "assistant", f"message {i}", f"2030-01-01T10:00:{i:02d}.000Z") for i in range(5)
    ]
    await sessions.append_messages("h", *records)
    last = await sessions.history("h", limit=2, before=None)
    assert [m["content"] for m in last["messages"]] == ["message 3", "message 4"] and last["hasMore"] is True
    older = await sessions.history("h", limit=10, before=last["messages"][0]["id"])
    assert [m["content"] for m in older["messages"]] == ["message 0", "message 1", "message 2"]
    assert older["hasMore"] is False
    with pytest.raises(NotFound):
        await sessions.history("h", limit=2, before="no-such-message")


async def test_a_message_bigger_than_a_page_is_shown_cut_and_marked(sessions):
    await sessions.create(key="big")
    await sessions.append_messages("big", msg("assistant", "x" * 50_000, "2030-01-01T10:00:00.000Z"))
    page = await sessions.history("big", limit=10, before=None, max_bytes=4096)
    (m,) = page["messages"]
    assert m["truncated"] is True and m["contentChars"] == 50_000 and len(m["content"]) < 4096


async def test_list_pages_most_recently_updated_first(sessions):
    for i, key in enumerate(["a", "b", "c"]):
        await sessions.create(key=key)
        await sessions.append_messages(key, msg("user", key, f"2030-01-0{3 - i}T00:00:00.000Z"))
    page, total = await sessions.list(limit=2, offset=0)
    assert total == 3 and [s["sessionKey"] for s in page] == ["a", "b"]
    rest, _ = await sessions.list(limit=2, offset=2)
    assert [s["sessionKey"] for s in rest] == ["c"]


async def test_a_missing_session_is_not_found_everywhere(sessions):
    with pytest.raises(NotFound):
        await sessions.get("ghost")
    with pytest.raises(NotFound):
        await sessions.update("ghost", label="x")
    with pytest.raises(NotFound):
        await sessions.delete("ghost")
    with pytest.raises(NotFound):
        await sessions.history("ghost", limit=5, before=None)


async def test_a_deleted_session_is_gone_and_its_key_starts_a_new_life_once_purged(sessions):
    await sessions.create(key="d", label="first life")
    await sessions.append_messages("d", msg("user", "old words", "2030-01-01T00:00:00.000Z"))
    await sessions.delete("d")
    assert not await sessions.exists("d") and await sessions.all() == {}
    with pytest.raises(NotFound):
        await sessions.append_messages("d", msg("user", "into nothing", "2030-01-01T00:00:01.000Z"))
    with pytest.raises(Conflict) as taken:  # in the trash, the key is still its
        await sessions.create(key="d")
    assert "in the trash" in taken.value.message
    await sessions.purge(["d"])
    again = await sessions.create(key="d")
    assert again["messageCount"] == 0 and again["label"] is None
    assert (await sessions.history("d", limit=10, before=None))["messages"] == []


async def test_everything_is_there_again_for_a_store_opened_after_close(storage, sessions):
    await sessions.create(key="kept", label="keep me", settings={"model": "m"})
    await sessions.append_messages("kept", msg("user", "remember", "2030-01-01T00:00:00.000Z"))
    before = await sessions.get("kept")
    await sessions.close()
    reopened = storage.sessions("main")
    await reopened.open()
    try:
        assert await reopened.get("kept") == before and before["messageCount"] == 1
        assert [m["content"] for m in (await reopened.history("kept", 10, None))["messages"]] == ["remember"]
    finally:
        await reopened.close()


async def test_agents_do_not_see_each_others_sessions(storage, sessions):
    await sessions.create(key="mine")
    other = storage.sessions("other")
    await other.open()
    try:
        assert await other.all() == {} and not await other.exists("mine")
        await other.create(key="mine")  # the same key is another session there
        assert await storage.has_agent("other") is storage.shared
    finally:
        await other.close()
    assert (await sessions.get("mine"))["messageCount"] == 0
