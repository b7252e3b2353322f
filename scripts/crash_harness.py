#!/usr/bin/env python3
"""SIGKILL the gateway at random moments, N times, and check that nothing acknowledged was lost.

    .venv/bin/python scripts/crash_harness.py [--rounds 20] [--seed 1] [--notes 300] [--no-memory] [--out FILE]

The logic (and what is checked) lives in tests/system/crash/test_crash.py, which runs a reduced count in the
suite. Everything runs on loopback in a temporary state dir. Writes JSON (default
bench-results/crash.json) and exits non-zero if any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.system.crash.test_crash import crash_rounds  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--notes", type=int, default=300, help="memory notes in the workspace (indexing work)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "crash.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jarvis-crash-") as tmp:
        try:
            res = asyncio.run(
                crash_rounds(
                    Path(tmp), min(args.rounds, 200), args.seed, args.notes, memory=False if args.no_memory else None
                )
            )
            res["ok"] = True
        except AssertionError as exc:
            res = {"ok": False, "error": str(exc)[:2000], "seed": args.seed}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    for r in res.get("rounds", []):
        print(r)
    print(json.dumps({k: v for k, v in res.items() if k != "rounds"}, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
