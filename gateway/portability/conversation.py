"""A conversation from another assistant, as both vendors' readers (chatgpt.py, claude.py) hand it to the
importer: its id, title, dates and the turns the person saw, each with its original time; and what was
left out of it, counted by why.

Each becomes a session whose key is derived from the vendor and the conversation's id (`session_key`), so
importing it again finds it; each turn becomes a transcript message record (PROTOCOL.md §6) whose id is
the vendor's message id, so a newer export adds only the turns not there yet. The transcript's header
record says where it came from:

    {"type":"session","version":1,"sessionKey":"chatgpt-6780…","agentId":"main","createdAt":"2024-03-01T…",
     "imported":{"source":"chatgpt","conversationId":"6780…","title":"Trip to Lisbon","importedAt":"…"}}
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import Invalid
from ..schema import SESSION_KEY, type_name
from ..sessions import transcript as tx
from ..timeutil import now_iso, parse_iso, to_iso

_KEY_TAIL = re.compile(r"[A-Za-z0-9._-]{1,100}")
_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")
_SESSION_KEY = re.compile(SESSION_KEY)
# Unix seconds the importer takes as a date: 1990 to 2200 (a millisecond value, or 0, is a mistake).
_EARLIEST, _LATEST = 631152000.0, 7258118400.0


class BadExport(Invalid):
    """An export the importer cannot read: which file, which conversation (its index, id and title when
    known) and which field of it, and what is wrong. Everything before that conversation was imported
    (`data.done`, set by the importer); nothing of it was. JSON-RPC -32602."""

    def __init__(self, rule: str, *, where: str = "", conversation: dict[str, Any] | None = None, at: str = ""):
        parts = [p for p in (where, _named(conversation), at) if p]
        data: dict[str, Any] = {}
        if conversation:
            data["conversation"] = conversation
        if at:
            data["exportField"] = at
        super().__init__(f"{': '.join(parts)}: {rule}" if parts else rule, None, data)
        self.where = where
        self.conversation = conversation
        self.at = at
        self.rule = rule


def _named(conv: dict[str, Any] | None) -> str:
    if not conv:
        return ""
    bits = [f"conversation {conv['index']}"]
    if conv.get("id"):
        bits.append(f"id {conv['id']}")
    if conv.get("title"):
        bits.append(repr(conv["title"][:80]))
    return bits[0] + (f" ({', '.join(bits[1:])})" if len(bits) > 1 else "")


@dataclass
class Turn:
    """One message the person saw: `role` user or assistant, its text, its original time."""

    id: str
    role: str
    text: str
    timestamp: str

    def record(self) -> dict[str, Any]:
        return tx.message_record(self.id, self.role, self.text, timestamp=self.timestamp)


@dataclass
class Conversation:
    source: str  # "chatgpt" | "claude"
    index: int  # its place in the export (0-based)
    id: str
    title: str | None
    created: str  # ISO 8601 UTC, as timeutil writes it
    turns: list[Turn]
    skipped: Counter[str] = field(default_factory=Counter)  # messages left out, by why

    @functools.cached_property
    def key(self) -> str:
        return session_key(self.source, self.id)

    @property
    def ref(self) -> dict[str, Any]:
        """How reports and errors name it."""
        return {"index": self.index, "id": self.id, "title": self.title}

    def header(self, agent_id: str) -> dict[str, Any]:
        head = tx.header(self.key, agent_id, self.created)
        head["imported"] = {
            "source": self.source,
            "conversationId": self.id,
            "title": self.title,
            "importedAt": now_iso(),
        }
        return head


def session_key(source: str, conversation_id: str) -> str:
    """The session a vendor's conversation becomes: `<source>-<id>`, or `<source>-<sha256 of the id>` for an
    id no session key can hold. The same conversation always gets the same key."""
    key = f"{source}-{conversation_id}"
    if _KEY_TAIL.fullmatch(conversation_id) and _SESSION_KEY.fullmatch(key):
        return key
    return f"{source}-{hashlib.sha256(conversation_id.encode()).hexdigest()[:40]}"


def message_id(raw: Any, fallback: str) -> str:
    """A vendor's message id as a transcript message id; `fallback` (derived from the content) when it has
    none a transcript can hold."""
    if isinstance(raw, str) and _ID.fullmatch(raw):
        return raw
    return "m-" + hashlib.sha256(fallback.encode()).hexdigest()[:32]


# ---- reading a vendor's fields: each failure names the field -------------------------------------


class Fields:
    """Checked reads of one conversation's JSON, raising BadExport that names the conversation and field."""

    def __init__(self, where: str, conv: dict[str, Any]):
        self.where = where
        self.conv = conv

    def fail(self, at: str, rule: str) -> BadExport:
        return BadExport(rule, where=self.where, conversation=self.conv, at=at)

    def obj(self, value: Any, at: str, *, null: bool = False) -> dict[str, Any] | None:
        if value is None and null:
            return None
        if not isinstance(value, dict):
            raise self.fail(at, f"must be an object, got {type_name(value)}")
        return value

    def arr(self, value: Any, at: str, *, null: bool = False) -> list[Any] | None:
        if value is None and null:
            return None
        if not isinstance(value, list):
            raise self.fail(at, f"must be an array, got {type_name(value)}")
        return value

    def text(self, value: Any, at: str, *, null: bool = False) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, str):
            raise self.fail(at, f"must be a string, got {type_name(value)}")
        return value

    def epoch(self, value: Any, at: str) -> str | None:
        """Unix seconds (ChatGPT's times) as ISO 8601 UTC; None for null."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(at, f"must be a number (Unix seconds) or null, got {type_name(value)}")
        if not math.isfinite(value) or not _EARLIEST <= value <= _LATEST:
            raise self.fail(at, f"{value!r} is not a date between 1990 and 2200 in Unix seconds")
        return to_iso(datetime.fromtimestamp(value, tz=timezone.utc))

    def iso(self, value: Any, at: str, *, null: bool = False) -> str | None:
        """An ISO 8601 time (Claude's) as ISO 8601 UTC with milliseconds; None for null when allowed."""
        if value is None and null:
            return None
        if not isinstance(value, str):
            raise self.fail(at, f"must be an ISO 8601 time, got {type_name(value)}")
        parsed = parse_iso(value)
        if parsed is None or not 1990 <= parsed.year <= 2200:
            raise self.fail(at, f"{value[:40]!r} is not an ISO 8601 time between 1990 and 2200")
        return to_iso(parsed)


def dict_or_empty(value: Any) -> dict[str, Any]:
    """`value` when it is an object, else {} (for optional parts a reader only looks into)."""
    return value if isinstance(value, dict) else {}
