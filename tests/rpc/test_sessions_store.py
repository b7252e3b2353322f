"""Session metadata under load and crashes: coalesced counters, reconciliation, bounded pages."""

import asyncio
import signal

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.sessions import transcript as tx
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
    # The bound is on the encoded messages, and it is tight: one more message would have passed it.
    full = await c.call("sessions.history", {"sessionKey": key, "limit": len(page["messages"]) + 1})
    assert full["hasMore"] is True and len(full["messages"]) == len(page["messages"])  # the byte bound cut it
    unbounded = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
    assert sum(len(orjson.dumps(m)) + 1 for m in page["messages"]) <= 8192
    everything = [m for m in tx.read_messages(gw.config.sessions_dir() / f"{key}.jsonl")]
    older_one = everything[-len(page["messages"]) - 1]
    older_one.pop("line", None)
    assert sum(len(orjson.dumps(m)) + 1 for m in [older_one, *page["messages"]]) > 8192
    assert unbounded == page["messages"]
    older = await c.call("sessions.history", {"sessionKey": key, "before": page["messages"][0]["id"]})
    assert older["messages"] and older["messages"][-1]["id"] != page["messages"][0]["id"]
    await c.close()


async def test_idle_unauthenticated_sockets_cannot_hold_every_slot(start_gateway):
    gw = await start_gateway(**{"server.maxConnections": 2})
    idle = [await connect(gw.url) for _ in range(2)]
    c = await gw.client()  # at the limit: an idle, unauthenticated socket makes room
    assert (await c.call("system.health"))["status"] == "ok"
    closed = []
    for ws in idle:
        try:
            await asyncio.wait_for(ws.recv(), 0.5)
        except ConnectionClosed:
            closed.append(ws.close_code)
        except TimeoutError:
            pass
    assert closed == [1008]
    d = await gw.client(how="header")  # the other idle one makes room too
    with pytest.raises(InvalidStatus) as exc:  # now every connection is authenticated: refused
        async with connect(gw.url):
            pass
    assert exc.value.response.status_code == 503
    for ws in idle:
        await ws.close()
    await c.close()
    await d.close()
