"""The OpenAI-compatible endpoint on the PostgreSQL engine: its sessions are the database's, so a
conversation held through one gateway's /v1/chat/completions is one session on every gateway."""

from __future__ import annotations

import openai

from tests.fake_openai import FakeOpenAI


async def test_a_conversation_through_one_gateways_endpoint_is_one_session_on_the_other(start_gateway, postgres_url):
    with FakeOpenAI() as api:
        common = {
            "storage.url": postgres_url,
            "server.httpPort": -1,
            "chat.baseUrl": api.base_url,
            "chat.maxRetries": 0,
        }
        a = await start_gateway("a", **{"storage.instanceId": "a", **common})
        b = await start_gateway("b", **{"storage.instanceId": "b", **common})
        history = [{"role": "user", "content": "Plan the garden: tomatoes first."}]
        keys = set()
        for turn, gw in enumerate((a, b, a)):  # the client's history resent, to either gateway
            api.reply = f"Step {turn} done."
            async with openai.AsyncOpenAI(base_url=gw.http_url + "/v1", api_key=gw.token, max_retries=0) as client:
                raw = await client.chat.completions.with_raw_response.create(model="fake-model", messages=history)
            keys.add(raw.headers["x-jarvis-session"])
            history += [
                {"role": "assistant", "content": raw.parse().choices[0].message.content},
                {"role": "user", "content": f"And then {turn}?"},
            ]
        assert len(keys) == 1
        key = keys.pop()
        cb = await b.client()
        got = await cb.call("sessions.history", {"sessionKey": key})
        assert [(m["role"], m["content"]) for m in got["messages"]] == [(m["role"], m["content"]) for m in history[:-1]]
        session = await cb.call("sessions.get", {"sessionKey": key})
        assert session["label"] == "Plan the garden: tomatoes first." and session["messageCount"] == 6
        await cb.close()
