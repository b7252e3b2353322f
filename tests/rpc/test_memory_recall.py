"""memory.recall end to end: memories and transcript messages from a period (dates, datetimes,
relative spans), optionally ranked by a query; bad periods are refused naming the field."""

from __future__ import annotations

import orjson
import pytest

from tests.helpers import RpcError


def write_transcript(path, key, messages):
    lines = [{"type": "session", "version": 1, "sessionKey": key, "agentId": "main", "createdAt": messages[0][0]}]
    for i, (ts, role, text) in enumerate(messages):
        lines.append({"type": "message", "id": f"m{i}", "timestamp": ts, "message": {"role": role, "content": text}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


async def test_recall_by_period_query_and_category(start_gateway, tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2020-01-10.md").write_text(
        "# 2020-01-10\n\n## Morning\n\nDentist appointment moved to Friday.\n\n## Evening\n\nBought a kayak paddle.\n"
    )
    (ws / "memory" / "2020-01-12.md").write_text("# 2020-01-12\n\nVisited the lighthouse museum.\n")
    (ws / "memory" / "notes.md").write_text("Undated notes never count for a period.\n")
    gw = await start_gateway(memory=True, workspace=str(ws))
    write_transcript(
        gw.config.sessions_dir() / "old-chat.jsonl",
        "old-chat",
        [
            ("2020-01-10T09:00:00.000Z", "user", "Remind me about the dentist on Friday"),
            ("2020-01-10T09:00:01.000Z", "assistant", "Noted: dentist on Friday."),
            ("2020-01-15T12:00:00.000Z", "user", "What about the kayak trip?"),
        ],
    )
    c = await gw.client()

    res = await c.call("memory.recall", {"from": "2020-01-10", "to": "2020-01-10"})
    got = {(r["path"], r["startLine"]) for r in res["results"]}
    assert got == {
        ("memory/2020-01-10.md", 3),
        ("memory/2020-01-10.md", 7),
        ("sessions/old-chat.jsonl", 2),
        ("sessions/old-chat.jsonl", 3),
    }
    assert res["from"] == "2020-01-10T00:00:00.000Z" and res["to"] == "2020-01-10T23:59:59.999Z"
    stamps = [r["timestamp"] for r in res["results"]]
    assert stamps == sorted(stamps, reverse=True), "newest first without a query"
    msg = next(r for r in res["results"] if r["startLine"] == 2 and r["source"] == "sessions")
    assert msg["sessionKey"] == "old-chat" and msg["role"] == "user" and msg["timestamp"] == "2020-01-10T09:00:00.000Z"
    assert "dentist" in msg["snippet"] and msg["kind"] == "message" and "score" not in msg
    section = next(r for r in res["results"] if r["startLine"] == 7)
    assert section["endLine"] == 9 and section["snippet"] == "## Evening\n\nBought a kayak paddle."

    # Datetimes narrow to the message; a query ranks (and drops what matches nothing).
    res = await c.call(
        "memory.recall", {"from": "2020-01-10T09:00:00.500Z", "to": "2020-01-10T10:00:00Z", "sources": ["sessions"]}
    )
    assert [r["startLine"] for r in res["results"]] == [3]
    res = await c.call("memory.recall", {"from": "2020-01-01", "to": "2020-01-31", "query": "kayak"})
    assert res["results"] and all("kayak" in r["snippet"].lower() for r in res["results"][:2])
    assert {r["path"] for r in res["results"][:2]} == {"memory/2020-01-10.md", "sessions/old-chat.jsonl"}
    assert all(0 < r["score"] <= 1 for r in res["results"])
    res = await c.call("memory.recall", {"from": "2020-01-01", "to": "2020-01-31", "k": 2})
    assert [r["timestamp"][:10] for r in res["results"]] == ["2020-01-15", "2020-01-12"]

    # Relative periods: only what is recent (a keyed memory set now, a message sent now).
    await c.call("memory.set", {"key": "plan", "value": "Kayak trip in June.", "category": "projects"})
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "pack the kayak helmet"})
    await c.run_to_end(sent["runId"])
    res = await c.call("memory.recall", {"from": "24h"})
    kinds = {(r["kind"], r["path"]) for r in res["results"]}
    assert ("keyed", "memory/keyed/projects/plan.md") in kinds
    assert ("message", f"sessions/{key}.jsonl") in kinds
    assert not any(r["timestamp"].startswith("2020") for r in res["results"])
    res = await c.call("memory.recall", {"from": "2w", "category": "projects"})
    assert [(r["key"], r["category"]) for r in res["results"]] == [("plan", "projects")]
    assert (await c.call("memory.recall", {"from": "7d", "category": "people"}))["results"] == []
    await c.close()

    await gw.restart()
    c = await gw.client()
    res = await c.call("memory.recall", {"from": "2020-01-12", "to": "2020-01-12"})
    assert [r["path"] for r in res["results"]] == ["memory/2020-01-12.md"]
    await c.close()


async def test_bad_periods_are_refused_naming_the_field(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    for params, field, words in (
        ({"from": "2020-02-01", "to": "2020-01-01"}, "params.from", "must not be after `to`"),
        ({"from": "1h", "to": "2d"}, "params.from", "must not be after"),
        ({"from": "last tuesday"}, "params.from", "is not a time"),
        ({"to": "2020-13-45"}, "params.to", "is not a time"),
        ({"from": "7x"}, "params.from", "is not a time"),
        ({"category": "gossip"}, "params.category", "must be one of"),
        ({"k": 0}, "params.k", ">= 1"),
    ):
        with pytest.raises(RpcError) as ei:
            await c.call("memory.recall", params)
        assert ei.value.code == -32602 and ei.value.data["field"] == field, (params, ei.value.message)
        assert words in ei.value.message, (params, ei.value.message)
    await c.close()
