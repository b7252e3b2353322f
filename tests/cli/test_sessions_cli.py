"""`jarvis sessions list|show|delete|export|trash|restore|purge`: the real CLI as a process against a real
gateway process."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.cli.test_chat_cli import jarvis
from tests.helpers import GatewayProcess


@pytest.fixture
def gateway(tmp_path):
    state = tmp_path / "state"
    with GatewayProcess.running(state, "[memory]\nenabled = false\n[chat]\nofflineDeltaDelay = 0.001\n") as gp:
        yield gp


def test_list_show_export_and_delete(gateway):
    state, port = gateway.state_dir, str(gateway.port)
    r = jarvis("sessions", "list", "--port", port, state_dir=state)
    assert r.returncode == 0 and r.stdout == "no sessions\n", (r.stdout, r.stderr)
    for text in ("Where do herons nest?", "And what do they eat?"):
        assert jarvis("chat", text, "--port", port, state_dir=state).returncode == 0
    key = (state / "chat-session").read_text().strip()
    jarvis("chat", "Another topic", "--new", "-m", "small-model", "--port", port, state_dir=state)

    r = jarvis("sessions", "list", "--port", port, state_dir=state)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()
    assert len(rows) == 2 and "Another topic  [small-model]" in rows[0]
    assert rows[1].endswith(f"   4 msg  {key}  Where do herons nest?"), rows
    listed = orjson.loads(jarvis("sessions", "list", "--json", "--port", port, state_dir=state).stdout)
    assert listed["total"] == 2 and {s["sessionKey"] for s in listed["sessions"]} >= {key}
    r = jarvis("sessions", "list", "--limit", "1", "--port", port, state_dir=state)
    assert len(r.stdout.splitlines()) == 1 and "(1 of 2; --offset 1 shows more)" in r.stderr

    r = jarvis("sessions", "show", key, "--port", port, state_dir=state)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# Where do herons nest?\n") and f"- session: `{key}`" in r.stdout
    assert r.stdout.count("\n## You · ") == 2 and r.stdout.count("\n## Jarvis · ") == 2
    assert "And what do they eat?" in r.stdout
    shown = orjson.loads(jarvis("sessions", "show", key, "--json", "--port", port, state_dir=state).stdout)
    assert shown["session"]["sessionKey"] == key and [m["role"] for m in shown["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]

    r = jarvis("sessions", "export", key, "--format", "jsonl", "--port", port, state_dir=state)
    lines = [orjson.loads(x) for x in r.stdout.splitlines()]
    assert [m["content"] for m in lines if m["role"] == "user"] == ["Where do herons nest?", "And what do they eat?"]
    assert lines == shown["messages"]
    r = jarvis("sessions", "export", key, "--port", port, state_dir=state)
    assert r.stdout == jarvis("sessions", "show", key, "--port", port, state_dir=state).stdout  # md by default

    r = jarvis("sessions", "delete", key, "--port", port, state_dir=state)
    assert r.returncode == 0 and r.stdout.startswith(f"deleted {key}: in the trash until 20"), r.stdout
    undo = r.stdout.splitlines()[-1]
    assert undo == f"undo: jarvis sessions restore {key}"
    r = jarvis("sessions", "show", key, "--port", port, state_dir=state)
    assert r.returncode == 1 and f"session not found: {key}" in r.stderr
    r = jarvis("sessions", "trash", "--port", port, state_dir=state)
    assert r.returncode == 0 and f"   4 msg  {key}  Where do herons nest?  [until 20" in r.stdout, r.stdout
    r = jarvis(*undo.split()[2:], "--port", port, state_dir=state)  # the undo, as printed
    assert r.returncode == 0 and r.stdout == f"restored {key} (4 messages)\n", (r.stdout, r.stderr)
    assert jarvis("sessions", "show", key, "--json", "--port", port, state_dir=state).returncode == 0
    jarvis("sessions", "delete", key, "--port", port, state_dir=state)
    r = jarvis("sessions", "purge", "--all", "--json", "--port", port, state_dir=state)
    assert r.returncode == 0 and orjson.loads(r.stdout) == {"purged": [key]}
    r = jarvis("sessions", "trash", "--port", port, state_dir=state)
    assert r.stdout == "the trash is empty\n"
    r = jarvis("sessions", "purge", "--port", port, state_dir=state)
    assert r.returncode == 1 and "params.sessionKey: give sessionKey, or all: true" in r.stderr
    r = jarvis("sessions", "export", "x", "--format", "pdf", "--port", port, state_dir=state)
    assert r.returncode == 2 and "invalid choice: 'pdf'" in r.stderr
    r = jarvis("sessions", "list", "--limit", "0", "--port", port, state_dir=state)
    assert r.returncode == 2 and "--limit" in r.stderr
    r = jarvis("sessions", state_dir=state)
    assert r.returncode == 2 and "usage: jarvis sessions" in r.stderr


def test_a_long_session_is_read_page_by_page(gateway):
    """sessions.history pages backwards; show and export put the pages back in order."""
    from tests.helpers import connect_client

    async def fill() -> str:
        c = await connect_client(gateway.url, gateway.token)
        key = (await c.call("sessions.create", {"label": "long"}))["sessionKey"]
        for i in range(1, 551):  # 1,100 messages: two pages of at most 1,000
            run = await c.call("chat.send", {"sessionKey": key, "message": f"message {i}"})
            await c.run_to_end(run["runId"])
        await c.close()
        return key

    key = asyncio.run(fill())
    r = jarvis("sessions", "export", key, "--format", "jsonl", "--port", str(gateway.port), state_dir=gateway.state_dir)
    users = [orjson.loads(x)["content"] for x in r.stdout.splitlines() if '"role":"user"' in x]
    assert users == [f"message {i}" for i in range(1, 551)]


async def test_a_gateway_that_never_answers_is_an_error_not_a_hang(tmp_path):
    """Something accepts the WebSocket and the token but never answers (a stuck gateway, a wrong process
    on the port): each command ends with one line naming the URL, the method and the limit, exit 3."""
    import time

    from websockets.asyncio.server import serve

    from gateway.cli.client import READ_TIMEOUT

    async def silent(ws):
        await ws.wait_closed()  # take every request, answer none

    jarvis("token", state_dir=tmp_path)
    async with serve(silent, "127.0.0.1", 0) as server:
        port = str(server.sockets[0].getsockname()[1])
        t0 = time.monotonic()
        listed, status = await asyncio.gather(
            asyncio.to_thread(jarvis, "sessions", "list", "--port", port, state_dir=tmp_path),
            asyncio.to_thread(jarvis, "memory", "status", "--port", port, state_dir=tmp_path),
        )
        took = time.monotonic() - t0
    url = f"ws://127.0.0.1:{port}/"
    assert listed.returncode == 3 and listed.stderr == (
        f"jarvis sessions: the gateway at {url} did not answer sessions.list within {READ_TIMEOUT:g}s\n"
    ), listed.stderr
    assert status.returncode == 3 and status.stderr == (
        f"jarvis: the gateway at {url} did not answer memory.status within {READ_TIMEOUT:g}s\n"
    ), status.stderr
    assert READ_TIMEOUT <= took < READ_TIMEOUT + 20
