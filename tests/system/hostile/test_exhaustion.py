"""Exhaustion and poisoned upstream data (issue 29): each test failed before its fix.

Half-open sockets and descriptors, clients that never read, pre-auth ping floods.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.helpers import GatewayProcess, RpcError, connect_client


async def half_open_flood(port: int, socks: list[socket.socket], n: int = 3000) -> None:
    """Non-blocking connects that never send a byte, 50 every 20 ms, until `n` are open."""
    while len(socks) < n:
        for _ in range(50):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        await asyncio.sleep(0.02)


async def test_half_open_flood_leaves_descriptors_for_the_gateways_own_files(tmp_path):
    # LimitNOFILE=256: sockets that never send a byte used to take every descriptor for the handshake
    # timeout, and an authenticated client's writes failed -32603 (EMFILE on sessions.json).
    with GatewayProcess.running(tmp_path / "state", nofile=256) as gw:
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
        assert "Too many open files" not in log


async def test_out_of_descriptors_is_a_retryable_error_naming_the_cause(tmp_path):
    # With (almost) no descriptors kept in reserve, a flood can still use them all: the client is then
    # told to retry (-32050, retryable, errno EMFILE) instead of a bare -32603 internal error.
    toml = ("[server]\nfdReserve = 1\nmaxPendingSockets = 5000\nmaxPendingPerAddress = 5000\n"
            "handshakeTimeout = 30\n")
    with GatewayProcess.running(tmp_path / "state", toml, nofile=256) as gw:
        client = await connect_client(gw.url, gw.token)
        socks: list[socket.socket] = []
        flood = asyncio.create_task(half_open_flood(gw.port, socks, 600))
        try:
            await flood
            await asyncio.sleep(1.0)
            with pytest.raises(RpcError) as err:
                for i in range(20):
                    await client.call("sessions.create", {"label": f"no descriptors {i}"})
            assert err.value.code == -32050, err.value.message
            assert err.value.data["retryable"] is True and err.value.data["errno"] == "EMFILE"
            assert "too many files open" in err.value.message
        finally:
            for s in socks:
                s.close()
        # Once the sockets are gone, the same request succeeds.
        await asyncio.sleep(0.5)
        assert (await client.call("sessions.create", {"label": "after"}))["sessionKey"]
        await client.close()
