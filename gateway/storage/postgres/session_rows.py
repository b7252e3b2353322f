"""A `sessions` row as the PostgreSQL engine's stores read it (its columns, as a session's metadata), and
what PostgreSQL `text` can hold of a transcript: shared by the session store (sessions.py) and the copies
of whole sessions (session_copies.py).
"""

from __future__ import annotations

from typing import Any, Sequence

COLUMNS = "session_key, label, created_at, updated_at, message_count, model, system_prompt"
SETTING_COLUMNS = {"model": "model", "systemPrompt": "system_prompt"}


def row_meta(row: Any) -> dict[str, Any]:
    """A `sessions` row as the session's metadata (the settings only when set, as the files engine keeps them)."""
    meta = {
        "sessionKey": row["session_key"],
        "label": row["label"],
        "createdAt": row["created_at"],
        "updatedAt": row["updated_at"],
        "messageCount": int(row["message_count"]),
    }
    for name, column in SETTING_COLUMNS.items():
        if row[column]:
            meta[name] = row[column]
    return meta


def text_problem(lines: Sequence[bytes]) -> str:
    """Why PostgreSQL `text` cannot hold these lines, or ""."""
    for n, line in enumerate(lines, start=1):
        if b"\x00" in line:
            return f"line {n} holds a NUL byte, which PostgreSQL text cannot store"
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return f"line {n} is not UTF-8 text, which PostgreSQL text cannot store"
    return ""
