"""The model's distillation of finished conversations into the ledger, through a real gateway and a
scripted OpenAI-compatible upstream (tests/fake_openai.py): add, update, close; and a model that answers
garbage, refuses, names what does not exist or is too slow — the profile stays right and indexing goes on
(issue 48)."""

from __future__ import annotations

import asyncio
import json

from tests.fake_openai import FakeOpenAI

LEDGER_PROMPT = "You keep a ledger"


def answer(*decisions: dict) -> tuple:
    return ("reply", json.dumps({"decisions": list(decisions)}))


async def until(check, what: str, deadline: float = 15.0):
    """Poll `check()` (async) until it returns something truthy, at most `deadline` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while True:
        got = await check()
        if got:
            return got
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def turn(c, api, message: str, *distilled: tuple) -> str:
    """One conversation of one turn; the upstream answers the chat turn, then the distillation as scripted."""
    api.script(("ok",), *distilled)
    key = (await c.call("sessions.create", {}))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    await c.run_to_end(sent["runId"])
    return key


async def distilled(c, calls: int) -> dict:
    """memory.status's distillation figures once `calls` requests were answered or failed."""

    async def done():
        st = (await c.call("memory.status", {})).get("ledger", {}).get("distill", {})
        return st if st and st["answered"] + st["failed"] >= calls else None

    return await until(done, f"{calls} distillations")


async def profile(c) -> dict:
    await c.call("memory.sync", {})
    return {f["subject"]: f for f in (await c.call("memory.profile", {}))["facts"]}


def gateway_config(api, **more):
    return {
        "memory": True,
        "chat.baseUrl": api.base_url,
        "chat.model": "fake-model",
        "memory.ledger.distillAfterS": 0.05,
        "memory.sync.sessionDebounceMs": 0,
        **more,
    }


async def test_the_model_adds_updates_and_closes_facts_the_rules_cannot_see(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await start_gateway(**gateway_config(api))
        c = await gw.client()
        # No cue word a rule knows: only the model sees that this is where they live.
        first = await turn(
            c,
            api,
            "Home is a tiny cottage in Whitby these days.",
            answer({"op": "add", "subject": "home", "value": "Whitby", "line": 2}),
        )
        await distilled(c, 1)
        facts = await until(lambda: _has(c, "home", "Whitby"), "home = Whitby")
        assert facts["home"]["source"] == "model" and facts["home"]["since"].startswith("20")
        body = next(r["body"] for r in api.requests if LEDGER_PROMPT in json.dumps(r["body"]))
        assert "[line 2] Home is a tiny cottage in Whitby these days." in body["messages"][1]["content"]
        assert not body.get("stream") and not body.get("tools")

        await turn(
            c,
            api,
            "Scarborough from now on, the cottage went back to the owner.",
            answer({"op": "update", "subject": "home", "value": "Scarborough", "line": 2}),
        )
        await distilled(c, 2)
        facts = await until(lambda: _has(c, "home", "Scarborough"), "home = Scarborough")
        assert [h["value"] for h in facts["home"]["history"]] == ["Whitby"]
        # The known facts went with the second request: the model decides against them.
        second = [r["body"] for r in api.requests if LEDGER_PROMPT in json.dumps(r["body"])][1]
        assert "- home: Whitby" in second["messages"][1]["content"]
        # A question in other words finds the model's statement first.
        top = (await c.call("memory.search", {"query": "Which town is my house in?", "k": 3}))["results"][0]
        assert top["fact"]["value"] == "Scarborough" and "Scarborough from now on" in top["snippet"]

        await turn(
            c, api, "That's it, no fixed address for a while.", answer({"op": "close", "subject": "home", "line": 2})
        )
        await distilled(c, 3)
        await until(lambda: _gone(c, "home"), "home closed")
        assert (await c.call("memory.get", {"path": f"memory/ledger/{first}.md"}))["text"].count(
            " · add · home · "
        ) == 1
        await c.close()


async def _has(c, subject: str, value: str):
    facts = await profile(c)
    return facts if facts.get(subject, {}).get("value") == value else None


async def _gone(c, subject: str):
    return subject not in await profile(c)


async def test_garbage_refusal_bad_decisions_and_a_slow_model_change_nothing_and_indexing_goes_on(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await start_gateway(**gateway_config(api, **{"memory.ledger.timeoutS": 1.0}))
        c = await gw.client()
        await turn(c, api, "I live in Leeds, in a flat by the canal.", ("reply", "{not json at all"))
        await distilled(c, 1)
        await turn(c, api, "My dentist is Dr Osei now.", ("reply", "I'm sorry, but I can't help with that."))
        await distilled(c, 2)
        await turn(
            c,
            api,
            "I drive a red Fiat Panda.",
            answer(
                {"op": "add", "subject": "favourite-everything", "value": "x", "line": 2},  # no such subject
                {"op": "add", "subject": "vehicle", "value": "a tank", "line": 999},  # no such line
                {"op": "update", "subject": "vehicle", "value": "", "line": 2},  # no value
                {"op": "explode", "subject": "vehicle", "value": "x", "line": 2},
                "not a decision",
            ),
        )
        st = await distilled(c, 3)
        assert st["rejected"] == 5 and st["decisions"] == 0
        # A model slower than timeoutS: the request is given up; it is tried once more, then left.
        await turn(c, api, "My girlfriend is Elin.", ("hang", 3), ("hang", 3))
        st = await distilled(c, 5)
        assert (st["calls"], st["failed"], st["decisions"]) == (5, 2, 0)

        facts = await profile(c)  # the offline extractor's statements stand
        assert "Leeds" in facts["home"]["value"] and facts["home"]["source"] == "extractor"
        assert facts["dentist"]["source"] == "extractor" and "Panda" in facts["vehicle"]["value"]
        assert "Elin" in facts["partner"]["value"]
        # ...and indexing went on all along.
        hits = (await c.call("memory.search", {"query": "Fiat Panda", "mode": "fts"}))["results"]
        assert hits and "Panda" in hits[0]["snippet"]
        await c.close()


async def test_without_a_chat_model_nothing_is_distilled(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    assert "ledger" not in await c.call("memory.status", {})
    await c.close()


async def test_a_restart_does_not_send_the_model_what_it_already_distilled(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await start_gateway(**gateway_config(api))
        c = await gw.client()
        key = await turn(
            c,
            api,
            "Home is a tiny cottage in Whitby these days.",
            answer({"op": "add", "subject": "home", "value": "Whitby", "line": 2}),
        )
        await distilled(c, 1)
        await c.close()

        await gw.restart()
        c = await gw.client()
        api.script(("ok",), answer())
        sent = await c.call("chat.send", {"sessionKey": key, "message": "The cottage has a blue door now."})
        await c.run_to_end(sent["runId"])
        await distilled(c, 1)  # the new process's first distillation
        bodies = [r["body"] for r in api.requests if LEDGER_PROMPT in json.dumps(r["body"])]
        assert len(bodies) == 2
        convo = bodies[1]["messages"][1]["content"].split("The user's messages:")[1]
        assert "The cottage has a blue door now." in convo and "Whitby" not in convo  # only what is new
        note = (await c.call("memory.get", {"path": f"memory/ledger/{key}.md"}))["text"]
        assert note.count(" · add · home · ") == 1
        await c.close()


async def test_an_unreadable_record_of_what_was_distilled_is_said_and_distillation_goes_on(start_gateway, tmp_path):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await start_gateway(**gateway_config(api))
        record = tmp_path / "state" / "workspace" / "memory" / "ledger" / "distilled.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("{not json")
        c = await gw.client()
        await turn(
            c, api, "Home is a flat in Hull.", answer({"op": "add", "subject": "home", "value": "Hull", "line": 2})
        )
        await distilled(c, 1)
        await until(lambda: _has(c, "home", "Hull"), "home = Hull")
        assert json.loads(record.read_text())  # written anew
        await c.close()
