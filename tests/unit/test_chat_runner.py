"""The chat service on its own (real session store and files): races the wire cannot time exactly."""

import asyncio

from gateway.chat.providers import OfflineResponder
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
        self.events.append((event.method, event.params))


async def test_abort_before_the_run_takes_its_first_step(tmp_path):
    cfg = make_config(tmp_path / "state")
    storage = FilesStorage(cfg)
    store = storage.sessions("main")
    await store.open()
    bus, rec = EventBus(), Recorder()
    chat = ChatService(cfg, store, bus, OfflineResponder(0), storage.ledger("main"), error_code=code_of)
    key = (await store.create())["sessionKey"]
    bus.subscribe(key, rec)

    started = await chat.send(key, "abort me at once", None)
    assert await chat.abort(key, None) is True  # no yield in between: the task has not run a line
    await asyncio.sleep(0.05)
    assert key not in chat.active, "the session is free again"
    assert ("chat.aborted", {"sessionKey": key, "runId": started["runId"], "seq": 1, "partial": ""}) in rec.events
    again = await chat.send(key, "next", None)
    assert again["status"] == "started"
    await asyncio.wait_for(chat.active[key].task, 5)
    await store.close()
