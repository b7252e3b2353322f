"""The cluster sweep's view of every agent's runs (storage/postgres/ledger.py: claims, drop_claim)."""

from __future__ import annotations

from gateway.storage import open_storage
from gateway.storage.postgres.ledger import claims, drop_claim
from tests.helpers import make_config


async def test_claims_tell_this_gateways_runs_from_the_others_and_one_drop_wins(postgres_url, tmp_path):
    a = await open_storage(make_config(tmp_path / "a", **{"storage.url": postgres_url, "storage.instanceId": "a"}))
    b = await open_storage(make_config(tmp_path / "b", **{"storage.url": postgres_url, "storage.instanceId": "b"}))
    try:
        assert await a.ledger("main").claim("s1", "run-a") is None
        assert await b.ledger("work").claim("s2", "run-b") is None
        assert await claims(a.pg, mine=True) == [("main", "s1", "run-a", "a")]
        assert await claims(a.pg, mine=True, older_than_s=60) == []  # just claimed: not stale
        assert await claims(a.pg, mine=False) == [("work", "s2", "run-b", "b")]
        assert await drop_claim(a.pg, "work", "s2", "run-b") is True  # a sweeper ends b's run once
        assert await drop_claim(b.pg, "work", "s2", "run-b") is False
        assert await b.ledger("work").holder("s2") is None
    finally:
        await a.close()
        await b.close()
