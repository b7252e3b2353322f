"""What both engines' session stores share: the session key rule, a session's own settings, and the
history page (sessions.history) cut from a transcript file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from ..errors import Conflict, Invalid, NotFound
from ..schema import SESSION_KEY
from . import transcript as tx

SESSION_KEY_RE = re.compile(SESSION_KEY)  # not "." or "..": those leave the folder


SETTINGS = ("model", "systemPrompt")
"""A session's own settings, kept with its metadata only when set (else the configured ones apply)."""


def check_session_key(key: str, field: str = "sessionKey") -> str:
    if not SESSION_KEY_RE.fullmatch(key):
        raise Invalid("must match [A-Za-z0-9._:-]{1,128} and not be dots only", field=field)
    return key


def in_trash(key: str) -> Conflict:
    """What `create` of a key that is in the trash answers (both session stores)."""
    return Conflict(
        f"a session {key} is in the trash: restore it (sessions.restore) or purge it (sessions.purge) first",
        {"sessionKey": key},
    )


def history_page(key: str, path: Path, limit: int, before: str | None, max_bytes: int) -> dict[str, Any]:
    """sessions.history's page, sized by the exact encoded bytes (in a thread: it encodes each message)."""
    messages = tx.chosen_versions(tx.read_messages(path))
    if before is not None:
        idx = next((i for i, m in enumerate(messages) if m["id"] == before), None)
        if idx is None:
            raise NotFound(f"message not found in session {key}: {before}", {"before": before})
        messages = messages[:idx]
    page: list[dict[str, Any]] = []
    size = 0
    for m in reversed(messages[-limit:]):
        m.pop("line", None)
        n = len(orjson.dumps(m)) + 1
        if n > max_bytes:  # one message bigger than a page (a runaway reply): show its start
            m, n = _shorten(m, max_bytes)
        size += n
        if page and size > max_bytes:
            break
        page.append(m)
    page.reverse()
    return {"messages": page, "hasMore": len(messages) > len(page)}


def _shorten(m: dict[str, Any], max_bytes: int) -> tuple[dict[str, Any], int]:
    """`m` with its content cut so that it encodes to at most `max_bytes`; marked `truncated`, with the
    full length in `contentChars` (the transcript keeps all of it)."""
    full = m["content"]
    out = {**m, "truncated": True, "contentChars": len(full)}
    keep = max_bytes // 2
    while True:
        out["content"] = full[:keep]
        n = len(orjson.dumps(out)) + 1
        if n <= max_bytes or keep == 0:
            return out, n
        keep //= 2
