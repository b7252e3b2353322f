"""How /v1 renders a run that fails (doors/openaistream.py `failure`, doors/httperrors.py `http_parts`):
chat completions and Responses, JSON and SSE, against a real gateway, tests/fake_openai.py as the
upstream and a real full disk (a small tmpfs; skipped where it cannot be mounted).

- an upstream's refusal keeps its status, and its Retry-After (whole seconds) reaches the client;
- a failure before the first chunk is an HTTP error even for a streamed request; after it, OpenAI's
  mid-stream error (`data: {"error": …}`, or a Responses `error` event);
- the session limit is a 409 `session_limit` on both doors;
- a reply that cannot be saved on a full disk is a 507 `insufficient_storage`, saying the disk is full.
"""

from __future__ import annotations

import contextlib
import errno
import os

import httpx2 as httpx
import orjson
import pytest

from tests.fake_openai import FakeOpenAI
from tests.system.hostile.test_faults import tiny_tmpfs

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def upstream_gateway(start_gateway, api, **overrides):
    return await start_gateway(
        **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model", "chat.maxRetries": 0}
        | overrides
    )


def http(gw, session: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {gw.token}"} | ({"X-Jarvis-Session": session} if session else {})
    return httpx.AsyncClient(base_url=gw.http_url, headers=headers, timeout=30)


def request(door: str, stream: bool, text: str = "hello") -> tuple[str, dict]:
    if door == "chat":
        return "/v1/chat/completions", {
            "model": "fake-model",
            "stream": stream,
            "messages": [HELLO[0] | {"content": text}],
        }
    return "/v1/responses", {"model": "fake-model", "stream": stream, "input": text}


def sse_error(door: str, body: bytes) -> dict:
    """The error a stream ended with: chat completions' last `data:` before none, or Responses' `error`."""
    frames = [f for f in body.split(b"\n\n") if f.strip()]
    last = frames[-1]
    if door == "chat":
        assert last.startswith(b"data: ") and b"[DONE]" not in body, body[-400:]
        return orjson.loads(last.removeprefix(b"data: "))["error"]
    head, data = last.split(b"\n", 1)
    assert head == b"event: error", body[-400:]
    told = orjson.loads(data.removeprefix(b"data: "))
    assert told["type"] == "error" and told["error"]["code"] == told["code"]
    return told["error"]


DOORS = [("chat", False), ("chat", True), ("responses", False), ("responses", True)]


@pytest.mark.parametrize("door,stream", DOORS)
async def test_an_upstream_refusal_keeps_its_status_and_its_retry_after(start_gateway, api, door, stream):
    gw = await upstream_gateway(start_gateway, api)
    path, body = request(door, stream)
    async with http(gw, "refused") as client:
        api.script(("status", 429, {"Retry-After": "7"}, "rate_limit_exceeded"))
        r = await client.post(path, json=body)
        assert r.status_code == 429, r.text  # before its first chunk: an HTTP error, streamed or not
        assert r.headers["retry-after"] == "7"
        assert r.json()["error"]["code"] == "rate_limit_exceeded"

        api.script(("status", 503, {"Retry-After": "3"}))  # a 5xx upstream: the gateway's 502, still when
        r = await client.post(path, json=body)
        assert (r.status_code, r.headers.get("retry-after")) == (502, "3"), r.text
        assert r.json()["error"]["code"] == "upstream_error" and "HTTP 503" in r.json()["error"]["message"]

        api.script(("status", 400, {}, "context_length_exceeded"))  # no Retry-After: none is invented
        r = await client.post(path, json=body)
        assert r.status_code == 400 and "retry-after" not in r.headers
        assert r.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("door", ["chat", "responses"])
async def test_an_upstream_that_breaks_off_after_its_first_chunk_is_a_mid_stream_error(start_gateway, api, door):
    api.reply = "one two three four five six"
    api.script(("cut", 2))
    gw = await upstream_gateway(start_gateway, api)
    path, body = request(door, True)
    async with http(gw, "cut") as client:
        r = await client.post(path, json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    error = sse_error(door, r.content)
    assert error["code"] == "upstream_error" and error["type"] == "upstream_error"
    assert "chat provider" in error["message"]


@pytest.mark.parametrize("door,stream", DOORS)
async def test_past_sessions_max_a_new_conversation_is_a_409_session_limit(start_gateway, api, door, stream):
    gw = await upstream_gateway(start_gateway, api, **{"sessions.max": 1})
    async with http(gw, "first") as client:
        path, body = request(door, False)
        assert (await client.post(path, json=body)).status_code == 200
    async with http(gw, "second") as client:
        path, body = request(door, stream)
        r = await client.post(path, json=body)
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert (error["code"], error["type"]) == ("session_limit", "conflict_error")
    assert "sessions.max" in error["message"] and "retry-after" not in r.headers


@contextlib.contextmanager
def filled(folder):
    """`folder` (a tmpfs) with not one byte free, until the block ends."""
    ballast = folder / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    try:
        yield
    finally:
        ballast.unlink()


@pytest.mark.parametrize("door,stream", DOORS)
async def test_a_reply_that_cannot_be_saved_on_a_full_disk_is_a_507(tmp_path, start_gateway, api, door, stream):
    from tests.helpers import make_config

    api.reply = "Saved nowhere."
    sessions = make_config(tmp_path / "state").sessions_dir()
    with tiny_tmpfs(sessions):
        gw = await upstream_gateway(start_gateway, api)
        path, body = request(door, stream, "hello " + "x" * 20_000)  # past the last page of its file
        async with http(gw, "full") as client:
            path0, body0 = request(door, False)
            assert (await client.post(path0, json=body0)).status_code == 200  # the session exists
            with filled(sessions):
                r = await client.post(path, json=body)
            if stream:  # the reply streamed, then could not be saved: the stream ends with the error
                assert r.status_code == 200, r.text
                error = sse_error(door, r.content)
            else:
                assert r.status_code == 507, r.text
                error = r.json()["error"]
            assert (error["code"], error["type"]) == ("insufficient_storage", "server_error")
            assert "disk is full" in error["message"]
            r = await client.post(path, json=body)  # room again: the same request is answered
            assert r.status_code == 200 and b"Saved" in r.content and b"insufficient_storage" not in r.content
