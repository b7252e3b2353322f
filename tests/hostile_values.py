"""Hostile values for property tests, derived from JSON Schema (`system.methods`, `tools/list`): values a
schema takes, made of odd text (`valid_for`), and values of the declared type that break a rule
(`hostile_for`: NUL, lone surrogates, integers past 64 bits, lengths at and past the bounds, 1 MB
strings, deep nesting). Names of things that exist in the tests' gateways (`SESSIONS`, `KEYS`, `NOTES`)
are preferred where a param names one. And `logged_failures`: what in captured logs says something
crashed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

MB = 1 << 20
SESSIONS = ["s-one", "hook:s-two"]
KEYS = ["boat", "tea.time"]
NOTES = ["memory/notes.md", "MEMORY.md"]


@dataclass(frozen=True)
class Ref:
    """A param that names something each engine calls by its own id (the session's last reply)."""

    what: str


# ---- valid shapes, hostile contents --------------------------------------------------------------------
# Text any method should take and store as it is: odd, but text (no NUL, no lone surrogate).
ODD = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30),
    st.sampled_from([" ", "\r\n", "\r", "a\rb", "\t", "\x1b[31m", "\u202e", "\ufeff", "\uffff", "𝕏", "é"]),
    st.sampled_from(["---\ntitle: x\n---", "# heading", "\\u0000", "a\u2028b", " lead", "trail ", "\x7f", "\x01"]),
)
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WHEN = st.sampled_from(["7d", "24h", "2w", "30m", "now", "today", "yesterday", "2026-11-20", "2026-11-20T10:00:00Z"])


def odd_text(min_len: int, max_len: int | None) -> st.SearchStrategy[str]:
    """Valid text of an allowed length, made of odd characters."""
    high = min(max_len if max_len is not None else 200, 200)
    return (
        st.lists(ODD, max_size=6)
        .map("".join)
        .map(lambda t: (t + "x" * min_len)[: max(high, min_len)])
        .filter(lambda t: min_len <= len(t) <= high)
    )


def hostile_text(min_len: int = 0, max_len: int | None = None) -> st.SearchStrategy[str]:
    """Text that breaks a rule: NUL, a lone surrogate, the lengths at and past the bounds, 1 MB."""
    plain = st.text(st.characters(codec="utf-8"), max_size=30)
    cut = (max_len if max_len is not None else 40) + 1
    around = [n for n in {min_len, max(min_len - 1, 0), cut - 1, cut} if n <= 2 * MB]
    return st.one_of(
        plain,
        plain.map(lambda t: t + "\x00" + t),  # NUL
        plain.map(lambda t: t[:3] + "\ud800" + t[3:]),  # a lone surrogate
        plain.map(lambda t: "\udfff" + t),
        st.sampled_from(around).map(lambda n: "x" * n),  # at and past the declared lengths
        st.just("\u00e9" * MB),  # 1 MB (2 MB of UTF-8)
        st.just("y" * MB),
    )


def hostile_int(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    edges = [v for b in (lo, hi) if b is not None for v in (b - 1, b, b + 1)]
    return st.one_of(
        st.sampled_from(edges or [0, 1, -1]),
        st.sampled_from([2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**30)]),
        st.sampled_from([1e19, -1e19, 1e300, 2.5]),
        st.integers(-(2**70), 2**70),
    )


def hostile_number(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([-0.0, 1e308, -1e308, 5e-324, 2**64, -(2**64), 10**400]),
    )


def nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def valid_for(name: str, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value the schema takes, of odd contents; names of things that exist preferred."""
    kind = schema.get("type")
    if kind == "string":
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        if name == "sessionKey":
            return st.one_of(st.sampled_from(SESSIONS), st.from_regex(schema["pattern"], fullmatch=True))
        if name == "key":
            return st.one_of(st.sampled_from(KEYS), st.from_regex(schema["pattern"], fullmatch=True))
        if name == "agentId":
            return st.sampled_from(["main", "main", "main", "other.agent"])
        if name == "messageId":
            return st.just(Ref("lastReply"))
        if name == "path":
            return st.one_of(st.sampled_from(NOTES), st.from_regex(r"memory/[a-z]{1,8}\.md", fullmatch=True))
        if name == "image":
            return st.just(PNG)
        if name in ("from", "to"):
            return WHEN
        if name == "category":
            return st.sampled_from(["preferences", "corrections", "patterns", "tools"])
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return odd_text(schema.get("minLength", 0), schema.get("maxLength"))
    if kind == "integer":
        lo, hi = schema.get("minimum", 0), schema.get("maximum", 1000)
        return st.one_of(st.sampled_from([lo, hi]), st.integers(lo, hi))
    if kind == "number":
        return st.floats(schema.get("minimum", 0), schema.get("maximum", 1))
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        items = schema["items"]
        low, high = schema.get("minItems", 0), schema.get("maxItems", 3)
        if "enum" in items and schema.get("uniqueItems"):
            return st.lists(st.sampled_from(items["enum"]), min_size=low, max_size=high, unique=True)
        return st.lists(valid_for(name, items), min_size=low, max_size=high)
    raise AssertionError(f"{name}: no strategy for {schema}")  # pragma: no cover - every declared type is above


def hostile_for(name: str, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value of the declared type that breaks a rule (or, rarely, deep nesting where it should be)."""
    kind = schema.get("type")
    if kind == "string":
        base = hostile_text(schema.get("minLength", 0), schema.get("maxLength"))
    elif kind == "integer":
        base = hostile_int(schema)
    elif kind == "number":
        base = hostile_number(schema)
    elif kind == "array":
        base = st.lists(
            st.one_of(valid_for(name, schema["items"]), hostile_for(name, schema["items"])),
            max_size=schema.get("maxItems", 3) + 1,
        )
    else:
        base = st.booleans()
    return st.one_of(base, st.sampled_from([nested(5), nested(40)]))


def has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(has_surrogate(v) for v in value.values())
    if isinstance(value, list):
        return any(has_surrogate(v) for v in value)
    return False


def logged_failures(logs: list[dict[str, Any]], records: list[logging.LogRecord]) -> list[Any]:
    """What of captured structlog events and stdlib log records says something failed: a traceback, an
    error line."""
    bad: list[Any] = [e for e in logs if e.get("exc_info") or e.get("log_level") in ("error", "critical")]
    return bad + [r.getMessage() for r in records if r.levelno >= logging.ERROR]
