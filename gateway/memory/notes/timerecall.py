"""Time recall: what was remembered or said in a period, optionally ranked by a query.

Where the time comes from:

    memory/**/YYYY-MM-DD.md      the day in the file name (UTC); one result per `#` section
    memory/keyed/<cat>/<key>.md  the entry's `updated` date
    LEARNINGS.md                 each entry's `[YYYY-MM-DD]`
    sessions/<key>.jsonl         each message's `timestamp`; one result per message

Periods: `from`/`to` are ISO dates (`2026-11-20`: from its start / to its end), ISO datetimes (UTC
unless an offset is given), relative spans back from now (`30m`, `24h`, `7d`, `2w`), or `now`, `today`,
`yesterday`. `to` defaults to now, `from` to the beginning. A day file counts when its day overlaps
the period. Without a query the newest come first; with one, results are ranked by
`(lexical + 0.7 · cosine) / 1.7` (lexical: the rarity-weighted share of the query's words a result
contains; cosine: of the embeddings, when the provider has them) and those matching neither are dropped.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import Invalid
from ...sessions import transcript as tx
from ...timeutil import parse_iso, to_iso
from . import learnings
from ..layout import LEARNINGS_FILE, NOTES_DIR, day_of
from .keyed import KeyedFiles
from ..index.sources import scan_sessions
from ..search.stopwords import STOPWORDS

SNIPPET = 700
MAX_EMBED = 1000  # the newest units of a period that a query also ranks by meaning
EMBED_CHARS = 1000  # of each unit's text
VECTOR_WEIGHT = 0.7
_REL = re.compile(r"(\d{1,6})\s*(m|min|h|d|w)")
_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_IGNORED = {".git", ".obsidian", ".trash", "node_modules"}


@dataclass
class Unit:
    kind: str  # day | keyed | learning | message
    path: str
    source: str
    start: int
    end: int
    ts: datetime
    text: str
    session_key: str | None = None
    extra: dict[str, Any] | None = None

    def result(self, score: float | None) -> dict:
        out: dict[str, Any] = {
            "path": self.path,
            "source": self.source,
            "kind": self.kind,
            "startLine": self.start,
            "endLine": self.end,
            "timestamp": to_iso(self.ts),
            "snippet": self.text[:SNIPPET],
        }
        if score is not None:
            out["score"] = round(float(score), 4)
        if self.session_key:
            out["sessionKey"] = self.session_key
        out.update(self.extra or {})
        return out


def _end_of_day(day: datetime) -> datetime:
    """The last microsecond of `day` (9999-12-31 included, where the next day does not exist)."""
    try:
        return day + timedelta(days=1) - timedelta(microseconds=1)
    except OverflowError:
        return datetime.max.replace(tzinfo=timezone.utc)


def parse_when(value: str | None, field: str, *, end: bool, now: datetime) -> datetime | None:
    if value is None:
        return None
    try:
        return _parse_when(value, field, end=end, now=now)
    except OverflowError:
        raise Invalid(f"{value!r} is out of range (dates run from year 1 to 9999)", field=field) from None


def _parse_when(value: str, field: str, *, end: bool, now: datetime) -> datetime:
    v = value.strip().lower()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if v == "now":
        return now
    if v in ("today", "yesterday"):
        start = today - timedelta(days=1 if v == "yesterday" else 0)
        return _end_of_day(start) if end else start
    m = _REL.fullmatch(v)
    if m:
        return now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", v):
        try:
            day = datetime.strptime(v, "%Y-%m-%d").replace(tzinfo=timezone.utc)
        except ValueError:
            day = None
        if day is not None:
            return _end_of_day(day) if end else day
    elif "t" in v or " " in v:
        dt = parse_iso(value.strip())
        if dt is not None:
            return dt.astimezone(timezone.utc)
    raise Invalid(
        f"{value!r} is not a time; use an ISO date or datetime (2026-11-20, "
        f"2026-11-20T10:00:00Z), a span back from now (30m, 24h, 7d, 2w), now, today or yesterday",
        field=field,
    )


def period(from_: str | None, to: str | None, now: datetime | None = None) -> tuple[datetime | None, datetime]:
    now = now or datetime.now(timezone.utc)
    start = parse_when(from_, "from", end=False, now=now)
    stop = parse_when(to, "to", end=True, now=now) or now
    if start is not None and start > stop:
        raise Invalid(f"must not be after `to` ({to_iso(start)} > {to_iso(stop)})", field="from")
    return start, stop


def _within(ts: datetime, start: datetime | None, stop: datetime) -> bool:
    return (start is None or ts >= start) and ts <= stop


def _day_units(workspace: Path, start: datetime | None, stop: datetime, max_bytes: int) -> list[Unit]:
    out: list[Unit] = []
    mem = workspace / NOTES_DIR
    if not mem.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(mem):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED and not d.startswith("."))
        for fn in filenames:
            day = day_of(fn)
            if day is None:
                continue
            if day > stop or (start is not None and _end_of_day(day) < start):
                continue
            p = Path(dirpath) / fn
            if p.is_symlink():
                continue
            try:
                if p.stat().st_size > max_bytes:  # skipped by the index too (memory.maxFileBytes)
                    continue
                lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            rel = p.relative_to(workspace).as_posix()
            sections: list[tuple[int, int]] = []
            first = 1
            for no, line in enumerate(lines, start=1):
                if line.startswith("#") and no > first:
                    sections.append((first, no - 1))
                    first = no
            sections.append((first, len(lines)))
            for a, b in sections:
                body = "\n".join(lines[a - 1 : b]).strip()
                if not body or all(ln.startswith("#") or not ln.strip() for ln in lines[a - 1 : b]):
                    continue
                while b > a and not lines[b - 1].strip():
                    b -= 1
                out.append(Unit("day", rel, "memory", a, b, day, body))
    return out


def _keyed_units(workspace: Path, category: str | None, start: datetime | None, stop: datetime) -> list[Unit]:
    out = []
    for e in KeyedFiles(workspace).all(category):
        ts = parse_iso(e.updated)
        if ts is None or not _within(ts, start, stop):
            continue
        try:
            n = len(e.abs.read_text(encoding="utf-8", errors="replace").splitlines())
        except OSError:
            continue
        out.append(
            Unit(
                "keyed",
                e.path,
                "memory",
                1,
                max(1, n),
                ts,
                f"{e.key}: {e.value}",
                extra={"key": e.key, "category": e.category},
            )
        )
    return out


def _learning_units(workspace: Path, start: datetime | None, stop: datetime, max_bytes: int) -> list[Unit]:
    p = workspace / LEARNINGS_FILE
    try:
        if p.stat().st_size > max_bytes:
            return []
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for e in learnings.parse(text):
        try:
            day = datetime.strptime(e["date"], "%Y-%m-%d").replace(tzinfo=timezone.utc)
        except ValueError:
            continue
        if day > stop or (start is not None and _end_of_day(day) < start):
            continue
        out.append(
            Unit(
                "learning",
                LEARNINGS_FILE,
                "memory",
                e["line"],
                e["line"],
                day,
                e["text"],
                extra={"category": e["category"]},
            )
        )
    return out


def _message_units(sessions_dir: Path, start: datetime | None, stop: datetime) -> list[Unit]:
    out: list[Unit] = []
    for sf in scan_sessions(sessions_dir):
        mtime = datetime.fromtimestamp(sf.mtime_ns / 1e9, timezone.utc)
        if start is not None and mtime < start:
            continue  # nothing was appended since before the period began
        key = sf.session_key
        for rec in tx.iter_records(sf.abs):
            d = rec.data
            if d.get("type") != "message" or not isinstance(d.get("message"), dict):
                continue
            ts = parse_iso(d.get("timestamp") or "")
            if ts is None or not _within(ts, start, stop):
                continue
            text = tx.memory_text(d)  # not the offline responder's replies, nor quoted recalls
            if not text:
                continue
            role = str(d["message"].get("role", ""))
            out.append(Unit("message", sf.path, "sessions", rec.line, rec.line, ts, text, key, extra={"role": role}))
    return out


def collect(
    workspace: Path,
    sessions_dir: Path,
    start: datetime | None,
    stop: datetime,
    category: str | None,
    sources: tuple[str, ...],
    max_file_bytes: int,
) -> list[Unit]:
    """Every unit in the period (blocking). Day files and LEARNINGS.md over `max_file_bytes`
    (`memory.maxFileBytes`) are left out, as the index leaves them out: never loaded whole."""
    units: list[Unit] = []
    if "memory" in sources:
        units += _keyed_units(workspace, category, start, stop)
        if category is None:
            units += _day_units(workspace, start, stop, max_file_bytes)
            units += _learning_units(workspace, start, stop, max_file_bytes)
    if "sessions" in sources and category is None:
        units += _message_units(sessions_dir, start, stop)
    return units


def query_words(query: str) -> list[str]:
    return [w for w in dict.fromkeys(re.findall(r"\w+", query.lower())) if w not in STOPWORDS]


def lexical_scores(units: list[Unit], words: list[str]) -> list[float]:
    """Per unit: the idf-weighted share of the query words it contains (a word of 5+ letters also
    matches by its stem, i.e. as a prefix without its last letter)."""
    if not words:
        return [0.0] * len(units)
    stems = [w[:-1] if len(w) >= 5 else None for w in words]
    hits = []
    for u in units:
        bag = set(re.findall(r"\w+", u.text.lower()))
        hits.append(
            [w in bag or (st is not None and any(t.startswith(st) for t in bag)) for w, st in zip(words, stems)]
        )
    n = len(units)
    idf = [math.log(1 + (n + 1) / (1 + sum(h[j] for h in hits))) for j in range(len(words))]
    total = sum(idf) or 1.0
    return [sum(idf[j] for j, hit in enumerate(h) if hit) / total for h in hits]


def rank(
    units: list[Unit], query: str | None, k: int, min_score: float, vectors: tuple[np.ndarray, np.ndarray] | None
) -> list[dict]:
    """Results: newest first without a query; else by score. `vectors`: (query vec, unit vecs)."""
    if not query:
        units = sorted(units, key=lambda u: (u.ts, u.path, -u.start), reverse=True)
        return [u.result(None) for u in units[:k]]
    lex = lexical_scores(units, query_words(query))
    scored = []
    for i, u in enumerate(units):
        if vectors is not None and i < len(vectors[1]):
            cos = max(0.0, float(np.dot(vectors[1][i], vectors[0])))
            score = (lex[i] + VECTOR_WEIGHT * cos) / (1 + VECTOR_WEIGHT)
            if lex[i] == 0 and cos < 0.5:
                continue
        else:
            score = lex[i]
            if score == 0:
                continue
        if score >= min_score:
            scored.append((score, u))
    scored.sort(key=lambda t: (t[0], t[1].ts), reverse=True)
    return [u.result(s) for s, u in scored[:k]]
