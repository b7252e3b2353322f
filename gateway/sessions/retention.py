"""Retention for ephemeral sessions (keys starting with `sessions.ephemeralPrefix`, default "hook:"):
those idle longer than `ephemeralMaxAgeHours` go, then all but the newest `ephemeralMaxCount`.
Ordinary sessions are never pruned."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from ..config import SessionsConfig
from ..timeutil import parse_iso

_EPOCH = datetime.fromtimestamp(0, timezone.utc)


def ephemeral_victims(
    sessions: dict[str, dict[str, Any]], cfg: SessionsConfig, now: datetime | None = None
) -> list[str]:
    """Keys of the ephemeral sessions to delete, oldest first."""
    now = now or datetime.now(timezone.utc)
    prefix = cfg.ephemeral_prefix
    if not prefix:
        return []
    eph = [
        (parse_iso(s.get("updatedAt") or "") or _EPOCH, key) for key, s in sessions.items() if key.startswith(prefix)
    ]
    eph.sort(reverse=True)  # newest first
    cutoff = now - timedelta(hours=cfg.ephemeral_max_age_hours)
    keep = [(t, k) for t, k in eph if t >= cutoff][: cfg.ephemeral_max_count]
    kept = {k for _, k in keep}
    return [k for _, k in reversed(eph) if k not in kept]
