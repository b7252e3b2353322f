#!/usr/bin/env python3
"""What the ledger (issue 48) costs, measured in one process side by side, so that a loaded machine
moves both sides alike.

1. Extraction: the synthetic corpus of bench_memory.py (notes and transcripts, Zipf words), plus
   first-person statements of a lived-in scenario, chunked as the index chunks them; the offline
   extractor's CPU time per chunk (process time), against the CPU time of a whole sync of the same
   corpus (what share of indexing it is).
2. Search: `memory.search` over that index, alternating query by query between the service as it is
   and the same service with the ledger's step skipped; p50 of each, for bench_memory's queries (a few
   content words) and for questions about a life ("Where do I live now?").
3. The ledger's step of a search alone (CPU and wall), with the facts kept per index generation
   (ledger/cache.py) and with them read and built every time (as before the cache), alternating.

    .venv/bin/python scripts/bench_ledger.py                  # 10,000 chunks
    .venv/bin/python scripts/bench_ledger.py --chunks 2000 --queries 100

Prints the figures and writes JSON (default bench-results/ledger.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_memory as bm  # noqa: E402
from gateway.memory.hit import Hit, HitFact  # noqa: E402
from gateway.memory.search.request import SearchRequest  # noqa: E402

LIFE_QUESTIONS = [
    "Where do I live now?",
    "Who's my manager these days?",
    "What's the wifi password?",
    "Who am I dating?",
    "What car do I drive?",
    "Which vet do we use?",
    "What dose am I on?",
    "Who was my landlord before?",
    "Where do I work these days?",  # a subject by the question's own words (recall.py ASKED_AS)
    "What's Dana's son called?",  # a name asked: the tie step reads the hits
]


def extraction_cpu(cfg, files: list[Path]) -> tuple[float, int, int]:
    """(CPU seconds of the extractor over these files' chunks, chunks, statements)."""
    from gateway.memory.index.chunking import chunk_markdown, chunk_transcript
    from gateway.memory.ledger.extract import from_chunks

    s = cfg.memory.chunking
    chunked = []
    for p in files:
        if p.suffix == ".md":
            chunked.append((f"memory/{p.name}", chunk_markdown(p.read_text(), s.tokens, s.overlap)))
        else:
            chunks = chunk_transcript(p, s.session_tokens, s.tokens, s.session_overlap, s.session_context)
            chunked.append((f"sessions/{p.name}", chunks))
    t = time.process_time()
    n = sum(len(from_chunks(path, cs, "2025-01-01T00:00:00.000Z")) for path, cs in chunked)
    return time.process_time() - t, sum(len(cs) for _, cs in chunked), n


def hit_of(w: dict) -> Hit:
    """A memory.search result back as the memory service's hit (memory/hit.py), for the step alone."""
    f = w.get("fact")
    return Hit(
        w["path"],
        w["source"],
        w["startLine"],
        w["endLine"],
        w["score"],
        w["snippet"],
        session_key=w.get("sessionKey"),
        date=w.get("date"),
        said=w.get("said"),
        first_said=w.get("firstSaid"),
        last_said=w.get("lastSaid"),
        superseded_by=w.get("supersededBy"),
        fact=HitFact(f["subject"], f["value"], f["since"], f.get("until")) if f else None,
    )


async def step_cost(mgr, ties, queries: dict[str, list[str]]) -> dict:
    """The ledger's step of a search alone, on the backend's results for each query: the question's
    subjects, the statement first, the ties — its CPU in the event loop's thread (what a loaded machine
    does not inflate) and its wall time (reading the statements included), medians in ms. Each query both
    with the facts kept per index generation (ledger/cache.py, as the service runs) and with them read
    and built every time (a cache that keeps nothing: the step as it was before), alternating."""
    from gateway.memory.ledger.cache import FactsCache

    kept = mgr.facts
    sides = {"kept": kept, "readEveryTime": FactsCache(max_statements=0)}
    out = {}
    for name, qs in queries.items():
        cpu: dict[str, list[float]] = {k: [] for k in sides}
        wall: dict[str, list[float]] = {k: [] for k in sides}
        each: dict[str, dict[str, list[float]]] = {}  # question → side → wall ms
        for i, q in enumerate(qs):
            res = await mgr.search(SearchRequest(query=q, k=6))  # warm, and the results the step re-orders
            results = [hit_of(r) for r in res["results"]]  # the step re-orders hits, not their wire form
            subjects = await mgr._ledger_subjects(q)
            tied = ties(q, results)
            for side in list(sides) if i % 2 == 0 else list(sides)[::-1]:
                mgr.facts = sides[side]
                c, w = time.thread_time(), time.perf_counter()
                await mgr._ledger_first(q, tied, 6, None, None, subjects)
                cpu[side].append((time.thread_time() - c) * 1000)
                wall[side].append((time.perf_counter() - w) * 1000)
                each.setdefault(q, {}).setdefault(side, []).append(wall[side][-1])
            mgr.facts = kept
        out[name] = {
            "cpuP50Ms": round(statistics.median(cpu["kept"]), 3),
            "wallP50Ms": round(statistics.median(wall["kept"]), 3),
            "slowestQuestion": max(
                ({"query": q, **{k: round(statistics.median(v), 3) for k, v in d.items()}} for q, d in each.items()),
                key=lambda x: x["kept"],
            ),
            "readEveryTime": {
                "cpuP50Ms": round(statistics.median(cpu["readEveryTime"]), 3),
                "wallP50Ms": round(statistics.median(wall["readEveryTime"]), 3),
            },
        }
    return out


async def main(chunks: int, queries: int, out: Path) -> dict:
    from bench_locomo import opened_index

    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as tmp:
        cfg = bm.bench_config(tmp, None)
        bm.generate(cfg, chunks, rng)
        files = sorted((cfg.workspace_dir / "memory").rglob("*.md")) + sorted(cfg.sessions_dir().glob("*.jsonl"))
        async with opened_index(cfg, None) as mgr:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await mgr.sync()
            sync_cpu, sync_wall = time.process_time() - cpu0, time.perf_counter() - wall0
            st = await mgr.status()
            ex_cpu, ex_chunks, statements = extraction_cpu(cfg, files)

            with_ledger = mgr._ledger_first

            async def without(query, results, k, as_of, exclude=None, subjects=None):
                return results

            with_subjects = mgr._ledger_subjects

            async def no_subjects(query):
                return []

            import gateway.memory.answers as service_module  # where the search step calls it

            def no_ties(query, results):
                return results

            # the ledger's tie step (ledger/placement.py) too, where this tree has one
            with_ties = service_module.prefer_statements

            lat: dict[str, dict[str, list[float]]] = {}
            for name, qs in (("words", [bm.query(rng) for _ in range(queries)]), ("life", LIFE_QUESTIONS * 8)):
                lat[name] = {"with": [], "without": []}
                for q in qs[:5]:
                    await mgr.search(SearchRequest(query=q, k=6))
                for i, q in enumerate(qs):  # each query both ways, which goes first alternating
                    for side in ("with", "without") if i % 2 == 0 else ("without", "with"):
                        mgr._ledger_first = with_ledger if side == "with" else without
                        mgr._ledger_subjects = with_subjects if side == "with" else no_subjects
                        service_module.prefer_statements = with_ties if side == "with" else no_ties  # type: ignore[assignment]
                        t = time.perf_counter()
                        await mgr.search(SearchRequest(query=q, k=6))
                        lat[name][side].append((time.perf_counter() - t) * 1000)
                mgr._ledger_first, mgr._ledger_subjects = with_ledger, with_subjects
                service_module.prefer_statements = with_ties  # type: ignore[assignment]
            step = await step_cost(
                mgr, with_ties, {"words": [bm.query(rng) for _ in range(queries)], "life": LIFE_QUESTIONS * 8}
            )
    res = {
        "chunks": st["chunks"],
        "files": st["files"],
        "syncWallS": round(sync_wall, 2),
        "syncCpuS": round(sync_cpu, 2),
        "extractionCpuS": round(ex_cpu, 3),
        "extractionShareOfSyncCpu": round(ex_cpu / sync_cpu, 4) if sync_cpu else None,
        "extractionMsPerChunk": round(ex_cpu * 1000 / max(1, ex_chunks), 4),
        "statements": statements,
        "ledgerStep": step,
        "search": {
            name: {
                side: {"p50Ms": round(statistics.median(v), 2), "p95Ms": round(bm.pct(v, 0.95), 2)}
                for side, v in sides.items()
            }
            for name, sides in lat.items()
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "ledger.json")
    a = ap.parse_args()
    r = asyncio.run(main(a.chunks, a.queries, a.out))
    print(
        f"{r['chunks']} chunks in {r['files']} files: sync {r['syncWallS']} s wall, {r['syncCpuS']} s CPU; "
        f"extraction {r['extractionCpuS']} s CPU ({r['extractionShareOfSyncCpu']:.1%} of the sync's), "
        f"{r['extractionMsPerChunk']} ms a chunk, {r['statements']} statements"
    )
    for name, sides in r["search"].items():
        w, wo = sides["with"], sides["without"]
        print(
            f"search ({name}): p50 {w['p50Ms']} ms with the ledger, {wo['p50Ms']} ms without "
            f"(+{w['p50Ms'] - wo['p50Ms']:.2f} ms); p95 {w['p95Ms']} / {wo['p95Ms']} ms"
        )
    for name, c in r["ledgerStep"].items():
        e = c["readEveryTime"]
        print(
            f"ledger step alone ({name}): p50 {c['cpuP50Ms']} ms CPU, {c['wallP50Ms']} ms wall with the facts kept; "
            f"{e['cpuP50Ms']} ms CPU, {e['wallP50Ms']} ms wall read every time; slowest {c['slowestQuestion']}"
        )
    print(f"wrote {a.out}")
