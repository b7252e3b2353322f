"""Memory that knows what is true now, through a real gateway: dated hits, the latest statement first, and
what the model is shown (issue 37)."""

from __future__ import annotations

import re

from tests.fake_openai import FakeOpenAI

OLD = "The code of the back gate is 4826, write it down."
NEW = "We changed the lock: the code of the back gate is now 7340."
QUESTION = "What's the code of the back gate?"


async def say(c, label: str, message: str) -> str:
    key = (await c.call("sessions.create", {"label": label}))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    await c.run_to_end(sent["runId"])
    return key


async def test_the_newer_statement_leads_dated_and_the_model_is_told_which_is_superseded(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await start_gateway(**{"memory": True, "chat.baseUrl": api.base_url, "chat.model": "fake-model"})
        c = await gw.client()
        old = await say(c, "Old gate", OLD)
        new = await say(c, "New gate", NEW)
        await c.call("memory.sync", {})

        res = await c.call("memory.search", {"query": QUESTION, "k": 5})
        top = res["results"]
        assert [r.get("sessionKey") for r in top[:2]] == [new, old], top
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["date"]) for r in top)
        assert top[0]["date"] > top[1]["date"] and top[1]["supersededBy"] == top[0]["date"]
        # Asked about the past, the older leads.
        past = (await c.call("memory.search", {"query": "What was the old code of the back gate?"}))["results"]
        assert past[0]["sessionKey"] == old

        # Chat: the model's prompt cites each recalled hit with its date and conversation, newest first.
        key = (await c.call("sessions.create", {"label": "Asking"}))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": QUESTION})
        events = await c.run_to_end(sent["runId"])
        system = api.requests[-1]["body"]["messages"][0]["content"]
        day = top[0]["date"][:10]
        newer = system.index(f'[{day} · session "New gate" · sessions/{new}.jsonl:')
        older = system.index(f'[{day} · session "Old gate" · sessions/{old}.jsonl:')
        assert newer < older and f"superseded by {day}]" in system[older:].split("\n")[0]
        final = events[-1]["params"]
        assert final["memory"] and all(m["date"] for m in final["memory"])
        await c.close()
