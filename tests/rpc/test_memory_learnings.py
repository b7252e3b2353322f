"""memory.learn end to end: LEARNINGS.md sections and entries, near-duplicates refresh instead of
adding, the file is indexed and readable through memory.get, and each agent has its own."""

from __future__ import annotations

import re
import stat
from datetime import datetime, timezone

import pytest

from tests.helpers import RpcError


async def test_learn_adds_dedupes_indexes_and_persists(start_gateway, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    # A hand-edited file with an old entry: learning it again refreshes its date.
    (ws / "LEARNINGS.md").write_text(
        "# Learnings\n\nSome intro the user wrote.\n\n## Corrections\n\n"
        "- [2020-01-01] The cat is called Miso, not Mochi.\n"
    )
    gw = await start_gateway(memory=True, workspace=str(ws))
    c = await gw.client()
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")

    a = await c.call("memory.learn", {"category": "preferences", "text": "User prefers short answers in bullet points"})
    assert a["status"] == "added" and a["entry"]["section"] == "User Preferences" and a["entry"]["date"] == today
    assert a["entry"]["path"] == "LEARNINGS.md"
    dup = await c.call(
        "memory.learn", {"category": "User Preferences", "text": "user prefers short answers in bullet points please"}
    )
    assert dup["status"] == "refreshed" and dup["similarity"] >= 0.8
    assert dup["entry"]["line"] == a["entry"]["line"] and dup["entry"]["text"] == a["entry"]["text"]
    other = await c.call("memory.learn", {"category": "preferences", "text": "User prefers long detailed essays"})
    assert other["status"] == "added"
    fixed = await c.call("memory.learn", {"category": "corrections", "text": "the cat is called Miso, not Mochi"})
    assert fixed["status"] == "refreshed" and fixed["entry"]["date"] == today
    # Same words in another section are a separate learning.
    tool = await c.call("memory.learn", {"category": "tools", "text": "User prefers short answers in bullet points"})
    assert tool["status"] == "added" and tool["entry"]["section"] == "Tool Usage"
    await c.call("memory.learn", {"category": "patterns", "text": "Summarise long threads before answering."})

    f = ws / "LEARNINGS.md"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    text = f.read_text()
    assert "Some intro the user wrote." in text and "[2020-01-01]" not in text
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sorted(sections) == sorted(["Corrections", "User Preferences", "Successful Patterns", "Tool Usage"])
    prefs = text.split("## User Preferences")[1].split("\n## ")[0]
    assert re.findall(r"^- \[\d{4}-\d{2}-\d{2}\] .+$", prefs, re.M) == [
        f"- [{today}] User prefers short answers in bullet points",
        f"- [{today}] User prefers long detailed essays",
    ]
    lines = text.splitlines()
    assert lines[tool["entry"]["line"] - 1] == f"- [{today}] User prefers short answers in bullet points"

    res = await c.call("memory.search", {"query": "Miso Mochi cat", "mode": "fts"})
    assert res["results"] and res["results"][0]["path"] == "LEARNINGS.md", "indexed at once"
    got = await c.call("memory.get", {"path": "LEARNINGS.md", "lines": 3})
    assert got["text"].startswith("# Learnings")
    st = await c.call("memory.status")
    assert st["sources"]["memory"]["files"] == 1
    await c.close()

    await gw.restart()
    c = await gw.client()
    again = await c.call("memory.learn", {"category": "patterns", "text": "summarise long threads before answering"})
    assert again["status"] == "refreshed"
    assert (await c.call("memory.search", {"query": "bullet points", "mode": "fts"}))["results"][0][
        "path"
    ] == "LEARNINGS.md"
    await c.close()


async def test_learn_refuses_unknown_categories_and_keeps_agents_apart(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    for params, field, words in (
        ({"category": "gossip", "text": "x"}, "params.category", "unknown learnings category"),
        ({"category": "preferences", "text": "   "}, "params.text", "blank"),
        ({"category": "preferences", "text": "!!!"}, "params.text", "at least one word"),
        ({"category": "preferences"}, "params.text", "required"),
    ):
        with pytest.raises(RpcError) as ei:
            await c.call("memory.learn", params)
        assert ei.value.code == -32602 and ei.value.data["field"] == field and words in ei.value.message
    assert not (gw.config.workspace_dir / "LEARNINGS.md").exists()

    await c.call("sessions.create", {"agentId": "coder"})
    await c.call("memory.learn", {"agentId": "coder", "category": "tools", "text": "Run pytest with -x first"})
    await c.call("memory.learn", {"category": "tools", "text": "Use the calendar tool for birthdays"})
    assert "pytest" in (gw.config.agent_workspace("coder") / "LEARNINGS.md").read_text()
    assert "pytest" not in (gw.config.workspace_dir / "LEARNINGS.md").read_text()
    assert (await c.call("memory.search", {"query": "pytest", "mode": "fts"}))["results"] == []
    hits = (await c.call("memory.search", {"query": "pytest", "mode": "fts", "agentId": "coder"}))["results"]
    assert [h["path"] for h in hits] == ["LEARNINGS.md"]
    # The same learning in the other agent is new there, not a refresh.
    same = await c.call(
        "memory.learn", {"agentId": "coder", "category": "tools", "text": "Use the calendar tool for birthdays"}
    )
    assert same["status"] == "added"
    await c.close()
