"""A run aborted before its first delta (issue 29, point 9): the user message is indexed all the same."""

from __future__ import annotations

import threading

from tests.fake_openai import FakeOpenAI
from tests.helpers import wait_for


async def test_a_run_aborted_before_any_delta_still_indexes_the_user_message(start_gateway):
    # The debounced re-index was scheduled only after chat.final or an abort with a partial reply, so
    # the user message of a run aborted early stayed out of memory.search until the next full sync.
    release = threading.Event()
    with FakeOpenAI() as api:
        api.script(("wait", release, 20))
        gw = await start_gateway(
            memory=True,
            **{
                "chat.baseUrl": api.base_url,
                "chat.maxRetries": 0,
                "memory.sync.sessionDebounceMs": 100,
                "memory.sync.onSearch": False,
            },
        )
        c = await gw.client()
        try:
            key = (await c.call("sessions.create"))["sessionKey"]
            sent = await c.call("chat.send", {"sessionKey": key, "message": "the zanzibar ferry leaves at noon"})
            await wait_for(lambda: _waiting(api))
            assert (await c.call("chat.abort", {"sessionKey": key}))["aborted"] is True
            events = await c.run_to_end(sent["runId"])
            assert events[-1]["method"] == "chat.aborted" and events[-1]["params"]["partial"] == ""

            async def found():
                hits = await c.call("memory.search", {"query": "zanzibar ferry", "sources": ["sessions"]})
                return [r for r in hits["results"] if r.get("sessionKey") == key]

            assert await wait_for(found, timeout=10)
        finally:
            release.set()
            await c.close()


async def _waiting(api) -> bool:
    return api.waiting > 0
