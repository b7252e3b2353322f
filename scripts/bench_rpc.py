#!/usr/bin/env python3
"""RPC throughput and latency of a real gateway, measured from a separate client process.

    .venv/bin/python scripts/bench_rpc.py [--connections 50] [--seconds 20] [--depth 4] [--out FILE]

Phase 1: N connections issue `system.health` for S seconds, each keeping `depth` requests in flight;
prints requests/s and p50/p99 latency — first against a bare websockets + orjson echo server (a
subprocess answering each frame with a fixed result: the floor any server on this stack pays), then
against the gateway, with the same client, and prints the gateway's throughput as a ratio of it and its CPU
time per request (which the load of a shared machine moves far less than latencies). Phase 2: a chat streamed from a local OpenAI-compatible server
(in this process) through the gateway; prints the added latency of a `chat.delta` from the moment the
provider wrote the chunk to the moment the client received it. The gateway runs as a subprocess
(`jarvis serve`, memory off, offline defaults otherwise). Writes JSON (default bench-results/rpc.json).

`--against REV` (repeatable; `--rounds`, `--no-tree`): the same bench over REV's gateway, alternating with
this working tree's, and the ratios of each figure (scripts/bench_against.py says how), e.g.

    .venv/bin/python scripts/bench_rpc.py --against 8cfea94 --seconds 5 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_against  # noqa: E402
import orjson  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.helpers import GatewayProcess, connect_client  # noqa: E402


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# Handshakes at once while the connections are opened (before the clock starts): the gateway drops the
# oldest of more than server.maxPendingPerAddress (32) sockets mid-handshake from one address.
HANDSHAKES_AT_ONCE = 16


async def health_load(url: str, token: str, connections: int, seconds: float, depth: int) -> dict:
    latencies: list[float] = []
    errors = 0
    handshakes = asyncio.Semaphore(HANDSHAKES_AT_ONCE)

    async def opened():
        async with handshakes:
            return await connect(
                url, additional_headers={"Authorization": f"Bearer {token}"}, compression=None, max_queue=None
            )

    sockets = await asyncio.gather(*(opened() for _ in range(connections)))
    stop_at = time.monotonic() + seconds

    async def one_connection(ws) -> None:
        nonlocal errors
        async with ws:
            sent: dict[int, float] = {}
            next_id = 0

            async def send_one() -> None:
                nonlocal next_id
                next_id += 1
                sent[next_id] = time.perf_counter()
                await ws.send(b'{"id":%d,"method":"system.health"}' % next_id, text=True)

            for _ in range(depth):
                await send_one()
            while sent:
                msg = orjson.loads(await ws.recv())
                t0 = sent.pop(msg["id"])
                latencies.append(time.perf_counter() - t0)
                if "error" in msg:
                    errors += 1
                if time.monotonic() < stop_at:
                    await send_one()

    t0 = time.monotonic()
    await asyncio.gather(*(one_connection(ws) for ws in sockets))
    elapsed = time.monotonic() - t0
    return {
        "connections": connections,
        "depth": depth,
        "seconds": round(elapsed, 2),
        "requests": len(latencies),
        "errors": errors,
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(pct(latencies, 50) * 1000, 2),
        "p99_ms": round(pct(latencies, 99) * 1000, 2),
    }


ECHO_SERVER = r"""
import asyncio, orjson, sys
from websockets.asyncio.server import serve

RESULT = {"status": "ok", "version": "echo", "uptimeS": 0.0, "connections": 0}

async def handler(ws):
    async for message in ws:
        req = orjson.loads(message)
        await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": req.get("id"), "result": RESULT}), text=True)

async def main():
    async with serve(handler, "127.0.0.1", 0, compression=None, max_queue=64) as server:
        print("listening on ws://127.0.0.1:%d/" % next(iter(server.sockets)).getsockname()[1], flush=True)
        await asyncio.Future()

asyncio.run(main())
"""


async def echo_baseline(connections: int, seconds: float, depth: int) -> dict:
    """The same load against a bare websockets + orjson echo server in its own process."""
    proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        line = await asyncio.to_thread(proc.stdout.readline)
        port = int(re.search(r":(\d+)/", line).group(1))
        return await health_load(f"ws://127.0.0.1:{port}/", "unused", connections, seconds, depth)
    finally:
        proc.terminate()
        proc.wait(10)


async def delta_latency(state: Path, words: int, chunk_delay: float) -> dict:
    with FakeOpenAI() as api:
        api.reply = " ".join(f"w{i}" for i in range(words))
        api.chunk_delay = chunk_delay
        (state / "config.toml").write_text("[memory]\nenabled = false\n")
        gp = GatewayProcess(state, env={"OPENAI_BASE_URL": api.base_url}).start()
        try:
            c = await connect_client(gp.url, gp.token)
            key = (await c.call("sessions.create"))["sessionKey"]
            added: list[float] = []
            for _ in range(5):
                api.chunk_times.clear()
                await c.call("chat.send", {"sessionKey": key, "message": "stream please"})
                received: list[float] = []
                while True:
                    ev = await c.next_event(timeout=30)
                    if ev["method"] == "chat.delta":
                        received.append(time.monotonic())
                    if ev["method"] in ("chat.final", "chat.error"):
                        break
                added += [r - s for r, s in zip(received, api.chunk_times)]
            await c.close()
        finally:
            gp.signal()
            gp.wait(20)
    return {
        "deltas": len(added),
        "p50_ms": round(pct(added, 50) * 1000, 2),
        "p99_ms": round(pct(added, 99) * 1000, 2),
        "mean_ms": round(statistics.fmean(added) * 1000, 2),
    }


# What --against compares: (label, path into the JSON, True where more is better).
AGAINST_FIGURES = [
    ("health req/s", ("system.health", "rps"), True),
    ("health p50 ms", ("system.health", "p50_ms"), False),
    ("health p99 ms", ("system.health", "p99_ms"), False),
    ("health gateway CPU us/req", ("system.health", "gatewayCpuUsPerRequest"), False),
    ("echo req/s", ("echo", "rps"), True),
    ("gateway / echo", ("ratioToEcho",), True),
    ("chat.delta added p50 ms", ("chat.delta", "p50_ms"), False),
    ("chat.delta added p99 ms", ("chat.delta", "p99_ms"), False),
]
HARNESS = ["tests/helpers.py", "tests/fake_openai.py"]  # carried into REV's tree: both sides measured alike


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--depth", type=int, default=4, help="requests kept in flight per connection")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "rpc.json"))
    bench_against.add_arguments(ap)
    args = ap.parse_args()
    if args.against:
        argv = bench_against.passthrough(sys.argv[1:])
        return bench_against.run_bench(args, "bench_rpc.py", argv, AGAINST_FIGURES, "bench_rpc", HARNESS)

    echo = await echo_baseline(args.connections, args.seconds, args.depth)
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        (state / "config.toml").write_text("[memory]\nenabled = false\n[server]\nmaxConnections = 1024\n")
        gp = GatewayProcess(state).start()
        try:
            assert gp.proc is not None
            cpu = bench_against.cpu_s(gp.proc.pid)
            load = await health_load(gp.url, gp.token, args.connections, args.seconds, args.depth)
            cpu = bench_against.cpu_s(gp.proc.pid) - cpu  # the gateway's, connections' handshakes included
            load["gatewayCpuUsPerRequest"] = round(cpu / max(1, load["requests"]) * 1e6, 1)
        finally:
            gp.signal()
            gp.wait(20)
        (Path(tmp) / "chat").mkdir(mode=0o700)
        delta = await delta_latency(Path(tmp) / "chat", words=60, chunk_delay=0.005)

    ratio = round(load["rps"] / echo["rps"], 3) if echo["rps"] else float("nan")
    result = {
        "system.health": load,
        "echo": echo,
        "ratioToEcho": ratio,
        "chat.delta": delta,
        "cpu_count": os.cpu_count(),
    }
    for name, r in (("echo server", echo), ("system.health", load)):
        print(
            f"{name:<14} {r['connections']} connections × depth {r['depth']}, {r['seconds']} s: "
            f"{r['rps']:,.0f} req/s   p50 {r['p50_ms']} ms   p99 {r['p99_ms']} ms   errors {r['errors']}"
        )
    print(f"gateway CPU per system.health: {load['gatewayCpuUsPerRequest']} µs")
    print(f"gateway / echo throughput: {ratio:.2f}×")
    print(
        f"chat.delta     provider → client added latency over {delta['deltas']} deltas: "
        f"p50 {delta['p50_ms']} ms   p99 {delta['p99_ms']} ms"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
