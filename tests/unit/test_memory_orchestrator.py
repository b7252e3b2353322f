"""SyncOrchestrator: coalescing, forced requests during a run, the interval trigger.

The orchestrator is given a run function that records what each run covered and can be held open with
an event, so the races are deterministic (no sleeps, no timed assertions)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gateway.errors import Unavailable
from gateway.memory.sync import SyncOrchestrator, SyncRequest


def cfg(**kw):
    base = dict(watch=False, watch_debounce_ms=100, interval_minutes=0.0)
    base.update(kw)
    return SimpleNamespace(**base)


class Recorder:
    def __init__(self):
        self.runs: list[SyncRequest] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = asyncio.Event()

    async def __call__(self, req: SyncRequest) -> dict:
        self.runs.append(req)
        self.started.set()
        await self.gate.wait()
        return {"run": len(self.runs), "force": req.force}


async def test_fifty_concurrent_requests_cause_at_most_two_runs():
    rec = Recorder()
    orch = SyncOrchestrator(rec, sync_cfg=cfg())
    try:
        results = await asyncio.gather(*(orch.sync(memory=True, sessions={f"s{i % 5}"}, reason="t") for i in range(50)))
        assert 1 <= len(rec.runs) <= 2
        assert orch.requests == 50 and orch.runs == len(rec.runs)
        assert all(r["run"] in (1, 2) for r in results)
        assert set().union(*(r.sessions for r in rec.runs)) == {f"s{i}" for i in range(5)}
    finally:
        await orch.close()


async def test_requests_during_a_run_coalesce_into_one_follow_up():
    rec = Recorder()
    rec.gate.clear()
    orch = SyncOrchestrator(rec, sync_cfg=cfg())
    try:
        first = orch.request(memory=True, reason="start")
        await rec.started.wait()  # run 1 is in progress
        later = [orch.request(sessions={f"s{i}"}, reason="chat") for i in range(50)]
        assert len({id(r) for r in later}) == 1  # all merged into one pending request
        rec.gate.set()
        await asyncio.gather(first.future, later[0].future)
        assert len(rec.runs) == 2
        assert rec.runs[1].sessions == {f"s{i}" for i in range(50)}
    finally:
        await orch.close()


async def test_force_during_a_running_sync_runs_forced_after_it():
    rec = Recorder()
    rec.gate.clear()
    orch = SyncOrchestrator(rec, sync_cfg=cfg())
    try:
        first = orch.request(memory=True, reason="watch")
        await rec.started.wait()
        forced = orch.request(force=True, memory=True, sessions=True, reason="flush")
        plain = orch.request(memory=True, reason="search")  # joins the forced one; force is kept
        assert plain is forced
        rec.gate.set()
        assert (await first.future)["force"] is False
        assert (await forced.future) == {"run": 2, "force": True}
        assert [r.force for r in rec.runs] == [False, True]
        assert rec.runs[1].reasons == {"flush", "search"}
    finally:
        await orch.close()


async def test_a_failed_run_fails_its_callers_and_the_next_one_still_runs():
    calls = []

    async def run(req):
        calls.append(req)
        if len(calls) == 1:
            raise OSError("disk gone")
        return "ok"

    orch = SyncOrchestrator(run, sync_cfg=cfg())
    try:
        with pytest.raises(OSError, match="disk gone"):
            await orch.sync(memory=True)
        assert await orch.sync(memory=True) == "ok"
    finally:
        await orch.close()


async def test_interval_trigger_fires_repeatedly():
    rec = Recorder()
    orch = SyncOrchestrator(rec, sync_cfg=cfg(interval_minutes=0.0005))  # 30 ms
    orch.start(None, lambda: None)
    try:

        async def two_runs():
            while len(rec.runs) < 2:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(two_runs(), timeout=10)
        assert all(r.reasons == {"interval"} and r.memory and r.sessions is True for r in rec.runs[:2])
    finally:
        await orch.close()
    n = len(rec.runs)
    # A second one with the same interval, started after the close, runs twice: by then the closed one's
    # next tick had come, had its interval not stopped.
    later = Recorder()
    other = SyncOrchestrator(later, sync_cfg=cfg(interval_minutes=0.0005))
    other.start(None, lambda: None)
    try:

        async def two_later_runs():
            while len(later.runs) < 2:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(two_later_runs(), timeout=30)  # the deadline only catches a hang
    finally:
        await other.close()
    assert len(rec.runs) == n  # closed: the interval stopped


async def test_unavailable_and_closed_requests_fail_fast():
    rec = Recorder()
    orch = SyncOrchestrator(rec, sync_cfg=cfg(), unavailable=lambda: "memory is disabled")
    with pytest.raises(Unavailable, match="memory is disabled"):
        await orch.sync(memory=True)
    await orch.close()
    orch2 = SyncOrchestrator(rec, sync_cfg=cfg())
    await orch2.close()
    with pytest.raises(Unavailable, match="closed"):
        await orch2.sync(memory=True)
    assert rec.runs == []


async def test_debounce_fires_once_after_the_last_call():
    orch = SyncOrchestrator(Recorder(), sync_cfg=cfg())
    fired = asyncio.Event()
    count = []

    def fire():
        count.append(1)
        fired.set()

    try:
        for _ in range(10):
            orch.debounce("s1", 0.02, fire)
        await asyncio.wait_for(fired.wait(), 5)
        # Another key's debounce, set after it fired with the same delay, fires after any of s1's still due.
        later = asyncio.Event()
        orch.debounce("s2", 0.02, later.set)
        await asyncio.wait_for(later.wait(), 30)  # the deadline only catches a hang
        assert count == [1]
    finally:
        await orch.close()
