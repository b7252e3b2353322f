"""AuditLog's bounds (storage/base.py), the same on both engines: read newest first up to a LIMIT however
big the log, every entry's text storable (a NUL or a lone surrogate never costs the row); the files
engine's rotation (size, age, kept N) and the PostgreSQL engine's retention."""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, given, settings

from gateway.principals import AUDIT_TEXT
from gateway.storage.files.principals import FileAuditLog
from tests.hostile_values import hostile_text


def _entry(i: int, who: str = "owner", **more) -> dict:
    at = f"2030-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z"
    return {
        "at": at,
        "principal": who,
        "method": "memory.set",
        "door": "websocket",
        "ok": True,
        "target": f"k{i}",
    } | more


async def test_a_big_log_is_read_newest_first_up_to_the_limit(storage):
    log = storage.audit()
    for i in range(600):
        await log.append(_entry(i, "phone" if i % 100 == 7 else "owner"))
    assert [e["target"] for e in await log.read(None, None, 3)] == ["k597", "k598", "k599"]
    assert [e["target"] for e in await log.read(None, "phone", 2)] == ["k407", "k507"]  # the newest, oldest first
    assert [e["target"] for e in await log.read(None, "phone", 100)] == ["k7"] + [f"k{i}07" for i in range(1, 6)]
    since = "2030-01-01T00:09:55.000Z"  # entry 595
    assert [e["target"] for e in await log.read(since, None, 100)] == [f"k{i}" for i in range(595, 600)]
    assert await log.read(None, "nobody", 10) == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostile_text(1, 200), who=hostile_text(1, 64))
async def test_an_entry_of_any_text_is_kept_storable(storage, text, who):
    """NUL (PostgreSQL's jsonb and text refuse it) and lone surrogates (no UTF-8) become U+FFFD and a text
    past AUDIT_TEXT is cut: the attempt is still recorded, on both engines."""
    log = storage.audit()
    await log.append(_entry(1, who, target=text, agent=text[:64]))
    [got] = (await log.read(None, None, 1))[-1:]
    stored = text[:AUDIT_TEXT].replace("\x00", "\ufffd")
    stored = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in stored)
    assert got["target"] == stored and len(got["target"]) == min(len(text), AUDIT_TEXT)
    assert "\x00" not in got["principal"] and len(got["principal"]) == min(len(who), AUDIT_TEXT)


async def test_the_files_audit_rotates_by_size_and_keeps_n(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = FileAuditLog(path, max_bytes=4096, max_age=0, keep=2)
    for i in range(200):  # ~110 bytes an entry: ~22 KB, five files' worth
        await log.append(_entry(i))
    names = sorted(p.name for p in tmp_path.glob("audit*.jsonl"))
    assert names == ["audit.1.jsonl", "audit.2.jsonl", "audit.jsonl"]
    assert all(os.path.getsize(tmp_path / n) < 4096 + 200 for n in names)
    got = [e["target"] for e in await log.read(None, None, 10_000)]
    assert (
        got == [f"k{i}" for i in range(200 - len(got), 200)] and 60 < len(got) < 120
    )  # newest, in order, across files
    assert [e["target"] for e in await log.read(None, None, 50)] == [f"k{i}" for i in range(150, 200)]


async def test_the_files_audit_rotates_by_age(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = FileAuditLog(path, max_bytes=1 << 20, max_age=3600, keep=1)
    old = time.gmtime(time.time() - 7200)
    await log.append(_entry(0) | {"at": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", old)})
    await log.append(_entry(1) | {"at": "2099-01-01T00:00:00.000Z"})  # its file's first entry is 2 h old: rotated
    assert (tmp_path / "audit.1.jsonl").read_bytes().count(b"\n") == 1
    assert b"k1" in path.read_bytes() and b"k0" not in path.read_bytes()
    assert [e["target"] for e in await log.read(None, None, 10)] == ["k0", "k1"]


async def test_a_torn_or_huge_line_costs_only_itself(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = FileAuditLog(path, max_bytes=64 << 20, max_age=0, keep=0)
    await log.append(_entry(0))
    with open(path, "ab") as f:
        f.write(b'{"at": "2030' + b"x" * (3 << 20) + b"\n")  # longer than any line is held
    await log.append(_entry(1))
    with open(path, "ab") as f:
        f.write(b'{"at": "2030-01-0')  # cut short by a crash
    assert [e["target"] for e in await log.read(None, None, 10)] == ["k0", "k1"]


async def test_postgresql_deletes_rows_past_the_retention(postgres_url, tmp_path):
    from gateway.storage import open_storage
    from tests.helpers import make_config

    engine = await open_storage(
        make_config(tmp_path / "state", **{"storage.url": postgres_url, "audit.maxAgeDays": 1, "audit.keep": 1})
    )
    try:
        log = engine.audit()
        assert log is engine.audit()
        await engine.pg.pool.execute(
            "INSERT INTO audit (at, principal, entry) VALUES ('2001-01-01T00:00:00.000Z', 'old', '{}'::jsonb)"
        )
        await log.append(_entry(1) | {"at": "2099-01-01T00:00:00.000Z"})  # the first append prunes
        assert [e["target"] for e in await log.read(None, None, 10)] == ["k1"]
    finally:
        await engine.close()
