"""Session metadata under load and crashes: coalesced counters, reconciliation, bounded pages."""

import signal

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.helpers import GatewayProcess, connect_client


async def test_counters_are_current_before_and_after_restart(gateway, client):
    key = (await client.call("sessions.create"))["sessionKey"]
    for i in range(3):
        sent = await client.call("chat.send", {"sessionKey": key, "message": f"m{i}"})
        await client.run_to_end(sent["runId"])
    assert (await client.call("sessions.get", {"sessionKey": key}))["messageCount"] == 6
    await client.close()
    await gateway.restart()  # close flushes what is pending
    data = orjson.loads((gateway.config.sessions_dir() / "sessions.json").read_bytes())
    assert data["sessions"][key]["messageCount"] == 6


async def test_counters_lost_in_a_crash_are_recounted_from_transcripts(tmp_path):
    (tmp_path / "config.toml").write_text("[memory]\nenabled = false\n[chat]\nofflineDeltaDelay = 0\n")
    gp = GatewayProcess(tmp_path).start()
    try:
        c = await connect_client(gp.url, gp.token)
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "counted"})
        await c.run_to_end(sent["runId"])
        gp.signal(signal.SIGKILL)  # within the coalescing window: sessions.json may still say 0
        gp.wait(10)
        gp.start()
        c = await connect_client(gp.url, gp.token)
        assert (await c.call("sessions.get", {"sessionKey": key}))["messageCount"] == 2
        await c.close()
    finally:
        gp.kill()


async def test_history_pages_are_bounded_in_bytes(start_gateway):
    gw = await start_gateway(**{"sessions.historyMaxBytes": 8192})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    for i in range(4):
        sent = await c.call("chat.send", {"sessionKey": key, "message": f"{i}" + "x" * 1500})
        await c.run_to_end(sent["runId"])
    page = await c.call("sessions.history", {"sessionKey": key})
    assert page["hasMore"] is True and 1 <= len(page["messages"]) < 8
    assert sum(len(m["content"]) for m in page["messages"]) <= 8192
    older = await c.call("sessions.history", {"sessionKey": key, "before": page["messages"][0]["id"]})
    assert older["messages"] and older["messages"][-1]["id"] != page["messages"][0]["id"]
    await c.close()


async def test_unauthenticated_connections_are_capped(start_gateway):
    gw = await start_gateway(**{"server.maxUnauthenticated": 2})
    idle = [await connect(gw.url) for _ in range(2)]
    with pytest.raises(InvalidStatus) as exc:
        async with connect(gw.url):
            pass
    assert exc.value.response.status_code == 503
    c = await gw.client(how="header")  # a client that authenticates up front still gets in
    assert (await c.call("system.health"))["status"] == "ok"
    await idle[0].send(orjson.dumps({"type": "auth", "token": gw.token}).decode())
    assert orjson.loads(await idle[0].recv())["method"] == "auth.ok"
    late = await gw.client()  # a slot was freed by authenticating
    await late.close()
    for ws in idle:
        await ws.close()
    await c.close()
