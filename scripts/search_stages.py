#!/usr/bin/env python3
"""Where each of the 200 bench queries' search time goes, per query and per stage, in process (issue 46's
tail at 1.18M chunks): max-score's two statements, the phrase counts, the related words, the rows, the
re-rank and snippets, the timeline; an answer digest over the 200 queries x hybrid, fts, vector.

    .venv/bin/python scripts/search_stages.py --corpus /tmp/corpus1m --size 1000000 --state /tmp/x-state \
        --out /tmp/x.json            # first call: links the corpus in, syncs (3-5 min at 1.18M), then times

The state is built once (a state that holds an index is searched as it is; no sync). Searches run as
bench_memory.py times them (k 6, 10 warm-up searches a mode, hybrid then fts then vector). Each stage is
wall time measured where it runs (SQLite's thread for the statements: `ms1` max-score's first statement,
`ms2` its `(R) AND (C)`, `whole` the whole OR, `counts` phrase_hits; `sql_<tag>` every trip to the SQLite
thread by caller: own / rel(ated words) / rows / vecs; `wait_<tag>` the awaiting side). Monkeypatched: a
measuring harness, not a test. `--report` prints p50/p95/p99 and the slowest 5% with their stages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import hashlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_memory as bm  # noqa: E402
from bench_locomo import opened_index  # noqa: E402

from gateway.memory import answers as amod  # noqa: E402
from gateway.memory.search import searcher as smod  # noqa: E402
from gateway.memory.search import timeline as tmod  # noqa: E402
from gateway.storage import fts5, fts5_topk  # noqa: E402
from gateway.storage.files.memory import db as dbmod  # noqa: E402
from gateway.storage.files.memory import reader as rmod  # noqa: E402

TAG = contextvars.ContextVar("tag", default="other")
CUR: dict = {}
IN_BEST = [False]


def add(name, dt, n=1):
    s = CUR.setdefault("stages", {})
    s[name] = s.get(name, 0.0) + dt * 1000
    c = CUR.setdefault("calls", {})
    c[name] = c.get(name, 0) + n


def timed_sync(name, fn):
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            add(name, time.perf_counter() - t)

    return w


def tagged_async(tag, fn):
    async def w(*a, **k):
        tok = TAG.set(tag)
        t = time.perf_counter()
        try:
            return await fn(*a, **k)
        finally:
            add("wait_" + tag, time.perf_counter() - t)
            TAG.reset(tok)

    return w


orig_call = dbmod.Database.call


async def call(self, fn):
    tag = TAG.get()

    def run(conn):
        t = time.perf_counter()
        try:
            return fn(conn)
        finally:
            add("sql_" + tag, time.perf_counter() - t)

    return await orig_call(self, run)


dbmod.Database.call = call

orig_rows = fts5_topk._rows


def rows(conn, sql, params):
    expr = next((p for p in params if isinstance(p, str)), "")
    kind = ("ms2" if ") AND (" in expr else "ms1") if IN_BEST[0] else "whole"
    t = time.perf_counter()
    try:
        return orig_rows(conn, sql, params)
    finally:
        add(kind, time.perf_counter() - t)


fts5_topk._rows = rows
orig_best = fts5_topk._best


def best(*a, **k):
    IN_BEST[0] = True
    try:
        return orig_best(*a, **k)
    finally:
        IN_BEST[0] = False


fts5_topk._best = best
orig_ph = fts5_topk.phrase_hits


def ph(conn, phrases, table="chunks_fts"):
    t = time.perf_counter()
    try:
        return orig_ph(conn, phrases, table)
    finally:
        add("counts", time.perf_counter() - t, len(phrases))
        CUR.setdefault("counted", []).extend(phrases)


fts5_topk.phrase_hits = ph
orig_topk = fts5_topk.top_k


def topk(*a, **k):
    r = orig_topk(*a, **k)
    CUR.setdefault("topk", []).append(
        {"rounds": r.rounds, "rows": r.rows, "exact": r.exact, "capped": r.capped, "phrases": len(a[1])}
    )
    return r


fts5_topk.top_k = topk
fts5.Fts5Search._counted = timed_sync("relcounts", fts5.Fts5Search._counted)
orig_search = fts5.Fts5Search.search


async def fsearch(self, terms, n, sources, session_key, *, generation, total, extra=False):
    tok = TAG.set("rel" if extra else "own")
    t = time.perf_counter()
    try:
        return await orig_search(self, terms, n, sources, session_key, generation=generation, total=total, extra=extra)
    finally:
        add("wait_fts_" + ("rel" if extra else "own"), time.perf_counter() - t)
        TAG.reset(tok)


fts5.Fts5Search.search = fsearch
rmod.SqliteChunkReader.chunk_rows = tagged_async("rows", rmod.SqliteChunkReader.chunk_rows)
rmod.SqliteChunkReader.vectors_of = tagged_async("vecs", rmod.SqliteChunkReader.vectors_of)
smod.Searcher._rank_and_show = timed_sync("rank_show", smod.Searcher._rank_and_show)
amod.prepare = timed_sync("tl_prepare", amod.prepare)
tmod.Arrangement.finish = timed_sync("tl_finish", tmod.Arrangement.finish)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


async def build(corpus: Path, size: int, seed: int, state: Path, queries: int) -> list[str]:
    """The state's index (synced once) and the bench's queries for this corpus and seed."""
    qfile = state / "bench-queries.json"
    if qfile.exists():
        return json.loads(qfile.read_text())
    state.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    bm.reuse_corpus(corpus, size, seed, rng, state)
    qs = [bm.query(rng) for _ in range(queries)]
    async with opened_index(bm.bench_config(str(state), None), None) as mgr:
        t = time.perf_counter()
        await mgr.sync()
        print(f"synced {(await mgr.status())['chunks']} chunks in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    qfile.write_text(json.dumps(qs))
    return qs


async def measure(state: Path, qs: list[str]) -> dict:
    res: dict = {"load": os.getloadavg(), "modes": {}}
    async with opened_index(bm.bench_config(str(state), None), None) as mgr:
        await mgr.warm()
        search = bm.service_search(mgr)
        for mode in ("hybrid", "fts", "vector"):
            for q in qs[:10]:
                await search(q, k=6, mode=mode)
            per = []
            for q in qs:
                CUR.clear()
                c0, t0 = time.process_time(), time.perf_counter()
                ans = await search(q, k=6, mode=mode)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                d = hashlib.sha256(repr(ans["results"]).encode()).hexdigest()[:16]
                per.append({"q": q, "ms": wall * 1000, "cpu": cpu * 1000, "digest": d, **CUR})
            res["modes"][mode] = per
    res["load_end"] = os.getloadavg()
    every = "".join(p["digest"] for m in ("hybrid", "fts", "vector") for p in res["modes"][m])
    res["digest"] = hashlib.sha256(every.encode()).hexdigest()[:16]
    return res


def report(r: dict) -> None:
    print("load", [round(x, 2) for x in r["load"]], [round(x, 2) for x in r["load_end"]], "digest", r["digest"])
    for mode, per in r["modes"].items():
        ms, cpu = [p["ms"] for p in per], [p["cpu"] for p in per]
        p50 = statistics.median(ms)
        print(
            f" {mode}: wall p50/p95/p99 {p50:.1f}/{pct(ms, 0.95):.1f}/{pct(ms, 0.99):.1f}  cpu p50/p95/p99 "
            f"{statistics.median(cpu):.1f}/{pct(cpu, 0.95):.1f}/{pct(cpu, 0.99):.1f}  p99/p50 {pct(ms, 0.99) / p50:.2f}"
        )
        if mode == "vector":
            continue
        keys = sorted({k for p in per for k in p.get("stages", {})})
        med = {k: statistics.median([p.get("stages", {}).get(k, 0) for p in per]) for k in keys}
        print("   median stages:", " ".join(f"{k}={v:.1f}" for k, v in med.items() if v >= 0.05))
        for p in sorted(per, key=lambda p: -p["ms"])[: max(1, len(per) // 20)]:
            st, tk = p.get("stages", {}), p.get("topk", [])
            print(f"   {p['ms']:6.1f} ms, cpu {p['cpu']:5.1f}: {p['q']!r}")
            print(
                "      ",
                " ".join(f"{k}={v:.1f}" for k, v in sorted(st.items(), key=lambda kv: -kv[1]) if v >= 0.3),
                "| top_k (phrases, rounds, R rows, proven)",
                [(t["phrases"], t["rounds"], t["rows"], t["exact"]) for t in tk],
                "| counted",
                len(p.get("counted", [])),
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=Path("/tmp/corpus1m"))
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--report", type=Path, help="print a measured JSON's figures and stop")
    args = ap.parse_args()
    if args.report:
        report(json.loads(args.report.read_text()))
        return 0
    qs = asyncio.run(build(args.corpus, args.size, args.seed, args.state, args.queries))
    res = asyncio.run(measure(args.state, qs))
    if args.out:
        args.out.write_text(json.dumps(res))
    report(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
