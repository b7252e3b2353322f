"""What the files engine's session store reads and writes (sessions.py's FileSessionStore): the bytes of
`sessions/sessions.json`, a session's entry as the store serves it, and the counters recounted from a
transcript. Pure functions over bytes and records; the files themselves are the store's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import orjson

from ...sessions import transcript as tx
from ...sessions.history import SETTINGS

CLEAN_MARKER = ".closed-cleanly"
"""In the sessions folder while nobody has it open and every counter in sessions.json is exact."""


def parse_sessions_file(data: bytes) -> tuple[dict[str, dict[str, Any]], int]:
    """sessions.json's sessions and the generation of the write that made it (0: none recorded);
    orjson.JSONDecodeError when it is not JSON. What is not a session's dict is left out."""
    parsed = orjson.loads(data)
    if not isinstance(parsed, dict):
        parsed = {}
    sessions = parsed.get("sessions", {})
    generation = parsed.get("generation", 0)
    return (
        {k: v for k, v in sessions.items() if isinstance(v, dict)} if isinstance(sessions, dict) else {},
        generation if type(generation) is int else 0,
    )


def sessions_file(sessions: dict[str, dict[str, Any]], generation: int) -> bytes:
    """sessions.json's bytes for `sessions`, written as `generation`."""
    return orjson.dumps({"version": 1, "generation": generation, "sessions": sessions}, option=orjson.OPT_INDENT_2)


def count_messages(records: Iterable[tx.Record]) -> tuple[int, str]:
    """(message records, the last message's timestamp or ""): a transcript's counters, as recounted."""
    stamps = [r.data.get("timestamp") for r in records if r.data.get("type") == "message"]
    return len(stamps), next((t for t in reversed(stamps) if isinstance(t, str)), "")


def exported_meta(key: str, raw: dict[str, Any], data: bytes, recount: bool) -> dict[str, Any]:
    """A sessions.json entry as the store serves it: the fields every session has (an entry written by
    hand may lack some: the transcript header knows createdAt), the own settings when set, and with
    `recount` (a folder not closed cleanly) the counters recounted from the transcript as `open` does."""
    created = raw.get("createdAt")
    if not isinstance(created, str):
        head = next(iter(tx.iter_records(Path(), data[: data.find(b"\n") + 1])), None)
        created = head.data.get("createdAt") if head and head.data.get("type") == "session" else None
        created = created if isinstance(created, str) else ""
    updated = raw.get("updatedAt") if isinstance(raw.get("updatedAt"), str) else created
    label, count = raw.get("label"), raw.get("messageCount")
    meta: dict[str, Any] = {
        "sessionKey": key,
        "label": None if label is None else str(label),
        "createdAt": created,
        "updatedAt": updated,
        "messageCount": count if type(count) is int else 0,
    }
    for name in SETTINGS:
        if isinstance(raw.get(name), str) and raw[name]:
            meta[name] = raw[name]
    if recount:
        n, last = count_messages(tx.iter_records(Path(), data))
        if meta["messageCount"] != n or last > meta["updatedAt"]:
            meta["messageCount"], meta["updatedAt"] = n, max(meta["updatedAt"], last)
    return meta


def apply_bumps(sessions: dict[str, dict[str, Any]], bumps: dict[str, list[Any]]) -> None:
    """Message counters bumped since a write of sessions.json (key → [added, updatedAt]), added in."""
    for key, (added, updated) in bumps.items():
        s = sessions.get(key)
        if s is None:  # deleted meanwhile: the transcript line stands, metadata stays gone
            continue
        s["messageCount"] = int(s.get("messageCount", 0)) + added
        s["updatedAt"] = max(s.get("updatedAt", ""), updated)
