"""`--against REV` for the benchmarks (bench_memory, bench_rpc, bench_openai, bench_responses): the same
bench over another revision's code, side by side with this working tree, in one run.

Each REV is exported (`git archive`) into a temporary folder, or copied when REV names a folder holding a
tree (`gateway/` in it: an export made beforehand, for a machine without the repository's history); this
checkout's copies of the bench and its harness (the `carry` paths: the bench script, this module, the
fake upstream, the gateway-process helper) are put into it, so both sides measure the same way and only
the gateway's code differs. Each side's run is a process of its own with that tree first on its path
(PYTHONPATH and the working directory: the gateway it starts runs from there). This working tree
(uncommitted changes included) is the last side, unless `--no-tree`.

The sides run alternately, `--rounds` times per case (the order flips each round: A B, B A, ...), so the
load of a shared machine falls on all of them alike; then each figure's median per side, each round's
figures, and the ratio of each side to the first REV. Absolute times on a busy machine are noise; these
ratios, over alternating rounds, are not. Every run is written as it ends (`….partial.json`), all of
them at the end with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# (label, path into a run's JSON, True where more is better)
Figure = tuple[str, tuple[str, ...], bool]


@dataclass(frozen=True)
class Side:
    label: str  # the REV as given and its commit (or the folder's name), or tree@HEAD(+ when changed)
    commit: str  # the full commit, the folder's name, or "tree"
    root: Path  # where its code is

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.root), os.environ.get("PYTHONPATH", "")])}


def add_arguments(ap: argparse.ArgumentParser, rounds: int = 2) -> None:
    """--against REV (repeatable), --rounds N, --tree/--no-tree."""
    ap.add_argument(
        "--against",
        action="append",
        metavar="REV",
        help="side by side: also measure this git revision (exported into a temporary folder), or the tree in "
        "this folder, alternating with this working tree; repeatable; the ratios are to the first REV",
    )
    ap.add_argument(
        "--rounds", type=int, default=rounds, help=f"--against: rounds of each side per case (default {rounds})"
    )
    ap.add_argument(
        "--tree",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--against: measure this working tree as one of the sides (default: on; --no-tree: only the REVs)",
    )


def passthrough(argv: list[str]) -> list[str]:
    """The bench's own options from `argv`, without --against, --rounds, --tree/--no-tree and --out (each
    side's run gets its own --out)."""
    valued = {"--against", "--rounds", "--out"}
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in valued:
            skip = "=" not in arg
            continue
        if name in {"--tree", "--no-tree"}:
            continue
        kept.append(arg)
    return kept


def export_rev(rev: str, into: Path, carry: list[str]) -> tuple[str, Path]:
    """REV's tree under `into`, with this checkout's `carry` paths (relative to the repository root) in
    it. → (its commit, or the folder's name; the tree)."""
    if (Path(rev) / "gateway").is_dir():
        tree = into / Path(rev).resolve().name
        shutil.copytree(rev, tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "bench-results"))
        commit = Path(rev).resolve().name
    else:
        sha = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if sha.returncode:
            raise SystemExit(f"--against {rev}: not a commit of this repository ({sha.stderr.strip()})")
        commit = sha.stdout.strip()
        tree = into / commit[:12]
        tree.mkdir(parents=True)
        archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.wait():
            raise SystemExit(f"--against {rev}: git archive failed")
    for rel in carry:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tree / rel)
    return commit, tree


@contextmanager
def sides(args: argparse.Namespace, name: str, carry: list[str]) -> Iterator[list[Side]]:
    """The sides of `--against` (each REV exported into a temporary folder, then this tree unless
    --no-tree), removed when done."""
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix=f"{name}-against-") as tmp:
        out: list[Side] = []
        for rev in args.against:
            commit, tree = export_rev(rev, Path(tmp), carry)
            label = commit if (Path(rev) / "gateway").is_dir() else commit[:9]
            out.append(Side(label if commit.startswith(rev) or label == commit else f"{rev}@{label}", commit, tree))
        if args.tree:
            head = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True
            )
            dirty = subprocess.run(
                ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            out.append(Side(f"tree@{head.stdout.strip()}{'+' if dirty else ''}", "tree", ROOT))
        if len(out) < 2:
            raise SystemExit("--against needs two sides: a second REV, or this working tree (drop --no-tree)")
        yield out


def alternate(
    sides: list[Side],
    rounds: int,
    cases: list[Any],
    measure: Callable[[Side, Any, int], dict],
    partial: Path,
) -> dict[Any, dict[str, list[dict]]]:
    """`measure(side, case, round)` for each case, `rounds` times a side, the order flipping each round;
    every run is written to `partial` as it ends. → runs[case][side's label]."""
    runs: dict[Any, dict[str, list[dict]]] = {case: {s.label: [] for s in sides} for case in cases}
    for case in cases:
        for rnd in range(rounds):
            for side in sides if rnd % 2 == 0 else sides[::-1]:
                print(f"{case}, round {rnd + 1}/{rounds}: {side.label} …", file=sys.stderr)
                runs[case][side.label].append(measure(side, case, rnd))
                partial.write_text(
                    json.dumps({"sides": [(s.label, s.commit) for s in sides], "runs": _keyed(runs)}, indent=1)
                )
    return runs


def run_json(side: Side, command: list[str], out: Path | None = None) -> dict:
    """Run `command` in `side`'s tree; → the JSON it wrote to `out`, or else the last line it printed."""
    done = subprocess.run(command, cwd=side.root, env=side.env(), capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{side.label}: {' '.join(command[1:3])} failed (exit {done.returncode})")
    if out is not None:
        return json.loads(out.read_text())
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_run(side: Side, script: str, argv: list[str], tmp: Path, tag: str) -> dict:
    """One run of `scripts/<script>` with `argv` in `side`'s tree, its JSON written under `tmp`."""
    out = tmp / f"{tag}-{abs(hash(side.label)) % 10**6}-{time.monotonic_ns()}.json"
    return run_json(side, [sys.executable, str(side.root / "scripts" / script), *argv, "--out", str(out)], out)


def out_path(name: str, out: str | Path | None) -> Path:
    """Where `--against` writes: --out when given on the command line (not its default), else
    bench-results/<name>-against-<time>.json."""
    given = any(a.split("=", 1)[0] == "--out" for a in sys.argv[1:])
    if given and out is not None:
        return Path(out)
    return ROOT / "bench-results" / f"{name}-against-{time.strftime('%Y%m%d-%H%M%S')}.json"


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system) process `pid` has used so far (Linux: /proc). CPU time per request
    holds still under a shared machine's load, where latencies do not."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def figure(result: dict, path: tuple[str, ...]) -> float | None:
    v: object = result
    for key in path:
        if not isinstance(v, dict) or v.get(key) is None:
            return None
        v = v[key]
    return float(v) if isinstance(v, (int, float)) else None


def compare(
    sides: list[Side], runs: dict[Any, dict[str, list[dict]]], figures: list[Figure], title: Callable[[Any], str]
) -> list[dict]:
    """Print each case's table (median per side, each round's figures, ratios to the first side); → rows."""
    ref = sides[0].label
    table: list[dict] = []
    for case, by in runs.items():
        print(f"\n{title(case)}, {len(by[ref])} round(s) a side, median (each round)")
        print(
            f"{'figure':<24}"
            + "".join(f" {s.label:>24}" for s in sides)
            + "".join(f" {'÷ ' + ref[:10]:>14}" for _ in sides[1:])
        )
        for name, key, _more_better in figures:
            per = {s.label: [v for r in by[s.label] if (v := figure(r, key)) is not None] for s in sides}
            if not all(per.values()):
                continue
            med = {label: statistics.median(vs) for label, vs in per.items()}
            ratios = {s.label: (med[s.label] / med[ref] if med[ref] else None) for s in sides[1:]}
            table.append({"case": case, "figure": name, "median": med, "rounds": per, "ratioToRef": ratios})
            cells = "".join(
                f" {med[s.label]:>10.1f} ({'/'.join(f'{v:g}' for v in per[s.label])[:11]:>11})" for s in sides
            )
            print(
                f"{name:<24}{cells}"
                + "".join(f" {(f'{r:.2f}x' if r is not None else '-'):>14}" for r in ratios.values())
            )
    return table


def write(
    path: Path, sides: list[Side], rounds: int, table: list[dict], runs: dict[Any, dict[str, list[dict]]]
) -> None:
    path.write_text(
        json.dumps(
            {
                "sides": [{"label": s.label, "commit": s.commit} for s in sides],
                "reference": sides[0].label,
                "rounds": rounds,
                "cpus": os.cpu_count(),
                "loadAverage": os.getloadavg(),
                "table": table,
                "runs": _keyed(runs),
            },
            indent=2,
        )
    )
    path.with_suffix(".partial.json").unlink(missing_ok=True)
    print(f"wrote {path}", file=sys.stderr)


def run_bench(
    args: argparse.Namespace, script: str, argv: list[str], figures: list[Figure], what: str, carry: list[str]
) -> int:
    """`--against` for a bench with one case: `script` run with its own options (`argv`, without the
    --against ones), alternating sides, `args.rounds` times each; the table printed and written to
    `args.out` (default bench-results/<name>-against-<time>.json)."""
    name = Path(script).stem
    path = out_path(name.removeprefix("bench_"), args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    with (
        sides(args, name, [f"scripts/{script}", "scripts/bench_against.py", *carry]) as both,
        tempfile.TemporaryDirectory() as tmp,
    ):
        runs = alternate(
            both,
            args.rounds,
            [what],
            lambda side, case, rnd: bench_run(side, script, argv, Path(tmp), f"r{rnd}"),
            path.with_suffix(".partial.json"),
        )
    table = compare(both, runs, figures, lambda case: case)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    write(path, both, args.rounds, table, runs)
    return 0


def _keyed(runs: dict[Any, dict[str, list[dict]]]) -> dict[str, dict[str, list[dict]]]:
    return {str(case): by for case, by in runs.items()}
