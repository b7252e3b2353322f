"""The audit entries that cannot be written while the store is away (gateway/auditing.py): held in order,
bounded in count and bytes (the oldest dropped, counted), written when the store answers again. The store
here is a list behind a switch, the recorder's own port (`Append`); the outage on a real PostgreSQL is
tests/system/postgres/test_outage_two_gateways.py."""

from __future__ import annotations

import structlog

from gateway import auditing
from gateway.auditing import AuditRecorder
from tests.helpers import wait_for


class Store:
    """An audit log that refuses connections while `down`."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.down = False

    async def append(self, entry: dict) -> None:
        if self.down:
            raise ConnectionRefusedError("connection refused")
        self.rows.append(entry)


def entry(i: int, ok: bool = True) -> dict:
    return {
        "at": f"2026-12-07T15:00:{i % 60:02d}.000Z",
        "principal": f"p{i}",
        "method": "memory.set",
        "door": "websocket",
        "ok": ok,
        "target": f"k{i}",
    }


async def test_entries_held_while_the_store_is_away_are_written_in_order_when_it_is_back(monkeypatch):
    monkeypatch.setattr(auditing, "HELD_RETRY_S", 0.01)
    store = Store()
    rec = AuditRecorder(store.append)
    await rec.record(entry(0))
    store.down = True
    with structlog.testing.capture_logs() as logs:
        for i in range(1, 6):
            await rec.record(entry(i, ok=i % 2 == 0))  # refusals of different principals: each written
        assert rec.held == 5 and len(store.rows) == 1
        store.down = False

        async def written() -> bool:
            return not rec.held

        await wait_for(written)
    assert [r["target"] for r in store.rows] == [f"k{i}" for i in range(6)]
    events = [e["event"] for e in logs]
    assert events == ["audit_entries_held", "audit_entries_written"], events
    assert logs[-1]["held"] == 5 and logs[-1]["dropped"] == 0
    await rec.close()


async def test_what_is_held_is_bounded_the_oldest_dropped_and_counted(monkeypatch):
    monkeypatch.setattr(auditing, "HELD_MAX", 3)
    store = Store()
    rec = AuditRecorder(store.append)
    store.down = True
    with structlog.testing.capture_logs() as logs:
        for i in range(10):
            await rec.record(entry(i))
        assert rec.held == 3
        store.down = False
        await rec.close()  # a gateway stopping tries them once more
    assert [r["target"] for r in store.rows] == ["k7", "k8", "k9"]
    dropped = [e for e in logs if e["event"] == "audit_entries_dropped"]
    assert len(dropped) == 1  # said once, counted after
    assert logs[-1]["event"] == "audit_entries_written" and logs[-1]["dropped"] == 7 and logs[-1]["held"] == 10


async def test_bytes_bound_too(monkeypatch):
    monkeypatch.setattr(auditing, "HELD_MAX_BYTES", 1000)
    store = Store()
    rec = AuditRecorder(store.append)
    store.down = True
    for i in range(50):
        await rec.record(entry(i))
    assert 0 < rec.held < 50
    store.down = False
    await rec.close()
    assert store.rows[-1]["target"] == "k49" and len(store.rows) < 50
