"""Importing conversations into a SessionStore as a running gateway holds it (open), on every engine: whole
sessions in, the same export twice adds nothing, new turns appended, sessions.max kept — and the store's
own answers (get, export, history) exact throughout."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import SessionLimit
from gateway.portability.conversation import session_key
from gateway.portability.importer import Limits, import_export
from gateway.sessions import transcript as tx
from tests.vendor_exports import chatgpt_sample, chatgpt_zip, long_chatgpt

CONFIG = {"sessions.max": 6}


async def test_an_import_into_an_open_store_is_exact_and_idempotent(storage, sessions, tmp_path):
    convs, expect = chatgpt_sample()
    path = chatgpt_zip(tmp_path / "export.zip", convs)
    report = await import_export(sessions, path, "chatgpt", agent_id="main", limits=Limits(batch=1))
    assert report["conversations"]["added"] == 2
    for conv in convs[:2]:
        key = session_key("chatgpt", conv["id"])
        copy = await sessions.export(key)
        records = [orjson.loads(line) for line in copy.lines]
        assert [
            (r["id"], r["message"]["role"], r["message"]["content"], r["timestamp"]) for r in records[1:]
        ] == expect[conv["id"]]
        meta = await sessions.get(key)
        assert meta == copy.meta and meta["messageCount"] == len(expect[conv["id"]])
        assert meta["updatedAt"] == expect[conv["id"]][-1][3] and meta["label"] == conv["title"]
        lines = (await sessions.local_transcript(key)).read_bytes().splitlines()
        assert tuple(lines) == copy.lines

    # A chat in a session made after the import: the store's counters stay exact (the files engine's
    # clean-close marker is the open store's, never an import's to set).
    await sessions.create(key="later")
    await sessions.append_messages("later", tx.message_record("x1", "user", "hi", timestamp="2030-01-01T00:00:00.000Z"))
    later = await sessions.export("later")
    assert later.meta["messageCount"] == 1 and later.meta["updatedAt"] == "2030-01-01T00:00:00.000Z"

    again = await import_export(sessions, path, "chatgpt", agent_id="main")
    assert again["conversations"]["unchanged"] == 2 and again["messages"]["added"] == 0


async def test_new_turns_are_appended_and_counted(storage, sessions, tmp_path):
    short = long_chatgpt("grow", 4)
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([short.json()]))
    await import_export(sessions, path, "chatgpt", agent_id="main")
    for i in range(4, 7):
        short.text("user" if i % 2 == 0 else "assistant", f"later turn {i}")
    path.write_bytes(orjson.dumps([short.json()]))
    dry = await import_export(sessions, path, "chatgpt", agent_id="main", dry_run=True)
    assert dry["conversations"]["extended"] == 1 and dry["messages"]["added"] == 3
    report = await import_export(sessions, path, "chatgpt", agent_id="main")
    assert report["conversations"]["extended"] == 1 and report["messages"]["added"] == 3
    key = session_key("chatgpt", short.id)
    meta = await sessions.get(key)
    assert meta["messageCount"] == 7
    page = await sessions.history(key, 50, None)
    assert [m["content"] for m in page["messages"]][-3:] == ["later turn 4", "later turn 5", "later turn 6"]


async def test_sessions_max_stops_the_import_and_keeps_what_fit(storage, sessions, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([long_chatgpt(f"c{i}", 2).json() for i in range(8)]))
    await sessions.create(key="mine")
    dry = await import_export(sessions, path, "chatgpt", agent_id="main", dry_run=True)
    assert dry["conversations"]["added"] == 5 and dry["conversations"]["skipped"] == 3
    assert dry["skippedConversations"][0]["reason"] == "over sessions.max (6)"
    with pytest.raises(SessionLimit) as err:
        await import_export(sessions, path, "chatgpt", agent_id="main", limits=Limits(batch=3))
    assert err.value.data["done"]["conversations"]["added"] == 5
    _, total = await sessions.list(50, 0)
    assert total == 6


@pytest.mark.parametrize("vendor", ["chatgpt", "claude"])
async def test_a_conversation_past_the_nodes_limit_is_skipped_unparsed_naming_the_limit(
    storage, sessions, tmp_path, vendor
):
    """Issue 43.7: one 240,000-node chain peaked at 1.4 GB; a conversation's nodes (ChatGPT) or messages
    (Claude) are counted in its bytes and one past `Limits.conversation_nodes` is skipped before it is
    parsed, the report naming the limit; the others are imported. A message that says the key's name
    (\"children\", \"sender\") in its text does not count."""
    from datetime import datetime, timezone

    from tests.vendor_exports import ClaudeConversation

    def conversation(seed: str, n: int) -> dict:
        if vendor == "chatgpt":
            c = long_chatgpt(seed, n)
            c.text("user", 'my "children" and the "sender" of the letter')
            return c.json()
        cl = ClaudeConversation(seed, f"claude {seed}", datetime(2026, 1, 1, tzinfo=timezone.utc))
        for i in range(n):
            cl.add("human" if i % 2 == 0 else "assistant", f'turn {i}: my "children" and the "sender"')
        return cl.json()

    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([conversation("small", 10), conversation("huge", 80), conversation("fits", 30)]))
    report = await import_export(sessions, path, vendor, agent_id="main", limits=Limits(conversation_nodes=40))
    assert report["conversations"]["found"] == 3 and report["conversations"]["added"] == 2
    [skipped] = report["skippedConversations"]
    assert skipped["index"] == 1
    assert "more than the 40 one conversation may have" in skipped["reason"] and "limit" in skipped["reason"]
