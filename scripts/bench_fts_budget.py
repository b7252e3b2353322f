#!/usr/bin/env python3
"""PostgreSQL full text on a big index: latency and recall of ROW_BUDGET / CANDIDATE_CAP choices.

On an existing database (`--url`, an agent's synced index: e.g. bench_memory.py --postgres's while it
runs), for bench_memory's kind of generated queries: each budget's full-text candidates (`PgFullText`
as a hybrid search of k = 6 asks them, n = k × candidateMultiplier) against the exact ranking (every
word matched and scored, document counts counted exactly: pruning off), top 5 and top n overlap, and
p50 / p95 / p99 of each budget's search. Budgets alternate query by query (A B C, C B A, ...), so the
load of a shared machine falls on each alike.

    .venv/bin/python scripts/bench_fts_budget.py --url postgresql://... --budgets 1000:5000,2000:10000,4000:20000
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


async def main_async(args: argparse.Namespace) -> dict:
    import asyncpg
    from bench_memory import query

    from gateway.config import load_config
    from gateway.memory.search import pruning
    from gateway.memory.search.query import query_terms
    from gateway.storage.postgres.memory import fulltext

    cfg = load_config({}, env={}).memory.search
    n = 6 * cfg.candidate_multiplier
    pool = await asyncpg.create_pool(args.url, min_size=1, max_size=2)
    try:
        total = int(await pool.fetchval("SELECT count(*) FROM memory_chunks WHERE agent_id = $1", args.agent))
        fts = fulltext.PgFullText(pool, args.agent, cfg.context_weight)
        rng = random.Random(args.seed)
        qs = [query_terms(query(rng)) for _ in range(args.queries)]
        budgets = [tuple(int(x) for x in b.split(":")) for b in args.budgets.split(",") if b]
        orig = (fulltext.ROW_BUDGET, fulltext.CANDIDATE_CAP, pruning.PRUNE_MIN_CHUNKS, fulltext.IDF_COUNT_CAP)

        async def run(terms, budget) -> tuple[list[int], float]:
            if budget is None:  # exact: no pruning, exact counts
                pruning.PRUNE_MIN_CHUNKS, fulltext.IDF_COUNT_CAP = 10**12, 10**12
            else:
                fulltext.ROW_BUDGET, fulltext.CANDIDATE_CAP = budget
                pruning.PRUNE_MIN_CHUNKS, fulltext.IDF_COUNT_CAP = orig[2], orig[3]
            t = time.perf_counter()
            hits = await fts.search(terms, n, ("memory", "sessions"), None, generation=None, total=total)
            return [h[0] for h in hits], (time.perf_counter() - t) * 1000

        for terms in qs[:5]:  # warm the statistics and caches
            await run(terms, budgets[0])
        exact = []
        for terms in qs:
            exact.append((await run(terms, None))[0])
        res: dict[str, dict] = {f"{b[0]}:{b[1]}": {"ms": [], "top5": [], "topn": []} for b in budgets}
        for i, terms in enumerate(qs):
            order = budgets if i % 2 == 0 else list(reversed(budgets))
            for b in order:
                ids, ms = await run(terms, b)
                r = res[f"{b[0]}:{b[1]}"]
                r["ms"].append(ms)
                r["top5"].append(len(set(ids[:5]) & set(exact[i][:5])) / max(1, min(5, len(exact[i]))))
                r["topn"].append(len(set(ids) & set(exact[i])) / max(1, len(exact[i])))
        fulltext.ROW_BUDGET, fulltext.CANDIDATE_CAP = orig[0], orig[1]
        out = {"chunks": total, "queries": len(qs), "n": n, "budgets": {}}
        for name, r in res.items():
            out["budgets"][name] = {
                "p50Ms": round(statistics.median(r["ms"]), 1),
                "p95Ms": round(pct(r["ms"], 0.95), 1),
                "p99Ms": round(pct(r["ms"], 0.99), 1),
                "top5Recall": round(statistics.mean(r["top5"]), 3),
                "topNRecall": round(statistics.mean(r["topn"]), 3),
                "top5Identical": sum(1 for x in r["top5"] if x == 1.0),
            }
        return out
    finally:
        await pool.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--agent", default="main")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--budgets", default="1000:5000,2000:10000,4000:20000", help="ROW_BUDGET:CANDIDATE_CAP,...")
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
