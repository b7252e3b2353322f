#!/usr/bin/env python3
"""The added latency of MCP: one `memory_search` tool call over stdio (`jarvis mcp`, forwarding to the
gateway's WebSocket) and over streamable HTTP (/mcp on the HTTP API listener), against the same
`memory.search` as a plain JSON-RPC round trip over the WebSocket.

A real gateway (`jarvis serve`, a subprocess) on a temp state dir with synthetic notes (local embedder),
synced first; every query is sent once to warm caches, then each path makes `--calls` round trips one
at a time with the same queries in the same order. The MCP clients are the official SDK's own. Prints
a table and writes JSON under bench-results/.

    .venv/bin/python scripts/bench_mcp.py                 # 200 calls each
    .venv/bin/python scripts/bench_mcp.py --calls 500 --notes 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPICS = (
    "boat sailing harbour",
    "sister birthday present",
    "garden tomatoes garlic",
    "marathon training plan",
    "passport visa flight",
    "guitar lesson teacher",
    "kitchen coffee machine",
    "mortgage bank loan",
    "camping tent hiking boots",
    "museum painting gallery",
    "dog walk neighbour",
    "project deadline client",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notes(workspace: Path, n: int) -> None:
    r = random.Random(7)
    notes = workspace / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        words = " ".join(r.choice(topic.split()) for _ in range(30))
        (notes / f"note-{i:04d}.md").write_text(f"# Note {i} about {topic}\n\n{words}.\n")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def timed(calls: int, queries: list[str], one) -> list[float]:
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        await one(queries[i % len(queries)])
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def bench(args: argparse.Namespace) -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from gateway.cli.client import Connection
    from gateway.config import load_config

    tmp = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    state = tmp / "state"
    write_notes(state / "workspace", args.notes)
    port, http_port = free_port(), free_port()
    env = {**os.environ, "JARVIS_STATE_DIR": str(state), "OPENAI_BASE_URL": "", "OPENAI_API_KEY": ""}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--port",
            str(port),
            "--http-port",
            str(http_port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while b"listening on" not in (line := proc.stderr.readline()):
            if not line and proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the gateway did not start")
        config = load_config({"stateDir": str(state), "server.port": port}, env={})
        token = config.token_file.read_text().strip()
        url = f"ws://127.0.0.1:{port}/"
        ws = await Connection.open(config, url)
        await ws.call("memory.sync", {})
        queries = [f"{t.split()[0]} {t.split()[-1]}" for t in TOPICS] + list(TOPICS)
        for q in queries:  # warm the embedding cache for every path alike
            await ws.call("memory.search", {"query": q, "k": 6})

        results: dict[str, list[float]] = {}
        results["websocket memory.search"] = await timed(
            args.calls, queries, lambda q: ws.call("memory.search", {"query": q, "k": 6})
        )

        stdio = StdioServerParameters(
            command=sys.executable,
            cwd=str(ROOT),
            env=env,
            args=["-m", "gateway.cli", "mcp", "--url", url, "--token", token],
        )
        async with Client(stdio) as client:
            await client.list_tools()
            await timed(20, queries, lambda q: client.call_tool("memory_search", {"query": q, "k": 6}))
            results["mcp stdio memory_search"] = await timed(
                args.calls, queries, lambda q: client.call_tool("memory_search", {"query": q, "k": 6})
            )

        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(f"http://127.0.0.1:{http_port}/mcp", http_client=http)) as client:
            await client.list_tools()
            await timed(20, queries, lambda q: client.call_tool("memory_search", {"query": q, "k": 6}))
            results["mcp http memory_search"] = await timed(
                args.calls, queries, lambda q: client.call_tool("memory_search", {"query": q, "k": 6})
            )
        await ws.close()
    finally:
        proc.terminate()
        proc.wait(30)
    base = statistics.median(results["websocket memory.search"])
    rows = {
        name: {
            "calls": len(v),
            "p50_ms": round(pct(v, 0.5), 2),
            "p95_ms": round(pct(v, 0.95), 2),
            "mean_ms": round(statistics.fmean(v), 2),
            "added_p50_ms": round(pct(v, 0.5) - base, 2),
        }
        for name, v in results.items()
    }
    base95 = rows["websocket memory.search"]["p95_ms"]
    for row in rows.values():
        row["added_p95_ms"] = round(row["p95_ms"] - base95, 2)
    return {
        "notes": args.notes,
        "calls": args.calls,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": rows,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200, help="round trips per path (default 200)")
    ap.add_argument("--notes", type=int, default=200, help="synthetic notes in memory (default 200)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "mcp.json", help="where the JSON goes")
    args = ap.parse_args()
    report = asyncio.run(bench(args))
    print(f"{'path':<28}{'p50 ms':>9}{'p95 ms':>9}{'added p50':>11}{'added p95':>11}")
    for name, r in report["results"].items():
        print(f"{name:<28}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{r['added_p50_ms']:>11.2f}{r['added_p95_ms']:>11.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
