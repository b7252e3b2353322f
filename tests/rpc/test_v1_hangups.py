"""/v1's hostile readers on both run doors (a review of issue 44's typed run stream, which both now
render): a Responses client that hangs up mid-stream leaves the partial reply kept and marked aborted,
the upstream's request cancelled and nothing running — as chat completions' hang-up does
(test_openai_api.py); and a Responses stream on an upstream without the Responses route (translated from
chat completions) does the same."""

from __future__ import annotations

import httpx2 as httpx
import orjson
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import wait_for


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def _records(gw, key: str) -> list[dict] | None:
    path = gw.config.sessions_dir() / f"{key}.jsonl"
    if not path.exists():
        return None
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    records = [r for r in lines if r.get("type") == "message"]
    return records if records and records[-1].get("aborted") else None


@pytest.mark.parametrize("route", [True, False], ids=["upstream-responses", "translated"])
async def test_a_responses_client_that_hangs_up_mid_stream(start_gateway, api, route):
    api.reply = " ".join(f"word{i}" for i in range(60))
    api.chunk_delay = 0.05
    api.responses_route = route
    gw = await start_gateway(
        **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model", "chat.maxRetries": 0}
    )
    headers = {"Authorization": f"Bearer {gw.token}", "X-Jarvis-Session": "hangup"}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=headers) as http:
        async with http.stream(
            "POST", "/v1/responses", json={"model": "fake-model", "stream": True, "input": "talk a lot"}
        ) as r:
            assert r.status_code == 200
            got = b""
            async for part in r.aiter_bytes():
                got += part
                if got.count(b"response.output_text.delta") >= 3:
                    break  # and hang up

    async def aborted():
        return _records(gw, "hangup")

    records = await wait_for(aborted)
    assert records[0]["message"]["role"] == "user" and "talk a lot" in str(records[0]["message"]["content"])
    assert records[1]["aborted"] is True and records[1]["message"]["content"].startswith("word0 word1 ")
    assert len(records[1]["message"]["content"].split()) < 60

    async def upstream_cancelled():
        return api.cancelled == 1

    await wait_for(upstream_cancelled)
    agent = gw.gw.services.agents["main"]

    async def idle():
        return agent.chat.idle

    await wait_for(idle)
