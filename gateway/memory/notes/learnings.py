"""LEARNINGS.md: what the assistant learned about working with you, in four fixed sections.

    # Learnings

    ## User Preferences

    - [2026-11-22] Prefers answers in bullet points.

    ## Corrections
    ## Successful Patterns
    ## Tool Usage

`learn(category, text)` adds `- [YYYY-MM-DD] text` (UTC date) to the section, unless an entry of that
section already says nearly the same: word-set Jaccard similarity >= 0.8 (words are lowercased `\\w+`
runs), in which case that entry's date is refreshed instead (its text is kept). Categories are given as
a short name (`preferences`, `corrections`, `patterns`, `tools`) or the section name (case-insensitive).
The file stays human-editable: other lines are kept as they are; a missing section is appended. Writes
are atomic under an flock (see frontmatter.py). Blocking: call from a thread.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from ...errors import Invalid
from ...fsutil import atomic_write, locked
from ..layout import LEARNINGS_FILE
from ..rerank import jaccard

SECTIONS = {
    "preferences": "User Preferences",
    "corrections": "Corrections",
    "patterns": "Successful Patterns",
    "tools": "Tool Usage",
}
SIMILARITY = 0.8
MAX_TEXT = 1000

_ALIASES = {**{k: k for k in SECTIONS}, **{v.lower(): k for k, v in SECTIONS.items()}}
_ENTRY = re.compile(r"^\s*[-*]\s+\[(\d{4}-\d{2}-\d{2})\]\s+(.*?)\s*$")
_HEADING = re.compile(r"^##\s+(.+?)\s*#*\s*$")


def category_name(category: str, field: str = "category") -> str:
    """The short name ("preferences", …) of a category given either way."""
    found = _ALIASES.get(" ".join(str(category).split()).lower())
    if found is None:
        allowed = ", ".join(f"{k!r} ({v})" for k, v in SECTIONS.items())
        raise Invalid(f"unknown learnings category {category!r}; must be one of {allowed}", field=field)
    return found


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _section_of(line: str) -> str | None:
    m = _HEADING.match(line)
    if not m:
        return None
    return _ALIASES.get(m.group(1).lower(), "")  # "" = a section that is not one of ours


def parse(text: str) -> list[dict]:
    """Every entry: {category, section, date, text, line} (line 1-based)."""
    out = []
    current: str | None = None
    for no, line in enumerate(text.splitlines(), start=1):
        sec = _section_of(line)
        if sec is not None:
            current = sec or None
            continue
        if line.startswith("# "):
            current = None
            continue
        m = _ENTRY.match(line)
        if m and current:
            out.append(
                {"category": current, "section": SECTIONS[current], "date": m.group(1), "text": m.group(2), "line": no}
            )
    return out


def _skeleton() -> list[str]:
    lines = ["# Learnings", ""]
    for title in SECTIONS.values():
        lines += [f"## {title}", ""]
    return lines


def learn(workspace: Path, category: str, text: str, today: str | None = None) -> dict:
    cat = category_name(category)
    text = " ".join(text.split())
    if not text:
        raise Invalid("must not be blank", field="text")
    if len(text) > MAX_TEXT:
        raise Invalid(f"must be at most {MAX_TEXT} characters, got {len(text)}", field="text")
    if not words(text):
        raise Invalid("must contain at least one word", field="text")
    today = today or datetime.now(timezone.utc).strftime("%Y-%m-%d")
    path = workspace / LEARNINGS_FILE
    with locked(path):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            lines = _skeleton()
        mine = words(text)
        best = None
        for e in parse("\n".join(lines)):
            if e["category"] != cat:
                continue
            sim = jaccard(mine, words(e["text"]), empty=1.0)  # two wordless entries are the same
            if sim >= SIMILARITY and (best is None or sim > best[0]):
                best = (sim, e)
        if best is not None:
            sim, e = best
            idx = e["line"] - 1
            lines[idx] = re.sub(r"\[\d{4}-\d{2}-\d{2}\]", f"[{today}]", lines[idx], count=1)
            entry = {**e, "date": today}
            status, extra = "refreshed", {"similarity": round(sim, 3)}
        else:
            idx = _insert_at(lines, cat)
            lines.insert(idx, f"- [{today}] {text}")
            entry = {"category": cat, "section": SECTIONS[cat], "date": today, "text": text, "line": idx + 1}
            status, extra = "added", {}
        atomic_write(path, ("\n".join(lines).rstrip("\n") + "\n").encode("utf-8"))
    return {"status": status, "entry": {**entry, "path": LEARNINGS_FILE}, **extra}


def _insert_at(lines: list[str], cat: str) -> int:
    """Index where a new entry of `cat` goes (after the section's last entry); adds the section if missing."""
    start = None
    for i, line in enumerate(lines):
        if _section_of(line) == cat:
            start = i
            break
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", f"## {SECTIONS[cat]}", ""]
        return len(lines)
    end = len(lines)
    for j in range(start + 1, len(lines)):
        if lines[j].startswith("#"):
            end = j
            break
    last = None
    for j in range(start + 1, end):
        if _ENTRY.match(lines[j]) or (lines[j].strip() and not lines[j].startswith("#")):
            last = j
    if last is not None:
        return last + 1
    # An empty section: right after the heading and one blank line (keeping a blank line before the next).
    if start + 1 < len(lines) and not lines[start + 1].strip():
        if start + 2 < len(lines) and lines[start + 2].startswith("#"):
            lines.insert(start + 2, "")
        return start + 2
    lines.insert(start + 1, "")
    return start + 2
