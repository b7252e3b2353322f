#!/usr/bin/env python3
"""The latency the OpenAI-compatible endpoint adds over calling the upstream directly.

    .venv/bin/python scripts/bench_openai.py [--requests 200] [--words 40] [--no-memory] [--out FILE]

The fake OpenAI server (tests/fake_openai.py) runs in its own process; the gateway runs as `jarvis serve`
with it as the chat upstream and as the embedding provider, memory on (a few notes in MEMORY.md, so
recall finds something, and every turn captured and indexed) unless --no-memory. One client, the
`openai` SDK, sends N streaming requests to each (alternating, one at a time, each a new conversation)
and measures time to first token (the first chunk with text) and total time (to `[DONE]`). Prints
p50/p95 of each, the added latency (gateway minus direct) and the gateway process's CPU time per request
(recall and capture included; a shared machine's load moves it far less than latencies). Writes JSON
(default bench-results/openai.json).

`--against REV` (repeatable; `--rounds`, `--no-tree`): the same bench over REV's gateway, alternating with
this working tree's, and the ratios of each figure (scripts/bench_against.py says how), e.g.

    .venv/bin/python scripts/bench_openai.py --against 8cfea94 --requests 60 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_against  # noqa: E402
import openai  # noqa: E402
import orjson  # noqa: E402

from tests.helpers import GatewayProcess  # noqa: E402

NOTES = """# Notes

The bicycle lock combination is 7395.
Anna's birthday is on 3 March; she likes green tea.
The boat is moored at pier 4 in the north harbour.
Quarterly taxes are due on the 15th of April, June, September and January.
"""


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else float("nan")


async def one(client: openai.AsyncOpenAI, i: int, first_byte: bool = False) -> tuple[float, float]:
    """(time to the first chunk with text — or to the first chunk at all, `first_byte` — and in all)."""
    t0 = time.perf_counter()
    first = None
    stream = await client.chat.completions.create(
        model="fake-model",
        stream=True,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Question {i}: when is Anna's birthday and what does she like?"},
        ],
    )
    async for chunk in stream:
        if first is None and (first_byte or (chunk.choices and chunk.choices[0].delta.content)):
            first = time.perf_counter() - t0
    return first if first is not None else float("nan"), time.perf_counter() - t0


def summary(times: list[tuple[float, float]]) -> dict:
    ttft, total = [t[0] * 1000 for t in times], [t[1] * 1000 for t in times]
    return {
        "ttft_p50_ms": round(pct(ttft, 50), 2),
        "ttft_p95_ms": round(pct(ttft, 95), 2),
        "total_p50_ms": round(pct(total, 50), 2),
        "total_p95_ms": round(pct(total, 95), 2),
    }


# What --against compares (bench_responses too): (label, path into the JSON, True where more is better).
AGAINST_FIGURES = [
    (f"{side} {what} {p} ms", (side, f"{what}_{p}_ms"), False)
    for side in ("gateway", "added", "direct")
    for what in ("ttft", "total")
    for p in ("p50", "p95")
] + [("gateway CPU ms/request", ("gatewayCpuMsPerRequest",), False)]
HARNESS = ["tests/helpers.py", "tests/fake_openai.py"]  # carried into REV's tree: both sides measured alike


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--words", type=int, default=40, help="words in the fake model's reply (one chunk each)")
    ap.add_argument("--no-memory", action="store_true", help="memory off in the gateway: the relay alone")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "openai.json"))
    bench_against.add_arguments(ap)
    args = ap.parse_args()
    if args.against:
        argv = bench_against.passthrough(sys.argv[1:])
        return bench_against.run_bench(args, "bench_openai.py", argv, AGAINST_FIGURES, "bench_openai", HARNESS)

    result = await against_fake(args, measure)
    result.update(
        {"requests": args.requests, "words": args.words, "memory": not args.no_memory, "cpu_count": os.cpu_count()}
    )
    report(result, args.out, "time to first token")
    return 0


async def against_fake(args: argparse.Namespace, measure, fake_args: tuple[str, ...] = ()) -> dict:
    """`measure(upstream, gateway process, n)` with the fake upstream in its own process and a `jarvis
    serve` using it for chat and embeddings (memory per `args.no_memory`; a few notes in MEMORY.md)."""
    reply = " ".join(f"w{i}" for i in range(args.words))
    fake = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--reply", reply, *fake_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        upstream = (await asyncio.to_thread(fake.stdout.readline)).strip()
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "state"
            (state / "workspace").mkdir(parents=True, mode=0o700)
            (state / "workspace" / "MEMORY.md").write_text(NOTES)
            memory = "false" if args.no_memory else "true"
            (state / "config.toml").write_text(
                f'[memory]\nenabled = {memory}\n[memory.embeddings]\nprovider = "openai"\n'
                f'baseUrl = "{upstream}"\n[memory.sync]\nsessionDebounceMs = 0\n'
            )
            gp = GatewayProcess(state, env={"OPENAI_BASE_URL": upstream}).start()
            try:
                return await measure(upstream, gp, args.requests)
            finally:
                gp.signal()
                gp.wait(30)
    finally:
        fake.stdin.close()
        fake.wait(10)


def report(result: dict, out_file: str, first: str) -> None:
    """Print direct / gateway / added (p50, p95) and write the JSON."""
    for name in ("direct", "gateway", "added"):
        r = result[name]
        print(
            f"{name:<8} {first} p50 {r['ttft_p50_ms']:7.2f} ms  p95 {r['ttft_p95_ms']:7.2f} ms   "
            f"total p50 {r['total_p50_ms']:7.2f} ms  p95 {r['total_p95_ms']:7.2f} ms"
        )
    print(f"recalled in the last request: {result['recalled']} sources")
    print(f"gateway CPU per request: {result['gatewayCpuMsPerRequest']} ms")
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {out}")


async def _chat_probe(gateway: openai.AsyncOpenAI) -> Any:
    return await gateway.chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "When is Anna's birthday?"}]
    )


async def measure(
    upstream: str, gp: GatewayProcess, n: int, direct_one: Any = one, gateway_one: Any = one, probe: Any = _chat_probe
) -> dict:
    """n requests to each, alternating (`direct_one` / `gateway_one`), after 3 to warm both; then `probe`
    asks the gateway once more, to count what it recalled."""
    assert gp.http_url is not None, "the gateway did not report its HTTP API listener"
    direct_times, gateway_times = [], []
    async with (
        openai.AsyncOpenAI(base_url=upstream, api_key="unused", max_retries=0) as direct,
        openai.AsyncOpenAI(base_url=gp.http_url + "/v1", api_key=gp.token, max_retries=0) as gateway,
    ):
        for i in range(3):  # warm both paths (connections, the index's first query, a route's probe)
            await direct_one(direct, -i)
            await gateway_one(gateway, -i)
        assert gp.proc is not None
        cpu = bench_against.cpu_s(gp.proc.pid)
        for i in range(n):
            direct_times.append(await direct_one(direct, i))
            gateway_times.append(await gateway_one(gateway, i))
        cpu = bench_against.cpu_s(gp.proc.pid) - cpu  # the gateway's: its n requests, recall and capture
        raw = await probe(gateway)
    d, g = summary(direct_times), summary(gateway_times)
    return {
        "direct": d,
        "gateway": g,
        "added": {k: round(g[k] - d[k], 2) for k in d},
        "gatewayCpuMsPerRequest": round(cpu / n * 1000, 2),
        "recalled": len(orjson.loads(raw.headers["x-jarvis-memory"])),
    }


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
