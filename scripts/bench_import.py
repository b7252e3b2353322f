#!/usr/bin/env python3
"""How fast `jarvis import chatgpt` brings a big export in, and how much memory it takes doing so.

A ChatGPT export of `--conversations` generated conversations (`--turns` messages each, in the vendor's
real shape: tests/vendor_exports.py) is zipped as ChatGPT sends it, then imported by `jarvis import`
as a user runs it: a subprocess on a fresh state dir, no gateway (in process), timed, its peak RSS read
from the kernel (RUSAGE_CHILDREN after it exits). Runs:

  floor       `jarvis config`: what the CLI process costs before it does anything
  import      memory off: reading, converting and writing the sessions only, for the export and for one
              `--scale` times bigger (the same peak RSS for both is what "bounded" means)
  import+index  memory on (the bundled local embedder): the import, then the sync that embeds every
              chunk (chunks/s)
  again       the same export imported a second time (nothing to add: the idempotence check's cost)
  export      `jarvis export` of what was imported

Prints a table and writes JSON (default bench-results/import.json).

    .venv/bin/python scripts/bench_import.py                       # 2,000 conversations, scale 4
    .venv/bin/python scripts/bench_import.py --conversations 500 --scale 2
    .venv/bin/python scripts/bench_import.py --chain 240000 --out bench-results/import-chain.json
    .venv/bin/python scripts/bench_import.py --linear 20000     # converting 1/10 and all of N turns

`--linear N` converts one conversation of N/10 and of N turns in process (no import, no files), each
the best of three in CPU time, alternating small and big, and prints the ratio: about 10 is linear, a
walk that searched the mapping per node would be about 100 (tests count the looks into the export instead).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_export(path: Path, n: int, turns: int) -> int:
    """Write the zip in a child process (this one stays small: a child's peak RSS counts from its parent's
    size when it was spawned); → the bytes of its conversations.json."""
    code = (
        "import sys, zipfile; from tests.vendor_exports import generated_export; "
        "data = generated_export(int(sys.argv[2]), turns=int(sys.argv[3]), seed='bench' + sys.argv[2]); "
        "zf = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED); zf.writestr('conversations.json', data); "
        "zf.close(); print(len(data))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(n), str(turns)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout)


def make_chain(path: Path, nodes: int) -> int:
    """One conversation of `nodes` messages in a single chain, lean ones (~210 bytes a node, as issue
    43.7's red-team export: 240,000 nodes in 51 MB), zipped; → the bytes of its conversations.json."""
    code = r"""
import sys, zipfile, orjson
n = int(sys.argv[2])
mapping = {}
for i in range(n):
    mapping[f"n{i}"] = {
        "id": f"n{i}",
        "message": {"id": f"m{i}", "author": {"role": "user" if i % 2 else "assistant"}, "create_time": 1.7e9 + i,
                    "content": {"content_type": "text", "parts": [f"turn {i}"]}},
        "parent": f"n{i - 1}" if i else None,
        "children": [f"n{i + 1}"] if i + 1 < n else [],
    }
conv = {"id": "chain", "title": "a chain", "create_time": 1.7e9, "current_node": f"n{n - 1}", "mapping": mapping}
data = orjson.dumps([conv])
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as zf:
    zf.writestr("conversations.json", data)
print(len(data))
"""
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(nodes)], check=True, capture_output=True, text=True
    )
    return int(out.stdout)


def linear(turns: int) -> int:
    """`--linear N`: CPU seconds converting N/10 and N turns (best of three, alternating), and the ratio."""
    sys.path.insert(0, str(ROOT))
    from gateway.portability import chatgpt
    from tests.vendor_exports import long_chatgpt

    convs = {n: long_chatgpt("speed", n).json() for n in (turns // 10, turns)}
    best = {n: float("inf") for n in convs}
    for _ in range(3):
        for n in (*convs, *reversed(convs)):  # A B B A
            t = time.process_time()
            out = chatgpt.convert(convs[n], 0)
            best[n] = min(best[n], time.process_time() - t)
            assert len(out.turns) == n
    small, big = best[turns // 10], best[turns]
    row = {
        "turns": [turns // 10, turns],
        "cpuSeconds": [small, big],
        "ratio": big / small if small else None,
        "loadavg": os.getloadavg()[0],
    }
    print(json.dumps(row, indent=2))
    return 0


def chain(nodes: int, out: Path) -> int:
    """`--chain N`: the peak RSS of importing one conversation of N nodes (set PYTHONPATH=<checkout>
    PYTHONSAFEPATH=1 to run another checkout's gateway: the figure before a change)."""
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        path = Path(tmp) / "chain.zip"
        size = make_chain(path, nodes)
        res, wall, rss = run(["import", "chatgpt", str(path), "--json"], Path(tmp) / "state", memory=False)
        row = {
            "run": f"one conversation of a {nodes:,}-node chain",
            "jsonMB": size / 1e6,
            "zipMB": path.stat().st_size / 1e6,
            "seconds": wall,
            "peakRssMB": rss / 2**20,
            "conversations": (res or {}).get("conversations"),
            "skipped": (res or {}).get("skippedConversations"),
        }
    print(json.dumps(row, indent=2))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(row, indent=2) + "\n")
    return 0


def run(args: list[str], state: Path, memory: bool) -> tuple[dict | None, float, int]:
    """(the --json result or None, wall seconds, peak RSS in bytes) of one `jarvis` subprocess."""
    state.mkdir(parents=True, exist_ok=True)
    (state / "config.toml").write_text("" if memory else "[memory]\nenabled = false\n")
    env = {**os.environ, "JARVIS_STATE_DIR": str(state)}
    env.pop("OPENAI_API_KEY", None)
    cmd = [sys.executable, "-m", "gateway.cli", *args]
    t = time.perf_counter()
    pid = os.posix_spawn(
        cmd[0],
        cmd,
        env,
        file_actions=[(os.POSIX_SPAWN_OPEN, 1, str(state / "out.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)],
    )
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(args)} failed: exit {os.waitstatus_to_exitcode(status)}")
    out = (state / "out.json").read_text()
    rss = usage.ru_maxrss * (1 if platform.system() == "Darwin" else 1024)
    return (json.loads(out) if out.strip().startswith("{") else None), wall, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=12, help="messages per conversation (default 12)")
    ap.add_argument("--scale", type=int, default=4, help="the bigger export's size, times --conversations")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "import.json", help="where the JSON goes")
    ap.add_argument("--chain", type=int, default=0, help="only: import one conversation of this many nodes")
    ap.add_argument("--linear", type=int, default=0, help="only: CPU time converting N/10 and N turns, the ratio")
    args = ap.parse_args()
    if args.linear:
        return linear(args.linear)
    if args.chain:
        return chain(args.chain, args.out)

    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        base = Path(tmp)
        exports = {}
        for n in (args.conversations, args.conversations * args.scale):
            path = base / f"chatgpt-{n}.zip"
            size = make_export(path, n, args.turns)
            exports[n] = (path, size)
            print(
                f"export of {n:,} conversations: {size / 1e6:,.1f} MB of JSON, {path.stat().st_size / 1e6:,.1f} MB zipped"
            )

        rows = []
        _, wall, rss = run(["config"], base / "floor", memory=False)
        rows.append({"run": "floor (jarvis config)", "seconds": wall, "peakRssMB": rss / 2**20})
        for n, (path, size) in exports.items():
            res, wall, rss = run(["import", "chatgpt", str(path), "--json"], base / f"plain-{n}", memory=False)
            assert res is not None and res["conversations"]["added"] == n, res
            rows.append(
                {
                    "run": f"import {n:,} (memory off)",
                    "conversations": n,
                    "jsonMB": size / 1e6,
                    "seconds": wall,
                    "importSeconds": res["durationMs"] / 1000,
                    "conversationsPerS": n / (res["durationMs"] / 1000),
                    "messagesPerS": res["messages"]["added"] / (res["durationMs"] / 1000),
                    "MBPerS": size / 1e6 / (res["durationMs"] / 1000),
                    "peakRssMB": rss / 2**20,
                }
            )
        n = args.conversations
        path, size = exports[n]
        state = base / "indexed"
        res, wall, rss = run(["import", "chatgpt", str(path), "--json"], state, memory=True)
        assert res is not None and res["index"] and "error" not in res["index"], res
        index_s = res["index"]["durationMs"] / 1000
        rows.append(
            {
                "run": f"import+index {n:,}",
                "conversations": n,
                "seconds": wall,
                "importSeconds": res["durationMs"] / 1000,
                "indexSeconds": index_s,
                "chunks": res["index"]["chunksEmbedded"],
                "chunksPerS": res["index"]["chunksEmbedded"] / index_s if index_s else None,
                "peakRssMB": rss / 2**20,
            }
        )
        res, wall, rss = run(["import", "chatgpt", str(path), "--json"], state, memory=True)
        assert res is not None and res["conversations"]["unchanged"] == n, res
        rows.append(
            {
                "run": f"again {n:,} (nothing new)",
                "seconds": wall,
                "importSeconds": res["durationMs"] / 1000,
                "peakRssMB": rss / 2**20,
            }
        )
        res, wall, rss = run(["export", "--out", str(base / "export.zip"), "--json"], state, memory=True)
        assert res is not None and res["sessions"]["count"] == n, res
        rows.append(
            {
                "run": f"export {n:,}",
                "seconds": wall,
                "exportSeconds": res["durationMs"] / 1000,
                "zipMB": res["bytes"] / 1e6,
                "peakRssMB": rss / 2**20,
            }
        )

    print(f"\n{'run':32} {'wall s':>8} {'work s':>8} {'rate':>22} {'peak RSS':>10}")
    for r in rows:
        work = r.get("importSeconds") or r.get("exportSeconds")
        if "chunksPerS" in r:
            rate = f"{r['chunksPerS']:,.0f} chunks/s"
        elif "conversationsPerS" in r:
            rate = f"{r['conversationsPerS']:,.0f} conv/s, {r['MBPerS']:.0f} MB/s"
        else:
            rate = ""
        print(
            f"{r['run']:32} {r['seconds']:8.2f} {work if work is not None else float('nan'):8.2f} {rate:>22} {r['peakRssMB']:8.0f} MB"
        )
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "conversations": args.conversations,
        "turns": args.turns,
        "scale": args.scale,
        "runs": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
