"""Per-agent isolation: each agent has its own sessions and transcripts and never sees another's."""

import pytest

from tests.helpers import RpcError


async def test_agents_do_not_see_each_others_sessions(gateway, client):
    mine = await client.call("sessions.create", {"label": "main's"})
    work = await client.call("sessions.create", {"label": "work's", "agentId": "work"})
    assert (gateway.config.state_dir / "agents/work/sessions" / f"{work['sessionKey']}.jsonl").exists()

    listed_main = await client.call("sessions.list")
    listed_work = await client.call("sessions.list", {"agentId": "work"})
    assert [s["sessionKey"] for s in listed_main["sessions"]] == [mine["sessionKey"]]
    assert [s["sessionKey"] for s in listed_work["sessions"]] == [work["sessionKey"]]

    with pytest.raises(RpcError) as exc:
        await client.call("sessions.get", {"sessionKey": work["sessionKey"]})
    assert exc.value.code == -32004
    with pytest.raises(RpcError) as exc:
        await client.call("chat.send", {"sessionKey": work["sessionKey"], "message": "wrong agent"})
    assert exc.value.code == -32004

    sent = await client.call("chat.send", {"sessionKey": work["sessionKey"], "message": "hi", "agentId": "work"})
    events = await client.run_to_end(sent["runId"])
    assert events[-1]["method"] == "chat.final"
    hist = await client.call("sessions.history", {"sessionKey": work["sessionKey"], "agentId": "work"})
    assert [m["content"] for m in hist["messages"]][0] == "hi"


async def test_unknown_and_invalid_agents(client):
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.list", {"agentId": "ghost"})
    assert exc.value.code == -32004 and "agent not found: ghost" in exc.value.message
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.create", {"agentId": "../etc"})
    assert exc.value.code == -32602 and exc.value.data["field"] == "params.agentId"


async def test_agents_survive_restart(gateway, client):
    work = await client.call("sessions.create", {"agentId": "work"})
    await client.close()
    await gateway.restart()
    c = await gateway.client()
    got = await c.call("sessions.get", {"sessionKey": work["sessionKey"], "agentId": "work"})
    assert got["sessionKey"] == work["sessionKey"]
    await c.close()
