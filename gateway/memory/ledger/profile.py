"""memory.profile's page: the ledger's current facts, bounded.

A year of life gives hundreds of subjects (a code per lock, a course per class, an appointment per
visit) and a value that changed weekly gives a long history; the profile answers a page at a time:

- `limit` facts (PROFILE_LIMIT by default, at most PROFILE_MAX), the most recently changed first
  (ordered by since, then subject, both descending);
- `cursor`: the page after the one that returned it (`nextCursor`, absent on the last page). It names
  the last fact shown, not a position, so a fact that changes between two pages moves to the front
  instead of shifting the rest by one;
- `subject`: one subject ("home", "code:shed") or a family of them ("code": every code);
- `history` earlier values per fact, the newest of them (HISTORY_LIMIT by default, at most HISTORY_MAX);
  `historyOmitted` says how many older ones were left out.

Pure: the service gives the facts (ledger/cache.py: of the subject's family only, when one is asked for).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Mapping

from ...errors import Invalid
from .facts import Fact
from .lexicon import BY_NAME

PROFILE_LIMIT = 50
PROFILE_MAX = 500
HISTORY_LIMIT = 10
HISTORY_MAX = 100


def subject_family(subject: str) -> str:
    """The lexicon subject a profile filter names ("code:shed" → "code"), checked against the lexicon."""
    family = subject.split(":", 1)[0]
    if family not in BY_NAME:
        raise Invalid(
            f"unknown subject {family!r}: one of {', '.join(sorted(BY_NAME))} (or '<subject>:<thing>')", field="subject"
        )
    return family


def encode_cursor(since: str, subject: str) -> str:
    raw = json.dumps([since, subject], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """The (since, subject) of the last fact of the page that returned `cursor`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        pair = json.loads(raw)
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair):
            return pair[0], pair[1]
    except (ValueError, TypeError):
        pass
    raise Invalid("not a cursor memory.profile returned (pass its nextCursor unchanged)", field="cursor")


def page(
    known: Mapping[str, Fact],
    limit: int = PROFILE_LIMIT,
    cursor: str | None = None,
    subject: str | None = None,
    history: int = HISTORY_LIMIT,
) -> dict[str, Any]:
    """{facts, nextCursor?}: the current facts (of `subject`: itself, or its family when it names one
    without a thing), the most recently changed first, `limit` of them after `cursor`."""
    after = decode_cursor(cursor) if cursor is not None else None
    if subject is not None:
        subject_family(subject)
    exact = subject is not None and ":" in subject
    out: list[dict[str, Any]] = []
    for f in known.values():
        if f.current is None or (exact and f.subject != subject):
            continue
        if subject is not None and not exact and f.subject.split(":", 1)[0] != subject:
            continue
        out.append(f.brief())
    out.sort(key=lambda f: (f["since"], f["subject"]), reverse=True)
    if after is not None:
        out = [f for f in out if (f["since"], f["subject"]) < after]
    res: dict[str, Any] = {"facts": out[:limit]}
    for f in res["facts"]:
        earlier = f["history"]
        if len(earlier) > history:  # the newest earlier values: they say what the value was just before
            f["history"] = earlier[len(earlier) - history :] if history else []
            f["historyOmitted"] = len(earlier) - history
    if len(out) > limit:
        last = res["facts"][-1]
        res["nextCursor"] = encode_cursor(last["since"], last["subject"])
    return res
