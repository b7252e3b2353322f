"""chat.regenerate: a new version of the last reply, not a second question. Against a real gateway whose
model is a real local server speaking the OpenAI wire format."""

from __future__ import annotations

import pytest

from gateway.sessions import transcript as tx
from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def _turn(c, method, params):
    run = await c.call(method, params)
    events = await c.run_to_end(run["runId"])
    return events[-1]


async def test_regenerate_records_a_version_and_history_and_prompts_follow_the_latest(start_gateway, api):
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "fake-model"})
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        api.reply = "Herons are wading birds."
        first = (await _turn(c, "chat.send", {"sessionKey": key, "message": "What is a heron?"}))["params"]["message"]

        api.reply = "A heron is a long-legged bird."
        final = await _turn(c, "chat.regenerate", {"sessionKey": key, "messageId": first["id"]})
        assert final["method"] == "chat.final"
        second = final["params"]["message"]
        assert second["replaces"] == first["id"] and second["content"] == "A heron is a long-legged bird."
        # The model was asked the same question, without the reply being replaced.
        asked = api.requests[-1]["body"]["messages"]
        assert [m["role"] for m in asked] == ["system", "user"] and asked[1]["content"] == "What is a heron?"

        # The transcript: one question, two versions of the answer (append-only).
        records = [r.data for r in tx.iter_records(gw.config.sessions_dir() / f"{key}.jsonl")]
        messages = [r for r in records if r.get("type") == "message"]
        assert [(m["message"]["role"], m.get("replaces")) for m in messages] == [
            ("user", None),
            ("assistant", None),
            ("assistant", first["id"]),
        ]

        # History shows the latest version in the first one's place, with every version.
        hist = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
        assert [m["role"] for m in hist] == ["user", "assistant"]
        assert hist[1]["id"] == second["id"] and hist[1]["content"] == second["content"]
        assert [v["content"] for v in hist[1]["versions"]] == [
            "Herons are wading birds.",
            "A heron is a long-legged bird.",
        ]

        # The conversation goes on from the latest version.
        api.reply = "By rivers."
        await _turn(c, "chat.send", {"sessionKey": key, "message": "Where do they nest?"})
        asked = [m["content"] for m in api.requests[-1]["body"]["messages"][1:]]
        assert asked == ["What is a heron?", "A heron is a long-legged bird.", "Where do they nest?"]

        # Only the last reply can be regenerated; the error names the field.
        with pytest.raises(RpcError) as ei:
            await c.call("chat.regenerate", {"sessionKey": key, "messageId": second["id"]})
        assert ei.value.code == -32602 and ei.value.data.get("field") == "params.messageId"
        assert "only the session's last reply" in ei.value.message
        with pytest.raises(RpcError) as ei:
            await c.call("chat.regenerate", {"sessionKey": "no-such", "messageId": "x"})
        assert ei.value.code == -32004
    finally:
        await c.close()


async def test_any_version_of_the_last_reply_regenerates_it_and_a_failure_keeps_it(start_gateway, api):
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "fake-model", "chat.maxRetries": 0})
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        api.reply = "one"
        v1 = (await _turn(c, "chat.send", {"sessionKey": key, "message": "Count."}))["params"]["message"]
        api.reply = "two"
        v2 = (await _turn(c, "chat.regenerate", {"sessionKey": key, "messageId": v1["id"]}))["params"]["message"]
        api.reply = "three"
        v3 = (await _turn(c, "chat.regenerate", {"sessionKey": key, "messageId": v2["id"]}))["params"]["message"]
        assert v2["replaces"] == v3["replaces"] == v1["id"]  # every version names the first
        api.script(("status", 500))
        failed = await _turn(c, "chat.regenerate", {"sessionKey": key, "messageId": v1["id"]})
        assert failed["method"] == "chat.error"
        hist = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
        assert [m["content"] for m in hist] == ["Count.", "three"]
        assert [v["content"] for v in hist[-1]["versions"]] == ["one", "two", "three"]
        assert (await c.call("sessions.get", {"sessionKey": key}))["messageCount"] == 4
    finally:
        await c.close()
