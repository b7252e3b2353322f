"""Two gateways of one PostgreSQL through an outage (issue 47's review, R8): the housekeeping that fails
every round (the cluster's sweep, every 5 s) and every second (the notification listener's reconnect) is
said once when it starts failing and once when it recovers, with a count — no traceback, no line per
round — and the audit rows of calls refused while the database was away are held and written once it is
back, on each gateway."""

from __future__ import annotations

import structlog

from tests.helpers import RpcError, connect_client, wait_for

STOP = 'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {allow}'


async def test_an_outage_on_two_gateways_is_said_once_and_its_refusals_are_audited_after(
    start_gateway, postgres_url, caplog
):
    import asyncpg

    cfg = {"storage.url": postgres_url, "memory": True, "memory.embeddings.provider": "none"}
    a = await start_gateway("a", **{"storage.instanceId": "a", **cfg})
    b = await start_gateway("b", **{"storage.instanceId": "b", **cfg})
    owner = await a.client()
    token = (await owner.call("principals.create", {"name": "reader", "agents": "main", "scopes": "read"}))["token"]

    async def admitted() -> bool:  # b's poll of the principals has seen the reader
        try:
            c = await connect_client(b.url, token, "frame")
        except AssertionError:
            return False
        await c.close()
        return True

    await wait_for(admitted)
    readers = {"a": await connect_client(a.url, token, "frame"), "b": await connect_client(b.url, token, "frame")}
    name = postgres_url.split("?")[0].rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres_url.replace(f"/{name}", "/postgres"))
    try:
        with structlog.testing.capture_logs() as logs:
            await admin.execute(STOP.format(name=name, allow="false"))
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
            for gw, reader in readers.items():  # refused (scope), while the audit cannot be written
                for i in range(3):
                    msg = await reader.request("memory.set", {"key": f"from-{gw}-{i}", "value": "v"})
                    assert msg["error"]["code"] == -32003
            try:
                await owner.call("memory.set", {"key": "during", "value": "v"})
            except RpcError as exc:
                assert exc.code == -32050  # retryable: the database cannot be reached

            async def both_swept() -> bool:  # each gateway's sweep failed at least once (≥ 4 listener tries)
                return sum(e["event"] == "cluster sweep failed" for e in logs) >= 2

            await wait_for(both_swept, 30)
            assert sum(e["event"] == "audit_entries_held" for e in logs) == 2  # once per gateway
            await admin.execute(STOP.format(name=name, allow="true"))

            async def audited() -> list:
                entries = (await owner.call("audit.list", {"principal": "reader"}))["entries"]
                return [e for e in entries if e["method"] == "memory.set" and not e["ok"]]

            async def written() -> bool:
                return sum(e["event"] == "audit_entries_written" for e in logs) == 2

            async def listening() -> bool:
                return sum(e["event"] == "postgres listener reconnected" for e in logs) >= 2

            await wait_for(written, 30)
            await wait_for(listening, 30)
            refused = await wait_for(audited, 30)
    finally:
        await admin.execute(STOP.format(name=name, allow="true"))
        await admin.close()
    assert len(refused) >= 2  # each gateway's first refusal, written as it happened (its repeats: counted)
    events = [e["event"] for e in logs]
    assert events.count("cluster sweep failed") == 2, events  # once per gateway, not once per round
    assert events.count("postgres listener reconnect failed") <= 2, events
    assert [e["failed"] for e in logs if e["event"] == "postgres listener reconnected"][-1] >= 1
    assert not [e for e in logs if e.get("exc_info") or e.get("log_level") in ("error", "critical")], logs
    pool = [r for r in caplog.records if r.name == "asyncpg.pool"]  # the driver's own: a line, no traceback
    assert not [r for r in pool if r.exc_info or r.exc_text], pool
    for c in (owner, *readers.values()):
        await c.close()
