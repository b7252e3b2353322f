"""What a database outage leaves behind (issue 47.5): one line when it goes, one when it comes back (with
the failures between), not a traceback per failed search; and a refused call whose params hold a NUL
still leaves its audit row on PostgreSQL."""

from __future__ import annotations

import asyncio

import structlog

from tests.helpers import RpcError

STOP = 'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {allow}'


async def test_an_outage_is_said_once_when_it_goes_and_once_when_it_is_back(start_gateway, postgres_url):
    import asyncpg

    gw = await start_gateway(memory=True, **{"storage.url": postgres_url, "memory.embeddings.provider": "none"})
    c = await gw.client()
    await c.call("memory.set", {"key": "boat", "value": "the boat is blue"})
    name = postgres_url.split("?")[0].rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres_url.replace(f"/{name}", "/postgres"))
    failed = 0
    try:
        with structlog.testing.capture_logs() as logs:
            await admin.execute(STOP.format(name=name, allow="false"))
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
            for i in range(40):
                for method, params in (
                    ("memory.search", {"query": f"boat {i}"}),
                    ("memory.set", {"key": f"k{i}", "value": "v"}),
                ):
                    try:
                        await c.call(method, params)
                    except RpcError as exc:
                        assert exc.code == -32050, exc  # retryable: the database cannot be reached
                        failed += 1
            await admin.execute(STOP.format(name=name, allow="true"))
            async with asyncio.timeout(20):
                while not any(e["event"] == "database_reachable" for e in logs):
                    await asyncio.sleep(0.1)
            assert (await c.call("memory.search", {"query": "boat"}))["results"]
    finally:
        await admin.execute(STOP.format(name=name, allow="true"))
        await admin.close()
    events = [e["event"] for e in logs]
    assert failed == 80
    assert events.count("database_unreachable") == 1, events
    assert events.count("database_reachable") == 1, events
    back = next(e for e in logs if e["event"] == "database_reachable")
    assert back["failures"] >= failed and back["seconds"] > 0
    assert "memory_sync_failed" not in events
    assert not [e for e in logs if e.get("log_level") in ("error", "critical") or e.get("exc_info")], logs
    said = [e["event"] for e in logs if e.get("log_level") not in ("debug", "info")]
    assert len(said) <= 8 < failed, said  # a few lines for the outage, not one (or a traceback) per failure
    await c.close()


async def test_a_refused_call_with_a_nul_leaves_its_audit_row_on_postgresql(start_gateway, postgres_url):
    gw = await start_gateway(**{"storage.url": postgres_url})
    owner = await gw.client()
    made = await owner.call("principals.create", {"name": "reader", "agents": "main", "scopes": "read"})
    from tests.helpers import connect_client

    reader = await connect_client(gw.url, made["token"], "frame")
    for params in ({"key": "a\x00b", "value": "v"}, {"key": "k", "value": "v", "agentId": "x\x00y"}):
        msg = await reader.request("memory.set", params)
        assert msg["error"]["code"] == -32003
        msg = await owner.request("memory.set", params)  # the owner's: refused by the schema (NUL)
        assert msg["error"]["code"] == -32602
    entries = (await owner.call("audit.list", {}))["entries"]
    refused = [(e["principal"], e["method"], e.get("count", 1)) for e in entries if not e["ok"]]
    assert ("reader", "memory.set", 1) in refused and ("owner", "memory.set", 1) in refused
    assert all("\x00" not in str(e) for e in entries)
    await reader.close()
    await owner.close()
