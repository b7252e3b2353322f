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
