#!/usr/bin/env python3
"""Soak: many connections, concurrent chats and reads against a real gateway; then prove nothing was lost.

    .venv/bin/python scripts/soak.py [--seconds 60] [--connections 200] [--sessions 50] [--no-memory] [--out FILE]

Starts `jarvis serve` as a subprocess on loopback in a temporary state dir (memory on, with FTS-only
embeddings, when gateway.memory works here; `--no-memory` or a failing import turns it off). Opens
`--connections` connections: `--sessions` of them each own a session and chat in it with the offline
responder (send, wait for the terminal event, sometimes read the history, repeat); as many others
subscribe to one of those sessions (fan-out); the rest mix `system.health`, `sessions.list`,
`sessions.history` and (memory on) `memory.search`. Bounded by `--seconds` and by a cap on requests.

At the end, with the gateway stopped, it checks that every acknowledged user message and every
chat.final reply is in its transcript exactly once and in order, that every chat.send got exactly one
terminal event (on its own connection and on each subscriber), and prints throughput, p50/p99 per
method and errors by code. Writes JSON (default bench-results/soak.json); exit 1 if a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.sessions import transcript as tx  # noqa: E402
from tests.helpers import Client, GatewayProcess, RpcError, connect_client  # noqa: E402

TERMINAL = ("chat.final", "chat.error", "chat.aborted")
MAX_REQUESTS = 2_000_000  # a hard cap besides the time bound


def memory_works() -> bool:
    try:
        import gateway.memory.service  # noqa: F401
        import gateway.methods.memory  # noqa: F401
    except Exception:
        return False
    return True


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Stats:
    def __init__(self) -> None:
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.errors: Counter[str] = Counter()
        self.requests = 0

    async def call(self, c: Client, method: str, params: Any = None, timeout: float = 30) -> Any:
        self.requests += 1
        t0 = time.perf_counter()
        try:
            msg = await c.request(method, params, timeout)
        except TimeoutError:
            self.errors[f"{method}:timeout"] += 1
            raise
        self.lat[method].append(time.perf_counter() - t0)
        if "error" in msg:
            self.errors[f"{method}:{msg['error']['code']}"] += 1
            raise RpcError(msg["error"])
        return msg["result"]


class Ledger:
    def __init__(self) -> None:
        self.turns: dict[str, list[dict[str, Any]]] = defaultdict(list)  # key -> [{runId, user, final?}]
        self.terminals: Counter[str] = Counter()  # runId -> terminal events seen by the sender
        self.sub_terminals: dict[str, Counter[str]] = defaultdict(Counter)  # subscriber -> runId -> n
        self.sub_of: dict[str, str] = {}  # subscriber id -> session key
        self.outcomes: Counter[str] = Counter()


async def chatter(
    url: str,
    token: str,
    stats: Stats,
    ledger: Ledger,
    key: str,
    stop_at: float,
    rng: random.Random,
    keys: list[str],
    memory: bool,
) -> None:
    c = await connect_client(url, token)
    try:
        n = 0
        while time.monotonic() < stop_at and stats.requests < MAX_REQUESTS:
            n += 1
            text = f"soak {key[:8]} turn {n} " + " ".join(
                rng.choices(["alpha", "bravo", "delta", "kilo"], k=rng.randint(1, 12))
            )
            t0 = time.perf_counter()
            try:
                r = await stats.call(c, "chat.send", {"sessionKey": key, "message": text})
            except (RpcError, TimeoutError):
                await asyncio.sleep(0.2)
                continue
            turn = {"runId": r["runId"], "user": text}
            ledger.turns[key].append(turn)
            while True:
                ev = await asyncio.wait_for(c.events.get(), 60)
                p = ev["params"]
                if ev["method"] in TERMINAL:
                    ledger.terminals[p["runId"]] += 1
                    if p["runId"] == r["runId"]:
                        ledger.outcomes[ev["method"]] += 1
                        if ev["method"] == "chat.final":
                            turn["final"] = p["message"]["id"]
                            turn["finalContent"] = p["message"]["content"]
                            stats.lat["chat.send→final"].append(time.perf_counter() - t0)
                        break
            if rng.random() < 0.3:
                await stats.call(c, "sessions.history", {"sessionKey": key, "limit": 50})
            if memory and rng.random() < 0.1:
                await stats.call(c, "memory.search", {"query": "alpha kilo", "k": 5})
            await asyncio.sleep(rng.uniform(0, 0.2))
        # drain: any late duplicate terminal would show here
        await asyncio.sleep(0.5)
        while not c.events.empty():
            ev = c.events.get_nowait()
            if ev["method"] in TERMINAL:
                ledger.terminals[ev["params"]["runId"]] += 1
    finally:
        await c.close()


async def subscriber(
    url: str, token: str, stats: Stats, ledger: Ledger, key: str, sid: str, done: asyncio.Event
) -> None:
    c = await connect_client(url, token)
    try:
        await stats.call(c, "sessions.subscribe", {"sessionKey": key})
        ledger.sub_of[sid] = key
        while not (done.is_set() and c.events.empty()):
            try:
                ev = await asyncio.wait_for(c.events.get(), 0.5)
            except TimeoutError:
                continue
            if ev["method"] in TERMINAL:
                ledger.sub_terminals[sid][ev["params"]["runId"]] += 1
    finally:
        await c.close()


async def reader(
    url: str, token: str, stats: Stats, keys: list[str], stop_at: float, rng: random.Random, memory: bool
) -> None:
    c = await connect_client(url, token)
    try:
        while time.monotonic() < stop_at and stats.requests < MAX_REQUESTS:
            roll = rng.random()
            try:
                if roll < 0.4:
                    await stats.call(c, "system.health")
                elif roll < 0.6:
                    await stats.call(c, "sessions.list", {"limit": 20})
                elif roll < 0.85 or not memory:
                    await stats.call(c, "sessions.history", {"sessionKey": rng.choice(keys), "limit": 20})
                else:
                    await stats.call(
                        c, "memory.search", {"query": rng.choice(["alpha", "bravo delta", "soak turn"]), "k": 5}
                    )
            except (RpcError, TimeoutError):
                pass
            await asyncio.sleep(rng.uniform(0.05, 0.25))
    finally:
        await c.close()


def verify(sessions_dir: Path, ledger: Ledger) -> list[str]:
    problems: list[str] = []
    for key, turns in ledger.turns.items():
        recs = [r.data for r in tx.iter_records(sessions_dir / f"{key}.jsonl")]
        msgs = [r for r in recs if r.get("type") == "message"]
        want: list[tuple[str, str]] = []
        for t in turns:
            want.append(("user", t["runId"] + "\0" + t["user"]))
            if "final" in t:
                want.append(("assistant", t["final"] + "\0" + t["finalContent"]))
        got = []
        for m in msgs:
            if m["message"]["role"] == "user":
                got.append(("user", m.get("runId", "") + "\0" + m["message"]["content"]))
            else:
                got.append(("assistant", m["id"] + "\0" + m["message"]["content"]))
        if got != want:
            problems.append(f"{key}: transcript has {len(got)} messages, acknowledged {len(want)} (or order differs)")
    acked = [t["runId"] for turns in ledger.turns.values() for t in turns]
    bad = [r for r in acked if ledger.terminals[r] != 1]
    if bad:
        problems.append(f"{len(bad)} runs without exactly one terminal event on the sender, e.g. {bad[:3]}")
    for sid, counts in ledger.sub_terminals.items():
        key = ledger.sub_of[sid]
        runs = [t["runId"] for t in ledger.turns[key]]
        extra = [r for r, n in counts.items() if n != 1]
        if extra:
            problems.append(f"subscriber {sid}: {len(extra)} runs with {set(counts[r] for r in extra)} terminals")
        missing = [r for r in runs if counts[r] == 0]
        if missing:
            problems.append(f"subscriber {sid}: missed terminal of {len(missing)} runs")
    return problems


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    memory = not args.no_memory and memory_works()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="jarvis-soak-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        cfg = f"[server]\nmaxConnections = {max(256, args.connections + 16)}\n[chat]\nofflineDeltaDelay = 0.01\n"
        cfg += (
            '[memory]\nenabled = true\n[memory.embeddings]\nprovider = "none"\n'
            if memory
            else "[memory]\nenabled = false\n"
        )
        (state / "config.toml").write_text(cfg)
        if memory:
            notes = state / "workspace" / "memory"
            notes.mkdir(parents=True)
            for i in range(50):
                (notes / f"n{i}.md").write_text(f"# note {i}\n\nalpha bravo {i} kilo delta soak turn notes\n")
        gw = GatewayProcess(state, env={"OPENAI_BASE_URL": ""}).start()
        stats, ledger = Stats(), Ledger()
        try:
            setup = await connect_client(gw.url, gw.token)
            keys = [
                (await setup.call("sessions.create", {"label": f"soak {i}"}))["sessionKey"]
                for i in range(args.sessions)
            ]
            await setup.close()
            rss_start = rss_kib(gw.proc.pid)
            n_sub = min(args.sessions, max(0, args.connections - args.sessions))
            n_read = max(0, args.connections - args.sessions - n_sub)
            t0 = time.monotonic()
            stop_at = t0 + args.seconds
            done = asyncio.Event()
            subs = [
                asyncio.create_task(subscriber(gw.url, gw.token, stats, ledger, keys[i], f"s{i}", done))
                for i in range(n_sub)
            ]
            await asyncio.sleep(1.0)  # subscriptions in place before the first send
            workers = [
                chatter(gw.url, gw.token, stats, ledger, keys[i], stop_at, random.Random(rng.random()), keys, memory)
                for i in range(args.sessions)
            ]
            workers += [
                reader(gw.url, gw.token, stats, keys, stop_at, random.Random(rng.random()), memory)
                for _ in range(n_read)
            ]
            health_conns = 0

            async def peek() -> None:
                nonlocal health_conns
                c = await connect_client(gw.url, gw.token)
                await asyncio.sleep(min(5, args.seconds / 2))
                health_conns = (await c.call("system.health"))["connections"]
                await c.close()

            results = await asyncio.gather(*workers, peek(), return_exceptions=True)
            worker_failures = [repr(r) for r in results if isinstance(r, BaseException)]
            elapsed = time.monotonic() - t0
            await asyncio.sleep(1.0)
            done.set()
            await asyncio.wait_for(asyncio.gather(*subs, return_exceptions=True), 30)
            rss_end = rss_kib(gw.proc.pid)
            gw.signal()
            code = gw.wait(30)
        finally:
            gw.kill()
        problems = verify(state / "agents" / "main" / "sessions", ledger)
        problems += [f"worker failed: {f}" for f in worker_failures]
        if code != 0:
            problems.append(f"gateway exited with {code}")
        log = gw.log.read_text(errors="replace")
        if "Traceback" in log:
            problems.append("a traceback in the gateway log")
    total = sum(len(v) for k, v in stats.lat.items() if "→" not in k)
    return {
        "seconds": round(elapsed, 1),
        "connections": args.connections,
        "connectionsSeenByServer": health_conns,
        "sessions": args.sessions,
        "subscribers": n_sub,
        "readers": n_read,
        "memory": memory,
        "requests": total,
        "rps": round(total / elapsed, 1),
        "chatRuns": sum(len(t) for t in ledger.turns.values()),
        "outcomes": dict(ledger.outcomes),
        "latencyMs": {
            m: {"n": len(v), "p50": round(pct(v, 50) * 1000, 1), "p99": round(pct(v, 99) * 1000, 1)}
            for m, v in sorted(stats.lat.items())
        },
        "errorsByCode": dict(stats.errors),
        "rssKiB": {"start": rss_start, "end": rss_end},
        "problems": problems,
        "ok": not problems,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "soak.json"))
    args = ap.parse_args()
    args.seconds = max(1.0, min(args.seconds, 3600))
    args.connections = max(args.sessions, min(args.connections, 1000))
    res = asyncio.run(soak(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
