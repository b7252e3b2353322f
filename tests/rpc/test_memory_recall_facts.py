"""What the chat model sees (issue 48 item 3): the recall block of a turn's system prompt starts with the
ledger's current facts the message is about, dated — every subject it touches and every thing it names,
not only the one the search put first — through a real gateway whose chat model is a scripted
OpenAI-compatible upstream that records its prompt; `memory.recall.facts` bounds them (0: none added)."""

from __future__ import annotations

import re

from tests.fake_openai import FakeOpenAI

NOTES = {
    "2025-01-10": "I live in Leeds, in a flat by the canal.",
    "2025-02-01": "I've been seeing someone for a few weeks, her name is Elin.",
    "2025-04-02": "Adopted a tortoise! Her name is Biscuit.",
    "2025-06-01": "We moved to York last week, got the keys to a terraced house.",
    "2025-08-20": "Noor and I made it official, she's my girlfriend now.",
    "2025-11-02": "Moved again: I now live in Dundee, by the river Tay.",
    "2025-11-20": "Elin sent a leek soup recipe, the one with crème fraîche.",
}


async def _prompt(c, api: FakeOpenAI, message: str) -> str:
    key = (await c.call("sessions.create", {"label": "asking"}))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    await c.run_to_end(sent["runId"])
    return next(m["content"] for m in api.requests[-1]["body"]["messages"] if m["role"] == "system")


def _facts(system: str) -> list[str]:
    """The lines of the prompt's "What is true now" section ([] when it has none)."""
    if "## What is true now\n" not in system:
        return []
    return system.split("## What is true now\n", 1)[1].split("\n\n", 1)[0].splitlines()


async def _gateway(start_gateway, api: FakeOpenAI, **more):
    gw = await start_gateway(**{"memory": True, "chat.baseUrl": api.base_url, "chat.model": "fake-model", **more})
    notes = gw.config.agent_workspace("main") / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    for day, line in NOTES.items():
        (notes / f"{day}.md").write_text(f"# {day}\n\n{line}\n")
    return gw


async def test_the_recall_block_starts_with_every_current_fact_the_message_touches(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await _gateway(start_gateway, api)
        c = await gw.client()
        try:
            await c.call("memory.sync", {})
            # Two subjects at once (the partner by name, the home by the question), each current, dated.
            system = await _prompt(c, api, "Noor wants us to get a dog, is where I live now big enough for one?")
            facts = _facts(system)
            assert any(
                re.match(r"- home: .*Dundee.* \(since 2025-11-02; memory/2025-11-02\.md:\d+-\d+\)", f) for f in facts
            ), facts
            assert any(re.match(r"- partner: .*Noor.* \(since 2025-08-20; ", f) for f in facts), facts
            assert not any("Leeds" in f or "York" in f or "Elin" in f for f in facts), facts  # nothing superseded
            assert system.index("## What is true now") < system.index("## Recalled memory")
            # A thing named ("Biscuit"): its fact, though the message asks about no subject of the lexicon.
            facts = _facts(await _prompt(c, api, "Should Biscuit get a bigger enclosure for the winter?"))
            assert any(f.startswith("- pet: ") and "Biscuit" in f for f in facts), facts
            # A message about nothing the ledger holds adds no fact.
            assert _facts(await _prompt(c, api, "Give me a leek soup recipe")) == []
        finally:
            await c.close()


async def test_recall_facts_zero_adds_none_beside_the_search(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await _gateway(start_gateway, api, **{"memory.recall.facts": 0})
        c = await gw.client()
        try:
            await c.call("memory.sync", {})
            facts = _facts(await _prompt(c, api, "Should Biscuit get a bigger enclosure for the winter?"))
            assert not any(f.startswith("- pet: ") for f in facts), facts
        finally:
            await c.close()
