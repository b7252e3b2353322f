#!/usr/bin/env python3
"""Full text at scale: the postings budget (before) against max-score's exact top n (storage/fts5_topk.py).

On an FTS5 file of the PostgreSQL mirror's schema (`chunks`, a `chunks_fts` of text and context,
`chunks_fts_rows`; storage/postgres/memory/fts_file.py) — e.g. a gateway's `<agent>.pg.fts` — for
bench_memory's kind of generated queries, n = 24 as a hybrid search of k = 6 asks:

- before: the rarest words within pruning's postings budget, the others skipped (what `Fts5Search`
  did for a query's own words until this change), the words' counts kept as per generation;
- after: `Fts5Search.search` (max-score, the phrases' counts kept as per generation), at each of
  `--cap-shares` (fts5_topk.CAP_SHARE: rows read at most before an answer is given unproven);
- exact: every phrase matched and every matching chunk scored (the whole OR, its phrases summed rarest
  first, the order max-score sums them in; a small index sends the query's own order, whose doubles may
  differ in the last bits);
- `--fresh`: before and after (the first cap) again with their counts read again for every query, as
  the first search of each query after a sync (a new generation) pays them.

Before and after alternate query by query (A B, B A, ...), each timed in CPU seconds of this process
(`time.process_time`: SQLite runs in it, so the shared machine's load does not count). Agreement: how many
of each side's top 5 / top 10 are exact's, and how many answers are exact's top n outright.

    .venv/bin/python scripts/bench_fts_topk.py --file /tmp/x/main.pg.fts --queries 200 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

T = TypeVar("T")


class SyncDb:
    """`FtsDb` on this thread: SQLite's work is this process's CPU time."""

    def __init__(self, conn: Any):
        self.conn = conn

    async def call(self, fn: Callable[[Any], T]) -> T:
        return fn(self.conn)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "p50Ms": round(statistics.median(ms), 2),
        "p95Ms": round(pct(ms, 0.95), 2),
        "p99Ms": round(pct(ms, 0.99), 2),
    }


async def main_async(args: argparse.Namespace) -> dict:
    from bench_memory import query

    from gateway.config import load_config
    from gateway.memory.search import pruning
    from gateway.memory.search.query import fts_phrases, fts_query, query_terms
    from gateway.storage import fts5_topk
    from gateway.storage.fts5 import Fts5Search
    from gateway.storage.postgres.memory.fts_file import sqlite_module

    mod = sqlite_module()
    assert mod is not None, "no SQLite with contentless_delete"
    conn = mod.connect(str(args.file), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA cache_size = -32000")  # as fts_file.py's
    cw = load_config({}, env={}).memory.search.context_weight
    total = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    rows = fts5_topk.row_count(conn)
    fts = Fts5Search(SyncDb(conn), args.tokenizer, cw)
    rng = random.Random(args.seed)
    qs = [t for t in (query_terms(query(rng)) for _ in range(args.queries + args.warm)) if len(t) >= 2]
    head = "SELECT rowid, bm25(chunks_fts, 1.0, ?) FROM chunks_fts"

    def before(fresh: bool = False) -> Callable:
        async def run(terms: list[str]) -> list[int]:
            if fresh:  # the first search of a new generation: every word counted again
                fts._counts.clear()
            chosen = await fts.prune_common(terms, total, "g")
            expr = fts_query(chosen, args.tokenizer)
            rs = conn.execute(head + " WHERE chunks_fts MATCH ? ORDER BY 2 LIMIT ?", (cw, expr, args.n)).fetchall()
            return [int(r[0]) for r in rs]

        return run

    def after(share: float, fresh: bool = False) -> Callable:
        async def run(terms: list[str]) -> list[int]:
            if fresh:  # the first search of a new generation: every phrase counted again
                fts._hits = {}
            kept, fts5_topk.CAP_SHARE = fts5_topk.CAP_SHARE, share
            try:
                hits = await fts.search(terms, args.n, ("memory", "sessions"), None, generation="g", total=total)
            finally:
                fts5_topk.CAP_SHARE = kept
            return [h[0] for h in hits]

        return run

    def exact(terms: list[str]) -> tuple[list[int], float]:
        # The whole OR, its phrases rarest first (max-score's summing order: its proven answers' reference).
        phrases = fts_phrases(terms, args.tokenizer)
        order = fts5_topk.ordered(phrases, fts5_topk.phrase_hits(conn, phrases))
        t = time.process_time()
        rs = conn.execute(head + " WHERE chunks_fts MATCH ?", (cw, " OR ".join(order))).fetchall()
        best = sorted(((int(r), float(s)) for r, s in rs), key=lambda x: (x[1], x[0]))[: args.n]
        return [b[0] for b in best], (time.process_time() - t) * 1000

    shares = [float(x) for x in args.cap_shares.split(",")]
    sides: dict[str, Callable] = {"before": before()} | {f"after@{s}": after(s) for s in shares}
    if args.fresh:  # each side again as the first search after a sync (its counts read again)
        sides |= {"before-fresh": before(True), f"after-fresh@{shares[0]}": after(shares[0], True)}
    ms: dict[str, list[float]] = {s: [] for s in [*sides, "exact"]}
    agree: dict[str, dict[str, list[int]]] = {s: {"top5": [], "top10": [], "identical": []} for s in sides}
    proven: dict[str, int] = {s: 0 for s in sides}
    for terms in qs[: args.warm]:  # warm the page cache and every side's kept counts
        for run in sides.values():
            await run(terms)
    for i, terms in enumerate(qs[args.warm :]):
        for run in sides.values():  # (the counts kept, as within one generation)
            await run(terms)
        got: dict[str, list[int]] = {}
        for side in list(sides) if i % 2 == 0 else list(reversed(sides)):
            p0 = fts.proven
            t = time.process_time()
            got[side] = await sides[side](terms)
            ms[side].append((time.process_time() - t) * 1000)
            proven[side] += fts.proven - p0
        ref, took = exact(terms)
        ms["exact"].append(took)
        for side, ids in got.items():
            agree[side]["top5"].append(len(set(ids[:5]) & set(ref[:5])))
            agree[side]["top10"].append(len(set(ids[:10]) & set(ref[:10])))
            agree[side]["identical"].append(int(ids == ref))
    done = len(ms["before"])
    out: dict[str, Any] = {"chunks": total, "ftsRows": rows, "queries": done, "n": args.n, "tokenizer": args.tokenizer}
    for side in [*sides, "exact"]:
        out[side] = summary(ms[side])
        if side in agree:
            a = agree[side]
            out[side] |= {
                "top5": round(statistics.mean(a["top5"]), 3),
                "top10": round(statistics.mean(a["top10"]), 3),
                "identicalTopN": sum(a["identical"]),
            }
    for side in sides:
        if not side.startswith("before"):
            out[side]["proven"] = proven[side]
    out["postingsBudget"] = pruning.POSTINGS_BUDGET
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warm", type=int, default=10)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--tokenizer", default="porter")
    ap.add_argument("--cap-shares", default="0.0125,0.05", help="after's CAP_SHARE(s), each a side: 0.05,0.0125")
    ap.add_argument("--fresh", action="store_true", help="also before / after with the counts read again")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out = asyncio.run(main_async(args))
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
