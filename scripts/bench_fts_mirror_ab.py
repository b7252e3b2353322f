"""Full text on a loaded PostgreSQL memory index (e.g. bench_memory.py --postgres's database while it runs),
in process: PostgreSQL's tsvector search (fulltext.PgFullText, before) against the gateway's FTS5 mirror
(fts_mirror.PgFtsMirror, after, filled first into a file of its own), alternating per query (A B, then
B A), the same terms, n = 24 (k = 6 × candidateMultiplier 4), agent `main`.

    .venv/bin/python scripts/bench_fts_mirror_ab.py SOCKET_DIR DATABASE [QUERIES] [OUT.json]
"""

import asyncio, json, os, random, resource, statistics, sys, time  # noqa: E401
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))
import asyncpg  # noqa: E402
import bench_memory as bm  # noqa: E402
from gateway.config import load_config  # noqa: E402
from gateway.memory.search.query import query_terms  # noqa: E402
from gateway.storage.postgres.memory.fts_mirror import PgFtsMirror, sqlite_module  # noqa: E402
from gateway.storage.postgres.memory.fulltext import PgFullText  # noqa: E402

HOST = sys.argv[1]
DB = sys.argv[2]
NQ = int(sys.argv[3]) if len(sys.argv) > 3 else 100
OUT = Path(sys.argv[4]) if len(sys.argv) > 4 else Path("/tmp/fts-mirror-ab.json")


def pct(v, p):
    s = sorted(v)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


async def main():
    cw = load_config({"stateDir": str(OUT.parent / "fts-mirror-ab")}, env={}).memory.search.context_weight
    pool = await asyncpg.create_pool(
        host=HOST, user="postgres", database=DB, min_size=1, max_size=4, command_timeout=600
    )
    agent = "main"
    total = int(await pool.fetchval("SELECT count(*) FROM memory_chunks WHERE agent_id = $1", agent))
    gen = await pool.fetchval("SELECT value FROM memory_meta WHERE agent_id = $1 AND key = 'generation'", agent)
    path = OUT.parent / "fts-mirror-ab" / "main.pg.fts"
    path.parent.mkdir(parents=True, exist_ok=True)
    mirror = PgFtsMirror(pool, agent, path, "porter", cw, sqlite_module())
    t, c = time.perf_counter(), time.process_time()
    mirror.start()
    await mirror.warm()
    fill = {
        "wallS": round(time.perf_counter() - t, 1),
        "cpuS": round(time.process_time() - c, 1),
        "chunks": mirror.held,
        "fileMb": round(path.stat().st_size / 1e6, 1),
        "total": total,
    }
    print("fill", fill, flush=True)
    if NQ == 0:
        await mirror.close()
        await pool.close()
        return
    pg = PgFullText(pool, agent, cw)
    rng = random.Random(11)
    qs = [bm.query(rng) for _ in range(NQ + 10)]
    times = {"pg": [], "mirror": []}
    same5 = []
    sides = {"pg": pg, "mirror": mirror}
    for i, q in enumerate(qs):
        terms = query_terms(q)
        order = ["pg", "mirror"] if i % 2 == 0 else ["mirror", "pg"]
        got = {}
        for name in order:
            s = time.perf_counter()
            got[name] = await sides[name].search(terms, 24, ("memory", "sessions"), None, generation=gen, total=total)
            if i >= 10:
                times[name].append((time.perf_counter() - s) * 1000)
        if i >= 10:
            a = [x[0] for x in got["pg"][:5]]
            b = [x[0] for x in got["mirror"][:5]]
            same5.append(len(set(a) & set(b)))
    out = {
        "fill": fill,
        "queries": NQ,
        "loadAverage": os.getloadavg(),
        "mirrorAnswered": mirror.answered,
        "sides": {
            k: {
                "p50Ms": round(statistics.median(v), 2),
                "p95Ms": round(pct(v, 0.95), 2),
                "p99Ms": round(pct(v, 0.99), 2),
            }
            for k, v in times.items()
        },
        "top5Shared": round(statistics.mean(same5), 2),
        "peakRssMb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(out, indent=1))
    OUT.write_text(json.dumps(out, indent=1))
    await mirror.close()
    await pool.close()


asyncio.run(main())
