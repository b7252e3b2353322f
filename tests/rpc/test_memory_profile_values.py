"""The profile shows values, not sentences (issue 48 item 1), through a real gateway: what the person said
in passing becomes `home: Glasgow`, `partner: Felix`, `employer: staff nurse at Royal Infirmary`, with the
message kept as the evidence; the model's prompt opens with the same values."""

from __future__ import annotations

from tests.fake_openai import FakeOpenAI

SAID = [
    "Actually I now live in Glasgow since the spring, right by the Botanic Gardens.",
    "I've been seeing a guy named Felix for a few weeks, he's lovely.",
    "I'm a staff nurse at Royal Infirmary, nights mostly.",
    "The wifi password is heron-4-lake, can you keep it for me?",
    "My sister moved to Leeds last month.",  # someone else's home: not the person's
    "Where do I live these days?",  # a question states nothing
]


async def test_the_profile_shows_the_value_and_keeps_the_sentence_as_evidence(start_gateway):
    with FakeOpenAI() as api:
        api.reply = "Noted."
        gw = await start_gateway(**{"memory": True, "chat.baseUrl": api.base_url, "chat.model": "fake-model"})
        c = await gw.client()
        for i, message in enumerate(SAID):
            key = (await c.call("sessions.create", {"label": f"s{i}"}))["sessionKey"]
            sent = await c.call("chat.send", {"sessionKey": key, "message": message})
            await c.run_to_end(sent["runId"])
        await c.call("memory.sync", {})

        facts = {f["subject"]: f for f in (await c.call("memory.profile", {}))["facts"]}
        got = {s: facts[s]["value"] for s in ("home", "partner", "employer")}
        assert got == {"home": "Glasgow", "partner": "Felix", "employer": "staff nurse at Royal Infirmary"}, facts
        # a password the index keeps masked (memory/secrets.py) is shown as its mask, whole
        assert facts["code:wifi"]["value"].startswith("[redacted: ") and facts["code:wifi"]["value"].endswith("]")
        assert facts["home"]["evidence"]["text"] == SAID[0] and not facts["home"]["history"]  # not Leeds

        key = (await c.call("sessions.create", {"label": "asking"}))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "Which city am I based in?"})
        await c.run_to_end(sent["runId"])
        system = api.requests[-1]["body"]["messages"][0]["content"]
        assert "- home: Glasgow (since " in system.split("## What is true now\n", 1)[1]
        await c.close()
