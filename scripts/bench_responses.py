#!/usr/bin/env python3
"""The latency `POST /v1/responses` adds over asking the upstream directly.

    .venv/bin/python scripts/bench_responses.py [--requests 200] [--words 40] [--no-memory] [--translate] [--out FILE]

As scripts/bench_openai.py (the fake upstream in its own process, `jarvis serve` with memory on and a few
notes), but with the Responses API: one client, the `openai` SDK's `responses.create(stream=True)`, sends
N requests to each (alternating, one at a time, each a new conversation) and measures the time to the
first byte (the first event, `response.created`) and the total (to `response.completed`). Direct is the
upstream's own /v1/responses; with --translate the upstream has none (as Ollama) and the gateway
translates to chat completions, direct then being the upstream's streamed chat completions. Prints
p50/p95 and the added latency (gateway minus direct); writes JSON (default bench-results/responses.json).

`--against REV` (repeatable; `--rounds`, `--no-tree`): the same bench over REV's gateway, alternating with
this working tree's, and the ratios of each figure (scripts/bench_against.py says how), e.g.

    .venv/bin/python scripts/bench_responses.py --against 8cfea94 --requests 60 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_against  # noqa: E402
import openai  # noqa: E402
from bench_openai import AGAINST_FIGURES, HARNESS, against_fake, measure, one, report  # noqa: E402

QUESTION = "Question {i}: when is Anna's birthday and what does she like?"  # as bench_openai asks


async def one_response(client: openai.AsyncOpenAI, i: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    first = None
    stream = await client.responses.create(
        model="fake-model", stream=True, instructions="You are a helpful assistant.", input=QUESTION.format(i=i)
    )
    async for _event in stream:
        if first is None:
            first = time.perf_counter() - t0
    return first if first is not None else float("nan"), time.perf_counter() - t0


async def one_chat(client: openai.AsyncOpenAI, i: int) -> tuple[float, float]:
    return await one(client, i, first_byte=True)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--words", type=int, default=40, help="words in the fake model's reply (one delta each)")
    ap.add_argument("--no-memory", action="store_true", help="memory off in the gateway: the relay alone")
    ap.add_argument("--translate", action="store_true", help="the upstream has no /v1/responses (as Ollama)")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "responses.json"))
    bench_against.add_arguments(ap)
    args = ap.parse_args()
    if args.against:
        argv = bench_against.passthrough(sys.argv[1:])
        carry = ["scripts/bench_openai.py", *HARNESS]
        return bench_against.run_bench(args, "bench_responses.py", argv, AGAINST_FIGURES, "bench_responses", carry)
    direct_one = one_chat if args.translate else one_response

    async def probe(gateway: openai.AsyncOpenAI) -> Any:
        return await gateway.responses.with_raw_response.create(model="fake-model", input="When is Anna's birthday?")

    measured = functools.partial(measure, direct_one=direct_one, gateway_one=one_response, probe=probe)
    result = await against_fake(args, measured, ("--no-responses",) if args.translate else ())
    result.update(
        {
            "requests": args.requests,
            "words": args.words,
            "memory": not args.no_memory,
            "route": "translate" if args.translate else "upstream",
            "cpu_count": os.cpu_count(),
            "note": "ttft_* here is the time to the first byte (the first event)",
        }
    )
    report(result, args.out, "time to first byte")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
