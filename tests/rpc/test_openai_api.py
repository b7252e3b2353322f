"""The OpenAI-compatible endpoint with memory (issue 25): the `openai` SDK pointed at a real gateway,
tests/fake_openai.py as the upstream, real transcripts and a real memory index."""

from __future__ import annotations

import asyncio
import json

import httpx2 as httpx
import openai
import orjson
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import wait_for


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def sdk(gw, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.http_url + "/v1", api_key=gw.token, max_retries=0, **kw)


def transcript(gw, key: str) -> list[dict]:
    path = gw.config.sessions_dir() / f"{key}.jsonl"
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return [r for r in lines if r.get("type") == "message"]


def said(records: list[dict]) -> list[tuple[str, str]]:
    return [(r["message"]["role"], r["message"]["content"]) for r in records]


async def upstream_gateway(start_gateway, api, **overrides):
    return await start_gateway(**{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model",
                                  "chat.maxRetries": 0, **overrides})


async def test_models_are_the_upstreams_or_the_offline_responders_own(start_gateway, api):
    api.models = ["fake-model", "fake-large"]
    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["fake-model", "fake-large"]
    assert models.data[0].object == "model" and models.data[0].owned_by == "fake"

    offline = await start_gateway("offline", **{"server.httpPort": -1})
    async with sdk(offline) as client:
        models = await client.models.list()
    assert [(m.id, m.object, m.owned_by) for m in models.data] == [("offline-responder", "model", "offline")]


async def test_a_streamed_completion_is_relayed_and_kept_in_the_transcript(start_gateway, api):
    api.reply = "The quick brown fox"
    gw = await upstream_gateway(start_gateway, api)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    async with sdk(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="fake-large", stream=True, stream_options={"include_usage": True}, tools=tools, temperature=0.3,
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "tell me a story"}])
        chunks = [c async for c in raw.parse()]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "The quick brown fox"
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4  # include_usage honoured
    jarvis = chunks[-1].model_extra["jarvis"]  # the last chunk only, an extra field clients ignore
    assert all("jarvis" not in (c.model_extra or {}) for c in chunks[:-1])
    key = raw.headers["x-jarvis-session"]
    assert jarvis["session"] == key and key.startswith("openai:")
    assert json.loads(raw.headers["x-jarvis-memory"]) == jarvis["memory"] == []

    sent = api.requests[-1]["body"]
    assert sent["model"] == "fake-large" and sent["tools"] == tools and sent["temperature"] == 0.3
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "tell me a story"}]
    # Written before the last chunk went out (the run's chat.final comes after the transcript line).
    assert said(transcript(gw, key)) == [("user", "tell me a story"), ("assistant", "The quick brown fox")]
    session = await (await gw.client()).call("sessions.get", {"sessionKey": key})
    assert session["label"] == "tell me a story" and session["messageCount"] == 2


async def test_without_include_usage_no_usage_chunk_and_the_stream_ends_with_done(start_gateway, api):
    gw = await start_gateway(**{"server.httpPort": -1})  # the offline responder: works out of the box
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        async with http.stream("POST", "/v1/chat/completions", json={
                "model": "offline-responder", "stream": True,
                "messages": [{"role": "user", "content": "hello there"}]}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            body = (await r.aread()).decode()
    events = body.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-2])
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" and c["choices"] for c in chunks)  # no usage chunk
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and "jarvis" in chunks[-1]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert "not a language model" in text.lower() or "no chat model is configured" in text


async def test_a_completion_without_streaming(start_gateway, api):
    api.reply = "Forty-two."
    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="fake-model", user="alice", messages=[{"role": "user", "content": "the answer?"}])
        done = raw.parse()
    assert done.object == "chat.completion" and done.choices[0].message.content == "Forty-two."
    assert done.choices[0].finish_reason == "stop" and done.usage.total_tokens > 0
    assert raw.headers["x-jarvis-session"] == "openai:user:alice" == done.model_extra["jarvis"]["session"]
    assert api.requests[-1]["body"].get("stream") is None  # passed through as the client sent it
    assert said(transcript(gw, "openai:user:alice")) == [("user", "the answer?"), ("assistant", "Forty-two.")]
