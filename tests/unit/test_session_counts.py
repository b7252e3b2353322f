"""Message counters while sessions.json is being written: a reader never sees a count go missing or
counted twice (the cause of a flaky `jarvis chat` test: a reply's count vanished during a flush)."""

import asyncio
import contextlib
import fcntl
import os

import orjson

from gateway.storage.files.sessions import FileSessionStore as SessionStore
from gateway.timeutil import now_iso
from tests.helpers import wait_for


def message(text: str) -> dict:
    return {"type": "message", "id": os.urandom(4).hex(), "role": "user", "content": text, "timestamp": now_iso()}


async def a_session_with_two_messages(tmp_path) -> tuple[SessionStore, str]:
    store = SessionStore(tmp_path / "sessions", "main")
    store.open_sync()
    key = (await store.create())["sessionKey"]
    await store.append_messages(key, message("one"), message("two"))
    return store, key


@contextlib.contextmanager
def list_locked(store: SessionStore):
    """Hold the session list's lock as another process would: a write of sessions.json waits for it."""
    fd = os.open(store.dir / ".sessions.json.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


async def a_write_waits_for_the_lock(store: SessionStore) -> None:
    """Until the kernel shows a flock on the list's lock file waited for (a `->` line in /proc/locks): the
    write's thread is blocked in it (the deadline only catches a hang)."""
    inode = os.stat(store.dir / ".sessions.json.lock").st_ino

    async def blocked() -> bool:
        with open("/proc/locks") as f:
            return any(
                parts[1] == "->" and parts[2] == "FLOCK" and parts[6].endswith(f":{inode}")
                for parts in (line.split() for line in f)
                if len(parts) > 6
            )

    await wait_for(blocked, timeout=60)


async def test_counts_stay_visible_while_a_write_of_them_is_under_way(tmp_path):
    store, key = await a_session_with_two_messages(tmp_path)
    with list_locked(store):  # the flush carrying both counts waits mid-write
        flush = asyncio.create_task(store.flush())
        await a_write_waits_for_the_lock(store)
        assert not flush.done(), "the write waits for the lock"
        assert (await store.get(key))["messageCount"] == 2
        assert (await store.all())[key]["messageCount"] == 2
        await store.append_messages(key, message("three"))
        assert (await store.get(key))["messageCount"] == 3
    await flush

    assert (await store.get(key))["messageCount"] == 3, "written once, counted once"
    on_disk = orjson.loads(store.meta_path.read_bytes())["sessions"][key]["messageCount"]
    assert on_disk == 2, "the third is still waiting for the next write"
    await store.close()
    assert orjson.loads(store.meta_path.read_bytes())["sessions"][key]["messageCount"] == 3


async def test_a_write_whose_caller_is_cancelled_still_counts_once(tmp_path):
    store, key = await a_session_with_two_messages(tmp_path)
    with list_locked(store):
        flush = asyncio.create_task(store.flush())
        await a_write_waits_for_the_lock(store)
        flush.cancel()  # the write itself waits in its thread for the lock, and goes on after it
        probe = asyncio.create_task(asyncio.Event().wait())
        await asyncio.sleep(0)
        probe.cancel()  # cancelled after the flush: its end comes after the flush's would, had it not waited
        await asyncio.wait([probe])
        assert not flush.done(), "the caller waits for the write it started"
    try:
        await flush
    except asyncio.CancelledError:
        pass
    assert flush.cancelled()
    await store.close()  # writes whatever is still pending: nothing may be counted twice
    assert orjson.loads(store.meta_path.read_bytes())["sessions"][key]["messageCount"] == 2


async def test_a_write_by_another_process_in_between_neither_hides_nor_doubles_a_count(tmp_path):
    store, key = await a_session_with_two_messages(tmp_path)
    with list_locked(store):
        flush = asyncio.create_task(store.flush())
        await a_write_waits_for_the_lock(store)
        # Meanwhile another process (holding the lock) adds a session, as the next generation.
        data = orjson.loads(store.meta_path.read_bytes())
        data["generation"] = data.get("generation", 0) + 1
        data["sessions"]["from-the-cli"] = {**data["sessions"][key], "sessionKey": "from-the-cli"}
        store.meta_path.write_bytes(orjson.dumps(data))
        assert (await store.get(key))["messageCount"] == 2
    await flush
    assert (await store.get(key))["messageCount"] == 2
    sessions = orjson.loads(store.meta_path.read_bytes())["sessions"]
    assert sessions[key]["messageCount"] == 2 and "from-the-cli" in sessions
    await store.close()
