"""The OpenAI-compatible provider against a real local server speaking the wire format."""

import time

import pytest

from gateway.sessions import transcript as tx
from tests.fake_openai import FakeOpenAI


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def _chat(start_gateway, api, message="hello", **overrides):
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "fake-model", **overrides})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    events = await c.run_to_end(sent["runId"])
    records = [r.data for r in tx.iter_records(gw.config.sessions_dir() / f"{key}.jsonl")]
    await c.close()
    return gw, events, records


async def test_streams_the_reply_with_usage(start_gateway, api):
    api.reply = "The quick brown fox jumps"
    gw, events, records = await _chat(start_gateway, api, "tell me")
    assert [e["params"]["delta"] for e in events if e["method"] == "chat.delta"] == [
        "The ",
        "quick ",
        "brown ",
        "fox ",
        "jumps",
    ]
    final = events[-1]["params"]
    assert final["message"]["content"] == "The quick brown fox jumps"
    assert final["usage"]["completionTokens"] == 5
    body = api.requests[-1]["body"]
    assert body["model"] == "fake-model" and body["stream"] is True
    assert body["messages"][0]["role"] == "system" and body["messages"][-1] == {"role": "user", "content": "tell me"}
    assert [r["message"]["role"] for r in records[1:]] == ["user", "assistant"]


async def test_history_window_is_the_last_n_messages(start_gateway, api):
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.historyMessages": 3})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    for i in range(3):
        sent = await c.call("chat.send", {"sessionKey": key, "message": f"m{i}"})
        await c.run_to_end(sent["runId"])
    msgs = api.requests[-1]["body"]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[1]["content"] == "m1" and msgs[-1]["content"] == "m2"
    await c.close()


async def test_429_with_retry_after_is_retried(start_gateway, api):
    api.script(("status", 429, {"Retry-After": "1"}))
    t0 = time.monotonic()
    gw, events, records = await _chat(start_gateway, api, **{"chat.maxRetries": 2})
    assert events[-1]["method"] == "chat.final"
    assert api.count("/v1/chat/completions") == 2
    assert time.monotonic() - t0 >= 0.9, "the Retry-After second was honoured"


async def test_429_after_retries_is_a_retryable_chat_error(start_gateway, api):
    api.script(*[("status", 429, {"Retry-After": "0"})] * 3)
    gw, events, records = await _chat(start_gateway, api, "keep me", **{"chat.maxRetries": 1})
    err = events[-1]
    assert err["method"] == "chat.error"
    assert err["params"]["error"]["retryable"] is True and err["params"]["error"]["code"] == -32050
    assert "429" in err["params"]["error"]["message"]
    assert [r["message"]["content"] for r in records[1:]] == ["keep me"], "the user message is kept"


async def test_mid_stream_disconnect(start_gateway, api):
    api.reply = "one two three four five six"
    api.script(("cut", 2))
    gw, events, records = await _chat(start_gateway, api, "cut me", **{"chat.maxRetries": 0})
    assert [e["method"] for e in events][:2] == ["chat.delta", "chat.delta"]
    err = events[-1]
    assert err["method"] == "chat.error" and err["params"]["error"]["retryable"] is True
    assert [r["message"]["role"] for r in records[1:]] == ["user"]


async def test_timeout_is_retryable(start_gateway, api):
    api.script(("hang", 3))
    gw, events, records = await _chat(start_gateway, api, **{"chat.maxRetries": 0, "chat.timeout": 0.5})
    err = events[-1]["params"]["error"]
    assert events[-1]["method"] == "chat.error" and err["retryable"] is True and "timed out" in err["message"]


async def test_auth_failure_is_not_retryable(start_gateway, api):
    api.script(("status", 401, {}))
    gw, events, records = await _chat(start_gateway, api, **{"chat.maxRetries": 2})
    err = events[-1]["params"]["error"]
    assert err["retryable"] is False and "401" in err["message"]
    assert api.count("/v1/chat/completions") == 1, "a 401 is not retried"
