"""Hostile and unlucky conditions (issue 15): each test failed before its fix.

Odd input (duplicate handshake headers, out-of-range dates, made-up keys), idempotency keys that
outlive their session, counters after a lost write, two gateways on one state dir, session labels
that would inject markdown.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import orjson
import pytest

from tests.helpers import (
    ROOT,
    GatewayProcess,
    RpcError,
    connect_client,
    make_config,
    user_namespaces_work,
    wait_for,
)


async def raw_http(port: int, head: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    status = int(data.split(b" ", 2)[1])
    return status, data


@pytest.mark.parametrize("header", ["Origin", "Authorization", "Upgrade"])
async def test_duplicate_handshake_headers_are_a_400_not_a_500(gateway, header):
    port = gateway.gw.port
    values = {"Origin": f"http://127.0.0.1:{port}", "Authorization": f"Bearer {gateway.token}", "Upgrade": "websocket"}
    lines = [
        "GET / HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    lines += [f"{k}: {v}" for k, v in values.items() if k != header]
    lines += [f"{header}: {values[header]}", f"{header}: {values[header]}"]
    status, body = await raw_http(port, "\r\n".join(lines) + "\r\n\r\n")
    assert status == 400 and f"duplicate {header} header".encode() in body
    c = await gateway.client()  # still serving
    assert (await c.call("system.health"))["status"] == "ok"
    await c.close()


async def test_deleting_made_up_sessions_keeps_no_lock(gateway, client):
    chat = gateway.gw.services.chat
    for i in range(200):
        with pytest.raises(RpcError) as exc:
            await client.call("sessions.delete", {"sessionKey": f"nope-{i}"})
        assert exc.value.code == -32004
    await asyncio.gather(
        *(client.request("chat.send", {"sessionKey": f"nope-{i}", "message": "hi"}) for i in range(50))
    )
    assert len(chat.slots.locks) == 0


async def test_out_of_range_recall_periods_are_invalid_params_or_clamped(start_gateway):
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none"})
    (gw.config.workspace_dir / "memory").mkdir(parents=True, exist_ok=True)
    (gw.config.workspace_dir / "memory" / "2026-11-20.md").write_text("# a day\n\nsomething happened\n")
    c = await gw.client()
    try:
        res = await c.call("memory.recall", {"to": "9999-12-31"})  # the end of time is a valid end
        assert any(r["path"] == "memory/2026-11-20.md" for r in res["results"])
        for params, field in (({"from": "800000d"}, "params.from"), ({"to": "999999w"}, "params.to")):
            with pytest.raises(RpcError) as exc:
                await c.call("memory.recall", params)
            assert exc.value.code == -32602 and exc.value.data["field"] == field
            assert "out of range" in exc.value.message
    finally:
        await c.close()


async def test_idempotency_keys_belong_to_one_life_of_a_session(client):
    await client.call("sessions.create", {"sessionKey": "s1"})
    sent = await client.call("chat.send", {"sessionKey": "s1", "message": "first", "idempotencyKey": "k1"})
    await client.run_to_end(sent["runId"])
    await client.call("sessions.delete", {"sessionKey": "s1"})
    with pytest.raises(RpcError) as exc:  # the session is gone: not a "duplicate" of its old message
        await client.call("chat.send", {"sessionKey": "s1", "message": "again", "idempotencyKey": "k1"})
    assert exc.value.code == -32004
    await client.call("sessions.purge", {"sessionKey": "s1"})  # out of the trash: the key is free again
    await client.call("sessions.create", {"sessionKey": "s1"})
    sent = await client.call("chat.send", {"sessionKey": "s1", "message": "new life", "idempotencyKey": "k1"})
    assert sent["status"] == "started"
    await client.run_to_end(sent["runId"])
    history = await client.call("sessions.history", {"sessionKey": "s1"})
    assert [m["content"] for m in history["messages"] if m["role"] == "user"] == ["new life"]


async def test_message_counts_are_reconciled_from_transcripts_whatever_the_mtimes(gateway):
    c = await gateway.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    for text in ("one", "two"):
        sent = await c.call("chat.send", {"sessionKey": key, "message": text})
        await c.run_to_end(sent["runId"])
    await c.close()
    await gateway.stop()
    meta = gateway.config.sessions_dir() / "sessions.json"
    data = orjson.loads(meta.read_bytes())
    data["sessions"][key]["messageCount"] = 1  # a lost counter write, in a file newer than the transcript
    meta.write_bytes(orjson.dumps(data))
    (gateway.config.sessions_dir() / ".closed-cleanly").unlink()  # as after a SIGKILL: no clean close
    await gateway.start()
    c = await gateway.client()
    assert (await c.call("sessions.get", {"sessionKey": key}))["messageCount"] == 4
    await c.close()


async def test_a_second_gateway_on_the_same_state_dir_exits_2_naming_the_holder(gateway):
    import os

    env = {**os.environ, "JARVIS_STATE_DIR": str(gateway.config.state_dir), "OPENAI_BASE_URL": ""}
    r = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert f"pid {os.getpid()}" in r.stderr and str(gateway.config.state_dir) in r.stderr
    await gateway.restart()  # the lock goes with the gateway that held it
    c = await gateway.client()
    assert (await c.call("system.health"))["status"] == "ok"
    await c.close()


async def test_a_label_with_newlines_stays_one_heading_in_the_day_file(start_gateway):
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", "chat.compactKeepRecent": 1})
    c = await gw.client()
    try:
        key = (await c.call("sessions.create", {"label": "trip\n## Injected heading\n- [x] done"}))["sessionKey"]
        for text in ("we plan a trip", "to the coast"):
            sent = await c.call("chat.send", {"sessionKey": key, "message": text})
            await c.run_to_end(sent["runId"])
        res = await c.call("sessions.compact", {"sessionKey": key})
        assert res["compacted"]
        text = (gw.config.workspace_dir / res["path"]).read_text()
        assert "## Injected heading" not in text.splitlines()
        assert "“trip ## Injected heading - [x] done”" in text
    finally:
        await c.close()


def test_tracebacks_in_the_log_carry_no_frame_locals():
    """Both renderers, in a fresh process (structlog's configuration is process-wide)."""
    code = """
import io, structlog
from gateway import logs
for fmt in ("json", "console"):
    buf = io.StringIO()
    logs.setup("info", fmt, buf)
    def handler(params={"token": "SECRET-TOKEN-123"}):
        raise ValueError("boom")
    try:
        handler()
    except ValueError:
        structlog.get_logger(fmt).exception("internal error")
    print(buf.getvalue())
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("boom") >= 2 and "SECRET-TOKEN-123" not in out.stdout, out.stdout


BIG = {
    "server.maxReplyBytes": 256 << 10,
    "server.maxSendBuffer": 256 << 10,
    "sessions.historyMaxBytes": 100_000,
    "chat.maxReplyChars": 20_000,
}


async def test_a_runaway_upstream_reply_is_cut_and_the_session_stays_readable(start_gateway):
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as api:
        api.reply = "runaway " * 40_000  # 320k chars, far past chat.maxReplyChars
        gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "fake", **BIG})
        c = await gw.client()
        try:
            key = (await c.call("sessions.create"))["sessionKey"]
            sent = await c.call("chat.send", {"sessionKey": key, "message": "talk forever"})
            events = await c.run_to_end(sent["runId"], timeout=60)
            final = events[-1]["params"]
            assert events[-1]["method"] == "chat.final" and final["truncated"] is True
            assert len(final["message"]["content"]) == 20_000
            assert (
                "".join(e["params"]["delta"] for e in events if e["method"] == "chat.delta")
                == final["message"]["content"]
            )
            history = await c.call("sessions.history", {"sessionKey": key})
            assert history["messages"][-1]["truncated"] is True
            assert (await c.call("system.health"))["status"] == "ok"  # never closed as a slow consumer
        finally:
            await c.close()


async def test_big_replies_are_refused_with_what_to_ask_for_not_closed(start_gateway):
    gw = await start_gateway(**BIG)
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        for i in range(4):  # 4 × 90k chars of user messages: one history page holds about one
            sent = await c.call("chat.send", {"sessionKey": key, "message": f"{i} " + "y" * 90_000})
            await c.run_to_end(sent["runId"])
        # A message bigger than a history page is shown shortened, never unreadable.
        page = await c.call("sessions.history", {"sessionKey": key, "limit": 1000})
        assert page["hasMore"] and len(orjson.dumps(page)) <= 256 << 10
        # A batch of 50 pages (~5 MB) answers what fits and asks to resend the rest, on an open socket.
        batch = [{"id": i, "method": "sessions.history", "params": {"sessionKey": key}} for i in range(50)]
        await c.send_text(orjson.dumps(batch).decode())
        answer = await asyncio.wait_for(c.raw.get(), 20)
        assert len(answer) == 50 and len(orjson.dumps(answer)) <= 256 << 10
        ok = [a for a in answer if "result" in a]
        refused = [a for a in answer if "error" in a]
        assert ok and refused and {a["error"]["code"] for a in refused} == {-32600}
        assert "send this request again on its own" in refused[0]["error"]["message"]
        assert sorted(a["id"] for a in answer) == list(range(50))
        assert (await c.call("system.health"))["status"] == "ok"
    finally:
        await c.close()


async def test_an_oversized_message_is_shortened_in_history_and_big_reads_are_refused(start_gateway):
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", **BIG})
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        # Written before chat.maxReplyChars existed: a 400k-char reply already in the transcript.
        from gateway.sessions import transcript as tx

        path = gw.config.sessions_dir() / f"{key}.jsonl"
        tx.append_sync(path, [tx.message_record("m1", "assistant", "z" * 400_000)])
        history = await c.call("sessions.history", {"sessionKey": key})
        (m,) = history["messages"]
        assert m["truncated"] is True and m["contentChars"] == 400_000 and len(m["content"]) < 100_000
        # A single reply over server.maxReplyBytes (a 240 KB image is 320 KB of base64): an error that
        # says what to do, on a socket that stays open.
        import base64
        import os

        image = base64.b64encode(b"\x89PNG\r\n\x1a\n" + os.urandom(240_000)).decode()
        await c.call("memory.setImage", {"key": "photo", "image": image, "description": "a photo"})
        with pytest.raises(RpcError) as exc:
            await c.call("memory.getImage", {"key": "photo"})
        assert exc.value.code == -32602 and "server.maxReplyBytes" in exc.value.message
        assert exc.value.data["replyBytes"] > exc.value.data["maxReplyBytes"] == 256 << 10
        assert (await c.call("system.health"))["status"] == "ok"
    finally:
        await c.close()


@pytest.mark.parametrize("damage", ["truncate", "zero-header"])
async def test_a_damaged_index_is_set_aside_and_rebuilt_while_chat_serves(tmp_path, damage):
    from tests.helpers import RunningGateway

    cfg = make_config(tmp_path / "state", memory=True, **{"memory.embeddings.provider": "none"})
    notes = cfg.workspace_dir / "memory"
    notes.mkdir(parents=True)
    for i in range(300):
        notes.joinpath(f"note-{i:03}.md").write_text(f"# Note {i}\n\n" + f"filler words number {i} " * 40 + "\n")
    (cfg.workspace_dir / "MEMORY.md").write_text("# Facts\n\nBjørn's birthday is on 14 June.\n")
    gw = RunningGateway(cfg)
    await gw.start()
    c = await gw.client()
    await c.call("memory.sync")
    assert (await c.call("memory.status"))["files"] >= 301
    await c.close()
    await gw.stop()
    db = cfg.memory_db()
    assert db.stat().st_size > 200_000
    if damage == "truncate":
        with open(db, "r+b") as fh:
            fh.truncate(100_000)
    else:
        with open(db, "r+b") as fh:
            fh.write(b"\0" * 100)
    await gw.start()  # serves instead of exiting with "database disk image is malformed"
    try:
        c = await gw.client()
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "still there?"})
        assert (await c.run_to_end(sent["runId"]))[-1]["method"] == "chat.final"
        res = await c.call("memory.search", {"query": "Bjørn birthday"})
        assert res["results"] and res["results"][0]["path"] == "MEMORY.md"
        status = await c.call("memory.status")
        assert status["files"] >= 301 and status["corrupt"]
        aside = [p for p in db.parent.iterdir() if p.name.startswith("memory.sqlite.corrupt-")]
        assert aside and status["corrupt"][-1]["movedTo"] == str(
            [p for p in aside if not p.name.endswith(("-wal", "-shm"))][0]
        )
        await c.close()
    finally:
        await gw.stop()


async def test_an_index_damaged_while_serving_before_any_full_text_search_is_set_aside_too(start_gateway):
    """Damage met by the first full-text search of the reader: SQLite says only "vtable constructor
    failed: chunks_fts" (FTS5 could not read its config from the damaged file). That was not taken for
    damage: every search answered -32603 for good, and the index was never rebuilt."""
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", "memory.sync.onSearch": False})
    notes = gw.config.workspace_dir / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    for i in range(200):
        (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\n" + f"harbour words number {i} " * 60 + "\n")
    c = await gw.client()
    try:
        await c.call("memory.sync")
        db = gw.config.memory_db()
        for path, keep in ((db, 4096), (db.with_name(db.name + "-wal"), 32)):  # all but the headers
            if path.exists() and path.stat().st_size > keep:
                with open(path, "r+b") as fh:
                    fh.seek(keep)
                    fh.write(b"\xa5" * (path.stat().st_size - keep))
        with pytest.raises(RpcError) as exc:
            await c.call("memory.search", {"query": "harbour words number 7"})
        assert exc.value.code == -32050 and "damaged" in exc.value.message, exc.value.message

        async def rebuilt():
            try:
                res = await c.call("memory.search", {"query": "harbour words number 7"})
            except RpcError:
                return False
            return bool(res["results"]) and "damaged" not in res.get("degraded", "")

        await wait_for(rebuilt, timeout=30)
        assert (await c.call("memory.status"))["corrupt"]
    finally:
        await c.close()


async def test_when_inotify_runs_out_the_watcher_polls_and_says_so(tmp_path):
    # The gateway runs where it may create no inotify instance at all: a limit of its own (in a user
    # namespace of its own), which no other process on the host can free meanwhile — exhausting the
    # user-wide limit instead raced with every other process of the same user (seen in CI).
    why_not = user_namespaces_work()
    if why_not:
        pytest.skip(f"{why_not} (the polling fallback is still covered by test_polling_mode_sees_note_edits)")
    config = '[memory]\nenabled = true\n[memory.embeddings]\nprovider = "none"\n[memory.sync]\nwatchPollMs = 200\n'
    with GatewayProcess.running(tmp_path / "state", config, inotify_instances=0) as gp:
        c = await connect_client(gp.url, gp.token)
        try:

            async def polling():
                return (await c.call("memory.status"))["sync"]["watcher"]["mode"] == "polling"

            await wait_for(polling)
            status = await c.call("memory.status")
            assert "native watching failed" in status["sync"]["watcher"]["error"]
            assert (await c.call("system.health"))["memory"]["watcher"] == "polling"
            (tmp_path / "state" / "workspace" / "MEMORY.md").write_text(
                "# Facts\n\nThe spare key is under the blue pot.\n"
            )

            async def found():
                # a search syncs a dirty index first; poll via memory.status so the watcher alone must see it
                return (await c.call("memory.status"))["files"] >= 1

            await wait_for(found)
            res = await c.call("memory.search", {"query": "spare key"})
            assert res["results"][0]["path"] == "MEMORY.md"
        finally:
            await c.close()


async def test_polling_mode_sees_note_edits(start_gateway):
    gw = await start_gateway(
        memory=True,
        **{"memory.embeddings.provider": "none", "memory.sync.watchMode": "polling", "memory.sync.watchPollMs": 200},
    )
    c = await gw.client()
    try:
        assert (await c.call("memory.status"))["sync"]["watcher"] == {"mode": "polling"}
        (gw.config.workspace_dir / "memory").mkdir(parents=True, exist_ok=True)
        (gw.config.workspace_dir / "memory" / "boat.md").write_text("My boat is painted blue.\n")

        async def indexed():
            return (await c.call("memory.status"))["files"] >= 1

        await wait_for(indexed)
    finally:
        await c.close()


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


async def test_agents_are_capped_and_the_least_recently_used_idle_one_is_closed(start_gateway):
    gw = await start_gateway(
        memory=True, **{"memory.embeddings.provider": "none", "agents.maxOpen": 3, "agents.max": 40}
    )
    c = await gw.client()
    try:
        keys = {}
        await c.call("system.health")
        for i in range(6):  # warm up: the first agents open lazily-loaded modules and pools
            keys[f"a{i}"] = (await c.call("sessions.create", {"agentId": f"a{i}"}))["sessionKey"]
        before = _open_fds()
        for i in range(6, 36):
            keys[f"a{i}"] = (await c.call("sessions.create", {"agentId": f"a{i}"}))["sessionKey"]
            health = await c.call("system.health")
            assert health["agents"] == {"open": 3, "maxOpen": 3}
        assert _open_fds() <= before + 4  # 30 more agents, no more descriptors held
        # Closed agents open again on demand, with everything they had.
        for agent, key in list(keys.items())[:3]:
            got = await c.call("sessions.get", {"agentId": agent, "sessionKey": key})
            assert got["sessionKey"] == key
        # agents.max: the 41st agent is refused with a clear error; existing ones still open.
        for i in range(36, 39):
            await c.call("sessions.create", {"agentId": f"a{i}"})
        with pytest.raises(RpcError) as exc:
            await c.call("sessions.create", {"agentId": "one-too-many"})
        assert exc.value.code == -32009 and "agents.max" in exc.value.message
    finally:
        await c.close()


async def test_when_every_open_agent_is_busy_another_is_refused_not_queued(start_gateway):
    gw = await start_gateway(**{"agents.maxOpen": 2, "chat.offlineDeltaDelay": 0.5})
    c = await gw.client()
    try:
        key = (await c.call("sessions.create", {"agentId": "busy"}))["sessionKey"]
        sent = await c.call("chat.send", {"agentId": "busy", "sessionKey": key, "message": "talk slowly"})
        with pytest.raises(RpcError) as exc:
            await c.call("sessions.create", {"agentId": "other"})
        assert exc.value.code == -32009 and "agents.maxOpen" in exc.value.message
        await c.call("chat.abort", {"agentId": "busy", "sessionKey": key, "runId": sent["runId"]})
        await c.run_to_end(sent["runId"])
        assert (await c.call("sessions.create", {"agentId": "other"}))["sessionKey"]  # room once idle
    finally:
        await c.close()


async def test_idle_agents_close_by_themselves_and_keep_their_idempotency_keys(start_gateway):
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", "agents.idleSeconds": 1})
    c = await gw.client()
    try:
        key = (await c.call("sessions.create", {"agentId": "napper"}))["sessionKey"]
        sent = await c.call(
            "chat.send", {"agentId": "napper", "sessionKey": key, "message": "hi", "idempotencyKey": "once"}
        )
        await c.run_to_end(sent["runId"])

        async def closed():
            return (await c.call("system.health"))["agents"]["open"] == 1

        await wait_for(closed, timeout=20)
        again = await c.call(
            "chat.send", {"agentId": "napper", "sessionKey": key, "message": "hi", "idempotencyKey": "once"}
        )
        assert again == {"runId": sent["runId"], "status": "duplicate"}
        history = await c.call("sessions.history", {"agentId": "napper", "sessionKey": key})
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]
    finally:
        await c.close()


async def test_a_client_that_pipelines_big_requests_and_reads_is_slowed_not_closed(start_gateway):
    gw = await start_gateway(**BIG)  # maxSendBuffer = maxReplyBytes = 256 KiB, history pages ~100 KB
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        for i in range(3):
            sent = await c.call("chat.send", {"sessionKey": key, "message": f"{i} " + "y" * 90_000})
            await c.run_to_end(sent["runId"])
        # 30 pages of ~100 KB (3 MB) asked for at once, and batches of 2 pages: far more than the buffer.
        for i in range(30):
            await c.send_text(
                orjson.dumps({"id": f"h{i}", "method": "sessions.history", "params": {"sessionKey": key}}).decode()
            )
        for i in range(6):
            batch = [{"id": f"b{i}-{j}", "method": "sessions.history", "params": {"sessionKey": key}} for j in range(2)]
            await c.send_text(orjson.dumps(batch).decode())
        # No call waits for these ids, so every answer lands in `raw`: 30 single answers and 6 batches.
        answers = [await asyncio.wait_for(c.raw.get(), 20) for _ in range(36)]
        singles = [a for a in answers if isinstance(a, dict)]
        batches = [a for a in answers if isinstance(a, list)]
        assert len(singles) == 30 and all("result" in a for a in singles)
        assert len(batches) == 6 and all(len(b) == 2 and all("result" in m for m in b) for b in batches)
        assert (await c.call("system.health"))["status"] == "ok"  # still open
    finally:
        await c.close()


async def test_idle_closing_never_closes_an_agent_under_a_request(start_gateway):
    """A memory.search on agent x held in its query embedding (the fake provider waits) for longer
    than agents.idleSeconds: x has no run and no sync, only that request; it must stay open."""
    import threading

    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as api:
        gw = await start_gateway(
            memory=True,
            **{
                "memory.embeddings.provider": "openai",
                "memory.embeddings.baseUrl": api.base_url,
                "memory.embeddings.apiKey": "k",
                "memory.embeddings.model": "fake-embed",
                "memory.sync.onStart": False,
                "memory.sync.onSearch": False,
                "memory.sync.watch": False,
                "agents.idleSeconds": 1,
            },
        )
        c = await gw.client()
        try:
            await c.call("sessions.create", {"agentId": "x"})
            notes = gw.config.agent_workspace("x")
            (notes / "MEMORY.md").write_text("# x\n\nThe red kite nests in the old oak.\n")
            await c.call("memory.sync", {"agentId": "x"})  # vectors exist, so a search embeds its query
            release = threading.Event()
            api.script(("wait", release, 30))
            search = asyncio.create_task(c.call("memory.search", {"agentId": "x", "query": "anything"}, timeout=60))

            async def held():
                return api.waiting == 1

            await wait_for(held)
            await asyncio.sleep(2.5)  # several rounds of the idle closer (every 0.5 s here)
            assert (await c.call("system.health"))["agents"]["open"] == 2
            release.set()
            res = await search
            assert res["mode"] == "hybrid" and "degraded" not in res

            async def closed_after():
                return (await c.call("system.health"))["agents"]["open"] == 1

            await wait_for(closed_after)  # and once the request is done, idle closing does its job
        finally:
            await c.close()


def test_a_short_configured_token_is_refused():
    from gateway.config import ConfigError, load_config

    with pytest.raises(ConfigError) as exc:
        load_config({"token": "hunter2"}, env={})
    assert str(exc.value).startswith("token: must be at least 16 characters")
    assert load_config({"token": "x" * 16}, env={}).token == "x" * 16


async def test_a_clean_close_skips_the_recount_and_a_crash_does_not(gateway):
    c = await gateway.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "one"})
    await c.run_to_end(sent["runId"])
    await c.close()
    await gateway.stop()
    marker = gateway.config.sessions_dir() / ".closed-cleanly"
    assert marker.exists()
    meta = gateway.config.sessions_dir() / "sessions.json"
    data = orjson.loads(meta.read_bytes())
    data["sessions"][key]["messageCount"] = 7  # after a clean close the file is trusted as it is
    meta.write_bytes(orjson.dumps(data))
    await gateway.start()
    assert not marker.exists()  # open: a crash from now on leaves no marker
    c = await gateway.client()
    assert (await c.call("sessions.get", {"sessionKey": key}))["messageCount"] == 7
    await c.close()
