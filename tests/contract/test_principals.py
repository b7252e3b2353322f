"""PrincipalStore's and AuditLog's contract (storage/base.py), the same on both engines."""

from __future__ import annotations

import pytest

from gateway.errors import Conflict, NotFound
from gateway.principals import Directory, hash_token, make


async def test_principals_are_added_listed_revoked_and_replaced(storage):
    store = storage.principals()
    v0 = await store.version()
    phone = make("phone", ["main"], "read,chat", "30d", "phone-token-of-43-characters-aaaaaaaaaaaaa")
    await store.add(phone)
    v1 = await store.version()
    assert v1 != v0
    [got] = await store.all()
    assert got == phone and got.token_hash == hash_token("phone-token-of-43-characters-aaaaaaaaaaaaa")
    assert got.agents == ("main",) and got.scopes == {"read", "chat"} and got.expires
    with pytest.raises(Conflict):
        await store.add(make("phone", "*", "admin", None, "another-token-of-plenty-of-characters-bbb"))
    gone = await store.revoke("phone", "2030-01-01T00:00:00.000Z")
    assert gone.revoked == "2030-01-01T00:00:00.000Z" and not gone.live()
    assert await store.version() != v1
    with pytest.raises(NotFound):
        await store.revoke("phone", "2030-01-02T00:00:00.000Z")
    with pytest.raises(NotFound):
        await store.revoke("nobody", "2030-01-02T00:00:00.000Z")
    [listed] = await store.all()
    assert listed.revoked  # a revoked principal stays listed, as revoked
    again = make("phone", "*", "admin", None, "another-token-of-plenty-of-characters-bbb")
    await store.add(again)  # its name may be given anew
    [now] = await store.all()
    assert now == again and now.agents is None and now.live()
    await store.touch("phone", "2031-01-01T00:00:00.000Z")
    [used] = await store.all()
    assert used.last_used == "2031-01-01T00:00:00.000Z"
    d = Directory(await store.all())
    assert d.find("another-token-of-plenty-of-characters-bbb").name == "phone"
    assert d.find("phone-token-of-43-characters-aaaaaaaaaaaaa") is None  # the old token: no one's


async def test_the_audit_log_keeps_entries_in_order_and_filters_them(storage):
    log = storage.audit()
    for i, who in enumerate(["owner", "phone", "owner", "phone"]):
        await log.append(
            {
                "at": f"2030-01-0{i + 1}T00:00:00.000Z",
                "principal": who,
                "method": "memory.set",
                "door": "ws",
                "agent": "main",
                "target": f"k{i}",
                "ok": True,
            }
        )
    assert [e["target"] for e in await log.read(None, None, 100)] == ["k0", "k1", "k2", "k3"]
    assert [e["target"] for e in await log.read("2030-01-02T00:00:00.000Z", None, 100)] == ["k1", "k2", "k3"]
    assert [e["target"] for e in await log.read(None, "phone", 100)] == ["k1", "k3"]
    assert [e["target"] for e in await log.read(None, None, 2)] == ["k2", "k3"]  # the newest, oldest first


async def test_the_audit_log_shows_a_principal_of_some_agents_only_theirs_and_its_own(storage):
    """audit.list for a principal that reaches some agents (issue 43): those agents' entries, and its own
    entries without an agent (principal changes) — never another agent's, nor another's principal changes;
    the newest `limit` of what it may see."""
    log = storage.audit()
    rows = [
        ("owner", "main", "k0"),
        ("owner", "side", "k1"),
        ("adm", None, "made-by-adm"),
        ("owner", None, "made-by-owner"),
        ("adm", "main", "k4"),
        ("owner", "third", "k5"),
        ("adm", "side", "k6"),  # its own entry on an agent it no longer reaches is its own still
    ]
    for i, (who, agent, target) in enumerate(rows):
        entry = {"at": f"2030-01-0{i + 1}T00:00:00.000Z", "principal": who, "method": "memory.set", "door": "ws"}
        if agent:
            entry["agent"] = agent
        await log.append({**entry, "target": target, "ok": True})
    seen = [e["target"] for e in await log.read(None, None, 100, agents=("main",), own="adm")]
    assert seen == ["k0", "made-by-adm", "k4", "k6"]
    assert [e["target"] for e in await log.read(None, None, 2, agents=("main",), own="adm")] == ["k4", "k6"]
    assert [e["target"] for e in await log.read(None, None, 100, agents=("main", "third"))] == ["k0", "k4", "k5"]
    assert [e["target"] for e in await log.read(None, "owner", 100, agents=("main",), own="adm")] == ["k0"]
    assert len(await log.read(None, None, 100)) == len(rows)  # no filter: every entry
