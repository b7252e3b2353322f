#!/usr/bin/env python3
"""Lived-in memory benchmark: a person whose facts change over months (the procedure of
shared/bench/livedin/README.md), through the public protocol of a real gateway.

Each scenario (`{"person", "sessions": [{"date", "turns": [{"role", "content"}]}], "questions": [{"q",
"kind", "gold", "stale", …}]}`) gets its own state dir and gateway (`jarvis serve`, offline defaults). Each
session becomes the transcript `sessions/livedin-<n>.jsonl`: the header on line 1, turn t on line t + 2,
timestamps the session's date plus 45 s a turn. After `memory.sync`:

1. search pass: `memory.search {query, k: 5}` per question, as the shared procedure says (default settings,
   asked now: relative dates such as "last spring" resolve against today); `--pinned` asks as of the day
   after the last session (`asOf`) instead, so that they mean the same whenever the bench runs — a
   figure of its own, never the procedure's. Scored by what a reader
   sees — a gold turn is *visible* in a snippet when its first 50 characters (lowercased, whitespace
   collapsed) occur in it;
2. chat pass: each question by `chat.send` in a new session (the offline responder), scoring the
   `memory` list of `chat.final` by line range, with `memory.sync` after each turn (earlier questions
   become memory too, as for a real user).

Per kind (`current`, `history`, `stable`) and overall: hit@1 / hit@3 / hit@5; `stale above` (current:
a superseded statement visible above the first visible current one, or in the top 5 with no current
one); `empty` (no result); dup@5 (share of the top 5 repeating another of the top 5: equal snippets, or
a sentence of 25+ characters of one inside the other); question-only@5 (share of the top 5 whose
snippet holds only questions); `undated` (results without a `date`). Prints a table and writes JSON
under bench-results/.

Each miss of the search pass (not hit@1, a stale value above, or nothing) gets its kind, read from the
ledger (`memory.profile`, every fact and its history: a gold turn *extracted* starts a period of some
fact — its time is the turn's) and from the hits (`fact` of a hit: the ledger's statement the search put
there): `empty` (no result), `not extracted` (no gold turn is a statement of the ledger), `not matched`
(extracted, but no hit carries a gold statement's fact: the question went to another subject, or none),
`below stale` (matched, a superseded value shown above it), `ranked low` (matched, not first: the hit
showing it is not the one the ledger put first).

`--against REV` (repeatable): the same scenarios on REV's gateway (`git archive` into a temporary folder;
this script and its scoring on both sides) and on this working tree, one after the other per scenario
(the order alternating), both tables and the miss kinds side by side (REV → tree).

`--show "message"`: what the chat model sees for a message, after the passes: a second gateway on the
same state, its chat model a scripted OpenAI-compatible upstream (tests/fake_openai.py) that records the
prompt; the recalled part of its system prompt is printed as the model got it.

    .venv/bin/python scripts/bench_livedin.py                     # the repo's scenarios and shared/'s
    .venv/bin/python scripts/bench_livedin.py --scenario my.json --no-chat -v
    .venv/bin/python scripts/bench_livedin.py --show "Where do I live now?"   # what the model sees
    .venv/bin/python scripts/bench_livedin.py --scenario scripts/data/livedin-kofi.json --against main
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.sessions.transcript import append_sync, header, message_record  # noqa: E402
from gateway.timeutil import parse_iso, to_iso  # noqa: E402

SCENARIOS = [
    ROOT / "scripts" / "data" / "livedin-tomas.json",
    ROOT / "scripts" / "data" / "livedin-aoife.json",
    ROOT / "scripts" / "data" / "livedin-kofi.json",
    ROOT / "scripts" / "data" / "livedin-halima.json",
    ROOT / "scripts" / "data" / "livedin-ines.json",
    ROOT.parent / "shared" / "bench" / "livedin" / "priya.json",
]
KINDS = ("current", "history", "stable")
VISIBLE_CHARS = 50
TURN_SECONDS = 45


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_transcripts(scenario: dict, sessions_dir: Path) -> None:
    sessions_dir.mkdir(parents=True, exist_ok=True)
    for n, session in enumerate(scenario["sessions"]):
        start = parse_iso(session["date"])
        assert start is not None, session["date"]
        key = f"livedin-{n}"
        recs = [header(key, "main", to_iso(start))]
        for t, turn in enumerate(session["turns"]):
            when = to_iso(start + timedelta(seconds=TURN_SECONDS * t))
            recs.append(message_record(f"s{n}t{t}", turn["role"], turn["content"], timestamp=when))
        append_sync(sessions_dir / f"{key}.jsonl", recs)


def turn_text(scenario: dict, ref: list[int]) -> str:
    return scenario["sessions"][ref[0]]["turns"][ref[1]]["content"]


def visible_at(scenario: dict, refs: list[list[int]], snippets: list[str]) -> int | None:
    """The rank (0-based) of the first snippet that shows one of `refs`, else None."""
    keys = [norm(turn_text(scenario, r))[:VISIBLE_CHARS] for r in refs]
    for i, snip in enumerate(snippets):
        s = norm(snip)
        if any(k and k in s for k in keys):
            return i
    return None


def in_range_at(refs: list[list[int]], hits: list[dict]) -> int | None:
    """Chat pass: the rank of the first recalled range that covers one of `refs` (by file and line)."""
    wanted = {(f"sessions/livedin-{s}.jsonl", t + 2) for s, t in refs}
    for i, h in enumerate(hits):
        for path, line in wanted:
            if h.get("path") == path and h.get("startLine", 0) <= line <= h.get("endLine", -1):
                return i
    return None


_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_SPEAKER = re.compile(r"^\s*(user|assistant|[A-Z][\w .'-]{0,30}):\s*", re.IGNORECASE)


def sentences(snippet: str) -> list[str]:
    out = []
    for line in snippet.split("\n"):
        line = _SPEAKER.sub("", line).strip(" …")
        out.extend(s.strip() for s in _SENTENCE.findall(line) if len(s.strip()) > 1)
    return out


def question_only(snippet: str) -> bool:
    ss = sentences(snippet)
    return bool(ss) and all(s.endswith("?") for s in ss)


def duplicates(snippets: list[str]) -> int:
    """How many of `snippets` repeat an earlier one: equal, or a 25+ character sentence of one in the other."""
    normed = [norm(s) for s in snippets]
    long_sentences = [[norm(x) for x in sentences(s) if len(x) >= 25] for s in snippets]
    dup = 0
    for i in range(len(snippets)):
        for j in range(i):
            if (
                normed[i] == normed[j]
                or any(x in normed[j] for x in long_sentences[i])
                or any(x in normed[i] for x in long_sentences[j])
            ):
                dup += 1
                break
    return dup


class Gateway:
    """`jarvis serve` of the tree at `root` on a temp state dir, offline (or with `upstream`, an
    OpenAI-compatible base URL, as its chat model), on free ports; a kept WebSocket connection."""

    def __init__(self, state: Path, root: Path = ROOT, upstream: str = ""):
        self.state = state
        self.root = root
        self.upstream = upstream
        self.proc: subprocess.Popen | None = None
        self.conn: Any = None

    async def __aenter__(self) -> "Gateway":
        from gateway.cli.client import Connection
        from gateway.config import load_config

        port = free_port()
        env = {
            **os.environ,
            "JARVIS_STATE_DIR": str(self.state),
            "OPENAI_BASE_URL": self.upstream,
            "OPENAI_API_KEY": "bench" if self.upstream else "",
            "PYTHONPATH": str(self.root),
        }
        env.pop("JARVIS_CHAT_MODEL", None)
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--http-port", "0"]
        self.proc = subprocess.Popen(
            [*cmd, "--log-level", "warning"], cwd=self.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 120
        assert self.proc.stderr is not None
        while b"listening on" not in (line := self.proc.stderr.readline()):
            if (not line and self.proc.poll() is not None) or time.monotonic() > deadline:
                raise SystemExit("the gateway did not start")
        config = load_config({"stateDir": str(self.state), "server.port": port}, env={})
        self.conn = await Connection.open(config, f"ws://127.0.0.1:{port}/")
        return self

    async def call(self, method: str, params: dict | None = None) -> Any:
        return await self.conn.call(method, params or {})

    async def chat(self, message: str) -> dict:
        """A new session, one turn; the chat.final event's params."""
        session = await self.call("sessions.create", {"label": "bench"})
        run = await self.call("chat.send", {"sessionKey": session["sessionKey"], "message": message})
        while True:
            ev = await asyncio.wait_for(self.conn.events.get(), 60)
            if ev is None:
                raise SystemExit("the gateway closed the connection")
            p = ev.get("params") or {}
            if p.get("runId") != run["runId"]:
                continue
            if ev["method"] == "chat.final":
                return p
            if ev["method"] in ("chat.error", "chat.aborted"):
                raise SystemExit(f"chat failed: {ev}")

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            await self.conn.close()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)


def score_search(scenario: dict, q: dict, results: list[dict]) -> dict:
    snippets = [r.get("snippet", "") for r in results]
    gold = visible_at(scenario, q["gold"], snippets)
    stale = visible_at(scenario, q.get("stale") or [], snippets) if q.get("stale") else None
    top5 = snippets[:5]
    return {
        "q": q["q"],
        "kind": q["kind"],
        "gold_rank": gold,
        "hit@1": gold is not None and gold < 1,
        "hit@3": gold is not None and gold < 3,
        "hit@5": gold is not None and gold < 5,
        "stale_above": q["kind"] == "current" and stale is not None and (gold is None or stale < gold),
        "empty": not results,
        "dup5": duplicates(top5) / len(top5) if top5 else 0.0,
        "qonly5": sum(question_only(s) for s in top5) / len(top5) if top5 else 0.0,
        "results": len(results),
        "undated": sum(1 for r in results if not r.get("date")),
    }


def score_chat(q: dict, memory: list[dict]) -> dict:
    gold = in_range_at(q["gold"], memory)
    stale = in_range_at(q.get("stale") or [], memory) if q.get("stale") else None
    return {
        "q": q["q"],
        "kind": q["kind"],
        "gold_rank": gold,
        "hit@1": gold is not None and gold < 1,
        "hit@3": gold is not None and gold < 3,
        "hit@5": gold is not None and gold < 5,
        "stale_above": q["kind"] == "current" and stale is not None and (gold is None or stale < gold),
        "empty": not memory,
        "undated": sum(1 for r in memory if not r.get("date")),
    }


def summarise(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for kind in (*KINDS, "all"):
        sel = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not sel:
            continue
        n = len(sel)
        s: dict[str, Any] = {"questions": n}
        for m in ("hit@1", "hit@3", "hit@5"):
            s[m] = round(sum(r[m] for r in sel) / n, 3)
        s["stale_above"] = sum(r["stale_above"] for r in sel)
        s["empty"] = sum(r["empty"] for r in sel)
        if "dup5" in sel[0]:
            s["dup@5"] = round(sum(r["dup5"] for r in sel) / n, 3)
            s["question_only@5"] = round(sum(r["qonly5"] for r in sel) / n, 3)
        s["undated"] = sum(r["undated"] for r in sel)
        out[kind] = s
    return out


def turn_time(scenario: dict, ref: list[int]) -> str:
    """When a turn was said, as its transcript writes it (the session's date plus 45 s a turn)."""
    start = parse_iso(scenario["sessions"][ref[0]]["date"])
    assert start is not None
    return to_iso(start + timedelta(seconds=TURN_SECONDS * ref[1]))


def _same_time(iso: object) -> str:
    dt = parse_iso(iso) if isinstance(iso, str) else None
    return to_iso(dt) if dt is not None else ""


def states(scenario: dict, refs: list[list[int]], since: object, evidence: dict | None = None) -> bool:
    """Whether a ledger period is one of the turns `refs`: by its evidence (path and lines), or — where a
    gateway gives none — by when it began (a statement is dated as the passage it was indexed in, so
    between the turn's time and the end of its session)."""
    if evidence:
        return any(
            evidence.get("path") == f"sessions/livedin-{r[0]}.jsonl"
            and evidence.get("startLine", 0) <= r[1] + 2 <= evidence.get("endLine", -1)
            for r in refs
        )
    at = _same_time(since)
    return bool(at) and any(
        turn_time(scenario, r) <= at <= turn_time(scenario, [r[0], len(scenario["sessions"][r[0]]["turns"]) - 1])
        for r in refs
    )


Period = tuple[str, dict | None]  # (since, evidence)


async def ledger_periods(gw: Gateway) -> list[Period]:
    """Every period of every fact of the ledger (memory.profile, all pages, all history): when it began
    and where it was said (its evidence, where the gateway gives it). Empty when the gateway has no
    profile (an older REV)."""
    out: list[Period] = []
    cursor = None
    try:
        while True:
            params: dict[str, Any] = {"limit": 500, "history": 100, **({"cursor": cursor} if cursor else {})}
            page = await gw.call("memory.profile", params)
            for f in page.get("facts", []):
                out.append((f.get("since"), f.get("evidence")))
                out.extend((h.get("from"), h.get("evidence")) for h in f.get("history", []))
            cursor = page.get("nextCursor")
            if not cursor:
                break
    except Exception:  # (no memory.profile on that side)
        pass
    return out


MISS_KINDS = ("empty", "not extracted", "not matched", "below stale", "ranked low")


def miss_kind(scenario: dict, q: dict, row: dict, results: list[dict], periods: list[Period]) -> str | None:
    """Why a question missed (see the module), None when it did not: first, no stale value above."""
    if not results:
        return "empty"
    if row["hit@1"] and not row["stale_above"]:
        return None
    if not any(states(scenario, q["gold"], since, ev) for since, ev in periods):
        return "not extracted"
    # a hit carrying the ledger's statement (`fact`): its own place is the statement's evidence
    if not any(r.get("fact") and states(scenario, q["gold"], r["fact"].get("since"), r) for r in results):
        return "not matched"
    return "below stale" if row["stale_above"] else "ranked low"


def fake_upstream() -> Any:
    """A scripted OpenAI-compatible chat model that records each request (tests/fake_openai.py)."""
    from tests.fake_openai import FakeOpenAI

    return FakeOpenAI()


def recall_block(requests: list[dict], message: str) -> str:
    """The recalled part of the system prompt of the chat request that carried `message`."""
    for req in reversed(requests):
        msgs = (req.get("body") or {}).get("messages") or []
        if msgs and any(m.get("role") == "user" and m.get("content") == message for m in msgs):
            system = "\n".join(str(m.get("content") or "") for m in msgs if m.get("role") == "system")
            at = min(
                (k for k in (system.find("## What is true now"), system.find("## Recalled memory")) if k >= 0),
                default=-1,
            )
            return system[at:].strip() if at >= 0 else "(nothing recalled)"
    return "(the chat model was not asked)"


def asked_on(scenario: dict) -> str:
    """The day the questions are asked: the day after the last session (as `asOf`, a date)."""
    last = max(parse_iso(s["date"]) for s in scenario["sessions"])  # type: ignore[type-var]
    assert last is not None
    return (last + timedelta(days=1)).date().isoformat()


async def run_scenario(
    path: Path, chat: bool, verbose: bool, show: list[str], root: Path = ROOT, pinned: bool = False
) -> dict:
    """One scenario on the gateway of the tree at `root`: the search pass, the chat pass, --show.
    `pinned`: the search pass asks as of the day after the last session (`asOf`), else now."""
    scenario = json.loads(path.read_text())
    as_of = {"asOf": asked_on(scenario)} if pinned else {}
    with tempfile.TemporaryDirectory(prefix="livedin-") as tmp:
        state = Path(tmp) / "state"
        write_transcripts(scenario, state / "agents" / "main" / "sessions")
        async with Gateway(state, root) as gw:
            t0 = time.perf_counter()
            await gw.call("memory.sync", {})
            sync_s = time.perf_counter() - t0
            periods = await ledger_periods(gw)
            search_rows, latencies = [], []
            for q in scenario["questions"]:
                t = time.perf_counter()
                res = await gw.call("memory.search", {"query": q["q"], "k": 5, **as_of})
                latencies.append((time.perf_counter() - t) * 1000)
                row = score_search(scenario, q, res["results"])
                row["miss"] = miss_kind(scenario, q, row, res["results"], periods)
                search_rows.append(row)
                if verbose and row["miss"]:
                    print(f"  [{q['kind']}] {q['q']}  gold@{row['gold_rank']} {row['miss']}")
                    for r in res["results"]:
                        fact = f" fact={r['fact']['subject']}" if r.get("fact") else ""
                        print(
                            f"      {r['score']:.3f} {r.get('date', '-')[:10]} {r['path']}:{r['startLine']}{fact}"
                            f"  {norm(r['snippet'])[:110]}"
                        )
            chat_rows = []
            if chat:
                for q in scenario["questions"]:
                    final = await gw.chat(q["q"])
                    chat_rows.append(score_chat(q, final.get("memory", [])))
                    await gw.call("memory.sync", {})
        shown = {}
        if show:  # the same memory, a chat model that records what it is given
            with fake_upstream() as api:
                async with Gateway(state, root, upstream=api.base_url) as gw:
                    for text in show:
                        await gw.chat(text)
                        shown[text] = recall_block(api.requests, text)
    lat = sorted(latencies)
    return {
        "scenario": path.name,
        "person": scenario.get("person"),
        "sessions": len(scenario["sessions"]),
        "turns": sum(len(s["turns"]) for s in scenario["sessions"]),
        "asked": as_of.get("asOf", "now"),
        "sync_s": round(sync_s, 2),
        "search_p50_ms": round(lat[len(lat) // 2], 1),
        "search": summarise(search_rows),
        "misses": misses(search_rows),
        "chat": summarise(chat_rows) if chat_rows else None,
        "rows": search_rows,
        "chat_rows": chat_rows,
        "shown": shown,
    }


def misses(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per kind of question (and all): how many missed for each reason (MISS_KINDS)."""
    out: dict[str, dict[str, int]] = {}
    for kind in (*KINDS, "all"):
        sel = [r for r in rows if kind == "all" or r["kind"] == kind]
        if sel:
            out[kind] = {m: sum(r.get("miss") == m for r in sel) for m in MISS_KINDS}
    return out


def print_table(report: dict, side: str = "") -> None:
    print(
        f"\n{report['scenario']} — {report['person']}{f' [{side}]' if side else ''}: {report['sessions']} sessions,"
        f" {report['turns']} turns; asked {report['asked']}; sync {report['sync_s']} s,"
        f" search p50 {report['search_p50_ms']} ms"
    )
    cols = ("questions", "hit@1", "hit@3", "hit@5", "stale_above", "empty", "dup@5", "question_only@5", "undated")
    for name in ("search", "chat"):
        table = report.get(name)
        if not table:
            continue
        print(f"  {name:<8}" + "".join(f"{c:>16}" for c in cols))
        for kind, s in table.items():
            print(f"  {kind:<8}" + "".join(f"{s.get(c, '-')!s:>16}" for c in cols))
    print(f"  {'misses':<8}" + "".join(f"{c:>16}" for c in MISS_KINDS))
    for kind, m in report["misses"].items():
        print(f"  {kind:<8}" + "".join(f"{m[c]:>16}" for c in MISS_KINDS))
    for text, block in report["shown"].items():
        print(f"\n  what the chat model sees for {text!r}:")
        print("\n".join("    " + line for line in block.splitlines()))


def _arrow(before: object, after: object) -> str:
    return f"{'-' if before is None else before} → {'-' if after is None else after}"


def print_side_by_side(before: dict, after: dict, labels: tuple[str, str]) -> None:
    """One scenario on two sides: the search pass's figures and the miss kinds, `before → after`."""
    print(f"\n{after['scenario']}: {labels[0]} → {labels[1]}")
    cols = ("hit@1", "hit@3", "hit@5", "stale_above", "empty", "undated")
    print(f"  {'search':<8}" + "".join(f"{c:>16}" for c in cols))
    for kind, s in after["search"].items():
        b = before["search"].get(kind, {})
        print(f"  {kind:<8}" + "".join(f"{_arrow(b.get(c), s.get(c)):>16}" for c in cols))
    print(f"  {'misses':<8}" + "".join(f"{c:>16}" for c in MISS_KINDS))
    for kind, m in after["misses"].items():
        b = before["misses"].get(kind, {})
        print(f"  {kind:<8}" + "".join(f"{_arrow(b.get(c), m[c]):>16}" for c in MISS_KINDS))
    if after.get("chat") and before.get("chat"):
        a, b = after["chat"]["all"], before["chat"]["all"]
        print("  chat all " + ", ".join(f"{c} {b[c]} → {a[c]}" for c in ("hit@1", "hit@5", "stale_above", "empty")))


def export_rev(rev: str, into: Path) -> Path:
    """REV's tree (`git archive`) under `into`: its gateway serves that side."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True, text=True
    )
    if sha.returncode:
        raise SystemExit(f"--against {rev}: not a commit of this repository ({sha.stderr.strip()})")
    tree = into / sha.stdout.strip()[:12]
    tree.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", sha.stdout.strip()], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise SystemExit(f"--against {rev}: git archive failed")
    return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", type=Path, action="append", help="a scenario JSON (repeatable; default: all)")
    ap.add_argument("--no-chat", action="store_true", help="skip the chat pass")
    ap.add_argument(
        "--show", action="append", default=[], help="a message whose recall, as the model sees it, is printed"
    )
    ap.add_argument(
        "--against", action="append", default=[], metavar="REV", help="also run REV's gateway, side by side"
    )
    ap.add_argument(
        "--pinned",
        action="store_true",
        help="search as of the day after the last session (asOf), not now as the shared procedure does",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print the results of every miss")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "livedin.json", help="where the JSON goes")
    args = ap.parse_args()
    scenarios = args.scenario or [p for p in SCENARIOS if p.exists()]
    for path in scenarios:
        if not path.is_file():
            raise SystemExit(f"--scenario {path}: no such file")
    reports: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="livedin-against-") as tmp:
        sides = [(rev, export_rev(rev, Path(tmp))) for rev in args.against] + [("tree", ROOT)]
        for n, path in enumerate(scenarios):
            by_side: dict[str, dict] = {}
            for label, root in sides if n % 2 == 0 else sides[::-1]:
                report = asyncio.run(run_scenario(path, not args.no_chat, args.verbose, args.show, root, args.pinned))
                report["side"] = label
                print_table(report, label if len(sides) > 1 else "")
                by_side[label] = report
                reports.append(report)
            for label, _ in sides[:-1]:
                print_side_by_side(by_side[label], by_side["tree"], (label, "tree"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.write_text(json.dumps({"when": when, "reports": reports}, indent=2) + "\n")
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
