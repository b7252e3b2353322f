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
    return await start_gateway(
        **{
            "server.httpPort": -1,
            "chat.baseUrl": api.base_url,
            "chat.model": "fake-model",
            "chat.maxRetries": 0,
            **overrides,
        }
    )


async def test_models_are_the_upstreams_or_the_offline_responders_own(start_gateway, api):
    api.models = ["fake-model", "fake-large"]
    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["fake-model", "fake-large"]
    assert models.data[0].object == "model" and models.data[0].owned_by == "fake"
    async with sdk(gw) as client:
        assert (await client.models.retrieve("fake-large")).id == "fake-large"
        with pytest.raises(openai.NotFoundError) as exc:
            await client.models.retrieve("gpt-9")
        assert exc.value.code == "model_not_found"

    offline = await start_gateway("offline", **{"server.httpPort": -1})
    async with sdk(offline) as client:
        models = await client.models.list()
    assert [(m.id, m.object, m.owned_by) for m in models.data] == [("offline-responder", "model", "offline")]


async def test_the_upstreams_models_are_kept_a_while_and_a_failure_is_not(start_gateway, api, monkeypatch):
    """A client polling GET /v1/models does not make every poll an upstream request."""
    from gateway.chat import openai_provider

    api.models = None  # the upstream has no /v1/models (404): asked again each time
    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        for _ in range(2):
            assert [m.id for m in (await client.models.list()).data] == ["fake-model"]
        assert api.count("/v1/models") == 2

        api.models = ["fake-model", "fake-large"]
        assert [m.id for m in (await client.models.list()).data] == ["fake-model", "fake-large"]
        assert [m.id for m in (await client.models.list()).data] == ["fake-model", "fake-large"]
        assert (await client.models.retrieve("fake-large")).id == "fake-large"
        assert api.count("/v1/models") == 3, "one upstream request for the three"

        api.models = ["fake-model", "fake-large", "fake-new"]
        monkeypatch.setattr(openai_provider, "MODELS_TTL_S", 0.5)
        await asyncio.sleep(0.6)
        api.models_delay = 1.0  # the upstream is slow: the polls that come meanwhile wait for its one answer
        lists = await asyncio.gather(*(client.models.list() for _ in range(5)))
        assert [[m.id for m in page.data] for page in lists] == [["fake-model", "fake-large", "fake-new"]] * 5
        assert api.count("/v1/models") == 4, "past the TTL: asked once more, for all five"


async def test_a_streamed_completion_is_relayed_and_kept_in_the_transcript(start_gateway, api):
    api.reply = "The quick brown fox"
    gw = await upstream_gateway(start_gateway, api)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    async with sdk(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="fake-large",
            stream=True,
            stream_options={"include_usage": True},
            tools=tools,
            temperature=0.3,
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "tell me a story"}],
        )
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
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "tell me a story"},
    ]
    # Written before the last chunk went out (the run's chat.final comes after the transcript line).
    assert said(transcript(gw, key)) == [("user", "tell me a story"), ("assistant", "The quick brown fox")]
    session = await (await gw.client()).call("sessions.get", {"sessionKey": key})
    assert session["label"] == "tell me a story" and session["messageCount"] == 2


async def test_without_include_usage_no_usage_chunk_and_the_stream_ends_with_done(start_gateway, api):
    gw = await start_gateway(**{"server.httpPort": -1})  # the offline responder: works out of the box
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        async with http.stream(
            "POST",
            "/v1/chat/completions",
            json={
                "model": "offline-responder",
                "stream": True,
                "messages": [{"role": "user", "content": "hello there"}],
            },
        ) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            body = (await r.aread()).decode()
    events = body.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e[len("data: ") :]) for e in events[:-2]]
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
            model="fake-model", user="alice", messages=[{"role": "user", "content": "the answer?"}]
        )
        done = raw.parse()
    assert done.object == "chat.completion" and done.choices[0].message.content == "Forty-two."
    assert done.choices[0].finish_reason == "stop" and done.usage.total_tokens > 0
    assert raw.headers["x-jarvis-session"] == "openai:user:alice" == done.model_extra["jarvis"]["session"]
    assert api.requests[-1]["body"].get("stream") is None  # passed through as the client sent it
    assert said(transcript(gw, "openai:user:alice")) == [("user", "the answer?"), ("assistant", "Forty-two.")]


def memory_gateway_overrides(api) -> dict:
    """Memory on, embedded by the fake upstream (a bag of words), sessions indexed right after a reply."""
    return {
        "memory": True,
        "memory.embeddings.provider": "openai",
        "memory.embeddings.baseUrl": api.base_url,
        "memory.sync.sessionDebounceMs": 0,
    }


def chat_requests(api) -> list[dict]:
    return [r["body"] for r in api.requests if r["path"].endswith("/chat/completions")]


async def test_a_fact_told_in_one_conversation_is_recalled_in_another(start_gateway, api):
    gw = await upstream_gateway(start_gateway, api, **memory_gateway_overrides(api))
    c = await gw.client()
    async with sdk(gw) as client:
        api.reply = "Noted."
        told = await client.chat.completions.with_raw_response.create(
            model="fake-model",
            messages=[{"role": "user", "content": "Remember this: my bicycle lock combination is 7395."}],
        )
        first_session = told.headers["x-jarvis-session"]

        async def indexed():
            found = await c.call("memory.search", {"query": "bicycle lock combination", "sources": ["sessions"]})
            return found["results"]

        await wait_for(indexed)

        api.reply = "It is 7395."
        stream = await client.chat.completions.with_raw_response.create(
            model="fake-model",
            stream=True,
            messages=[
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is my bicycle lock combination?"},
            ],
        )
        chunks = [ch async for ch in stream.parse()]
    system = chat_requests(api)[-1]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You are terse.\n\n## What is true now\n")
    assert "- code:lock: 7395 (since " in system["content"] and "\n\n## Recalled memory\n" in system["content"]
    assert "7395" in system["content"]
    recalled = json.loads(stream.headers["x-jarvis-memory"])
    assert recalled and recalled[0]["path"].startswith("sessions/")
    assert set(recalled[0]) == {"path", "startLine", "endLine", "score"}
    assert chunks[-1].model_extra["jarvis"]["memory"] == recalled
    assert stream.headers["x-jarvis-session"] != first_session  # another conversation, another session
    # Recall off for one request: nothing recalled, nothing added to the prompt.
    async with sdk(gw, default_headers={"X-Jarvis-Memory": "off"}) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": "What is my bicycle lock combination, again?"}]
        )
    assert raw.headers["x-jarvis-memory"] == "[]"
    assert chat_requests(api)[-1]["messages"] == [
        {"role": "user", "content": "What is my bicycle lock combination, again?"}
    ]
    await c.close()


async def test_a_client_resending_the_history_stays_in_one_session_and_nothing_is_written_twice(start_gateway, api):
    gw = await upstream_gateway(start_gateway, api)
    history = [{"role": "system", "content": "You are Jarvis."}]
    keys = set()
    async with sdk(gw) as client:
        for turn in range(4):  # the first request, then the whole history resent three times
            api.reply = f"Answer number {turn}."
            history.append({"role": "user", "content": f"Question number {turn}?"})
            raw = await client.chat.completions.with_raw_response.create(model="fake-model", messages=history)
            reply = raw.parse().choices[0].message.content
            history.append({"role": "assistant", "content": reply})
            keys.add(raw.headers["x-jarvis-session"])
    assert len(keys) == 1
    assert chat_requests(api)[-1]["messages"] == history[:-1]  # the upstream got the client's history as sent
    expected = [(m["role"], m["content"]) for m in history[1:]]
    assert said(transcript(gw, keys.pop())) == expected


async def test_websocket_subscribers_see_the_relayed_run(start_gateway, api):
    api.reply = "one two three"
    gw = await upstream_gateway(start_gateway, api)
    c = await gw.client()
    await c.call("sessions.create", {"sessionKey": "desk"})  # the creator is subscribed
    async with sdk(gw, default_headers={"X-Jarvis-Session": "desk"}) as client:
        stream = await client.chat.completions.create(
            model="fake-model", stream=True, messages=[{"role": "user", "content": "count to three"}]
        )
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
    assert text == "one two three"
    events = []
    while not events or events[-1]["method"] != "chat.final":
        events.append(await c.next_event())
    assert [e["params"]["delta"] for e in events if e["method"] == "chat.delta"] == ["one ", "two ", "three"]
    assert events[-1]["params"]["message"]["content"] == "one two three"
    assert [e["params"]["seq"] for e in events] == list(range(1, len(events) + 1))
    listed = await c.call("sessions.list")
    assert [(s["sessionKey"], s["label"]) for s in listed["sessions"]] == [("desk", "count to three")]
    await c.close()


async def test_a_client_that_hangs_up_mid_stream_leaves_an_aborted_reply_and_cancels_the_upstream(start_gateway, api):
    api.reply = " ".join(f"word{i}" for i in range(60))
    api.chunk_delay = 0.05
    gw = await upstream_gateway(start_gateway, api)
    headers = {"Authorization": f"Bearer {gw.token}", "X-Jarvis-Session": "hangup"}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=headers) as http:
        async with http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "talk a lot"}]},
        ) as r:
            got = b""
            async for part in r.aiter_bytes():
                got += part
                if got.count(b"data: ") >= 3:
                    break  # and hang up
    records = await wait_for(lambda: _aborted(gw, "hangup"))
    assert records[0]["message"] == {"role": "user", "content": "talk a lot"}
    assert records[1]["aborted"] is True and records[1]["message"]["content"].startswith("word0 word1 ")
    await wait_for(lambda: _true(api.cancelled == 1))  # the upstream saw its client go away
    assert len(records[1]["message"]["content"].split()) < 60
    assert gw.gw.services.agents["main"].chat.idle  # nothing left running


async def _aborted(gw, key):
    path = gw.config.sessions_dir() / f"{key}.jsonl"
    if not path.exists():
        return None
    records = transcript(gw, key)
    return records if records and records[-1].get("aborted") else None


async def _true(value):
    return value


async def test_bad_requests_and_upstream_failures_are_openai_shaped_errors(start_gateway, api):
    gw = await upstream_gateway(start_gateway, api, **{"chat.timeout": 0.5, "server.authFailureDelay": 0})
    hello = [{"role": "user", "content": "hello"}]
    async with openai.AsyncOpenAI(base_url=gw.http_url + "/v1", api_key="wrong-token-12345", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as exc:
            await bad.chat.completions.create(model="fake-model", messages=hello)
    assert exc.value.status_code == 401 and exc.value.code == "invalid_api_key"

    auth = {"Authorization": f"Bearer {gw.token}"}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=auth) as http:
        r = await http.post("/v1/chat/completions", content=b'{"model": "fake-model", "messages": [')
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        assert r.json()["error"]["message"].startswith("the request body is not valid JSON")
        r = await http.post("/v1/chat/completions", json={"model": "fake-model"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        assert r.json()["error"]["type"] == "invalid_request_error"
        r = await http.post("/v1/chat/completions", json={"model": "fake-model", "messages": [{"role": "robot"}]})
        assert (r.status_code, r.json()["error"]["param"]) == (400, "messages[0].role")
        r = await http.post("/v1/chat/completions", json={"messages": hello})
        assert (r.status_code, r.json()["error"]["param"]) == (400, "model")
        r = await http.post(
            "/v1/chat/completions",
            json={"model": "fake-model", "messages": hello},
            headers={"X-Jarvis-Session": "../etc"},
        )
        assert (r.status_code, r.json()["error"]["param"]) == (400, "X-Jarvis-Session")

        async def twenty_megabytes():  # chunked: no Content-Length for the guard to refuse up front
            yield b'{"model": "fake-model", "messages": [{"role": "user", "content": "'
            for _ in range(20 * 16):
                yield b"x" * 65536
            yield b'"}]}'

        r = await http.post("/v1/chat/completions", content=twenty_megabytes())
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        assert api.count("/v1/chat/completions") == 0

    async with sdk(gw) as client:
        api.script(("status", 404))  # the upstream does not know the model: its 404, passed through
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="no-such-model", messages=hello)
        api.script(("hang", 3))  # the upstream stalls past chat.timeout
        with pytest.raises(openai.APIStatusError) as exc:
            await client.chat.completions.create(model="fake-model", messages=hello, stream=True)
        assert exc.value.status_code == 504 and exc.value.code == "upstream_timeout"
        api.script(("status", 503))
        with pytest.raises(openai.APIStatusError) as exc:
            await client.chat.completions.create(model="fake-model", messages=hello)
        assert exc.value.status_code == 502 and "HTTP 503" in exc.value.message

        # Nothing of the failed requests was written: a retry writes the conversation once.
        api.reply = "Hi."
        done = await client.chat.completions.with_raw_response.create(model="fake-model", messages=hello)
        assert said(transcript(gw, done.headers["x-jarvis-session"])) == [("user", "hello"), ("assistant", "Hi.")]

    down = await upstream_gateway(start_gateway, api, state_name="down", **{"chat.baseUrl": FakeOpenAI.closed_url()})
    async with sdk(down) as client:
        with pytest.raises(openai.APIStatusError) as exc:
            await client.chat.completions.create(model="fake-model", messages=hello)
        assert exc.value.status_code == 502 and "unreachable" in exc.value.message
        assert exc.value.code == "upstream_error"

    offline = await start_gateway("offline", **{"server.httpPort": -1})
    async with sdk(offline) as client:  # the offline responder answers under any model name
        assert (await client.chat.completions.create(model="gpt-4o", messages=hello)).model == "gpt-4o"

    c = await gw.client()  # the gateway is unaffected
    assert (await c.call("system.health"))["status"] == "ok"
    await c.close()


async def test_capture_off_writes_nothing(start_gateway, api):
    gw = await upstream_gateway(start_gateway, api)
    hello = [{"role": "user", "content": "a private question"}]
    async with sdk(gw, default_headers={"X-Jarvis-Capture": "off"}) as client:
        raw = await client.chat.completions.with_raw_response.create(model="fake-model", messages=hello)
    assert raw.parse().choices[0].message.content == api.reply
    assert "x-jarvis-session" not in raw.headers
    assert not list(gw.config.sessions_dir().glob("openai*.jsonl"))

    off = await upstream_gateway(start_gateway, api, state_name="off", **{"openaiApi.capture": False})
    async with sdk(off) as client:
        stream = await client.chat.completions.create(model="fake-model", messages=hello, stream=True)
        assert [ch async for ch in stream][-1].model_extra["jarvis"]["session"] is None
    assert (await (await off.client()).call("sessions.list"))["total"] == 0


async def test_a_second_request_to_a_busy_session_is_a_conflict_the_sdk_retries(start_gateway, api):
    import threading

    release = threading.Event()
    api.script(("wait", release, 10))
    gw = await upstream_gateway(start_gateway, api)
    hello = [{"role": "user", "content": "one at a time"}]
    async with sdk(gw, default_headers={"X-Jarvis-Session": "busy"}) as client:
        first = asyncio.create_task(client.chat.completions.create(model="fake-model", messages=hello))
        await wait_for(lambda: _true(api.waiting == 1))
        with pytest.raises(openai.ConflictError) as exc:
            await client.chat.completions.create(model="fake-model", messages=hello)
        assert exc.value.code == "session_busy" and "busy" in exc.value.message
        release.set()
        assert (await first).choices[0].message.content == api.reply
    # The SDK retries a 409 by itself: with its retries on, the second request simply waits its turn.
    release.clear()
    api.script(("wait", release, 10))
    statuses: list[int] = []

    async def answered(response) -> None:
        statuses.append(response.status_code)

    async with openai.AsyncOpenAI(
        base_url=gw.http_url + "/v1",
        api_key=gw.token,
        max_retries=3,
        default_headers={"X-Jarvis-Session": "busy"},
        http_client=openai.DefaultAsyncHttpxClient(event_hooks={"response": [answered]}),
    ) as client:
        first = asyncio.create_task(client.chat.completions.create(model="fake-model", messages=hello))
        await wait_for(lambda: _true(api.waiting == 1))
        second = asyncio.create_task(client.chat.completions.create(model="fake-model", messages=hello))
        await wait_for(lambda: _true(409 in statuses), timeout=60)  # it was refused once while the first ran
        release.set()
        await asyncio.gather(first, second)
    assert len(transcript(gw, "busy")) == 6


async def test_a_runaway_reply_is_cut_at_max_reply_chars_and_finishes_with_length(start_gateway, api):
    api.reply = " ".join(f"word{i}" for i in range(200))
    gw = await upstream_gateway(start_gateway, api, **{"chat.maxReplyChars": 50})
    async with sdk(gw, default_headers={"X-Jarvis-Session": "runaway"}) as client:
        stream = await client.chat.completions.create(
            model="fake-model", stream=True, messages=[{"role": "user", "content": "go on"}]
        )
        chunks = [ch async for ch in stream]
    assert chunks[-1].choices[0].finish_reason == "length" and "jarvis" in chunks[-1].model_extra
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(text) < 200 * 6
    kept = transcript(gw, "runaway")[-1]
    assert kept["truncated"] is True and len(kept["message"]["content"]) == 50


async def test_an_upstream_that_breaks_off_mid_stream_ends_the_stream_with_an_error_event(start_gateway, api):
    api.reply = "one two three four five six"
    api.script(("cut", 3))
    gw = await upstream_gateway(start_gateway, api)
    got = []
    async with sdk(gw, default_headers={"X-Jarvis-Session": "cut"}) as client:
        stream = await client.chat.completions.create(
            model="fake-model", stream=True, messages=[{"role": "user", "content": "count"}]
        )
        with pytest.raises(openai.APIError) as exc:
            async for ch in stream:
                got.append(ch.choices[0].delta.content)
    assert got == ["one ", "two ", "three "]
    assert "chat provider" in exc.value.message
    assert transcript(gw, "cut") == []  # a failed turn is not kept: the client's retry writes it once


MALFORMED = [
    (b"[]", None),
    (b'"hello"', None),
    (b"null", None),
    (b"", None),
    (b'{"model": 5, "messages": [{"role": "user", "content": "hi"}]}', "model"),
    (b'{"model": "", "messages": [{"role": "user", "content": "hi"}]}', "model"),
    (b'{"model": "m", "messages": "hi"}', "messages"),
    (b'{"model": "m", "messages": []}', "messages"),
    (b'{"model": "m", "messages": [1]}', "messages[0]"),
    (b'{"model": "m", "messages": [{"content": "hi"}]}', "messages[0].role"),
    (b'{"model": "m", "messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    (b'{"model": "m", "messages": [{"role": "user", "content": ["hi"]}]}', "messages[0].content"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', "stream"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream_options": []}', "stream_options"),
    (
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": 1}}',
        "stream_options",
    ),
    (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": 5}', "user"),
]


async def test_each_malformed_request_is_a_400_naming_the_field(start_gateway, api):
    gw = await upstream_gateway(start_gateway, api)
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        for body, param in MALFORMED:
            r = await http.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
            error = r.json()["error"]
            assert (r.status_code, error["type"], error["param"]) == (400, "invalid_request_error", param), body
            assert error["message"].startswith(param + ":" if param else "the request body"), body
    assert api.count("/v1/chat/completions") == 0 and not list(gw.config.sessions_dir().glob("openai*"))


async def test_a_client_that_gives_up_on_a_completion_stops_its_run(start_gateway, api):
    import threading

    release = threading.Event()
    api.script(("wait", release, 10))
    gw = await upstream_gateway(start_gateway, api)
    c = await gw.client()
    await c.call("sessions.create", {"sessionKey": "impatient"})
    async with sdk(gw, default_headers={"X-Jarvis-Session": "impatient"}, timeout=0.5) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "slow?"}])
    aborted = await c.next_event("chat.aborted")
    assert aborted["params"]["sessionKey"] == "impatient" and aborted["params"]["partial"] == ""
    release.set()
    assert transcript(gw, "impatient") == []  # nothing was said: nothing kept
    await wait_for(lambda: _true(gw.gw.services.agents["main"].chat.idle))
    await c.close()


async def test_past_sessions_max_both_doors_refuse_a_new_session_and_keep_the_old_ones(start_gateway, api):
    api.reply = "Noted."
    gw = await upstream_gateway(start_gateway, api, **{"sessions.max": 2})
    c = await gw.client()
    first = (await c.call("sessions.create", {"label": "one"}))["sessionKey"]
    async with sdk(gw) as client:
        await client.chat.completions.create(
            model="fake-model", user="alice", messages=[{"role": "user", "content": "hi"}]
        )
        with pytest.raises(openai.ConflictError) as refused:  # a third conversation: a third session
            await client.chat.completions.create(
                model="fake-model", user="bob", messages=[{"role": "user", "content": "hi"}]
            )
        assert refused.value.code == "session_limit" and "sessions.max" in refused.value.message
        again = await client.chat.completions.create(
            model="fake-model",
            user="alice",  # an existing one: fine
            messages=[{"role": "user", "content": "again"}],
        )
        assert again.choices[0].message.content == "Noted."
    got = await c.request("sessions.create", {"label": "three"})
    assert got["error"]["code"] == -32009 and got["error"]["data"] == {"max": 2}
    assert "sessions.max" in got["error"]["message"]
    assert {s["sessionKey"] for s in (await c.call("sessions.list"))["sessions"]} == {first, "openai:user:alice"}
    await c.call("sessions.delete", {"sessionKey": first})
    assert (await c.call("sessions.create", {"label": "room again"}))["sessionKey"]
    await c.close()
