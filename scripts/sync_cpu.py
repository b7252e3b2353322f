#!/usr/bin/env python3
"""Where a sync's CPU goes, by thread of the gateway process and in its child processes (the extractor, the
workers), for any tree (issue 46): one full sync of a kept corpus, then no-op re-syncs, in one process.

    .venv/bin/python scripts/sync_cpu.py --corpus /tmp/c/100000-s7 --state /tmp/x-a [--code /tmp/dd3eddc]

`--code` runs another checkout's gateway (a `git archive` of it: its own `gateway/` and `scripts/`; the
measuring is this script's). The corpus (a `bench_memory.py --corpus` folder: `workspace/`, `agents/`) is
hard-linked into `--state` when that holds no workspace yet; a state already synced goes straight to the
no-op re-syncs. CPU is `RUSAGE_SELF` and `RUSAGE_CHILDREN` (a child's counts once it has exited: the
extractor exits with the sync's end) and each thread's from /proc, so a loaded machine's figures still
compare; alternate the trees (A B B A) in one run, each in its own state dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def thread_cpu_ms() -> dict[int, float]:
    """CPU (user + system) of each thread of this process, ms, by thread id."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) * 1000 / tick
    return out


def cpu_s() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


async def measure(state: Path, noops: int) -> dict:
    from bench_locomo import opened_index  # the measured tree's own

    from gateway.config import load_config

    cfg = load_config({"stateDir": str(state), "memory.sync.onStart": False, "memory.sync.watch": False}, env={})
    runs = []
    async with opened_index(cfg, None) as mgr:
        for _ in range(1 + noops):
            threads0, (me0, kids0), t = thread_cpu_ms(), cpu_s(), time.perf_counter()
            result = await mgr.sync()
            wall, (me1, kids1), threads1 = time.perf_counter() - t, cpu_s(), thread_cpu_ms()
            busy = sorted((round(v - threads0.get(k, 0.0)) for k, v in threads1.items()), reverse=True)
            runs.append(
                {
                    "indexed": result.get("indexed"),
                    "unchanged": result.get("unchanged"),
                    "wallS": round(wall, 3),
                    "gatewayCpuS": round(me1 - me0, 3),
                    "childrenCpuS": round(kids1 - kids0, 3),
                    "threadsCpuMs": [ms for ms in busy if ms > 0],
                    "load": round(os.getloadavg()[0], 2),
                }
            )
    return {"code": os.getcwd(), "state": str(state), "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", type=Path, required=True, help="the state dir to sync into (kept)")
    ap.add_argument("--corpus", type=Path, help="a bench_memory.py corpus folder, hard-linked into --state")
    ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent, help="the tree to run")
    ap.add_argument("--noops", type=int, default=3, help="no-op re-syncs after the first sync")
    args = ap.parse_args()
    code = args.code.resolve()
    sys.path[:0] = [str(code), str(code / "scripts")]
    os.chdir(code)
    args.state.mkdir(parents=True, exist_ok=True)
    if args.corpus is not None and not (args.state / "workspace").exists():
        for part in ("workspace", "agents"):
            if (args.corpus / part).exists():
                subprocess.run(["cp", "-al", str(args.corpus / part), str(args.state / part)], check=True)
    print(json.dumps(asyncio.run(measure(args.state, args.noops))), flush=True)


if __name__ == "__main__":  # the extractor is spawned: it imports this module and must not run it
    main()
