"""Timestamps as the protocol writes them: ISO 8601 UTC with milliseconds and a Z."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


def now_iso() -> str:
    return to_iso(datetime.now(timezone.utc))


def to_iso(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_iso(text: str) -> datetime | None:
    """Parse an ISO 8601 timestamp (a trailing Z allowed); None when it is not one."""
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError, TypeError):
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def days_after(text: str | None, days: float) -> str | None:
    """`days` after the timestamp `text` (None when it is not one): when a trashed thing is purged."""
    when = parse_iso(text or "")
    return to_iso(when + timedelta(days=days)) if when else None


def days_ago(days: float) -> str:
    return to_iso(datetime.now(timezone.utc) - timedelta(days=days))
