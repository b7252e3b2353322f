"""Memory end to end through the WebSocket: chat turns become searchable, survive restarts, and are
recalled into later turns."""

import asyncio
import threading

import pytest

from gateway.compose import memory_service
from gateway.errors import Conflict
from gateway.memory.search.request import SearchRequest
from tests.fake_openai import FakeOpenAI
from tests.helpers import RunningGateway, make_config, wait_for


async def test_turns_are_indexed_recalled_and_survive_restart(tmp_path):
    cfg = make_config(tmp_path / "state", memory=True, **{"memory.sync.sessionDebounceMs": 200})
    cfg.workspace_dir.mkdir(parents=True)
    (cfg.workspace_dir / "MEMORY.md").write_text("# About me\n\nMy sailing boat is called Seahorse.\n")
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "What is my sailing boat called again?"})
        final = (await c.run_to_end(sent["runId"]))[-1]["params"]
        recalled = final["memory"]
        assert recalled and recalled[0]["path"] == "MEMORY.md"
        assert recalled[0]["startLine"] <= 3 <= recalled[0]["endLine"] and 0 < recalled[0]["score"] <= 1
        assert "Seahorse" in final["message"]["content"], "the offline responder shows what it recalled"
        hist = await c.call("sessions.history", {"sessionKey": key})
        assert hist["messages"][-1]["memory"] == recalled

        sent = await c.call("chat.send", {"sessionKey": key, "message": "The marina fee is due on the ninth of March."})
        await c.run_to_end(sent["runId"])

        async def found():
            res = await c.call("memory.search", {"query": "marina fee due", "sources": ["sessions"]})
            return [r for r in res["results"] if r["path"] == f"sessions/{key}.jsonl" and "marina fee" in r["snippet"]]

        hits = await wait_for(found)
        assert hits[0]["sessionKey"] == key and hits[0]["source"] == "sessions"
        line = hits[0]["startLine"]
        got = await c.call("memory.get", {"path": f"sessions/{key}.jsonl", "from": line, "lines": 1})
        assert got["path"] == f"sessions/{key}.jsonl" and got["from"] == line
        status = await c.call("memory.status")
        assert status["sources"]["sessions"]["files"] == 1 and status["sources"]["memory"]["files"] == 1
        await c.close()

        await gw.restart()
        c = await gw.client()
        stats = await c.call("memory.sync", {})
        assert stats["chunksEmbedded"] == 0, "nothing re-embedded after a restart"
        assert await found(), "still found after a restart"
        # A full re-read re-embeds nothing either: unchanged chunks keep their vectors.
        forced = await c.call("memory.sync", {"force": True})
        assert forced["chunksEmbedded"] == 0
        # Text that leaves the index and comes back is indexed again (the local model is not cached).
        notes = cfg.workspace_dir / "MEMORY.md"
        text = notes.read_text()
        notes.unlink()
        assert (await c.call("memory.sync", {}))["removed"] == 1
        notes.write_text(text)
        back = await c.call("memory.sync", {})
        assert back["indexed"] == 1 and back["chunksEmbedded"] >= 1 and back["cacheHits"] == 0
        await c.close()
    finally:
        await gw.stop()


async def test_deleting_a_session_removes_it_from_search(tmp_path):
    cfg = make_config(tmp_path / "state", memory=True, **{"memory.sync.sessionDebounceMs": 50})
    gw = await RunningGateway(cfg).start()
    try:
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "zanzibar pineapple festival"})
        await c.run_to_end(sent["runId"])

        async def hits():
            res = await c.call("memory.search", {"query": "zanzibar pineapple", "mode": "fts"})
            return res["results"]

        assert await wait_for(hits)
        await c.call("sessions.delete", {"sessionKey": key})
        assert await hits() == []
        await c.close()
    finally:
        await gw.stop()


async def test_deleting_a_session_does_not_wait_for_a_running_sync(tmp_path):
    """A sync holds the index while it embeds (a full one for many seconds): sessions.delete answers
    at once, search leaves the session out from then on, and the chunks go once that sync is done."""
    with FakeOpenAI() as api:
        cfg = make_config(
            tmp_path / "state",
            memory=True,
            **{
                "memory.sync.sessionDebounceMs": 50,
                "memory.recall.enabled": False,
                "memory.embeddings.provider": "openai",
                "memory.embeddings.baseUrl": api.base_url,
                "memory.embeddings.apiKey": "test",
                "memory.embeddings.timeout": 60,
            },
        )
        gw = await RunningGateway(cfg).start()
        release = threading.Event()
        try:
            c = await gw.client()

            async def search(query):
                return (await c.call("memory.search", {"query": query, "mode": "fts"}))["results"]

            async def idle():
                st = (await c.call("memory.status"))["sync"]
                return not st["running"] and not st["pending"]

            key = (await c.call("sessions.create"))["sessionKey"]
            await c.run_to_end(
                (await c.call("chat.send", {"sessionKey": key, "message": "zanzibar pineapple festival"}))["runId"]
            )
            assert await wait_for(lambda: search("zanzibar pineapple"))
            await wait_for(idle)

            api.script(("wait", release))  # the next sync's embedding request is held
            other = (await c.call("sessions.create"))["sessionKey"]
            await c.run_to_end(
                (await c.call("chat.send", {"sessionKey": other, "message": "a walrus named Gustav"}))["runId"]
            )

            async def held():
                return api.waiting == 1

            await wait_for(held)
            assert (await c.call("memory.status"))["sync"]["running"]

            deleted = await asyncio.wait_for(c.call("sessions.delete", {"sessionKey": key}), 10)
            assert deleted["deleted"] is True
            assert await search("zanzibar pineapple") == [], "left out of search at once"
            assert (await c.call("memory.status"))["sync"]["running"], "the held sync is still running"
            release.set()
            await wait_for(idle)
            status = await c.call("memory.status")
            assert status["sources"]["sessions"]["files"] == 1, "its chunks are gone from the index"
            assert await search("zanzibar pineapple") == []
            assert [r["sessionKey"] for r in await search("walrus Gustav")] == [other]
            await c.close()
        finally:
            release.set()
            await gw.stop()


async def test_no_rebuild_under_another_process_holding_the_index(tmp_path):
    from gateway.storage.files.engine import FilesStorage

    cfg = make_config(tmp_path / "state", memory=True, **{"memory.sync.watch": False})
    cfg.workspace_dir.mkdir(parents=True)
    (cfg.workspace_dir / "MEMORY.md").write_text("# Notes\n\nThe gate code is 4711.\n")
    live = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)  # stands for the running gateway
    await live.open()
    await live.sync()
    inode = cfg.memory_db().stat().st_ino

    changed = make_config(
        tmp_path / "state",
        memory=True,
        **{"memory.sync.watch": False, "memory.sync.onStart": False, "memory.chunking.tokens": 200},
    )  # new chunking: needs a rebuild
    cli = memory_service(changed, FilesStorage(changed), changed.agent_id)
    await cli.open()
    with pytest.raises(Conflict, match="another process"):
        await cli.sync()
    assert cfg.memory_db().stat().st_ino == inode, "the live index was not swapped"
    assert (await live.search(SearchRequest(query="gate code")))["results"], "the live index still answers"
    await live.close()

    stats = await cli.sync()  # alone now: the rebuild goes ahead
    assert stats["indexed"] >= 1 and cfg.memory_db().stat().st_ino != inode
    assert (await cli.search(SearchRequest(query="gate code")))["results"]
    await cli.close()
