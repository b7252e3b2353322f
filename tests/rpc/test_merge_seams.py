"""Where the merged work of issues 23-29 meets (a hostile review): the OpenAI endpoint's relay under the
upstream checks and the shutdown grace, the HTTP API listener under the pre-auth limits. Each test
failed before its fix; real gateway, real clients, tests/fake_openai.py as the upstream."""

from __future__ import annotations

import time

import httpx2 as httpx
import openai
import pytest

from tests.fake_openai import FakeOpenAI


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def sdk(gw, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.http_url + "/v1", api_key=gw.token, max_retries=0, **kw)


async def relay_gateway(start_gateway, api, **overrides):
    return await start_gateway(**{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model",
                                  "chat.maxRetries": 0, **overrides})


async def test_keepalive_comments_do_not_hold_a_relayed_stream_past_the_timeout(start_gateway, api):
    # chat.send was paced (chat.timeout between chunks with content); the relay of the OpenAI endpoint
    # was not: an upstream sending only ": keep-alive" held the request and its session for good.
    api.reply = "first then the rest"
    api.script(("comments", 8, 0.5))
    gw = await relay_gateway(start_gateway, api, **{"chat.timeout": 1.5})
    got = []
    t0 = time.monotonic()
    async with sdk(gw, default_headers={"X-Jarvis-Session": "kept-alive"}) as client:
        stream = await client.chat.completions.create(model="fake-model", stream=True,
                                                      messages=[{"role": "user", "content": "hello"}])
        with pytest.raises(openai.APIError) as exc:
            async for ch in stream:
                got.append(ch.choices[0].delta.content)
    elapsed = time.monotonic() - t0
    assert got == ["first "]
    assert "no content for 1.5 s" in exc.value.message
    assert elapsed < 3.5, f"ended after {elapsed:.1f} s"


def chunk(content):
    return {"id": "c1", "object": "chat.completion.chunk", "model": "fake-model",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}


async def test_a_relayed_surrogate_split_across_chunks_reaches_the_client_as_sent(start_gateway, api):
    # A proxy cutting by UTF-16 units: chat.send joins the halves (upstream.checked); the relay sends the
    # upstream's chunks as they are, and orjson refused the lone surrogate: the SSE body broke off
    # mid-stream without an error or [DONE], and a completion without streaming was a plain-text 500.
    api.script(("events", [chunk("smile \ud83d"), chunk("\ude00 end")]))
    gw = await relay_gateway(start_gateway, api)
    headers = {"Authorization": f"Bearer {gw.token}", "X-Jarvis-Session": "split"}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=headers) as http:
        async with http.stream("POST", "/v1/chat/completions", json={
                "model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "smile"}]}) as r:
            body = (await r.aread()).decode()
        assert body.endswith("data: [DONE]\n\n"), body
        assert '"smile \\ud83d"' in body and '"\\ude00 end"' in body  # the halves as the upstream sent them

        api.reply = "a lone \ud83d here"
        r = await http.post("/v1/chat/completions", json={
            "model": "fake-model", "messages": [{"role": "user", "content": "once more"}]})
        assert r.status_code == 200, r.text
        assert '"a lone \\ud83d here"' in r.text
    history = await (await gw.client()).call("sessions.history", {"sessionKey": "split"})
    assert [m["content"] for m in history["messages"] if m["role"] == "assistant"] == [
        "smile \U0001F600 end", "a lone \ufffd here"]  # the transcript keeps the repaired text


async def _closed_within(reader, seconds: float) -> bool:
    """Whether the gateway closed the socket (EOF or reset) within `seconds`."""
    import asyncio

    try:
        async with asyncio.timeout(seconds):
            while await reader.read(1024):
                pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def test_the_http_listener_drops_sockets_that_never_finish_their_request(start_gateway):
    # The WebSocket port counts every socket from accept (server.maxPendingSockets, handshakeTimeout);
    # server.httpPort had no such bound: sockets that sent nothing, or a request line and then a header
    # byte now and then, were held for good, and enough of them used up the descriptors.
    import asyncio

    gw = await start_gateway(**{"server.httpPort": -1, "server.handshakeTimeout": 0.5,
                                "server.maxPendingSockets": 4, "server.maxPendingPerAddress": 4})
    port = int(gw.http_url.rsplit(":", 1)[1])
    slow_reader, slow = await asyncio.open_connection("127.0.0.1", port)
    slow.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    await slow.drain()
    assert await _closed_within(slow_reader, 3.0), "a request whose headers never end is dropped"

    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(8)]
    await asyncio.sleep(0.2)
    closed = [await _closed_within(r, 0.05) for r, _ in idle[:4]]
    assert closed == [True] * 4, "past maxPendingSockets the oldest silent ones are dropped"
    assert await _closed_within(idle[-1][0], 3.0), "and the rest after server.handshakeTimeout"
    for _, w in idle:
        w.close()

    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        assert (await http.get("/v1/models")).status_code == 200  # a real request still goes through
        await asyncio.sleep(1.0)  # longer than handshakeTimeout: the keep-alive connection is reused or redone
        assert (await http.get("/v1/models")).status_code == 200


async def test_a_relayed_stream_the_shutdown_stops_ends_with_an_error_not_quietly(start_gateway, api):
    # A restart during a streamed completion: past server.shutdownGrace the run is aborted (partial kept,
    # chat.aborted reason "shutdown"), and the SSE body simply ended: no error, no [DONE], no
    # finish_reason. The SDK ends such a stream without a word, so the client took half a reply as whole.
    import asyncio

    api.reply = " ".join(f"word{i}" for i in range(40))
    api.chunk_delay = 0.2
    gw = await relay_gateway(start_gateway, api, **{"server.shutdownGrace": 0.5})
    got = []
    async with sdk(gw, default_headers={"X-Jarvis-Session": "restart"}) as client:
        stream = await client.chat.completions.create(model="fake-model", stream=True,
                                                      messages=[{"role": "user", "content": "talk"}])
        with pytest.raises(openai.APIError) as exc:
            async for ch in stream:
                got.append(ch.choices[0].delta.content)
                if len(got) == 2:
                    stopping = asyncio.create_task(gw.stop())
    await stopping
    assert 2 <= len(got) < 40
    assert "stopping" in exc.value.message and exc.value.code == "aborted"


async def test_relayed_chunks_of_odd_shapes_neither_break_the_stream_nor_crash_the_run(start_gateway, api, caplog):
    # `choices` that is not a list, usage counts of Infinity (Python's json reads it): the relay's own
    # reading of the chunks raised TypeError / OverflowError: the SSE body broke off without an error and
    # the run was logged as crashed ("internal error"), although upstream.checked guards chat.send.
    api.script(("events", [chunk("Hello"), {"id": "c1", "object": "chat.completion.chunk", "choices": 5},
                           '{"id": "c1", "choices": [], "usage": {"prompt_tokens": Infinity, "completion_tokens": 1}}',
                           chunk(" there")]))
    gw = await relay_gateway(start_gateway, api)
    headers = {"Authorization": f"Bearer {gw.token}", "X-Jarvis-Session": "odd"}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=headers) as http:
        async with http.stream("POST", "/v1/chat/completions", json={
                "model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
            body = (await r.aread()).decode()
    assert body.endswith("data: [DONE]\n\n"), body
    assert '"choices":5' in body  # relayed as the upstream sent it
    history = await (await gw.client()).call("sessions.history", {"sessionKey": "odd"})
    assert [m["content"] for m in history["messages"]] == ["hi", "Hello there"]
