"""Faults outside the gateway: a failing chat provider and a full disk.

Provider faults (the basics — 429, a cut stream, a hang before headers, 401 — are in
test_chat_openai.py): here a 500 then success, 5xx exhausted, a 400, a stream that stalls mid-way
past the timeout, an endpoint that refuses connections. Every run ends in exactly one terminal event
with `retryable` right, and the user message stays in the transcript.

Disk full: the sessions folder is a 64 KiB tmpfs. chat.send then fails with a clear "disk is full"
error (not a bare internal error), no partial line is left in any transcript, the gateway goes on
serving, and once space is freed the same session works again.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess

import pytest

from gateway.sessions import transcript as tx
from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError

TERMINAL = ("chat.final", "chat.error", "chat.aborted")


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def run_once(gw, message: str, timeout: float = 20):
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": message})
        events = await c.run_to_end(sent["runId"], timeout=timeout)
        health = await c.call("system.health")
        assert health["status"] == "ok"
    finally:
        await c.close()
    records = [r.data for r in tx.iter_records(gw.config.sessions_dir() / f"{key}.jsonl")]
    assert sum(1 for e in events if e["method"] in TERMINAL) == 1, "exactly one terminal event"
    assert [e["params"]["seq"] for e in events] == list(range(1, len(events) + 1))
    return events, [(r["message"]["role"], r["message"]["content"]) for r in records if r.get("type") == "message"]


async def test_500_then_success_is_retried(start_gateway, api):
    api.script(("status", 500, {}))
    api.reply = "recovered fine"
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.maxRetries": 2})
    events, msgs = await run_once(gw, "try again")
    assert events[-1]["method"] == "chat.final" and events[-1]["params"]["message"]["content"] == "recovered fine"
    assert api.count("/v1/chat/completions") == 2
    assert msgs == [("user", "try again"), ("assistant", "recovered fine")]


@pytest.mark.parametrize(
    "status,retryable", [(500, True), (502, True), (503, True), (408, True), (400, False), (404, False), (422, False)]
)
async def test_http_errors_end_in_chat_error_with_retryable_right(start_gateway, api, status, retryable):
    api.script(*[("status", status, {"Retry-After": "0"})] * 3)
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.maxRetries": 1})
    events, msgs = await run_once(gw, f"status {status}")
    err = events[-1]
    assert err["method"] == "chat.error", err
    assert err["params"]["error"]["code"] == -32050 and err["params"]["error"]["retryable"] is retryable
    assert str(status) in err["params"]["error"]["message"]
    assert msgs == [("user", f"status {status}")], "the user message is kept, nothing else"
    assert api.count("/v1/chat/completions") == (2 if retryable else 1)


async def test_stream_that_stalls_mid_way_past_the_timeout(start_gateway, api):
    api.reply = "one two three"
    api.chunk_delay = 3.0  # the first chunk arrives, then the stream goes quiet for longer than the timeout
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.maxRetries": 0, "chat.timeout": 0.7})
    events, msgs = await run_once(gw, "stall please")
    assert [e["method"] for e in events][0] == "chat.delta"
    err = events[-1]
    assert err["method"] == "chat.error" and err["params"]["error"]["retryable"] is True, err
    assert msgs == [("user", "stall please")]


async def test_endpoint_refusing_connections_is_retryable(start_gateway):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gw = await start_gateway(**{"chat.baseUrl": f"http://127.0.0.1:{port}/v1", "chat.maxRetries": 0})
    events, msgs = await run_once(gw, "anyone there?")
    err = events[-1]["params"]["error"]
    assert events[-1]["method"] == "chat.error" and err["retryable"] is True and "unreachable" in err["message"]
    assert msgs == [("user", "anyone there?")]


# ---- disk full ----------------------------------------------------------------------------------
@contextlib.contextmanager
def tiny_tmpfs(path, size: str = "64k"):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def assert_whole_lines(folder) -> int:
    n = 0
    for p in folder.glob("*.jsonl"):
        data = p.read_bytes()
        assert data == b"" or data.endswith(b"\n"), f"{p.name} ends in a partial line"
        for line in data.splitlines():
            tx.orjson.loads(line)  # every line parses
            n += 1
    return n


async def test_disk_full_while_appending(tmp_path, start_gateway):
    from tests.helpers import make_config

    sessions_dir = make_config(tmp_path / "state").sessions_dir()
    with tiny_tmpfs(sessions_dir):
        gw = await start_gateway()
        c = await gw.client()
        try:
            key = (await c.call("sessions.create"))["sessionKey"]
            big = "x" * 9000
            acked = []
            failure = None
            for i in range(20):  # 64 KiB fills within a few turns (each turn: 9 KB in, ~0.4 KB out)
                try:
                    sent = await c.call("chat.send", {"sessionKey": key, "message": f"{i} {big}"})
                except RpcError as exc:
                    failure = exc
                    break
                acked.append(i)
                events = await c.run_to_end(sent["runId"])
                if events[-1]["method"] == "chat.error":
                    err = events[-1]["params"]["error"]
                    assert "disk is full" in err["message"] and err["retryable"] is True, err
            assert failure is not None, "the disk never filled"
            assert "disk is full" in failure.message, failure.message
            assert failure.data.get("retryable") is True and "errorId" not in failure.data
            # nothing partial, every acknowledged user message is there exactly once
            assert_whole_lines(sessions_dir)
            history = await c.call("sessions.history", {"sessionKey": key, "limit": 1000})
            users = [m["content"].split(" ", 1)[0] for m in history["messages"] if m["role"] == "user"]
            assert users == [str(i) for i in acked]
            # still serving; sessions.create on the full disk fails just as clearly
            assert (await c.call("system.health"))["status"] == "ok"
            with pytest.raises(RpcError) as exc:
                for _ in range(30):
                    await c.call("sessions.create", {"label": "y" * 200})
            assert "disk is full" in exc.value.message
            assert_whole_lines(sessions_dir)
            listed = {s["sessionKey"] for s in (await c.call("sessions.list", {"limit": 500}))["sessions"]}
            assert {p.stem for p in sessions_dir.glob("*.jsonl")} == listed  # no orphan transcript
            # free space: the same session works again
            for p in sessions_dir.glob("*.jsonl"):
                if p.name != f"{key}.jsonl":
                    p.unlink()
            ballast = sessions_dir / f"{key}.jsonl"
            kept = [line for line in ballast.read_bytes().splitlines(keepends=True)]
            ballast.write_bytes(b"".join(kept[:1] + kept[-2:]))  # trim the transcript to make room
            sent = await c.call("chat.send", {"sessionKey": key, "message": "after the cleanup"})
            events = await c.run_to_end(sent["runId"])
            assert events[-1]["method"] == "chat.final"
            assert_whole_lines(sessions_dir)
        finally:
            await c.close()
            await gw.stop()


async def test_memory_writes_on_a_full_disk_name_the_cause(tmp_path, start_gateway):
    from tests.helpers import make_config

    workspace = make_config(tmp_path / "state").workspace_dir
    with tiny_tmpfs(workspace, "32k"):
        gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none"})
        c = await gw.client()
        try:
            with pytest.raises(RpcError) as exc:
                for i in range(40):
                    await c.call("memory.set", {"key": f"k{i}", "value": "v" * 20_000})
            assert exc.value.code == -32603 and "disk is full (ENOSPC" in exc.value.message, exc.value.message
            assert exc.value.data["retryable"] is True and exc.value.data["errno"] == "ENOSPC"
            assert "errorId" not in exc.value.data
            assert (await c.call("system.health"))["status"] == "ok"
        finally:
            await c.close()
            await gw.stop()
