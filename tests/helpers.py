"""Test helpers: a real gateway (in-process or as a subprocess) and a real websockets JSON-RPC client.

Nothing of our own code is faked. What lies outside this machine (an OpenAI-compatible API) is played
by `tests/fake_openai.py`, a real local HTTP server speaking the wire format.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

from gateway.app import Gateway
from gateway.config import Config, load_config

ROOT = Path(__file__).resolve().parent.parent


def examples(n: int) -> int:
    """A property test's example count: `n` in the suite, times PROPERTY_SCALE when exploring."""
    return max(1, int(n * float(os.environ.get("PROPERTY_SCALE", "1"))))


def make_config(state_dir: Path, **overrides: Any) -> Config:
    """A Config for tests: port 0, given state dir, nothing from the developer's environment.

    Memory is off unless `memory=True` (the core tests don't need the embedding model)."""
    memory = overrides.pop("memory", False)
    base: dict[str, Any] = {
        "stateDir": str(state_dir),
        "server.port": 0,
        "memory.enabled": memory,
        "chat.offlineDeltaDelay": 0.002,
        "memory.sync.watchDebounceMs": 100,
        "server.httpPort": 0,
        "chat.discover": False,  # no looking for a model server on this machine's ports (tests of it ask)
    }  # tests of the HTTP API ask for -1 (a free port)
    base.update(overrides)
    return load_config(base, env={})


def memory_cli(cfg: Config, capsys: Any):
    """`run("memory", "sync", "--json")` → (exit code, stdout) through the real `jarvis memory` parser."""
    import argparse

    from gateway.cli import memory as cli

    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))

    def run(*argv: str) -> tuple[int, str]:
        import structlog

        args = parser.parse_args(list(argv))
        with structlog.testing.capture_logs():  # `jarvis` sends log lines to stderr (cli.main); here, nowhere
            code = args.handler(args, cfg)
        return code, capsys.readouterr().out

    return run


async def wait_for(predicate, timeout: float = 15.0, interval: float = 0.05):
    """Await `predicate()` until it returns something truthy (returned), or fail after `timeout` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


@contextlib.contextmanager
def descriptors_exhausted():
    """This process (an in-process gateway runs in it) can open no file, as when half-open connections
    have used them all up: the soft RLIMIT_NOFILE is lowered to 3, below every descriptor already open
    (which stay usable), so each new one is refused with EMFILE, even one whose number another thread
    frees meanwhile. Any of 0-2 that is free is taken first (/dev/null). Both are given back on exit."""
    import errno
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    taken = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < 3:
            taken.append(fd)
        os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (3, hard))
        try:
            os.close(os.open(os.devnull, os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
        else:
            raise AssertionError("a descriptor could still be opened")
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in taken:
            os.close(fd)


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = error.get("message")
        self.data = error.get("data") or {}


class Client:
    """A JSON-RPC client over a real websocket: `call` awaits the matching response, every
    notification lands in `events`."""

    def __init__(self, ws: ClientConnection):
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[Any, asyncio.Future[Any]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.raw: asyncio.Queue[Any] = asyncio.Queue()  # batch answers and id-less errors
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for text in self.ws:
                msg = orjson.loads(text)
                if isinstance(msg, dict) and "method" in msg and "id" not in msg:
                    self.events.put_nowait(msg)
                elif isinstance(msg, dict) and msg.get("id") in self._pending:
                    self._pending.pop(msg["id"]).set_result(msg)
                else:
                    self.raw.put_nowait(msg)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection closed"))

    async def request(self, method: str, params: Any = None, timeout: float = 30) -> dict[str, Any]:
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
        if params is not None:
            frame["params"] = params
        await self.ws.send(orjson.dumps(frame).decode())
        return await asyncio.wait_for(fut, timeout)

    async def call(self, method: str, params: Any = None, timeout: float = 30) -> Any:
        msg = await self.request(method, params, timeout)
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]

    async def send_text(self, text: str) -> None:
        await self.ws.send(text)

    async def next_event(self, method: str | None = None, timeout: float = 10) -> dict[str, Any]:
        while True:
            ev = await asyncio.wait_for(self.events.get(), timeout)
            if method is None or ev["method"] == method:
                return ev

    async def run_to_end(self, run_id: str, timeout: float = 20) -> list[dict[str, Any]]:
        """Collect this run's events up to and including its terminal event."""
        out = []
        while True:
            ev = await asyncio.wait_for(self.events.get(), timeout)
            if ev["params"].get("runId") != run_id:
                continue
            out.append(ev)
            if ev["method"] in ("chat.final", "chat.error", "chat.aborted"):
                return out

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


async def connect_client(url: str, token: str | None, how: str = "frame", **kw: Any) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if how == "header" and token else None
    ws = await connect(url, additional_headers=headers, max_size=None, compression=None, **kw)
    if how == "frame":
        await ws.send(orjson.dumps({"type": "auth", "token": token}).decode())
        ok = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
        assert ok.get("method") == "auth.ok", ok
    return Client(ws)


class RunningGateway:
    def __init__(self, config: Config):
        self.config = config
        self.gw: Gateway | None = None

    @property
    def url(self) -> str:
        assert self.gw is not None
        return self.gw.url

    @property
    def token(self) -> str:
        return self.config.token or self.config.token_file.read_text().strip()

    @property
    def http_url(self) -> str:
        """The HTTP API listener's base URL (started with `server.httpPort = -1`)."""
        assert self.gw is not None and self.gw.http is not None and self.gw.http.enabled
        return self.gw.http.url()

    async def start(self) -> "RunningGateway":
        self.gw = Gateway(self.config)
        await self.gw.start()
        # Reuse the bound port on restart so clients can reconnect to the same URL.
        self.config.server.port = self.gw.port
        return self

    async def stop(self) -> None:
        if self.gw is not None:
            await self.gw.shutdown()
            self.gw = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def client(self, how: str = "frame") -> Client:
        return await connect_client(self.url, self.token, how)


# Run a Python command line with limits of its own: argv = [nofile, inotify instances, *python args]
# ("" leaves one as it is). The inotify limit is set in a fresh user namespace (this process mapped to
# root there), since the host-wide one is shared with every process of the same user.
_LAUNCH = r"""
import ctypes, os, resource, sys
nofile, inotify = sys.argv[1], sys.argv[2]
if nofile:
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(nofile), int(nofile)))
if inotify:
    uid, gid = os.getuid(), os.getgid()
    if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:  # CLONE_NEWUSER
        sys.exit("unshare(CLONE_NEWUSER): " + os.strerror(ctypes.get_errno()))
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    with open("/proc/sys/user/max_inotify_instances", "w") as f:
        f.write(inotify)
os.execv(sys.executable, [sys.executable, *sys.argv[3:]])
"""


def user_namespaces_work() -> str | None:
    """None where `GatewayProcess(inotify_instances=…)` can run here; else why not."""
    if not sys.platform.startswith("linux"):
        return "user namespaces are Linux's"
    probe = subprocess.run(
        [sys.executable, "-c", _LAUNCH, "", "0", "-c", "pass"], capture_output=True, text=True, timeout=30
    )
    return None if probe.returncode == 0 else f"no user namespace with its own limits here: {probe.stderr.strip()}"


class GatewayProcess:
    """`jarvis serve` as a real subprocess, for signals and crash tests."""

    def __init__(
        self,
        state_dir: Path,
        env: dict[str, str] | None = None,
        port: int = 0,
        nofile: int | None = None,
        inotify_instances: int | None = None,
    ):
        """`nofile`: the process's RLIMIT_NOFILE (soft and hard), as a unit's LimitNOFILE sets it.
        `inotify_instances`: run it in a user namespace of its own whose inotify instance limit is this
        (`user.max_inotify_instances`): a resource run out for this process alone, which no other
        process on the host can free or take (see `user_namespaces_work`)."""
        self.state_dir = state_dir
        self.nofile = nofile
        self.inotify_instances = inotify_instances
        # The HTTP API on a free port: several gateways (and test runs) side by side never collide.
        self.env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir), "JARVIS_HTTP_PORT": "-1", **(env or {})}
        self.env.pop("OPENAI_API_KEY", None) if "OPENAI_API_KEY" not in (env or {}) else None
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.http_url: str | None = None
        self.log = state_dir / "serve.log"

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        state_dir: Path,
        config_toml: str = "",
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        inotify_instances: int | None = None,
    ):
        """A started gateway with this config.toml (and no chat endpoint from the environment),
        killed on exit."""
        state_dir.mkdir(parents=True, exist_ok=True)
        if config_toml:
            (state_dir / "config.toml").write_text(config_toml)
        proc = cls(
            state_dir, env={"OPENAI_BASE_URL": "", **(env or {})}, nofile=nofile, inotify_instances=inotify_instances
        )
        try:
            proc.start()
            yield proc
        finally:
            proc.kill()

    def start(self, timeout: float = 30) -> "GatewayProcess":
        import re
        import time

        offset = self.log.stat().st_size if self.log.exists() else 0  # a restart appends to the log
        fh = open(self.log, "ab")
        cmd = ["-m", "gateway.cli", "serve", "--port", str(self.port), "--log-format", "json"]
        if self.nofile is not None or self.inotify_instances is not None:
            # set in the child, then exec (preexec_fn is unsafe with threads)
            limits = ["" if n is None else str(n) for n in (self.nofile, self.inotify_instances)]
            cmd = ["-c", _LAUNCH, *limits, *cmd]
        self.proc = subprocess.Popen(
            [sys.executable, *cmd], cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[offset:].decode(errors="replace")
            m = re.findall(r"listening on ws://[^:]+:(\d+)/", text)
            if m:
                self.port = int(m[-1])
                http = re.findall(r"HTTP API \(MCP at /mcp, OpenAI-compatible at /v1\): (http://\S+)", text)
                self.http_url = http[-1] if http else None
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        raise TimeoutError(f"gateway did not start:\n{self.log.read_text(errors='replace')}")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def token(self) -> str:
        return (self.state_dir / "gateway.token").read_text().strip()

    def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 20) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def unlinked_sqlite_files(self) -> list[str]:
        """The SQLite files (a database, its -wal, -shm) the gateway has open that no longer have a name:
        a WAL deleted under it by another process means a fresh reader sees a stale index."""
        assert self.proc is not None
        found = []
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.proc.pid}/fd/{fd}")
            except OSError:
                continue
            if ".sqlite" in target and target.endswith(" (deleted)"):
                found.append(Path(target[: -len(" (deleted)")]).name)
        return sorted(found)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
