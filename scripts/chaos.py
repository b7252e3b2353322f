#!/usr/bin/env python3
"""Chaos: the attacks of issue 15 against a real `jarvis serve`, with a bystander measuring the damage.

    .venv/bin/python scripts/chaos.py [--agents 300] [--embeddings none|local] [--out FILE]

Starts `jarvis serve` as a subprocess on loopback in a temporary state dir (and a local fake OpenAI
server for the runaway upstream). A bystander connection calls `system.health` every 20 ms all along;
each attack reports what happened, the gateway's RSS, open descriptors and threads before and after,
and the bystander's p99 during the attack:

1. agents      `sessions.create` in N distinct agents (each opens its index, watcher and threads)
2. corrupt     the memory index truncated to 100 KB, the gateway restarted on it
3. big replies a 50-request batch of `sessions.history` on a session of big messages; a runaway
               upstream streaming 2 MB into one reply
4. auth        200 wrong tokens from 127.0.0.2, then the right token from there

and those of issue 29 (the gateway runs with the unit's LimitNOFILE=8192):

5. half-open   non-blocking connects that never send a byte, as fast as they go for 5 s, while an
               authenticated client creates sessions, chats and sets memories; then a new client connects
6. non-readers 5 subscribers that stop reading during two long replies: torn down, memory released?
6. ping flood  16 sockets that upgrade, never authenticate and send pings as fast as they can

`--only half-open,ping-flood` runs only the named attacks (names: agents, big-batch, runaway, auth,
corrupt, half-open, non-readers, ping-flood).

Prints a table, writes JSON (default bench-results/chaos.json); exit 1 if an attack broke something.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
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
    return {"rssMB": round(fields.get("VmRSS", 0) / 1024), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": fields.get("Threads", 0)}


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
    return (f"{ok} created, {refused} refused (-32009 agents.max), {other} other errors; "
            f"{health['agents']['open']} open (maxOpen {health['agents']['maxOpen']})")


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
    return (f"{final['method']} with {chars} chars, truncated={final['params'].get('truncated', False)}; "
            f"history readable: {len(history['messages'])} messages")


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
    return (f"wrong tokens answered {dict(sorted(codes.items()))}; right token from the same address: "
            f"{'accepted' if ok else 'REFUSED'} in {ms:.0f} ms (frame), {'accepted' if header_ok else 'REFUSED'} (header)")


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
    return (f"{opened} half-open sockets; gateway fds peak {peak} of {NOFILE}; requests during it: {codes}; "
            f"chat.send → {chat}; a new client got in in {joined:.0f} ms")


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
    return (f"gateway up, chat {'ok' if chat_ok else 'FAILED'}; index rebuilt: {status['chunks']} chunks "
            f"(before: {before}); {aside} damaged file(s) set aside"), gw


async def main_async(args: argparse.Namespace) -> int:
    # The fake upstream runs in its own process: in this one it would share the bystander's GIL.
    fake = subprocess.Popen([sys.executable, "-m", "tests.fake_openai", "--reply", "runaway ", "--repeat",
                             "250000"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    base_url = fake.stdout.readline().strip()
    try:
        return await _run(args, base_url)
    finally:
        fake.stdin.close()
        fake.wait(10)


async def _run(args: argparse.Namespace, base_url: str) -> int:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jarvis-chaos-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        # Send buffers small enough that a subscriber which stops reading during a long reply goes over
        # maxSendBuffer + maxReplyBytes (with the kernel's buffers) and is flagged a slow consumer.
        (state / "config.toml").write_text(
            f'[memory.embeddings]\nprovider = "{args.embeddings}"\n'
            '[chat]\nofflineDeltaDelay = 0.0\nmaxReplyChars = 200000\n'
            '[server]\nmaxSendBuffer = 262144\nmaxReplyBytes = 2228224\n')
        notes = state / "workspace" / "memory"
        notes.mkdir(parents=True)
        for i in range(200):
            (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\n" + f"some words about topic {i}. " * 50)
        gw = GatewayProcess(state, env={"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "chaos",
                                        "JARVIS_CHAT_MODEL": "fake"}, nofile=NOFILE)
        gw.start(timeout=120)
        bystander = Bystander()
        await bystander.start(gw)
        attacks: list[tuple[str, str, Callable[[], Awaitable[str]]]] = [
            ("agents", "1. agents", lambda: attack_agents(gw, args.agents)),
            ("big-batch", "3. big batch", lambda: attack_big_replies(gw)),
            ("runaway", "3. runaway upstream", lambda: attack_runaway(gw)),
            ("auth", "4. auth lockout", lambda: attack_auth(gw)),
            ("half-open", "5. half-open flood", lambda: attack_half_open(gw)),
            ("non-readers", "6. non-readers", lambda: attack_non_readers(gw)),
            ("ping-flood", "6. pre-auth pings", lambda: attack_ping_flood(gw, bystander)),
        ]
        failed = False
        for key, name, run in attacks:
            if key not in args.only:
                continue
            before = proc_stats(gw.proc.pid)
            mark = bystander.mark()
            t0 = time.perf_counter()
            try:
                result = await run()
            except Exception as exc:  # an attack that breaks the gateway is a finding, not a crash here
                result, failed = f"BROKE: {type(exc).__name__}: {exc}", True
            rows.append({"attack": name, "result": result, "seconds": round(time.perf_counter() - t0, 1),
                         "before": before, "after": proc_stats(gw.proc.pid),
                         "bystanderP99Ms": round(p99(bystander.lat[mark:]), 2)})
        await bystander.stop()
        if "corrupt" in args.only:
            before = proc_stats(gw.proc.pid)
            t0 = time.perf_counter()
            try:
                result, gw = await attack_corrupt(gw, state)
            except Exception as exc:
                result, failed = f"BROKE: {type(exc).__name__}: {exc}", True
            rows.append({"attack": "2. corrupt index", "result": result, "seconds": round(time.perf_counter() - t0, 1),
                         "before": before, "after": proc_stats(gw.proc.pid) if gw.proc.poll() is None else {},
                         "bystanderP99Ms": None})
        gw.signal()
        gw.wait()
        failed = failed or bystander.failures > 0

    print(f"{'attack':<22} {'RSS MB':>11} {'fds':>11} {'threads':>9} {'p99 ms':>7}  result")
    for r in rows:
        b, a = r["before"], r["after"]
        p = "—" if r["bystanderP99Ms"] is None else f"{r['bystanderP99Ms']:.1f}"
        print(f"{r['attack']:<22} {b.get('rssMB', 0):>4} → {a.get('rssMB', 0):<4} {b.get('fds', 0):>4} → "
              f"{a.get('fds', 0):<4} {b.get('threads', 0):>3} → {a.get('threads', 0):<3} {p:>7}  {r['result']}")
    print(f"bystander: {bystander.failures} failed health calls")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "bystanderFailures": bystander.failures,
                               "agents": args.agents, "embeddings": args.embeddings}, indent=2))
    print(f"wrote {out}")
    return 1 if failed else 0


ATTACKS = ("agents", "big-batch", "runaway", "auth", "corrupt", "half-open", "non-readers", "ping-flood")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=300, help="distinct agents to create (default 300)")
    ap.add_argument("--embeddings", choices=("none", "local"), default="none",
                    help="memory embeddings of the gateway under attack (default none: FTS only, quicker)")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "chaos.json"))
    ap.add_argument("--only", default=",".join(ATTACKS),
                    help=f"comma-separated attacks to run (default all: {','.join(ATTACKS)})")
    args = ap.parse_args()
    args.only = set(args.only.split(","))
    unknown = args.only - set(ATTACKS)
    if unknown:
        ap.error(f"--only: unknown attack(s) {', '.join(sorted(unknown))}; choose from {', '.join(ATTACKS)}")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
