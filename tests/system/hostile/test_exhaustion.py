"""Exhaustion (issue 29): each test failed before its fix.

Half-open sockets and descriptors, clients that never read, pre-auth ping floods.
"""

from __future__ import annotations

import asyncio
import socket

import orjson

from tests.attacks import half_open_flood, ping_flood
from tests.fake_openai import FakeOpenAI
from tests.helpers import GatewayProcess, connect_client, wait_for
from tests.system.hostile.test_hostile import frame, raw_ws


async def test_half_open_flood_leaves_descriptors_for_the_gateways_own_files(tmp_path):
    # LimitNOFILE=512: sockets that never send a byte used to take every descriptor for the handshake
    # timeout, and an authenticated client's writes failed -32603 (EMFILE on sessions.json).
    with GatewayProcess.running(tmp_path / "state", nofile=512) as gw:
        client = await connect_client(gw.url, gw.token)
        socks: list[socket.socket] = []
        flood = asyncio.create_task(half_open_flood(gw.port, socks))
        try:
            await asyncio.sleep(1.5)
            for i in range(5):
                created = await client.call("sessions.create", {"label": f"during flood {i}"})
                sent = await client.call("chat.send", {"sessionKey": created["sessionKey"], "message": "hi"})
                events = await client.run_to_end(sent["runId"])
                assert events[-1]["method"] == "chat.final", events[-1]
            # A new client still gets in: the oldest half-open sockets make room for it.
            other = await connect_client(gw.url, gw.token, open_timeout=10)
            health = await other.call("system.health")
            assert health["status"] == "ok"
            await other.close()
        finally:
            flood.cancel()
            for s in socks:
                s.close()
        await client.close()
        log = gw.log.read_text()
        assert "pending socket dropped" in log
        emfile = [line for line in log.splitlines() if "Too many open files" in line]
        assert not emfile, emfile[:3]


async def test_subscribers_that_never_read_are_torn_down(tmp_path):
    # Five subscribers stop reading during a long reply of small deltas: they are flagged slow
    # consumers, and websockets' close() used to wait for them to read (drain) before its own timeout
    # started, so their sockets and buffers were held for good. Now the transport is aborted.
    toml = (
        "[server]\nmaxSendBuffer = 65536\nmaxReplyBytes = 393216\n[chat]\nmaxReplyChars = 50000\n"
        "timeout = 30\n[sessions]\nhistoryMaxBytes = 65536\n"
    )
    with FakeOpenAI() as api:
        api.reply = "x " * 25_000  # 25k deltas of ~290 bytes (a long key): more than any socket buffer
        env = {"OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "k"}
        with GatewayProcess.running(tmp_path / "state", toml, env=env) as gw:
            loop = asyncio.get_running_loop()
            good = await connect_client(gw.url, gw.token)
            key = (await good.call("sessions.create", {"sessionKey": "k" * 128}))["sessionKey"]
            readers = []
            for _ in range(5):
                s = await loop.run_in_executor(None, raw_ws, gw, 4096)
                s.sendall(frame(orjson.dumps({"type": "auth", "token": gw.token})))
                s.sendall(frame(orjson.dumps({"id": 1, "method": "sessions.subscribe", "params": {"sessionKey": key}})))
                readers.append(s)
            await wait_for(lambda: count_connections(good, 6))
            sent = await good.call("chat.send", {"sessionKey": key, "message": "long one"})
            events = await good.run_to_end(sent["runId"], timeout=60)
            assert events[-1]["method"] == "chat.final"
            assert gw.log.read_text().count("closing slow consumer") >= 5
            # Torn down within the close timeout (5 s), while they still have not read a byte.
            await wait_for(lambda: count_connections(good, 1), timeout=12)
            for s in readers:
                s.close()
            await good.close()


async def count_connections(client, want: int) -> bool:
    return (await client.call("system.health"))["connections"] == want


async def test_a_preauth_ping_flood_does_not_slow_a_bystander(tmp_path):
    # 16 sockets that upgrade, never authenticate and send pings as fast as they can used to push a
    # bystander's system.health p50 to 571 ms: every ping was parsed and answered. Before auth a socket
    # now has a budget of frames and bytes; past it, it is cut.
    import statistics
    import time

    with GatewayProcess.running(tmp_path / "state") as gw:
        good = await connect_client(gw.url, gw.token)
        attacker = ping_flood(gw.port, 16, 4)
        times = []
        try:
            end = time.monotonic() + 4
            while time.monotonic() < end:
                t0 = time.monotonic()
                await good.call("system.health")
                times.append(time.monotonic() - t0)
                await asyncio.sleep(0.02)
        finally:
            out, _ = attacker.communicate(timeout=30)
        p50 = statistics.median(times) * 1000
        assert int(out) == 16, "every flooding socket is cut"
        assert "closing a socket that sent too much before authenticating" in gw.log.read_text()
        assert p50 < 100, f"bystander system.health p50 {p50:.0f} ms during the flood"
        await good.close()
