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

from tests.helpers import ROOT, RpcError, make_config


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
    values = {"Origin": f"http://127.0.0.1:{port}", "Authorization": f"Bearer {gateway.token}",
              "Upgrade": "websocket"}
    lines = [f"GET / HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
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
    await asyncio.gather(*(client.request("chat.send", {"sessionKey": f"nope-{i}", "message": "hi"})
                           for i in range(50)))
    assert len(chat._send_locks) == 0


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
    await gateway.start()
    c = await gateway.client()
    assert (await c.call("sessions.get", {"sessionKey": key}))["messageCount"] == 4
    await c.close()


async def test_a_second_gateway_on_the_same_state_dir_exits_2_naming_the_holder(gateway):
    import os

    env = {**os.environ, "JARVIS_STATE_DIR": str(gateway.config.state_dir), "OPENAI_BASE_URL": ""}
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--port", "0"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
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
