"""The session trash over the wire: sessions.delete moves a session to the trash (out of search at once),
sessions.trash lists it, sessions.restore brings it back searchable, sessions.purge removes it, and
the trash is emptied memory.trashDays after a delete (the retention loop)."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import RpcError


async def _hits(c, words: str) -> list[str]:
    found = await c.call("memory.search", {"query": words, "sources": ["sessions"], "mode": "fts"})
    return [r["sessionKey"] for r in found["results"]]


async def test_delete_restore_and_purge_a_session_with_its_memory(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    key = (await c.call("sessions.create", {"label": "the zanzibar trip"}))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "We sail to Zanzibar with pineapples."})
    await c.run_to_end(sent["runId"])
    await c.call("memory.sync")
    assert await _hits(c, "zanzibar pineapples") == [key]
    before = await c.call("sessions.get", {"sessionKey": key})
    history = await c.call("sessions.history", {"sessionKey": key})

    deleted = await c.call("sessions.delete", {"sessionKey": key})
    assert deleted["trashed"] is True
    assert await _hits(c, "zanzibar pineapples") == [], "out of search at once"
    trash = await c.call("sessions.trash")
    assert trash["total"] == 1
    item = trash["sessions"][0]
    assert item["sessionKey"] == key and item["label"] == "the zanzibar trip" and item["expiresAt"] > item["deletedAt"]
    with pytest.raises(RpcError) as err:
        await c.call("sessions.create", {"sessionKey": key})
    assert err.value.code == -32009 and "sessions.restore" in err.value.message

    await gw.restart()  # the trash survives a restart
    c = await gw.client()
    assert (await c.call("sessions.trash"))["total"] == 1
    back = await c.call("sessions.restore", {"sessionKey": key})
    assert back == before and await c.call("sessions.history", {"sessionKey": key}) == history
    assert await _hits(c, "zanzibar pineapples") == [key], "searchable again when restore answers"
    assert (await c.call("sessions.trash"))["total"] == 0
    sent = await c.call("chat.send", {"sessionKey": key, "message": "And mangoes."})
    await c.run_to_end(sent["runId"])

    await c.call("sessions.delete", {"sessionKey": key})
    assert (await c.call("sessions.purge", {"all": True}))["purged"] == [key]
    with pytest.raises(RpcError) as err:
        await c.call("sessions.restore", {"sessionKey": key})
    assert err.value.code == -32004
    for params, words in (({}, "give sessionKey, or all: true"), ({"sessionKey": key, "all": True}, "not both")):
        with pytest.raises(RpcError) as err:
            await c.call("sessions.purge", params)
        assert (
            err.value.code == -32602 and err.value.data["field"] == "params.sessionKey" and words in err.value.message
        )
    await c.close()


async def test_the_trash_empties_itself_after_trash_days_and_past_trash_max(start_gateway):
    gw = await start_gateway(memory=True, **{"memory.trashDays": 30, "memory.trashMax": 2})
    c = await gw.client()
    for key in ("a", "b", "c"):
        await c.call("sessions.create", {"sessionKey": key})
        await c.call("sessions.delete", {"sessionKey": key})
        await c.call("memory.set", {"key": f"k{key}", "value": f"memory {key}"})
        await c.call("memory.delete", {"key": f"k{key}"})
    agent = await gw.gw.services.agent()
    emptied = await agent.empty_trash(gw.config.memory)  # what the retention loop runs
    assert emptied == {"sessions": ["a"], "keyed": ["ka"]}, "past trashMax: the longest deleted go"
    gw.config.memory.trash_days = 0.00001  # about a second
    await asyncio.sleep(1.2)
    assert await agent.empty_trash(gw.config.memory) == {"sessions": ["b", "c"], "keyed": ["kb", "kc"]}
    assert (await c.call("sessions.trash"))["total"] == 0 and (await c.call("memory.trash"))["total"] == 0
    await c.close()
