"""The gateway under systemd: the unit file systemd accepts, and the sd_notify conversation of a real
`jarvis serve` process with a real AF_UNIX datagram socket playing systemd's $NOTIFY_SOCKET."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest

from gateway.config import load_config
from gateway.cli.systemd import TEMPLATE, render_unit
from tests.fake_openai import FakeOpenAI
from tests.helpers import GatewayProcess, connect_client

VENV_JARVIS = Path(sys.executable).parent / "jarvis"


class NotifySocket:
    """What systemd listens on: collects every datagram, split into KEY=value dicts, in arrival order."""

    def __init__(self, address: str):
        self.address = address  # as it goes into NOTIFY_SOCKET: a path, or '@name' for an abstract socket
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.settimeout(0.2)
        self.messages: list[dict[str, str]] = []

    def _receive(self) -> bool:
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return False
        self.messages.append(dict(line.split("=", 1) for line in data.decode().split("\n")))
        return True

    def wait_for(self, key: str, value: str | None = None, count: int = 1, timeout: float = 20) -> None:
        """Receive until `count` messages carry `key` (with `value`, when given)."""
        deadline = time.monotonic() + timeout
        while len(self.with_key(key, value)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count}× {key}={value} not received; got {self.messages}")
            self._receive()

    def drain(self) -> None:
        while self._receive():
            pass

    def with_key(self, key: str, value: str | None = None) -> list[int]:
        """Positions of the messages that carry `key` (= `value`)."""
        return [i for i, m in enumerate(self.messages) if key in m and (value is None or m[key] == value)]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request, tmp_path):
    address = str(tmp_path / "notify.sock") if request.param == "path" else f"@jarvis-test-{uuid.uuid4().hex}"
    ns = NotifySocket(address)
    yield ns
    ns.close()


def write_config(state_dir: Path, text: str) -> None:
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state_dir / "config.toml").write_text(text)


# ---- the unit file -----------------------------------------------------------------------------
def test_rendered_unit_passes_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    if not VENV_JARVIS.is_file():
        pytest.skip(f"{VENV_JARVIS} missing: install the package (./scripts/test does `pip install -e .`)")
    config = load_config({"stateDir": str(tmp_path / "state")}, env={})
    text = render_unit(config, VENV_JARVIS)
    assert not re.search(r"\{\{[A-Z_]+\}\}", text), "a placeholder was left unrendered"
    unit = tmp_path / "jarvis-gateway.service"
    unit.write_text(text)
    # `--user` needs a runtime dir for the (never started) user manager it simulates.
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    done = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
    )
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]
    assert done.returncode == 0 and not complaints, done.stdout + done.stderr


def test_unit_template_declares_the_service_contract():
    lines = set(TEMPLATE.read_text().splitlines())
    for directive in (
        "Type=notify",
        "NotifyAccess=main",
        "Restart=on-failure",
        "EnvironmentFile=-%h/.config/jarvis/env",
        "ExecStart={{JARVIS}} serve {{SERVE_ARGS}}",
        "ReadWritePaths={{READ_WRITE_PATHS}}",
        "LimitNOFILE=8192",
        "UMask=0077",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "WantedBy=default.target",
    ):
        assert directive in lines, directive
    config = load_config({"server.shutdownGrace": 5.0}, env={})
    stop = next(
        line
        for line in render_unit(config, Path("/opt/jarvis/bin/jarvis")).splitlines()
        if line.startswith("TimeoutStopSec=")
    )
    assert int(stop.split("=")[1]) > config.server.shutdown_grace + 10  # grace + closing sockets + margin


# ---- sd_notify from a real `jarvis serve` ------------------------------------------------------
async def test_ready_watchdog_status_and_stopping_arrive_in_order(tmp_path, notify_socket):
    state = tmp_path / "state"
    write_config(state, "[memory]\nenabled = false\n")
    gw = GatewayProcess(state, env={"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "200000"})
    try:
        gw.start()
        await asyncio.to_thread(notify_socket.wait_for, "READY", "1")
        await asyncio.to_thread(notify_socket.wait_for, "WATCHDOG", "1", 3)
        ready = notify_socket.messages[notify_socket.with_key("READY")[0]]
        assert ready["STATUS"].startswith("serving; 0 connections; memory off")

        client = await connect_client(gw.url, gw.token)
        await asyncio.to_thread(notify_socket.wait_for, "STATUS", "serving; 1 connection; memory off")
        gw.signal(signal.SIGTERM)
        await asyncio.to_thread(notify_socket.wait_for, "STOPPING", "1")
        assert await asyncio.to_thread(gw.wait, 20) == 0
        await client.close()
    finally:
        gw.kill()
    notify_socket.drain()
    ready_at = notify_socket.with_key("READY")
    watchdog_at = notify_socket.with_key("WATCHDOG")
    stopping_at = notify_socket.with_key("STOPPING")
    assert ready_at == [0], notify_socket.messages  # nothing before READY=1, and READY=1 once
    assert len(stopping_at) == 1 and stopping_at[0] == len(notify_socket.messages) - 1  # STOPPING=1 is last
    assert len(watchdog_at) >= 3 and all(0 < i < stopping_at[0] for i in watchdog_at)


async def test_watchdog_pid_of_another_process_means_no_pings(tmp_path):
    notify = NotifySocket(str(tmp_path / "notify.sock"))
    state = tmp_path / "state"
    write_config(state, "[memory]\nenabled = false\n")
    gw = GatewayProcess(
        state, env={"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": str(os.getpid())}
    )  # the test's pid, not the gateway's
    try:
        gw.start()
        await asyncio.to_thread(notify.wait_for, "READY", "1")
        await asyncio.sleep(1.0)  # ten would-be watchdog intervals
        gw.signal(signal.SIGTERM)
        await asyncio.to_thread(notify.wait_for, "STOPPING", "1")
        assert await asyncio.to_thread(gw.wait, 20) == 0
    finally:
        gw.kill()
        notify.close()
    assert notify.with_key("WATCHDOG") == [], notify.messages


async def test_sigterm_lets_a_running_reply_finish_and_refuses_new_sends(tmp_path):
    """`systemctl --user restart` during a reply: the reply finishes (within server.shutdownGrace), a
    new chat.send meanwhile is refused with a retryable error, and only then do sockets close (1012)."""
    notify = NotifySocket(str(tmp_path / "notify.sock"))
    state = tmp_path / "state"
    grace = 15.0
    write_config(state, f"[memory]\nenabled = false\n\n[server]\nshutdownGrace = {grace}\n")
    with FakeOpenAI() as api:
        api.reply = " ".join(f"word{i}" for i in range(30))
        api.chunk_delay = 0.05  # 1.5 s for the whole reply
        gw = GatewayProcess(
            state, env={"NOTIFY_SOCKET": notify.address, "OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "sk-test"}
        )
        try:
            gw.start()
            client = await connect_client(gw.url, gw.token)
            key = (await client.call("sessions.create", {}))["sessionKey"]
            other = (await client.call("sessions.create", {}))["sessionKey"]
            run = await client.call("chat.send", {"sessionKey": key, "message": "tell me a story"})
            await client.next_event("chat.delta")

            signalled = time.monotonic()
            gw.signal(signal.SIGTERM)
            await asyncio.to_thread(notify.wait_for, "STOPPING", "1")
            refused = await client.request("chat.send", {"sessionKey": other, "message": "and another"})
            events = await client.run_to_end(run["runId"], timeout=grace)
            await client.ws.wait_closed()
            close_code = client.ws.close_code
            code = await asyncio.to_thread(gw.wait, grace + 10)
            exited_after = time.monotonic() - signalled
            await client.close()
        finally:
            gw.kill()
            notify.close()
    assert code == 0, gw.log.read_text()
    err = refused["error"]
    assert err["code"] == -32050 and err["data"]["retryable"] is True and "shutting down" in err["message"], err
    assert events[-1]["method"] == "chat.final", events[-1]
    assert events[-1]["params"]["message"]["content"] == api.reply
    assert close_code == 1012
    assert exited_after < grace, f"took {exited_after:.1f} s to exit"  # no waiting once the reply was done
    lines = [orjson.loads(line) for line in (state / "agents/main/sessions" / f"{key}.jsonl").read_text().splitlines()]
    assert lines[-1]["message"] == {"role": "assistant", "content": api.reply} and "aborted" not in lines[-1]
    assert not (state / "agents/main/sessions" / f"{other}.jsonl").read_text().count('"role":"user"')


async def test_sigterm_aborts_a_reply_still_running_after_the_grace_and_keeps_it(tmp_path):
    notify = NotifySocket(str(tmp_path / "notify.sock"))
    state = tmp_path / "state"
    grace = 2.0
    write_config(state, f"[memory]\nenabled = false\n\n[server]\nshutdownGrace = {grace}\n")
    with FakeOpenAI() as api:
        api.reply = " ".join(f"word{i}" for i in range(200))
        api.chunk_delay = 0.1  # 20 s for the whole reply: longer than the grace
        gw = GatewayProcess(
            state, env={"NOTIFY_SOCKET": notify.address, "OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "sk-test"}
        )
        try:
            gw.start()
            client = await connect_client(gw.url, gw.token)
            session = await client.call("sessions.create", {})
            key = session["sessionKey"]
            run = await client.call("chat.send", {"sessionKey": key, "message": "tell me a long story"})
            await client.next_event("chat.delta")
            await client.next_event("chat.delta")

            signalled = time.monotonic()
            gw.signal(signal.SIGTERM)
            code = await asyncio.to_thread(gw.wait, grace + 10)
            exited_after = time.monotonic() - signalled

            events = await client.run_to_end(run["runId"], timeout=5)
            await client.ws.wait_closed()
            close_code = client.ws.close_code
            await client.close()
        finally:
            gw.kill()
    assert code == 0, gw.log.read_text()
    assert grace - 0.2 < exited_after < grace + 3, f"took {exited_after:.1f} s to exit"  # the grace, then out
    aborted = events[-1]
    assert aborted["method"] == "chat.aborted", events
    assert aborted["params"]["reason"] == "shutdown"
    partial = aborted["params"]["partial"]
    assert partial.startswith("word0 word1 ") and len(partial.split()) > 10  # it went on streaming meanwhile
    assert close_code == 1012

    lines = [orjson.loads(line) for line in (state / "agents/main/sessions" / f"{key}.jsonl").read_text().splitlines()]
    last = lines[-1]
    assert last["type"] == "message" and last["runId"] == run["runId"]
    assert last["message"] == {"role": "assistant", "content": partial}
    assert last["aborted"] is True and last["abortReason"] == "shutdown"

    notify.drain()
    notify.close()
    assert notify.with_key("STOPPING", "1"), notify.messages
    assert notify.with_key("READY", "1")[0] < notify.with_key("STOPPING", "1")[0]

    # After the restart, history shows the reply as stopped by it.
    with GatewayProcess.running(state) as again:
        client = await connect_client(again.url, again.token)
        try:
            hist = await client.call("sessions.history", {"sessionKey": key})
        finally:
            await client.close()
    reply = hist["messages"][-1]
    assert reply["content"] == partial and reply["aborted"] is True and reply["abortReason"] == "shutdown"
