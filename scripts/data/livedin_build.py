"""Build a lived-in scenario (the format of shared/bench/livedin/) from labelled turns, and check it.

A generator script (`gen_livedin_<name>.py`) lists sessions as `(date, [turn, …])` where a turn is
`U(text, *labels)` or `A(text, *labels)`, and questions as `Q(q, kind, gold=[label…], stale=[label…])`.
A label names the value a turn states (`home.toxteth`); `x~home.toxteth` marks a turn that only mentions
that old value while saying a new one: gold for a question about the old value, never stale.

`build()` resolves labels to `[session, turn]` refs (0-based) and refuses the scenario unless:
- every label a question uses is on some turn, every ref is in range, kinds are current/history/stable;
- for a `current` question every stale turn comes before its first gold turn, and no turn is both;
- every turn's first 50 normalised characters (lowercased, whitespace collapsed, as bench_livedin.py
  scores a visible hit) are unique, and the key of a gold or stale turn occurs in no other turn's text,
  so a hit can only be the turn it names;
- session dates rise.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

VISIBLE_CHARS = 50
KINDS = ("current", "history", "stable")


@dataclass
class Turn:
    role: str
    content: str
    labels: tuple[str, ...] = ()


@dataclass
class Q:
    q: str
    kind: str
    gold: list[str]
    stale: list[str] = field(default_factory=list)


def U(content: str, *labels: str) -> Turn:
    return Turn("user", content, labels)


def A(content: str, *labels: str) -> Turn:
    return Turn("assistant", content, labels)


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def iso(date: str) -> str:
    """`2025-03-04 19:20` → `2025-03-04T19:20:00.000Z`."""
    d = datetime.strptime(date, "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.000Z")


class ScenarioError(ValueError):
    pass


def build(person: str, sessions: list[tuple[str, list[Turn]]], questions: list[Q]) -> dict:
    errors: list[str] = []
    where: dict[str, list[list[int]]] = {}
    keys: Counter[str] = Counter()
    texts: list[tuple[list[int], str]] = []
    last = ""
    for s, (date, turns) in enumerate(sessions):
        when = iso(date)
        if when <= last:
            errors.append(f"session {s}: date {date} does not come after the one before")
        last = when
        if not turns:
            errors.append(f"session {s}: no turns")
        for t, turn in enumerate(turns):
            if turn.role not in ("user", "assistant") or not turn.content.strip():
                errors.append(f"session {s} turn {t}: bad role or empty text")
            keys[norm(turn.content)[:VISIBLE_CHARS]] += 1
            texts.append(([s, t], norm(turn.content)))
            for label in turn.labels:
                where.setdefault(label, []).append([s, t])
    for key, n in keys.items():
        if n > 1:
            errors.append(f"{n} turns share the first {VISIBLE_CHARS} characters {key!r}")

    out_questions = []
    for i, q in enumerate(questions):
        if q.kind not in KINDS:
            errors.append(f"question {i} {q.q!r}: kind {q.kind!r} is none of {KINDS}")
        if not q.q.rstrip().endswith("?"):
            errors.append(f"question {i} {q.q!r}: not a question")
        gold: list[list[int]] = []
        for label in q.gold:
            refs = where.get(label, []) + where.get("x~" + label, [])
            if not refs:
                errors.append(f"question {i} {q.q!r}: no turn carries gold label {label!r}")
            gold.extend(refs)
        stale: list[list[int]] = []
        for label in q.stale:
            refs = where.get(label, [])
            if not refs:
                errors.append(f"question {i} {q.q!r}: no turn carries stale label {label!r}")
            stale.extend(refs)
        if q.stale and q.kind != "current":
            errors.append(f"question {i} {q.q!r}: only current questions have stale turns")
        gold = sorted({tuple(r): r for r in gold}.values())
        stale = sorted({tuple(r): r for r in stale}.values())
        for r in gold + stale:
            if not (0 <= r[0] < len(sessions) and 0 <= r[1] < len(sessions[r[0]][1])):
                errors.append(f"question {i}: ref {r} out of range")
        if {tuple(r) for r in gold} & {tuple(r) for r in stale}:
            errors.append(f"question {i} {q.q!r}: a turn is both gold and stale")
        if gold and stale and max(stale) >= min(gold):
            errors.append(f"question {i} {q.q!r}: stale turn {max(stale)} is not before gold {min(gold)}")
        for r in gold + stale:
            key = norm(sessions[r[0]][1][r[1]].content)[:VISIBLE_CHARS]
            for other, text in texts:
                if other != r and key in text:
                    errors.append(f"question {i}: the key of turn {r} also occurs in turn {other}")
        out_questions.append(
            {
                "q": q.q,
                "kind": q.kind,
                "gold": gold,
                "stale": stale,
                "gold_labels": list(q.gold),
                "stale_labels": list(q.stale),
            }
        )
    if errors:
        raise ScenarioError("\n".join(errors))
    return {
        "person": person,
        "sessions": [
            {"date": iso(date), "turns": [{"role": t.role, "content": t.content} for t in turns]}
            for date, turns in sessions
        ],
        "questions": out_questions,
    }


def write(scenario: dict, path: Path, check: bool = False) -> None:
    """Write `scenario` to `path`; with `check`, only verify that `path` already holds exactly it."""
    text = json.dumps(scenario, indent=1, ensure_ascii=False) + "\n"
    if check:
        if not path.exists() or path.read_text() != text:
            raise ScenarioError(f"{path.name} is not what its generator makes: run the generator and commit both")
    else:
        path.write_text(text)
    turns = sum(len(s["turns"]) for s in scenario["sessions"])
    kinds = Counter(q["kind"] for q in scenario["questions"])
    print(
        f"{path.name}: {len(scenario['sessions'])} sessions "
        f"({scenario['sessions'][0]['date'][:10]} → {scenario['sessions'][-1]['date'][:10]}), {turns} turns, "
        f"{len(scenario['questions'])} questions {dict(kinds)}"
    )


def run(person: str, sessions: list[tuple[str, list[Turn]]], questions: list[Q], out: Path, argv: list[str]) -> int:
    """A generator's main: build, check and write (or with `--check`, only verify) `out`; errors to stderr."""
    try:
        write(build(person, sessions, questions), out, check="--check" in argv)
    except ScenarioError as e:
        print(f"{out.name}: refused\n{e}", file=sys.stderr)
        return 1
    return 0
