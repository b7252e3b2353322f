"""Upstream data of the wrong shape (issue 29, point 4): validated and repaired at the provider boundary.

Each test streams exactly what a broken proxy or server sent, through the real SDK, from
tests/fake_openai.py; each failed before its fix.
"""

from __future__ import annotations

import pytest

from gateway.sessions import transcript as tx
from tests.fake_openai import FakeOpenAI


def chunk(content=None, usage=None, **delta):
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": []}
    if content is not None or delta:
        body["choices"] = [
            {
                "index": 0,
                "delta": {**({"content": content} if content is not None else {}), **delta},
                "finish_reason": None,
            }
        ]
    if usage is not None:
        body["usage"] = usage
    return body


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def run_events(start_gateway, api, payloads):
    api.script(("events", payloads))
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "m", "chat.maxRetries": 0})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "hello"})
    events = await c.run_to_end(sent["runId"])
    records = [r.data for r in tx.iter_records(gw.config.sessions_dir() / f"{key}.jsonl")]
    await c.close()
    assert [e["params"]["seq"] for e in events] == list(range(1, len(events) + 1)), "seq never skips"
    return events, [r["message"] for r in records if r.get("type") == "message"]


def deltas(events):
    return [e["params"]["delta"] for e in events if e["method"] == "chat.delta"]


async def test_a_surrogate_pair_split_across_two_deltas_is_joined(start_gateway, api):
    # A proxy splitting by UTF-16 units sent "\ud83d" and "\ude00" in two chunks: -32603, partial lost.
    events, messages = await run_events(
        start_gateway, api, [chunk("smile \ud83d"), chunk("\ude00 and a lone \udc00 one"), chunk(" end \ud83d")]
    )
    assert events[-1]["method"] == "chat.final", events[-1]
    text = "smile \U0001f600 and a lone \ufffd one end \ufffd"
    assert "".join(deltas(events)) == text
    assert events[-1]["params"]["message"]["content"] == text
    assert messages[-1] == {"role": "assistant", "content": text} | {
        k: messages[-1][k] for k in messages[-1] if k not in ("role", "content")
    }


async def test_usage_with_bad_token_counts_never_turns_a_saved_reply_into_an_error(start_gateway, api):
    # Usage with string counts: the reply was fsynced, then chat.error was sent (a retry duplicated it).
    events, messages = await run_events(
        start_gateway,
        api,
        [chunk("Hello"), chunk(usage={"prompt_tokens": "12", "completion_tokens": "many", "total_tokens": None})],
    )
    assert events[-1]["method"] == "chat.final", events[-1]
    assert "usage" not in events[-1]["params"]
    assert [m["content"] for m in messages if m["role"] == "assistant"] == ["Hello"]


async def test_usage_counts_that_are_whole_numbers_in_disguise_are_repaired(start_gateway, api):
    events, _ = await run_events(
        start_gateway, api, [chunk("Hi"), chunk(usage={"prompt_tokens": "12", "completion_tokens": 3.0})]
    )
    assert events[-1]["method"] == "chat.final"
    assert events[-1]["params"]["usage"] == {"promptTokens": 12, "completionTokens": 3, "totalTokens": 15}


async def test_delta_content_that_is_not_a_string(start_gateway, api):
    # A list of parts: its text parts are the text; an int or a dict is ignored (and logged), never
    # forwarded as the delta.
    events, messages = await run_events(
        start_gateway,
        api,
        [
            chunk(
                [
                    {"type": "text", "text": "Hello "},
                    {"type": "image_url", "image_url": {"url": "x"}},
                    {"type": "text", "text": "there"},
                ]
            ),
            chunk(5),
            chunk({"text": "no"}),
            chunk(True),
            chunk("!"),
        ],
    )
    assert events[-1]["method"] == "chat.final", events[-1]
    assert deltas(events) == ["Hello there", "!"]
    assert messages[-1]["content"] == "Hello there!"


async def test_keepalive_comments_do_not_hold_off_the_timeout(start_gateway, api):
    # An upstream sending SSE comments every second after its first chunk never hit chat.timeout
    # (3 s): the SDK's read timeout is between bytes. The timeout is between content. The comments go on
    # for 30 s and then the rest of the reply: held off by them, the run would end with it, not in error
    # (and past run_to_end's deadline).
    api.reply = "first then the rest"
    api.script(("comments", 60, 0.5))
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.maxRetries": 0, "chat.timeout": 1.5})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "hello"})
    events = await c.run_to_end(sent["runId"])
    await c.close()
    assert deltas(events) == ["first "]
    err = events[-1]["params"].get("error")
    assert events[-1]["method"] == "chat.error", events[-1]
    assert err["retryable"] is True and "no content for 1.5 s" in err["message"]
