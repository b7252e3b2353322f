"""A run's events crossing gateways on one PostgreSQL database (cluster.py, chat/events.py's codec): a
subscriber on B gets the very notifications a subscriber on A gets — failures and aborts included, the
error's JSON-RPC code as A renders it."""

from __future__ import annotations

import asyncio
import threading

from tests.fake_openai import FakeOpenAI


async def pair(start_gateway, postgres_url, **overrides):
    common = {"storage.url": postgres_url, **overrides}
    a = await start_gateway("a", **{"storage.instanceId": "a", **common})
    b = await start_gateway("b", **{"storage.instanceId": "b", **common})
    return a, b


async def test_every_end_of_a_run_reaches_b_as_a_renders_it(start_gateway, postgres_url):
    with FakeOpenAI() as api:
        api.reply = "one two three"
        a, b = await pair(
            start_gateway, postgres_url, **{"chat.baseUrl": api.base_url, "chat.model": "m", "chat.maxRetries": 0}
        )
        ca, cb = await a.client(), await b.client()
        try:
            key = (await ca.call("sessions.create"))["sessionKey"]
            await cb.call("sessions.subscribe", {"sessionKey": key})
            release = threading.Event()
            ends = []
            for behaviour in [("ok",), ("status", 429, {"Retry-After": "2"}), ("cut", 1), ("wait", release, 10)]:
                api.script(behaviour)
                run = await ca.call("chat.send", {"sessionKey": key, "message": "count"})
                if behaviour[0] == "wait":
                    await asyncio.sleep(0.3)
                    await ca.call("chat.abort", {"sessionKey": key})
                on_a = await ca.run_to_end(run["runId"])
                on_b = await cb.run_to_end(run["runId"])
                assert on_b == on_a  # the same notifications, params and all
                ends.append(on_b[-1])
            release.set()
            assert [e["method"] for e in ends] == ["chat.final", "chat.error", "chat.error", "chat.aborted"]
            refused = ends[1]["params"]["error"]
            assert refused["code"] == -32050 and refused["retryable"] is True and "HTTP 429" in refused["message"]
            assert ends[3]["params"]["partial"] == ""
        finally:
            await ca.close()
            await cb.close()
