"""ResponseStore's contract (storage/base.py): the /v1/responses responses kept, the same on both engines —
each its agent's and its principal's, bounded per principal by count and bytes (the oldest evicted),
readable for the time kept, whatever text they hold."""

from __future__ import annotations

import asyncio

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.storage.base import ResponseLimits
from tests.helpers import examples


def _record(text: str, pad: int = 0) -> dict:
    return {"response": {"id": "x", "output_text": text}, "items": [{"role": "user", "content": "p" * pad}]}


def _size(record: dict) -> int:
    return len(orjson.dumps(record))


async def test_a_response_is_kept_for_its_agent_and_principal_only(storage):
    store = storage.responses()
    assert await store.put("main", "owner", "resp_1", _record("Paris is sunny."))
    assert await store.get("main", "owner", "resp_1") == _record("Paris is sunny.")
    assert await store.get("other", "owner", "resp_1") is None, "another agent's"
    assert await store.get("main", "phone", "resp_1") is None, "another principal's"
    assert await store.get("main", "owner", "resp_2") is None
    assert await store.put("main", "owner", "resp_1", _record("Rain later."))  # the same id again: replaced
    assert await store.get("main", "owner", "resp_1") == _record("Rain later.")


async def test_the_oldest_are_evicted_past_the_count_per_principal(storage):
    store = storage.responses()
    store.limits = ResponseLimits(count=3, bytes=1 << 20, keep_s=3600)
    for i in range(5):
        await store.put("main", "owner", f"o{i}", _record(f"owner {i}"))
        await store.put("main", "phone", f"p{i}", _record(f"phone {i}"))
    kept = [i for i in range(5) if await store.get("main", "owner", f"o{i}") is not None]
    assert kept == [2, 3, 4]
    assert [i for i in range(5) if await store.get("main", "phone", f"p{i}") is not None] == [2, 3, 4]


async def test_the_oldest_are_evicted_past_the_bytes_and_one_too_big_is_not_kept(storage):
    store = storage.responses()
    one = _size(_record("r0", pad=1000))
    store.limits = ResponseLimits(count=100, bytes=one * 2 + 10, keep_s=3600)
    for i in range(4):
        assert await store.put("main", "owner", f"r{i}", _record(f"r{i}", pad=1000))
    assert [i for i in range(4) if await store.get("main", "owner", f"r{i}") is not None] == [2, 3]
    assert not await store.put("main", "owner", "huge", _record("huge", pad=one * 3)), "bigger than the bytes alone"
    assert await store.get("main", "owner", "huge") is None
    assert await store.get("main", "owner", "r3") is not None, "a refused one evicts nothing"


async def test_expired_ones_are_not_read_and_are_purged(storage):
    store = storage.responses()
    await store.put("main", "owner", "old", _record("old"))
    store.limits = ResponseLimits(count=10, bytes=1 << 20, keep_s=-60.0)  # everything kept is past its time
    assert await store.get("main", "owner", "old") is None
    assert await store.purge() == 1
    store.limits = ResponseLimits(count=10, bytes=1 << 20, keep_s=3600)
    assert await store.get("main", "owner", "old") is None, "purged, not hidden"


async def test_no_limit_keeps_none(storage):
    store = storage.responses()
    store.limits = ResponseLimits(count=0, bytes=1 << 20, keep_s=3600)
    assert not await store.put("main", "owner", "r", _record("r"))
    assert await store.get("main", "owner", "r") is None


async def test_puts_at_once_for_one_principal_stay_within_its_limits(storage):
    store = storage.responses()
    store.limits = ResponseLimits(count=4, bytes=1 << 20, keep_s=3600)
    await asyncio.gather(*(store.put("main", "owner", f"r{i}", _record(f"r{i}")) for i in range(12)))
    assert sum([await store.get("main", "owner", f"r{i}") is not None for i in range(12)]) == 4


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=200))
async def test_any_text_said_is_kept_as_it_was(storage, text):
    """NUL, controls, any plane: what a conversation held comes back byte for byte (jsonb would refuse
    `\\u0000`; the record is kept as JSON text)."""
    store = storage.responses()
    record = {"response": {"id": "h", "output_text": text}, "items": [{"content": text}], "session": None}
    assert await store.put("main", "owner", "h", record)
    assert await store.get("main", "owner", "h") == record
