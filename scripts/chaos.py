#!/usr/bin/env python3
"""Chaos: the attacks of issues 15 and 29 against a real `jarvis serve`, with a bystander measuring the damage.

    .venv/bin/python scripts/chaos.py [--agents 300] [--embeddings none|local|openai] [--only NAME[,NAME]] [--out FILE]

Starts `jarvis serve` as a subprocess on loopback in a temporary state dir (and a local fake OpenAI
server for the runaway upstream). A bystander connection calls `system.health` every 20 ms all along;
each attack reports what happened, the gateway's RSS, open descriptors and threads before and after,
and the bystander's p99 during the attack:

1. agents      `sessions.create` in N distinct agents (each opens its index, watcher and threads)
2. corrupt     the memory index truncated to 100 KB, the gateway restarted on it
3. big replies a 50-request batch of `sessions.history` on a session of big messages; a runaway
               upstream streaming 2 MB into one reply
4. auth        200 wrong tokens from 127.0.0.2, then the right token from there
5. reader      an outside reader (the stock sqlite3 module, and plain reads of -wal/-shm) opening and
               closing every SQLite file of the state dir every 100 ms while the gateway (its own state
               dir) syncs new notes and chats in three sessions; then SIGKILL, and offline: every
               acknowledged message is in its transcript once, every note whose memory.sync answered is
               in the index, `PRAGMA integrity_check` is ok — then the gateway starts again on it

6. scan        (issue 29.2) the workspace unreadable during a sync: the gateway's descriptors exhausted
               (its RLIMIT_NOFILE lowered to what it holds), the workspace gone, its mount point left
               empty, memory/ away for 0.3 s while a sync scans; none may remove a note
7. vectors     (issue 29.3) the embeddings server answers NaN vectors once, then zero vectors once, then
               is healthy: every search mode must keep answering, and the notes get their vectors back
               (needs the fake server's embeddings: `--embeddings openai`, chosen by itself when this
               attack runs and `--embeddings` was left at none)

8. half-open   (issue 29.1; this gateway runs with the unit's LimitNOFILE=8192) non-blocking connects
               that never send a byte, as fast as they go for 5 s, while an authenticated client creates
               sessions, chats and sets memories; then a new client connects
9. non-readers (issue 29.6) 5 subscribers that stop reading during two long replies: torn down, memory
               released?
10. ping-flood (issue 29.6) 16 sockets that upgrade, never authenticate and send pings as fast as they can

On the HTTP API listener (issue 35), each flood from its own process (tests/http_attacks.py), with a
second bystander calling GET /v1/models every 20 ms with the token all along (its p99 and failures are
in the table beside the WebSocket's), and the gateway's peak RSS during the attack:

11. sse-flood  255 standalone GET /mcp event streams with the token, held idle for 5 s
12. wrong-tokens 4000 requests with wrong tokens from 8 addresses (127.0.0.3-10), 400 at a time
13. huge-v1    60 /v1/chat/completions of 200,000 messages (6.6 MB) each, all at once

`--only` runs some of them: agents, big-batch, runaway, auth, corrupt, reader, scan, vectors, half-open,
non-readers, ping-flood, sse-flood, wrong-tokens, huge-v1.
Prints a table, writes JSON (default bench-results/chaos.json); exit 1 if an attack broke something.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402

from tests.attacks import half_open_flood, ping_flood  # noqa: E402
from tests.helpers import GatewayProcess, RpcError, connect_client, wait_for  # noqa: E402
from tests.system.hostile.test_hostile import frame, raw_ws  # noqa: E402

NOFILE = 8192  # the unit's LimitNOFILE


def proc_stats(pid: int) -> dict[str, int]:
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                fields[key] = int(value.split()[0])
    return {
        "rssMB": round(fields.get("VmRSS", 0) / 1024),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": fields.get("Threads", 0),
    }


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))] * 1000


class Bystander:
    """A well-behaved client: system.health every 20 ms; records latencies and failures."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self, gw: GatewayProcess) -> None:
        self.client = await connect_client(gw.url, gw.token)
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            t0 = time.perf_counter()
            try:
                await self.client.call("system.health", timeout=5)
                self.lat.append(time.perf_counter() - t0)
            except Exception:
                self.failures += 1
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.02)

    def mark(self) -> int:
        return len(self.lat)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.client.close()


class HttpBystander(Bystander):
    """The owner on the HTTP API listener: GET /v1/models every 20 ms with the token, each on a new
    connection (as a script or curl would: a kept-alive one would slip past a connection limit); anything
    but a 200 is a failure."""

    async def start(self, gw: GatewayProcess) -> None:
        import httpx2 as httpx

        assert gw.http_url is not None, "the HTTP API listener is off"
        self.http = httpx.AsyncClient(
            base_url=gw.http_url,
            headers={"Authorization": f"Bearer {gw.token}"},
            timeout=5,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self.statuses: Counter[int] = Counter()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            t0 = time.perf_counter()
            try:
                r = await self.http.get("/v1/models")
                self.statuses[r.status_code] += 1
                if r.status_code == 200:
                    self.lat.append(time.perf_counter() - t0)
                else:
                    self.failures += 1
            except Exception:
                self.failures += 1
                self.statuses[0] += 1
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.http.aclose()


class PeakRss:
    """The gateway's highest RSS while an attack runs, sampled every 20 ms."""

    def __init__(self, pid: int):
        self.pid, self.peak = pid, 0
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            self.peak = max(self.peak, proc_stats(self.pid).get("rssMB", 0))
            await asyncio.sleep(0.02)

    def stop(self) -> int:
        self._task.cancel()
        return self.peak


async def _http_attack(gw: GatewayProcess, *argv: str) -> tuple[dict[str, Any], int]:
    """One of tests/http_attacks.py in its own process: (what it saw, the gateway's peak RSS in MB)."""
    port = str(int(gw.http_url.rsplit(":", 1)[1].strip("/"))) if gw.http_url else "0"
    rss = PeakRss(gw.proc.pid)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.http_attacks", argv[0], port, *argv[1:], cwd=ROOT, stdout=subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    return json.loads(out), rss.stop()


async def attack_sse_flood(gw: GatewayProcess) -> str:
    seen, peak = await _http_attack(gw, "sse", gw.token, "255", "5")
    statuses = seen["statuses"]
    if statuses.get("200", 0) > 64:
        raise AssertionError(f"{statuses.get('200')} idle streams held: unbounded")
    return f"255 GET /mcp streams: {statuses.get('200', 0)} held, {statuses.get('503', 0)} answered 503; peak RSS {peak} MB"


async def attack_wrong_tokens(gw: GatewayProcess) -> str:
    seen, peak = await _http_attack(gw, "wrong", "4000", "400")
    statuses = dict(sorted(seen["statuses"].items()))
    dropped = statuses.pop("0", 0)
    return (
        f"4000 wrong tokens (400 at a time): answered {statuses}, {dropped} sockets dropped while pending "
        f"(server.maxPendingPerAddress); peak RSS {peak} MB"
    )


async def attack_huge_v1(gw: GatewayProcess) -> str:
    seen, peak = await _http_attack(gw, "huge", gw.token, "60", "200000")
    return (
        f"60 × {seen['bodyBytes'] / 1e6:.1f} MB requests at once: answered {dict(sorted(seen['statuses'].items()))} "
        f"{dict(sorted(seen['codes'].items()))}; peak RSS {peak} MB"
    )


async def attack_agents(gw: GatewayProcess, n: int) -> str:
    c = await connect_client(gw.url, gw.token)
    ok = refused = other = 0
    for i in range(n):
        try:
            await c.call("sessions.create", {"agentId": f"chaos-{i}"}, timeout=60)
            ok += 1
        except RpcError as exc:
            refused += exc.code == -32009
            other += exc.code != -32009
    health = await c.call("system.health")
    await c.close()
    return (
        f"{ok} created, {refused} refused (-32009 agents.max), {other} other errors; "
        f"{health['agents']['open']} open (maxOpen {health['agents']['maxOpen']})"
    )


async def attack_big_replies(gw: GatewayProcess) -> str:
    c = await connect_client(gw.url, gw.token)
    key = (await c.call("sessions.create"))["sessionKey"]
    for i in range(24):  # 24 × 90k chars: each history page holds about 2 MiB
        sent = await c.call("chat.send", {"sessionKey": key, "message": f"{i} " + "y" * 90_000})
        await c.call("chat.abort", {"sessionKey": key, "runId": sent["runId"]})  # the message is what counts
        await c.run_to_end(sent["runId"], timeout=60)
    batch = [{"id": i, "method": "sessions.history", "params": {"sessionKey": key}} for i in range(50)]
    await c.send_text(orjson.dumps(batch).decode())
    answer = await asyncio.wait_for(c.raw.get(), 60)
    answered = sum(1 for a in answer if "result" in a)
    resend = sum(1 for a in answer if "error" in a and a["error"]["code"] == -32600)
    alive = (await c.call("system.health"))["status"] == "ok"
    await c.close()
    return f"{answered} answered, {resend} 'send again on its own' (-32600); socket still open: {alive}"


async def attack_runaway(gw: GatewayProcess) -> str:
    c = await connect_client(gw.url, gw.token)
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "never stop"})
    events = await c.run_to_end(sent["runId"], timeout=120)
    final = events[-1]
    history = await c.call("sessions.history", {"sessionKey": key})
    await c.close()
    chars = len(final["params"].get("message", {}).get("content", ""))
    return (
        f"{final['method']} with {chars} chars, truncated={final['params'].get('truncated', False)}; "
        f"history readable: {len(history['messages'])} messages"
    )


async def attack_auth(gw: GatewayProcess) -> str:
    other = ("127.0.0.2", 0)
    codes: dict[int, int] = {}

    async def guess(i: int) -> None:
        async with connect(gw.url, local_addr=other) as ws:
            await ws.send(orjson.dumps({"type": "auth", "token": f"wrong-{i}"}).decode())
            code = orjson.loads(await ws.recv())["error"]["code"]
            codes[code] = codes.get(code, 0) + 1

    for start in range(0, 200, 40):  # 40 guesses at a time: each wrong answer waits authFailureDelay
        await asyncio.gather(*(guess(i) for i in range(start, start + 40)))
    t0 = time.perf_counter()
    async with connect(gw.url, local_addr=other) as ws:
        await ws.send(orjson.dumps({"type": "auth", "token": gw.token}).decode())
        ok = orjson.loads(await ws.recv()).get("method") == "auth.ok"
    ms = (time.perf_counter() - t0) * 1000
    try:
        async with connect(gw.url, additional_headers={"Authorization": f"Bearer {gw.token}"}, local_addr=other):
            header_ok = True
    except InvalidStatus:
        header_ok = False
    return (
        f"wrong tokens answered {dict(sorted(codes.items()))}; right token from the same address: "
        f"{'accepted' if ok else 'REFUSED'} in {ms:.0f} ms (frame), {'accepted' if header_ok else 'REFUSED'} (header)"
    )


async def attack_half_open(gw: GatewayProcess) -> str:
    c = await connect_client(gw.url, gw.token)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    socks: list[socket.socket] = []
    flood = asyncio.create_task(half_open_flood(gw.port, socks, n=min(12_000, soft - 200), batch=200))
    codes: dict[str, int] = {}
    peak = 0
    try:
        end = time.monotonic() + 5
        i = 0
        while time.monotonic() < end:
            i += 1
            for method, params in (("sessions.create", {}), ("memory.set", {"key": f"flood-{i}", "value": "v"})):
                try:
                    await c.call(method, params, timeout=10)
                    codes["ok"] = codes.get("ok", 0) + 1
                except RpcError as exc:
                    codes[str(exc.code)] = codes.get(str(exc.code), 0) + 1
            peak = max(peak, proc_stats(gw.proc.pid)["fds"])
            await asyncio.sleep(0.05)
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "during the flood"})
        chat = (await c.run_to_end(sent["runId"], timeout=60))[-1]["method"]
        t0 = time.perf_counter()
        other = await connect_client(gw.url, gw.token, open_timeout=10)
        joined = (time.perf_counter() - t0) * 1000
        await other.close()
    finally:
        flood.cancel()
        opened = len(socks)
        for s in socks:
            s.close()
    await c.close()
    return (
        f"{opened} half-open sockets; gateway fds peak {peak} of {NOFILE}; requests during it: {codes}; "
        f"chat.send → {chat}; a new client got in in {joined:.0f} ms"
    )


async def attack_non_readers(gw: GatewayProcess) -> str:
    loop = asyncio.get_running_loop()
    c = await connect_client(gw.url, gw.token)
    key = (await c.call("sessions.create", {"sessionKey": "n" * 128}))["sessionKey"]  # long key: big deltas
    readers = []
    for _ in range(5):
        s = await loop.run_in_executor(None, raw_ws, gw, 4096)
        s.sendall(frame(orjson.dumps({"type": "auth", "token": gw.token})))
        s.sendall(frame(orjson.dumps({"id": 1, "method": "sessions.subscribe", "params": {"sessionKey": key}})))
        readers.append(s)
    base = (await c.call("system.health"))["connections"]
    peak_rss = 0
    for _ in range(2):
        sent = await c.call("chat.send", {"sessionKey": key, "message": "never stop"})
        await c.run_to_end(sent["runId"], timeout=120)
        peak_rss = max(peak_rss, proc_stats(gw.proc.pid)["rssMB"])

    async def torn_down():
        return (await c.call("system.health"))["connections"] <= base - 5

    t0 = time.perf_counter()
    try:
        await wait_for(torn_down, timeout=30)
        gone = f"torn down {time.perf_counter() - t0:.1f} s after the replies"
    except AssertionError:
        gone = "STILL CONNECTED 30 s after the replies"
    await c.close()
    for s in readers:
        s.close()
    return f"5 subscribers that never read: {gone}; RSS peak {peak_rss} MB"


async def attack_ping_flood(gw: GatewayProcess, bystander: "Bystander") -> str:
    mark = bystander.mark()
    flood = ping_flood(gw.port, 16, 5)
    out, _ = await asyncio.get_running_loop().run_in_executor(None, flood.communicate)
    p50 = statistics.median(bystander.lat[mark:]) * 1000 if len(bystander.lat) > mark else float("nan")
    return f"16 flooding sockets, {int(out)} cut by the gateway; bystander system.health p50 {p50:.1f} ms"


async def attack_corrupt(gw: GatewayProcess, state: Path) -> tuple[str, GatewayProcess]:
    c = await connect_client(gw.url, gw.token)
    await c.call("memory.sync", timeout=120)
    before = (await c.call("memory.status"))["chunks"]
    await c.close()
    gw.signal()
    gw.wait()
    db = state / "agents" / "main" / "memory.sqlite"
    with open(db, "r+b") as fh:
        fh.truncate(100_000)
    gw.start()
    c = await connect_client(gw.url, gw.token)
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "are you there?"})
    chat_ok = (await c.run_to_end(sent["runId"], timeout=60))[-1]["method"] == "chat.final"
    await c.call("memory.sync", timeout=120)
    status = await c.call("memory.status")
    await c.close()
    aside = len(status.get("corrupt", []))
    return (
        f"gateway up, chat {'ok' if chat_ok else 'FAILED'}; index rebuilt: {status['chunks']} chunks "
        f"(before: {before}); {aside} damaged file(s) set aside"
    ), gw


class OutsideReader:
    """Another process's reader of the state dir (a thread of this one): every `every` seconds, each
    SQLite database under `root` opened with the stock sqlite3 module, queried and closed, and each
    -wal/-shm file opened, read and closed as a copying tool would."""

    def __init__(self, root: Path, every: float = 0.1):
        self.root, self.every = root, every
        self.opens = self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            for path in sorted(self.root.rglob("*.sqlite*")):
                try:
                    if path.name.endswith(".sqlite"):
                        conn = sqlite3.connect(path, timeout=5)
                        try:
                            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                        finally:
                            conn.close()
                    elif path.name.endswith(("-wal", "-shm")):
                        with open(path, "rb") as fh:
                            fh.read(4096)
                    else:
                        continue
                    self.opens += 1
                except (OSError, sqlite3.Error):
                    self.errors += 1  # busy, or a file that went away meanwhile: not the gateway's damage

    def __enter__(self) -> "OutsideReader":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


async def attack_outside_reader(gw: GatewayProcess, seconds: float) -> tuple[str, bool]:
    """Attack 5 (see the module docstring) on `gw`, a gateway of its own (see reader_gateway); it is
    killed and started again. → (what happened, whether everything acknowledged was there)."""
    state = gw.state_dir
    sent: dict[str, list[str]] = {}  # session → acknowledged user messages
    finals: dict[str, list[str]] = {}  # session → message ids of replies whose chat.final arrived
    indexed: list[str] = []  # notes whose memory.sync answered after they were written
    deadline = time.monotonic() + seconds

    async def chat(c: Any, key: str) -> None:
        i = 0
        while time.monotonic() < deadline:
            text = f"outside reader round {i} in {key[:8]}: the harbour lamp {i} is violet"
            run = await c.call("chat.send", {"sessionKey": key, "message": text})
            sent[key].append(text)
            end = (await c.run_to_end(run["runId"], timeout=60))[-1]
            if end["method"] == "chat.final":
                finals[key].append(end["params"]["message"]["id"])
            i += 1

    async def write_notes(c: Any) -> None:
        j = 0
        while time.monotonic() < deadline:
            rel = f"memory/reader-{j:04}.md"
            (state / "workspace" / rel).write_text(f"# Reader note {j}\n\nquokka{j}zeta was written at round {j}.\n")
            await c.call("memory.sync", {"force": j % 10 == 9}, timeout=120)
            indexed.append(rel)
            j += 1

    with OutsideReader(state) as reader:
        clients = [await connect_client(gw.url, gw.token) for _ in range(4)]
        keys = [(await clients[i].call("sessions.create"))["sessionKey"] for i in range(3)]
        for key in keys:
            sent[key], finals[key] = [], []
        tasks = [asyncio.create_task(chat(clients[i], keys[i])) for i in range(3)]
        tasks.append(asyncio.create_task(write_notes(clients[3])))
        await asyncio.sleep(seconds)
        unlinked = gw.unlinked_sqlite_files()  # a WAL the outside reader deleted under the gateway
        gw.proc.kill()  # SIGKILL mid-work: whatever was answered before must be on disk
        gw.proc.wait(10)
        await asyncio.gather(*tasks, return_exceptions=True)  # their calls fail on the dead socket
        for c in clients:
            await c.close()
    problems: list[str] = []
    sessions_dir = state / "agents" / "main" / "sessions"
    for key in keys:
        records = [
            orjson.loads(line) for line in (sessions_dir / f"{key}.jsonl").read_bytes().split(b"\n") if line.strip()
        ]  # a torn last line would fail here too: there must be none
        users = Counter(
            r["message"]["content"] for r in records if r.get("type") == "message" and r["message"]["role"] == "user"
        )
        ids = Counter(r["id"] for r in records if r.get("type") == "message")
        problems += [f"{key[:8]}: acknowledged message seen {users[t]}x" for t in sent[key] if users[t] != 1]
        problems += [f"{key[:8]}: reply {m} seen {ids[m]}x" for m in finals[key] if ids[m] != 1]
    db = sqlite3.connect(state / "agents" / "main" / "memory.sqlite")
    try:
        check = db.execute("PRAGMA integrity_check").fetchone()[0]
        files = {r[0] for r in db.execute("SELECT path FROM files")}
        dups = db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM chunks GROUP BY path, start_line, end_line, hash HAVING count(*) > 1)"
        ).fetchone()[0]
    finally:
        db.close()
    lost = [p for p in indexed if p not in files]
    if unlinked:
        problems.append(f"the gateway wrote to unlinked files: {', '.join(unlinked)}")
    if check != "ok":
        problems.append(f"integrity_check: {check}")
    if lost:
        problems.append(f"{len(lost)} indexed notes lost ({lost[0]} …)")
    if dups:
        problems.append(f"{dups} duplicated chunks")
    gw.start(timeout=120)
    c = await connect_client(gw.url, gw.token)
    status = await c.call("memory.status")
    await c.close()
    acked = sum(len(v) for v in sent.values())
    result = (
        f"{reader.opens} outside opens ({reader.errors} busy); SIGKILL after {acked} messages, "
        f"{sum(len(v) for v in finals.values())} replies, {len(indexed)} notes synced: "
        + ("; ".join(problems) if problems else "all there, integrity_check ok")
        + f"; restarted: {status['files']} files indexed"
    )
    return result, not problems


def reader_gateway(state: Path, embeddings: str) -> GatewayProcess:
    """The gateway attack 5 works on: its own state dir, offline replies, 200 notes."""
    state.mkdir()
    (state / "config.toml").write_text(
        f'[memory.embeddings]\nprovider = "{embeddings}"\n[chat]\nofflineDeltaDelay = 0.005\n'
    )
    notes = state / "workspace" / "memory"
    notes.mkdir(parents=True)
    for i in range(200):
        (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\n" + f"some words about topic {i}. " * 50)
    return GatewayProcess(state, env={"OPENAI_BASE_URL": ""}).start(timeout=120)


async def _sync_error(c: Any) -> RpcError | None:
    try:
        await c.call("memory.sync", timeout=120)
    except RpcError as exc:
        return exc
    return None


async def attack_scan(gw: GatewayProcess, state: Path) -> str:
    """Issue 29.2: a scan that cannot read the workspace must fail the sync, never remove notes."""
    import resource

    c = await connect_client(gw.url, gw.token)
    await c.call("memory.sync", timeout=120)
    files = (await c.call("memory.status"))["files"]
    out = []
    soft, hard = resource.prlimit(gw.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(gw.proc.pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{gw.proc.pid}/fd")), hard))
    try:
        err = await _sync_error(c)
    finally:
        resource.prlimit(gw.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
    out.append(f"EMFILE: {err.code} {err.data.get('errno')}" if err else "EMFILE: sync SUCCEEDED")
    ws = state / "workspace"
    ws.rename(ws.with_name("workspace.away"))
    try:
        err = await _sync_error(c)
    finally:
        ws.with_name("workspace.away").rename(ws)
    out.append(f"workspace gone: {err.code} {err.data.get('errno')}" if err else "workspace gone: sync SUCCEEDED")
    share = ws.with_name("share")  # the share unmounted: its mount point stays, empty
    share.mkdir()
    for p in list(ws.iterdir()):
        p.rename(share / p.name)
    try:
        err = await _sync_error(c)
    finally:
        for p in list(share.iterdir()):
            p.rename(ws / p.name)
        share.rmdir()
    out.append(f"mount point empty: {err.code} {err.data.get('errno')}" if err else "mount point empty: sync SUCCEEDED")
    mem = ws / "memory"
    mem.rename(ws / "memory.away")
    try:
        sync = asyncio.ensure_future(c.call("memory.sync", timeout=120))
        await asyncio.sleep(0.3)
    finally:
        (ws / "memory.away").rename(mem)
    out.append(f"memory/ away 0.3 s: removed {(await sync)['removed']}")
    stats = await c.call("memory.sync", timeout=120)
    after = (await c.call("memory.status"))["files"]
    await c.close()
    if after != files or stats["removed"]:
        raise AssertionError(f"notes lost: {files} → {after} files; " + "; ".join(out))
    return "; ".join(out) + f"; files {files} → {after}"


async def attack_vectors(gw: GatewayProcess, state: Path, script: Callable[[list], Awaitable[None]]) -> str:
    """Issue 29.3: NaN then zero vectors once from the embeddings server must not poison search."""
    c = await connect_client(gw.url, gw.token)
    await c.call("memory.sync", timeout=120)
    notes = state / "workspace" / "memory"
    out = []
    for kind in ("nan", "zero"):
        (notes / f"chaos-{kind}.md").write_text(f"# {kind}\n\nThe {kind} heron nests by the quarry lake.\n")
        await script(["vectors", kind])
        await c.call("memory.sync", timeout=120)
        st = await c.call("memory.status")
        modes = []
        for mode in ("hybrid", "vector"):
            try:
                res = await c.call("memory.search", {"query": f"{kind} heron quarry", "mode": mode})
                modes.append(f"{mode} ok{' (degraded)' if res.get('degraded') else ''}")
            except RpcError as exc:
                modes.append(f"{mode} FAILED {exc.code}")
        refused = "refused" if "none were stored" in st["embeddings"].get("error", "") else "NOT refused"
        out.append(f"{kind}: {refused}, {st['vector']['missing']} without vectors, {', '.join(modes)}")
    await c.call("memory.sync", timeout=120)  # healthy again
    st = await c.call("memory.status")
    res = await c.call("memory.search", {"query": "nan heron quarry", "mode": "vector"})
    await c.close()
    healed = (
        st["vector"]["missing"] == 0
        and not res.get("degraded")
        and res["results"]
        and res["results"][0]["path"] == "memory/chaos-nan.md"
    )
    if "FAILED" in " ".join(out) or not healed:
        raise AssertionError("; ".join(out) + f"; healed: {healed}")
    return "; ".join(out) + "; healthy again: 0 without vectors, vector search finds the notes"


ATTACKS = (
    "agents",
    "big-batch",
    "runaway",
    "auth",
    "corrupt",
    "reader",
    "scan",
    "vectors",
    "half-open",
    "non-readers",
    "ping-flood",
    "sse-flood",
    "wrong-tokens",
    "huge-v1",
)


async def main_async(args: argparse.Namespace) -> int:
    # The fake upstream runs in its own process: in this one it would share the bystander's GIL.
    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--reply", "runaway ", "--repeat", "250000"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    base_url = fake.stdout.readline().strip()

    async def script(behaviour: list) -> None:
        fake.stdin.write(json.dumps(behaviour) + "\n")
        fake.stdin.flush()
        await asyncio.to_thread(fake.stdout.readline)  # "scripted"

    try:
        return await _run(args, base_url, script)
    finally:
        fake.stdin.close()
        fake.wait(10)


def _row(
    name: str,
    result: str,
    t0: float,
    before: dict,
    gw: GatewayProcess,
    p99_ms: float | None,
    http: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """`http`: the HTTP bystander's p99 (ms) and failed requests during the attack."""
    return {
        "attack": name,
        "result": result,
        "seconds": round(time.perf_counter() - t0, 1),
        "before": before,
        "after": proc_stats(gw.proc.pid) if gw.proc is not None and gw.proc.poll() is None else {},
        "bystanderP99Ms": p99_ms,
        "httpBystanderP99Ms": None if http is None else http[0],
        "httpBystanderFailures": None if http is None else http[1],
    }


async def _run(args: argparse.Namespace, base_url: str, script: Callable[[list], Awaitable[None]]) -> int:
    rows: list[dict[str, Any]] = []
    only = args.only
    if "vectors" in only and args.embeddings == "none":
        args.embeddings = "openai"  # the fake server's embeddings, which the attack scripts
    with tempfile.TemporaryDirectory(prefix="jarvis-chaos-") as tmp:
        failed, bystander, owner = False, None, None
        if only - {"reader"}:
            state = Path(tmp) / "state"
            state.mkdir()
            openai = (
                f'baseUrl = "{base_url}"\napiKey = "chaos"\ndims = 64\nmaxRetries = 0\n'
                if args.embeddings == "openai"
                else ""
            )
            (state / "config.toml").write_text(
                f'[memory.embeddings]\nprovider = "{args.embeddings}"\n{openai}'
                "[chat]\nofflineDeltaDelay = 0.0\nmaxReplyChars = 200000\n"
                # Send buffers small enough that a subscriber which stops reading during a long reply
                # goes over maxSendBuffer + maxReplyBytes (with the kernel's buffers): a slow consumer.
                "[server]\nmaxSendBuffer = 262144\nmaxReplyBytes = 2228224\n"
            )
            notes = state / "workspace" / "memory"
            notes.mkdir(parents=True)
            for i in range(200):
                (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\n" + f"some words about topic {i}. " * 50)
            gw = GatewayProcess(
                state,
                env={"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "chaos", "JARVIS_CHAT_MODEL": "fake"},
                nofile=NOFILE,
            )
            gw.start(timeout=120)
            bystander = Bystander()
            await bystander.start(gw)
            owner = HttpBystander()
            await owner.start(gw)
            attacks: list[tuple[str, str, Callable[[], Awaitable[str]]]] = [
                ("agents", "1. agents", lambda: attack_agents(gw, args.agents)),
                ("big-batch", "3. big batch", lambda: attack_big_replies(gw)),
                ("runaway", "3. runaway upstream", lambda: attack_runaway(gw)),
                ("auth", "4. auth lockout", lambda: attack_auth(gw)),
                ("scan", "6. unreadable scan", lambda: attack_scan(gw, state)),
                ("vectors", "7. NaN/zero vectors", lambda: attack_vectors(gw, state, script)),
                ("half-open", "8. half-open flood", lambda: attack_half_open(gw)),
                ("non-readers", "9. non-readers", lambda: attack_non_readers(gw)),
                ("ping-flood", "10. pre-auth pings", lambda: attack_ping_flood(gw, bystander)),
                ("sse-flood", "11. idle SSE flood", lambda: attack_sse_flood(gw)),
                ("wrong-tokens", "12. wrong-token flood", lambda: attack_wrong_tokens(gw)),
                ("huge-v1", "13. huge /v1 requests", lambda: attack_huge_v1(gw)),
            ]
            for key, name, run in attacks:
                if key not in only:
                    continue
                before = proc_stats(gw.proc.pid)
                mark, http_mark, http_failed = bystander.mark(), owner.mark(), owner.failures
                t0 = time.perf_counter()
                try:
                    result = await run()
                except Exception as exc:  # an attack that breaks the gateway is a finding, not a crash here
                    result, failed = f"BROKE: {type(exc).__name__}: {exc}", True
                http = (round(p99(owner.lat[http_mark:]), 2), owner.failures - http_failed)
                rows.append(_row(name, result, t0, before, gw, round(p99(bystander.lat[mark:]), 2), http))
            await bystander.stop()
            await owner.stop()
            if "corrupt" in only:
                before = proc_stats(gw.proc.pid)
                t0 = time.perf_counter()
                try:
                    result, gw = await attack_corrupt(gw, state)
                except Exception as exc:
                    result, failed = f"BROKE: {type(exc).__name__}: {exc}", True
                rows.append(_row("2. corrupt index", result, t0, before, gw, None))
            gw.signal()
            gw.wait()
            failed = failed or bystander.failures > 0 or owner.failures > 0
        if "reader" in only:
            # its own gateway, killed at the end; the fake server's embeddings are not needed there
            other = reader_gateway(
                Path(tmp) / "reader-state", "none" if args.embeddings == "openai" else args.embeddings
            )
            watcher = Bystander()
            await watcher.start(other)
            before = proc_stats(other.proc.pid)
            t0 = time.perf_counter()
            try:
                result, ok = await attack_outside_reader(other, args.reader_seconds)
                failed = failed or not ok
            except Exception as exc:
                result, failed = f"BROKE: {type(exc).__name__}: {exc}", True
            await watcher.stop()  # its calls failed while the gateway was down (the SIGKILL): not counted
            rows.append(_row("5. outside reader", result, t0, before, other, round(p99(watcher.lat), 2)))
            other.kill()

    print(f"{'attack':<22} {'RSS MB':>11} {'fds':>11} {'threads':>9} {'ws p99':>7} {'http p99':>8} {'fail':>4}  result")
    for r in rows:
        b, a = r["before"], r["after"]
        p = "—" if r["bystanderP99Ms"] is None else f"{r['bystanderP99Ms']:.1f}"
        hp = "—" if r.get("httpBystanderP99Ms") is None else f"{r['httpBystanderP99Ms']:.1f}"
        hf = "—" if r.get("httpBystanderFailures") is None else str(r["httpBystanderFailures"])
        print(
            f"{r['attack']:<22} {b.get('rssMB', 0):>4} → {a.get('rssMB', 0):<4} {b.get('fds', 0):>4} → "
            f"{a.get('fds', 0):<4} {b.get('threads', 0):>3} → {a.get('threads', 0):<3} {p:>7} {hp:>8} {hf:>4}  "
            f"{r['result']}"
        )
    failures = bystander.failures if bystander is not None else 0
    print(f"bystander: {failures} failed health calls (WebSocket)", end="")
    if owner is not None:
        print(f", {owner.failures} failed GET /v1/models (HTTP: {dict(owner.statuses)})")
    else:
        print()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"rows": rows, "bystanderFailures": failures, "agents": args.agents, "embeddings": args.embeddings},
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=300, help="distinct agents to create (default 300)")
    ap.add_argument(
        "--embeddings",
        choices=("none", "local", "openai"),
        default="none",
        help="memory embeddings of the gateway under attack (default none: FTS only, quicker; "
        "openai: the fake server's, chosen when the vectors attack runs)",
    )
    ap.add_argument(
        "--only",
        default="",
        metavar="NAME[,NAME]",
        help=f"run only these attacks, of: {', '.join(ATTACKS)} (default all)",
    )
    ap.add_argument(
        "--reader-seconds",
        type=float,
        default=20.0,
        help="how long the outside reader attack works before its SIGKILL (default 20)",
    )
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "chaos.json"))
    args = ap.parse_args()
    args.only = set(args.only.split(",")) if args.only else set(ATTACKS)
    unknown = args.only - set(ATTACKS)
    if unknown:
        ap.error(f"--only: unknown attack(s) {', '.join(sorted(unknown))}; choose from {', '.join(ATTACKS)}")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
