"""How a memory hit is cited to whoever reads it — a model's prompt, a tool's result, the offline
responder: when it was said, in which conversation, where, and how it stands against other hits.

    2025-11-08 · session "Moving" · sessions/3f….jsonl:2-4 · said 3 times, last 2025-12-03
    2025-04-12 · sessions/9a….jsonl:2-5 · superseded by 2025-11-08

A hit is a `memory.search` result (`path`, `startLine`, `endLine`, `date`, and where the search found
them `said`, `lastSaid`, `supersededBy`, see search/timeline.py), plus `session`: the label of its
conversation when the caller looked it up.
"""

from __future__ import annotations

from typing import Any, Mapping


def day(iso: object) -> str:
    """The day of an ISO 8601 timestamp ("2025-11-08"), "" for anything else."""
    return iso[:10] if isinstance(iso, str) and len(iso) >= 10 else ""


def heading(hit: Mapping[str, Any]) -> str:
    """The hit's citation line (without brackets)."""
    parts = []
    if when := day(hit.get("date")):
        parts.append(when)
    if label := hit.get("session"):
        parts.append(f'session "{label}"')
    parts.append(f"{hit['path']}:{hit['startLine']}-{hit['endLine']}")
    said = hit.get("said")
    if isinstance(said, int) and said > 1:
        parts.append(f"said {said} times, last {day(hit.get('lastSaid'))}")
    if newer := day(hit.get("supersededBy")):
        parts.append(f"superseded by {newer}")
    return " · ".join(parts)


def prompt_section(hits: list[Mapping[str, Any]]) -> str:
    """The recalled memory as it is added to a system prompt, each snippet under its citation: when it
    was said, in which conversation, where. Newer statements come first where hits disagree, and an
    older one says what superseded it."""
    if not hits:
        return ""
    return "\n\n## Recalled memory\n" + "\n\n".join(f"[{heading(r)}]\n{r['snippet']}" for r in hits)


def references(hits: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Where each hit is, for a client to find it again: path, lines and score (/v1's X-Jarvis-Memory)."""
    return [
        {"path": r["path"], "startLine": r["startLine"], "endLine": r["endLine"], "score": round(float(r["score"]), 4)}
        for r in hits
    ]
