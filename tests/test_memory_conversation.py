"""Memory that serves a real conversation (issue 16), end to end: a real gateway on a free port, the real
websockets client, the offline responder and the local embedder.

1. a question is not recalled as its own answer (neither the message being answered nor an earlier
   identical question outranks the note that answers it);
2. the offline responder's replies and the recalled-memory blocks a reply quotes are not memory;
3. transcript chunks keep who spoke;
4. unrelated hits are not returned by default.
"""

from __future__ import annotations

import asyncio

import orjson

from gateway.sessions.transcript import append_sync, header, message_record
from tests.helpers import RunningGateway, make_config, memory_cli

NOTES = """# People

Anna works at the harbour office and sails on weekends.
Bjørn's birthday is on 14 June; he likes dark chocolate.
Carla moved to Bergen in 2021 and teaches the violin.
The dentist appointment is every second Tuesday at 9:30.
"""
QUESTION = "When is Bjørn's birthday?"


async def wait_for(predicate, timeout=15.0, interval=0.05):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


def transcript_lines(cfg, key: str) -> list[dict]:
    return [orjson.loads(line) for line in (cfg.sessions_dir() / f"{key}.jsonl").read_bytes().splitlines()]


async def turn(c, key: str, message: str) -> dict:
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    events = await c.run_to_end(sent["runId"])
    assert events[-1]["method"] == "chat.final", events[-1]
    return events[-1]["params"]


async def test_a_question_is_not_recalled_as_its_own_answer(tmp_path):
    # A long debounce keeps a session dirty after its turn, so the next turn's recall syncs the
    # transcript first (sync.onSearch) — with the message being answered already in it.
    cfg = make_config(tmp_path / "state", memory=True, **{"memory.sync.sessionDebounceMs": 60_000})
    cfg.workspace_dir.mkdir(parents=True)
    (cfg.workspace_dir / "MEMORY.md").write_text(NOTES)
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        # The same question, asked in an earlier conversation (and indexed).
        earlier = (await c.call("sessions.create"))["sessionKey"]
        await turn(c, earlier, QUESTION)
        await c.call("memory.sync", {})
        found = await c.call("memory.search", {"query": "Bjørn birthday", "sources": ["sessions"]})
        assert [r["sessionKey"] for r in found["results"]] == [earlier], "the earlier question is indexed"

        key = (await c.call("sessions.create"))["sessionKey"]
        await turn(c, key, "Good morning, Jarvis.")
        final = await turn(c, key, QUESTION)
        lines = transcript_lines(cfg, key)
        asked = next(i for i, d in enumerate(lines, start=1)
                     if d.get("message", {}).get("content") == QUESTION)
        status = await c.call("memory.status")
        assert status["sources"]["sessions"]["files"] == 2, "the turn's own transcript was synced before recall"

        recalled = final["memory"]
        assert recalled, "the note is recalled"
        assert recalled[0]["path"] == "MEMORY.md", recalled
        assert not any(r["path"] == f"sessions/{key}.jsonl" and r["startLine"] <= asked <= r["endLine"]
                       for r in recalled), "the message being answered is not recalled"
        assert "14 June" in final["message"]["content"]

        # memory.search ranks the statement above the earlier identical question too.
        res = await c.call("memory.search", {"query": QUESTION})
        assert res["results"][0]["path"] == "MEMORY.md", res["results"]
        assert "14 June" in res["results"][0]["snippet"]
        await c.close()
    finally:
        await gw.stop()
