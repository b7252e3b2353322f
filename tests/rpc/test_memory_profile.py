"""What Jarvis believes about the person, through a real gateway (issue 48): the ledger's current fact
leads a question in other words and opens the model's recall block, dated; memory.profile lists it with
its evidence and history; a correction is a keyed memory of its own (versioned, undone by deleting it,
which puts it in the trash); asOf is checked."""

from __future__ import annotations

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError

OLD = "I've been seeing someone for a few weeks, her name is Elin."
NEW = "Noor and I made it official, she's my girlfriend now."
QUESTION = "Who am I going out with these days?"


async def say(c, label: str, message: str) -> str:
    key = (await c.call("sessions.create", {"label": label}))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    await c.run_to_end(sent["runId"])
    return key


async def test_the_current_fact_leads_the_recall_and_the_profile_can_be_corrected(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await start_gateway(**{"memory": True, "chat.baseUrl": api.base_url, "chat.model": "fake-model"})
        c = await gw.client()
        old = await say(c, "Elin", OLD)
        new = await say(c, "Noor", NEW)
        await say(c, "Soup", "Can you suggest a soup with leeks?")
        await c.call("memory.sync", {})

        top = (await c.call("memory.search", {"query": QUESTION, "k": 5}))["results"]
        assert top[0]["sessionKey"] == new and top[0]["fact"]["subject"] == "partner", top
        assert all(r.get("supersededBy") for r in top if r.get("sessionKey") == old)

        # The model's prompt opens its recalled memory with what is true now, dated.
        key = (await c.call("sessions.create", {"label": "Asking"}))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": QUESTION})
        await c.run_to_end(sent["runId"])
        system = api.requests[-1]["body"]["messages"][0]["content"]
        facts = system.split("## What is true now\n", 1)[1].split("\n\n", 1)[0]
        assert facts.startswith("- partner: ") and f"sessions/{new}.jsonl" in facts and "since 20" in facts

        prof = (await c.call("memory.profile", {}))["facts"]
        partner = next(f for f in prof if f["subject"] == "partner")
        assert partner["evidence"]["path"] == f"sessions/{new}.jsonl" and partner["source"] == "extractor"
        assert len(partner["history"]) == 1 and partner["history"][0]["until"] == partner["since"]

        # A correction: a keyed memory of its own, the latest statement of its subject.
        await c.call("memory.set", {"key": "profile.partner", "value": "Noor Haddad", "category": "people"})
        await c.call("memory.sync", {})
        partner = next(f for f in (await c.call("memory.profile", {}))["facts"] if f["subject"] == "partner")
        assert (partner["value"], partner["source"]) == ("Noor Haddad", "correction")
        assert [h["value"] for h in partner["history"]][-1] != "Noor Haddad"
        # ...versioned like every keyed memory, and undone by deleting it (it goes to the trash).
        await c.call("memory.set", {"key": "profile.partner", "value": "Noor H.", "category": "people"})
        assert len((await c.call("memory.history", {"key": "profile.partner"}))["versions"]) == 2
        await c.call("memory.delete", {"key": "profile.partner"})
        assert [t["key"] for t in (await c.call("memory.trash", {}))["memories"]] == ["profile.partner"]
        await c.call("memory.sync", {})
        partner = next(f for f in (await c.call("memory.profile", {}))["facts"] if f["subject"] == "partner")
        assert partner["source"] == "extractor" and partner["evidence"]["path"] == f"sessions/{new}.jsonl"
        await c.close()


@pytest.mark.parametrize("bad", ["yesterday-ish", "2025-13-40", "31/12/2025", " "])
async def test_as_of_must_be_an_iso_date_or_datetime(start_gateway, bad):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    with pytest.raises(RpcError) as exc:
        await c.call("memory.search", {"query": "home", "asOf": bad})
    assert exc.value.code == -32602 and exc.value.data["field"] == "params.asOf", exc.value.data
    assert "ISO 8601" in str(exc.value.message) or "must" in str(exc.value.message)
    ok = await c.call("memory.search", {"query": "home", "asOf": "2025-06-01"})
    assert ok["asOf"] == "2025-06-01T23:59:59.999Z"
    await c.close()


async def test_codes_of_numbered_things_each_lead_their_own_question(start_gateway, tmp_path):
    """Thirty lockers' codes are thirty subjects, not one code said thirty times: a question naming box 17
    gets box 17's code first, never box 7's (a qualifier is named whole: "17" is not "7") or the newest box's."""
    gw = await start_gateway(memory=True)
    ws = gw.config.agent_workspace(gw.config.agent_id)
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    for i in range(30):
        (ws / "memory" / f"note-{i}.md").write_text(f"# Note {i}\n\nThe locker code for box {i} is {1000 + i}.\n")
    c = await gw.client()
    await c.call("memory.sync", {"force": True})
    for box in (7, 17, 27):
        top = (await c.call("memory.search", {"query": f"locker code box {box}"}))["results"][0]
        assert top["path"] == f"memory/note-{box}.md", (box, top)
        if "fact" in top:
            assert top["fact"]["value"] == str(1000 + box)


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"limit": 0}, "params.limit", ">= 1"),
        ({"limit": 501}, "params.limit", "<= 500"),
        ({"history": -1}, "params.history", ">= 0"),
        ({"history": 101}, "params.history", "<= 100"),
        ({"subject": "spaceship"}, "params.subject", "unknown subject 'spaceship'"),
        ({"subject": "spaceship:red"}, "params.subject", "unknown subject 'spaceship'"),
        ({"cursor": "bm90IG9uZQ"}, "params.cursor", "not a cursor memory.profile returned"),
        ({"cursor": "%%%"}, "params.cursor", "not a cursor memory.profile returned"),
    ],
)
async def test_the_profile_is_bounded_and_says_which_parameter_breaks_which_rule(start_gateway, params, field, says):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    with pytest.raises(RpcError) as exc:
        await c.call("memory.profile", params)
    assert exc.value.code == -32602 and exc.value.data["field"] == field, exc.value.data
    assert says in str(exc.value.message), exc.value.message
    ok = await c.call("memory.profile", {"limit": 500, "history": 100, "subject": "code"})
    assert ok == {"facts": []}
    await c.close()
