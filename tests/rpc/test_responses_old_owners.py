"""Stored Responses are owned by `name#digest` (chat/responses.py owner_key) since principals were told
apart by token: a non-owner principal's responses kept in the bare-name form before are no longer read
(docs/openai-endpoint.md). A gateway says so once as it opens — how many of them it found, which then
expire — on both engines; the owner's and those of the new form are not counted."""

from __future__ import annotations

import pytest
import structlog

from gateway.chat.responses import owner_key
from gateway.principals import OWNER
from tests.helpers import wait_for

SAID = "stored responses of the old owner form"


@pytest.fixture(params=["files", "postgresql"])
def engine(request) -> dict:
    if request.param == "files":
        return {}
    return {"storage.url": request.getfixturevalue("postgres_url")}


async def test_responses_kept_in_the_old_owner_form_are_counted_once_at_open(start_gateway, engine):
    gw = await start_gateway(**engine)
    store = gw.gw.storage.responses()
    owner = await gw.client()
    await owner.call("principals.create", {"name": "phone", "agents": "*", "scopes": "read,chat"})
    await owner.close()
    new_form = owner_key(gw.gw.services.principals.directory.by_name["phone"])  # the form kept now
    assert "#" in new_form
    for n, who in enumerate(["phone", "phone", "laptop", OWNER, new_form]):  # three of the old form
        assert await store.put("main", who, f"resp_{n}", {"id": f"resp_{n}", "output": []})
    await gw.stop()
    with structlog.testing.capture_logs() as logs:
        await gw.start()

        async def said() -> list:
            return [e for e in logs if e.get("event") == SAID]

        await wait_for(said)
        c = await gw.client()  # a request answered: the gateway is open (the count came at its start)
        await c.call("system.health")
        await c.close()
    found = [e for e in logs if e.get("event") == SAID]
    assert [e["count"] for e in found] == [3], found
    assert found[0]["log_level"] == "warning"
