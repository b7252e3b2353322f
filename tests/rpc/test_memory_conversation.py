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
        asked = next(i for i, d in enumerate(lines, start=1) if d.get("message", {}).get("content") == QUESTION)
        status = await c.call("memory.status")
        assert status["sources"]["sessions"]["files"] == 2, "the turn's own transcript was synced before recall"

        recalled = final["memory"]
        assert recalled, "the note is recalled"
        assert recalled[0]["path"] == "MEMORY.md", recalled
        assert not any(
            r["path"] == f"sessions/{key}.jsonl" and r["startLine"] <= asked <= r["endLine"] for r in recalled
        ), "the message being answered is not recalled"
        assert "14 June" in final["message"]["content"]

        # memory.search ranks the statement above the earlier identical question too.
        res = await c.call("memory.search", {"query": QUESTION})
        assert res["results"][0]["path"] == "MEMORY.md", res["results"]
        assert "14 June" in res["results"][0]["snippet"]
        await c.close()
    finally:
        await gw.stop()


async def test_offline_replies_and_quoted_recalls_are_not_memory(tmp_path):
    cfg = make_config(tmp_path / "state", memory=True, **{"memory.sync.sessionDebounceMs": 50})
    cfg.workspace_dir.mkdir(parents=True)
    (cfg.workspace_dir / "MEMORY.md").write_text("# Boat\n\nMy sailing boat is called Seahorse.\n")
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        await turn(c, key, "The marina fee for the Seahorse is due on the ninth of March.")
        final = await turn(c, key, "What is my sailing boat called?")
        reply = final["message"]["content"]
        assert reply.startswith("I am Jarvis's offline responder") and "From memory I recalled:" in reply
        replies = [d for d in transcript_lines(cfg, key) if d.get("message", {}).get("role") == "assistant"]
        assert len(replies) == 2 and all(d["provider"] == "offline" and d["remember"] is False for d in replies)

        # A transcript written before replies were marked (an offline reply recognised by its first
        # words), and a model's reply that quotes the recalled-memory block of its prompt.
        old = "0ld-session"
        append_sync(
            cfg.sessions_dir() / f"{old}.jsonl",
            [
                header(old, "main"),
                message_record("u1", "user", "Where do I keep the spare anchor?"),
                message_record(
                    "a1",
                    "assistant",
                    "I am Jarvis's offline responder, not a language model: no chat "
                    "model is configured.\nYou wrote: “Where do I keep the spare anchor?”\n\nFrom memory "
                    "I recalled:\n- MEMORY.md:1-3 (score 0.41): # Boat My sailing boat is called Seahorse.",
                ),
                message_record(
                    "a2",
                    "assistant",
                    "The anchor is in the forward locker, next to the fenders.\n\n"
                    "## Recalled memory\n[MEMORY.md:1-3]\n# Boat\nMy sailing boat is called Seahorse.\n\n"
                    "- sessions/other.jsonl:2-4 (score 0.50): User: the gangway rattles",
                ),
            ],
        )
        await c.call("memory.sync", {})

        async def sessions_hits(query):
            res = await c.call("memory.search", {"query": query, "sources": ["sessions"], "mode": "fts"})
            return res["results"]

        for query in (
            "offline responder language model",
            "recalled",
            "Seahorse sailing boat called",
            "gangway rattles",
            "chat model configured",
        ):
            hits = await sessions_hits(query)
            assert not [
                h
                for h in hits
                if "offline responder" in h["snippet"]
                or "recalled" in h["snippet"]
                or "Seahorse." in h["snippet"]
                or "gangway" in h["snippet"]
            ], (query, hits)
        # What the user said is memory, and so are a model's own words.
        fee = await sessions_hits("marina fee ninth of March")
        assert fee and fee[0]["sessionKey"] == key and "The marina fee for the Seahorse" in fee[0]["snippet"]
        assert (await sessions_hits("spare anchor"))[0]["sessionKey"] == old
        locker = await sessions_hits("forward locker fenders")
        assert locker and "The anchor is in the forward locker, next to the fenders." in locker[0]["snippet"]
        assert "Seahorse" not in locker[0]["snippet"]
        # The next turn recalls the note, not an earlier reply that quoted it.
        final = await turn(c, key, "Remind me what my sailing boat is called")
        assert [r["path"] for r in final["memory"]][:1] == ["MEMORY.md"]
        assert not any(
            r["path"].startswith("sessions/") and r["score"] >= final["memory"][0]["score"] for r in final["memory"][1:]
        )
        await c.close()
    finally:
        await gw.stop()


async def test_transcript_chunks_keep_who_spoke(tmp_path):
    cfg = make_config(tmp_path / "state", memory=True, **{"memory.sync.sessionDebounceMs": 50})
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        await turn(c, key, "The marina fee is due on the ninth of March.")
        # An imported chat with a model's replies, and a message that names its speaker.
        chat = "imported-chat"
        append_sync(
            cfg.sessions_dir() / f"{chat}.jsonl",
            [
                header(chat, "main"),
                message_record("m1", "user", "Which bulbs should go along the fence?"),
                message_record("m2", "assistant", "Tulip bulbs do well along a sunny fence; plant them in October."),
                {
                    **message_record("m3", "user", "I planted forty daffodils by the shed."),
                    "message": {"role": "user", "name": "Kari", "content": "I planted forty daffodils by the shed."},
                },
            ],
        )
        # A transcript whose messages already start with their speaker's name keeps them as they are.
        named = "named-chat"
        append_sync(
            cfg.sessions_dir() / f"{named}.jsonl",
            [
                header(named, "main"),
                message_record("n1", "user", "Caroline: I went to the pottery workshop on Saturday."),
                message_record("n2", "assistant", "Melanie: How lovely! What did you make at the workshop?"),
            ],
        )
        await c.call("memory.sync", {})

        async def snippet(query, session):
            res = await c.call("memory.search", {"query": query, "sources": ["sessions"]})
            hits = [r for r in res["results"] if r["sessionKey"] == session]
            assert hits, (query, res["results"])
            return hits[0]["snippet"]

        assert "User: The marina fee is due on the ninth of March." in await snippet("marina fee", key)
        text = await snippet("tulip bulbs fence", chat)
        assert "User: Which bulbs should go along the fence?" in text
        assert "Assistant: Tulip bulbs do well along a sunny fence" in text
        assert "Kari: I planted forty daffodils by the shed." in await snippet("daffodils shed", chat)
        text = await snippet("pottery workshop", named)
        assert "Caroline: I went to the pottery workshop" in text and "Melanie: How lovely!" in text
        assert "User:" not in text and "Assistant:" not in text
        await c.close()
    finally:
        await gw.stop()


async def test_a_chat_message_that_looks_like_a_speaker_label_keeps_who_spoke(tmp_path):
    """The README's own example as a first message: "Remember:" is the user's word, not a speaker's name
    (issue 23, point 5). Imported chats that name their speakers (no runId) still keep their names."""
    cfg = make_config(tmp_path / "state", memory=True, **{"memory.sync.sessionDebounceMs": 50})
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        await turn(c, key, "Remember: my boat is blue.")
        await c.call("memory.sync", {})
        res = await c.call("memory.search", {"query": "boat blue", "sources": ["sessions"]})
        hits = [r for r in res["results"] if r["sessionKey"] == key]
        assert hits and "User: Remember: my boat is blue." in hits[0]["snippet"], res["results"]
        await c.close()
    finally:
        await gw.stop()


async def test_a_question_about_the_persons_own_life_is_not_left_empty(tmp_path):
    """A first-person question that shares no word with any note and is close to none by the floor
    (minSimilarity) gets the closest few notes (search/floor.py), not nothing, scored low (below the chat
    recall's minScore); a query that is not about the person's life — a how-to, a topic — still gets
    nothing."""
    cfg = make_config(tmp_path / "state", memory=True)
    ws = cfg.workspace_dir
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "kitchen.md").write_text(
        "# Kitchen\n\nPastry want kiwi on the winter menu; it makes my mouth swell up, so I never taste it.\n"
    )
    (ws / "memory" / "car.md").write_text("# Car\n\nThe Volvo's next service is due at 90,000 km.\n")
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        await c.call("memory.sync", {})
        for mode in ("hybrid", "vector"):
            res = await c.call("memory.search", {"query": "Which fruit do I react to?", "mode": mode})
            assert [r["path"] for r in res["results"]][:1] == ["memory/kitchen.md"], (mode, res["results"])
            assert len(res["results"]) <= 3 and all(0 < r["score"] < 0.3 for r in res["results"]), res["results"]
            for unrelated in ("quantum chromodynamics lecture", "How do I boil an egg?"):
                res = await c.call("memory.search", {"query": unrelated, "mode": mode})
                assert res["results"] == [], (mode, unrelated, res["results"])
        await c.close()
    finally:
        await gw.stop()


async def test_unrelated_hits_are_not_returned_by_default(tmp_path, capsys):
    cfg = make_config(tmp_path / "state", memory=True)
    ws = cfg.workspace_dir
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(NOTES)
    (ws / "memory" / "garden.md").write_text(
        "# Garden\n\nThe tomatoes need water twice a week in July.\nCompost goes in the left bin.\n"
    )
    (ws / "memory" / "car.md").write_text("# Car\n\nThe Volvo's next service is due at 90,000 km.\n")
    (ws / "memory" / "2026-11-20.md").write_text(
        "# 20 November\n\nCalled the plumber about the kitchen sink; he comes on Friday.\n"
    )
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        await c.call("memory.sync", {})
        for mode in ("hybrid", "vector", "fts"):
            res = await c.call("memory.search", {"query": QUESTION, "mode": mode})
            assert [r["path"] for r in res["results"]] == ["MEMORY.md"], (mode, res["results"])
            res = await c.call("memory.search", {"query": "what should I do about the sink", "mode": mode})
            assert [r["path"] for r in res["results"]] == ["memory/2026-11-20.md"], (mode, res["results"])
            res = await c.call("memory.search", {"query": "quantum chromodynamics lecture", "mode": mode})
            assert res["results"] == [], (mode, res["results"])
        await c.close()
    finally:
        await gw.stop()
    # The command line answers the same.
    capsys.readouterr()  # the gateway's log lines
    run = memory_cli(cfg, capsys)
    code, out = await asyncio.to_thread(run, "memory", "search", QUESTION, "--json")
    assert code == 0
    assert [r["path"] for r in orjson.loads(out)["results"]] == ["MEMORY.md"]
    code, out = await asyncio.to_thread(run, "memory", "search", "quantum chromodynamics lecture", "--json")
    assert code == 0 and orjson.loads(out)["results"] == []
