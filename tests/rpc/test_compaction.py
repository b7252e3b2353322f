"""Compaction flushes older messages into the day's memory file; retention prunes ephemeral sessions."""

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from gateway.config import SessionsConfig
from gateway.sessions import transcript as tx
from gateway.sessions.retention import ephemeral_victims
from gateway.timeutil import to_iso
from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError


async def chat(c, key, text):
    sent = await c.call("chat.send", {"sessionKey": key, "message": text})
    return (await c.run_to_end(sent["runId"]))[-1]


def day_file(gw):
    return gw.config.workspace_dir / "memory" / f"{datetime.now(timezone.utc):%Y-%m-%d}.md"


async def test_automatic_compaction_keeps_recent_messages_and_indexes_the_flush(start_gateway):
    gw = await start_gateway(memory=True, **{"chat.historyMessages": 4, "chat.compactKeepRecent": 2})
    c = await gw.client()
    key = (await c.call("sessions.create", {"label": "Boats"}))["sessionKey"]
    await chat(c, key, "My sailing boat Seahorse is moored at Kinsale harbour.")
    await chat(c, key, "The engine was serviced in April by Dermot.")
    await chat(c, key, "Remind me to buy new fenders.")  # 6 messages > window of 4 → compaction

    path = day_file(gw)
    transcript = gw.config.sessions_dir() / f"{key}.jsonl"
    for _ in range(200):  # compaction runs in the background after chat.final: wait for its marker
        if any(r.data["type"] == "compaction" for r in tx.iter_records(transcript)):
            break
        await asyncio.sleep(0.05)
    text = path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600", "summaries are as private as transcripts"
    assert text.startswith("# ") and "## Conversation “Boats”" in text
    assert "Seahorse is moored at Kinsale harbour" in text and "serviced in April by Dermot" in text
    assert "fenders" not in text, "the most recent messages stay verbatim, not flushed"

    records = [r.data for r in tx.iter_records(gw.config.sessions_dir() / f"{key}.jsonl")]
    markers = [r for r in records if r["type"] == "compaction"]
    assert len(markers) == 1 and markers[0]["messages"] == 4
    lines = text.splitlines()
    assert lines[markers[0]["startLine"] - 1].startswith("## Conversation")
    assert markers[0]["endLine"] == len(lines)

    hist = await c.call("sessions.history", {"sessionKey": key})
    assert len(hist["messages"]) == 6, "the transcript keeps every message"

    res = await c.call("memory.search", {"query": "Kinsale harbour", "sources": ["memory"]})
    assert res["results"] and res["results"][0]["path"] == path.relative_to(gw.config.workspace_dir).as_posix()
    await c.close()


async def test_model_summary_and_prompt_carry_on_from_recent_messages(start_gateway):
    with FakeOpenAI() as api:
        gw = await start_gateway(
            **{"chat.baseUrl": api.base_url, "chat.compactKeepRecent": 2, "chat.compactBudgetTokens": 0}
        )
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        for i in range(3):
            await chat(c, key, f"message number {i}")
        api.reply = "- The user counted to three."
        done = await c.call("sessions.compact", {"sessionKey": key})
        assert done["compacted"] == 4 and done["path"].startswith("memory/")
        assert "- The user counted to three." in day_file(gw).read_text()
        assert api.requests[-1]["body"]["messages"][0]["content"].startswith("Summarise the conversation")

        api.reply = "ok"
        await chat(c, key, "and now?")
        prompt = api.requests[-1]["body"]["messages"]
        assert "The user counted to three." in prompt[0]["content"], "the summary leads the prompt"
        assert [m["content"] for m in prompt[1:]] == ["message number 2", "Hello from the fake model.", "and now?"]
        assert (await c.call("sessions.compact", {"sessionKey": key}))["compacted"] == 2
        assert await c.call("sessions.compact", {"sessionKey": key}) == {"compacted": 0}
        with pytest.raises(RpcError) as exc:
            await c.call("sessions.compact", {"sessionKey": "nope"})
        assert exc.value.code == -32004
        await c.close()


async def test_failed_model_summary_falls_back_to_extractive(start_gateway):
    with FakeOpenAI() as api:
        gw = await start_gateway(
            **{
                "chat.baseUrl": api.base_url,
                "chat.compactKeepRecent": 1,
                "chat.compactBudgetTokens": 0,
                "chat.maxRetries": 0,
            }
        )
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        await chat(c, key, "The spare key is under the blue flowerpot.")
        api.script(("status", 500, {}))
        done = await c.call("sessions.compact", {"sessionKey": key})
        assert done["compacted"] == 1
        assert "- **User:** The spare key is under the blue flowerpot." in day_file(gw).read_text()
        await c.close()


def test_retention_picks_old_and_surplus_ephemeral_sessions():
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    ago = lambda h: {"updatedAt": to_iso(now - timedelta(hours=h))}  # noqa: E731
    sessions = {"hook:a": ago(50), "hook:b": ago(1), "hook:c": ago(2), "hook:d": ago(3), "keep": ago(500)}
    cfg = SessionsConfig(ephemeral_max_age_hours=48, ephemeral_max_count=2)
    assert ephemeral_victims(sessions, cfg, now) == ["hook:a", "hook:d"]
    assert ephemeral_victims(sessions, SessionsConfig(ephemeral_prefix=""), now) == []


async def test_prune_deletes_ephemeral_sessions_with_their_transcripts(start_gateway):
    gw = await start_gateway(memory=True, **{"sessions.ephemeralMaxCount": 2, "memory.sync.sessionDebounceMs": 50})
    c = await gw.client()
    keys = []
    for i in range(4):
        s = await c.call("sessions.create", {"sessionKey": f"hook:run-{i}"})
        keys.append(s["sessionKey"])
        await chat(c, s["sessionKey"], f"ephemeral quokka number {i}")
    normal = (await c.call("sessions.create"))["sessionKey"]
    with pytest.raises(RpcError) as exc:
        await c.call("sessions.create", {"sessionKey": "hook:run-0"})
    assert exc.value.code == -32009

    res = await c.call("sessions.prune")
    assert res == {"deleted": ["hook:run-0", "hook:run-1"]}
    left = {s["sessionKey"] for s in (await c.call("sessions.list"))["sessions"]}
    assert left == {"hook:run-2", "hook:run-3", normal}
    assert not (gw.config.sessions_dir() / "hook:run-0.jsonl").exists()
    await c.call("memory.sync")
    hits = (await c.call("memory.search", {"query": "ephemeral quokka", "mode": "fts", "k": 10}))["results"]
    assert {h["sessionKey"] for h in hits} <= {"hook:run-2", "hook:run-3"} and hits
    await c.close()
