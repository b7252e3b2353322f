"""The chat service on its own (real session store and files): races the wire cannot time exactly."""

import asyncio

import pytest

from gateway.chat.events import ENDS, HANDLE_HIGH, Chunk, Final, Recalled, RunHandle, Said
from gateway.chat.providers import OfflineResponder
from gateway.chat.relay import RelayedTurn
from gateway.errors import Unavailable
from gateway.protocol import code_of
from gateway.chat.runner import ChatService
from gateway.events import EventBus
from gateway.storage.files.engine import FilesStorage
from tests.helpers import make_config


class Recorder:
    def __init__(self):
        self.subscriptions: set[str] = set()
        self.events: list[tuple[str, dict]] = []

    def deliver(self, event) -> None:
        self.events.append(event.notification(code_of))


async def test_abort_before_the_run_takes_its_first_step(tmp_path):
    cfg = make_config(tmp_path / "state")
    storage = FilesStorage(cfg)
    store = storage.sessions("main")
    await store.open()
    bus, rec = EventBus(), Recorder()
    chat = ChatService(cfg, store, bus, OfflineResponder(0), storage.ledger("main"))
    key = (await store.create())["sessionKey"]
    bus.subscribe(key, rec)

    started = await chat.send(key, "abort me at once", None)
    run = chat.active[key]
    assert await chat.abort(key, None) is True  # no yield in between: the task has not run a line
    await asyncio.wait([run.task], timeout=30)  # its end (the deadline only catches a hang)
    assert run.task.done()
    assert key not in chat.active, "the session is free again"
    assert ("chat.aborted", {"sessionKey": key, "runId": started["runId"], "seq": 1, "partial": ""}) in rec.events
    again = await chat.send(key, "next", None)
    assert again["status"] == "started"
    await asyncio.wait_for(chat.active[key].task, 5)
    await store.close()


async def test_a_relayed_runs_handle_and_its_subscribers_hear_the_same_run(tmp_path):
    """The handle a relayed run returns (what /v1 renders) and the session's subscribers (what the WebSocket
    sends) are told one run: the same text in the same order, the same end; the handle alone gets what was
    recalled and the upstream's own chunks, and ends once."""
    cfg = make_config(tmp_path / "state")
    storage = FilesStorage(cfg)
    store = storage.sessions("main")
    await store.open()
    bus, rec = EventBus(), Recorder()
    chat = ChatService(cfg, store, bus, OfflineResponder(0), storage.ledger("main"))
    key = (await store.create())["sessionKey"]
    bus.subscribe(key, rec)
    request = {"model": "offline", "messages": [{"role": "user", "content": "what is in the box?"}], "stream": True}

    handle = await chat.relay(key, RelayedTurn(request, memory=False, capture=True))
    told = await asyncio.wait_for(_read(handle), 10)
    assert handle.ended and handle.run_id and handle.session_key == key and handle.captured
    assert isinstance(told[0], Recalled) and isinstance(told[-1], Final)
    assert sum(isinstance(e, ENDS) for e in told) == 1
    assert any(isinstance(e, Chunk) for e in told), "the upstream's own chunks reach the handle"
    said = "".join(e.text for e in told if isinstance(e, Said))
    assert said and said == told[-1].params["message"]["content"]
    if key in chat.active:  # the task's last lines (it told its end already)
        await asyncio.wait_for(chat.active[key].task, 5)
    heard = [(m, p) for m, p in rec.events if p["runId"] == handle.run_id]
    assert "".join(p["delta"] for m, p in heard if m == "chat.delta") == said
    assert heard[-1][0] == "chat.final" and heard[-1][1]["message"] == told[-1].params["message"]
    assert [p["seq"] for _, p in heard] == list(range(1, len(heard) + 1))
    await store.close()


async def _read(handle: RunHandle) -> list:
    return [event async for event in handle]


async def test_a_handle_nobody_reads_stops_the_run_after_the_slow_consumer_wait():
    """Past HANDLE_HIGH chunks unread, a chunk waits for room for slowConsumerSeconds, then the run fails
    retryable; text events beside the chunks take no room; reading makes room again."""
    handle = RunHandle(0.2)
    for i in range(HANDLE_HIGH - 1):
        await handle.put(Chunk({"i": i}))
        handle.tell(Said("x"))  # not counted
    with pytest.raises(Unavailable) as refused:
        await handle.put(Chunk({"i": "last"}))
    assert refused.value.retryable and "server.slowConsumerSeconds" in refused.value.message

    handle = RunHandle(5.0)
    for i in range(HANDLE_HIGH - 1):
        await handle.put(Chunk({"i": i}))
    waiting = asyncio.create_task(handle.put(Chunk({"i": "last"})))
    await asyncio.sleep(0)  # its first step, up to where it waits (one that did not wait is done by now)
    assert not waiting.done(), "the run waits for the reader"
    for _ in range(HANDLE_HIGH // 2 + 1):
        await anext(handle)
    await asyncio.wait_for(waiting, 30)  # room again: the run goes on (the deadline only catches a hang)
