#!/usr/bin/env python3
"""Lived-in memory benchmark: a person whose facts change over months (the procedure of
shared/bench/livedin/README.md), through the public protocol of a real gateway.

Each scenario (`{"person", "sessions": [{"date", "turns": [{"role", "content"}]}], "questions": [{"q",
"kind", "gold", "stale", …}]}`) gets its own state dir and gateway (`jarvis serve`, offline defaults). Each
session becomes the transcript `sessions/livedin-<n>.jsonl`: the header on line 1, turn t on line t + 2,
timestamps the session's date plus 45 s a turn. After `memory.sync`:

1. search pass: `memory.search {query, k: 5}` per question, scored by what a reader sees — a gold turn is
   *visible* in a snippet when its first 50 characters (lowercased, whitespace collapsed) occur in it;
2. chat pass: each question by `chat.send` in a new session (the offline responder), scoring the
   `memory` list of `chat.final` by line range, with `memory.sync` after each turn (earlier questions
   become memory too, as for a real user).

Per kind (`current`, `history`, `stable`) and overall: hit@1 / hit@3 / hit@5; `stale above` (current:
a superseded statement visible above the first visible current one, or in the top 5 with no current
one); `empty` (no result); dup@5 (share of the top 5 repeating another of the top 5: equal snippets, or
a sentence of 25+ characters of one inside the other); question-only@5 (share of the top 5 whose
snippet holds only questions); `undated` (results without a `date`). Prints a table and writes JSON
under bench-results/.

    .venv/bin/python scripts/bench_livedin.py                     # the repo's scenarios and shared/'s
    .venv/bin/python scripts/bench_livedin.py --scenario my.json --no-chat -v
    .venv/bin/python scripts/bench_livedin.py --show "Where do I live now?"   # what the model sees
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
    """`jarvis serve` on a temp state dir, offline, on free ports; a kept WebSocket connection."""

    def __init__(self, state: Path):
        self.state = state
        self.proc: subprocess.Popen | None = None
        self.conn: Any = None

    async def __aenter__(self) -> "Gateway":
        from gateway.cli.client import Connection
        from gateway.config import load_config

        port = free_port()
        env = {**os.environ, "JARVIS_STATE_DIR": str(self.state), "OPENAI_BASE_URL": "", "OPENAI_API_KEY": ""}
        env.pop("JARVIS_CHAT_MODEL", None)
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--http-port", "0"]
        self.proc = subprocess.Popen(
            [*cmd, "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
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


async def run_scenario(path: Path, chat: bool, verbose: bool, show: list[str]) -> dict:
    scenario = json.loads(path.read_text())
    with tempfile.TemporaryDirectory(prefix="livedin-") as tmp:
        state = Path(tmp) / "state"
        write_transcripts(scenario, state / "agents" / "main" / "sessions")
        async with Gateway(state) as gw:
            t0 = time.perf_counter()
            await gw.call("memory.sync", {})
            sync_s = time.perf_counter() - t0
            search_rows, latencies = [], []
            for q in scenario["questions"]:
                t = time.perf_counter()
                res = await gw.call("memory.search", {"query": q["q"], "k": 5})
                latencies.append((time.perf_counter() - t) * 1000)
                row = score_search(scenario, q, res["results"])
                search_rows.append(row)
                if verbose and not (row["hit@1"] and not row["stale_above"]):
                    print(f"  [{q['kind']}] {q['q']}  gold@{row['gold_rank']} stale_above={row['stale_above']}")
                    for r in res["results"]:
                        print(
                            f"      {r['score']:.3f} {r.get('date', '-')[:10]} {r['path']}:{r['startLine']}"
                            f"  {norm(r['snippet'])[:110]}"
                        )
            shown = {}
            for text in show:
                final = await gw.chat(text)
                shown[text] = final.get("memory", [])
            chat_rows = []
            if chat:
                for q in scenario["questions"]:
                    final = await gw.chat(q["q"])
                    chat_rows.append(score_chat(q, final.get("memory", [])))
                    await gw.call("memory.sync", {})
    lat = sorted(latencies)
    return {
        "scenario": path.name,
        "person": scenario.get("person"),
        "sessions": len(scenario["sessions"]),
        "turns": sum(len(s["turns"]) for s in scenario["sessions"]),
        "sync_s": round(sync_s, 2),
        "search_p50_ms": round(lat[len(lat) // 2], 1),
        "search": summarise(search_rows),
        "chat": summarise(chat_rows) if chat_rows else None,
        "rows": search_rows,
        "chat_rows": chat_rows,
        "shown": shown,
    }


def print_table(report: dict) -> None:
    print(
        f"\n{report['scenario']} — {report['person']}: {report['sessions']} sessions, {report['turns']} turns;"
        f" sync {report['sync_s']} s, search p50 {report['search_p50_ms']} ms"
    )
    cols = ("questions", "hit@1", "hit@3", "hit@5", "stale_above", "empty", "dup@5", "question_only@5", "undated")
    for name in ("search", "chat"):
        table = report.get(name)
        if not table:
            continue
        print(f"  {name:<8}" + "".join(f"{c:>16}" for c in cols))
        for kind, s in table.items():
            print(f"  {kind:<8}" + "".join(f"{s.get(c, '-')!s:>16}" for c in cols))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", type=Path, action="append", help="a scenario JSON (repeatable; default: both)")
    ap.add_argument("--no-chat", action="store_true", help="skip the chat pass")
    ap.add_argument("--show", action="append", default=[], help="a message whose chat recall is printed")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the results of every miss")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "livedin.json", help="where the JSON goes")
    args = ap.parse_args()
    scenarios = args.scenario or [p for p in SCENARIOS if p.exists()]
    reports = []
    for path in scenarios:
        report = asyncio.run(run_scenario(path, not args.no_chat, args.verbose, args.show))
        print_table(report)
        for text, memory in report["shown"].items():
            print(f"\n  recalled for {text!r}:")
            for m in memory:
                print(f"    {m.get('date', '-')} {m['path']}:{m['startLine']}-{m['endLine']} {m.get('score')}")
        reports.append(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.write_text(json.dumps({"when": when, "reports": reports}, indent=2) + "\n")
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
