"""What the ledger believes: statements grouped by subject, each valid from when it was said until the
next statement of its subject (an ending closes the subject). Pure.

Across the whole memory, not one query's results: the latest statement of a subject is its value now,
whatever words it was said in. Repeats of the same value (said again later) keep the value's `since`
at its first saying; a correction is a statement like any other, said when it was made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..ports import Statement


def _same(a: str, b: str) -> bool:
    # A secret the index keeps masked ("[redacted: password]") says nothing of whether it changed: said
    # again, it is taken as new (a person restates a password when it changes).
    if a.startswith("[redacted: "):
        return False
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


_NAME_WORD = re.compile(r"\b[A-Z][\w'’-]{2,}")


def _named(value: str, text: str) -> bool:
    """Whether a text names a value: one of the value's capitalised words is a word of the text."""
    low = text.lower()
    return any(re.search(rf"\b{re.escape(w.lower())}\b", low) for w in _NAME_WORD.findall(value))


def _ends_an_earlier(ending: Statement, periods: list[Period]) -> bool:
    """An ending that names an earlier value and not the one holding ("I handed in my notice at Halden",
    said a week after "accepted a post at Brightwater") ends the earlier one, which already ended."""
    now = periods[-1]
    if now.ending or _named(now.value, ending.text):
        return False
    return any(_named(p.value, ending.text) for p in periods[:-1] if not p.ending)


@dataclass
class Period:
    value: str
    since: str
    until: str | None  # None: still holds
    ending: bool
    statement: Statement  # the first saying of this value (its evidence)
    sayings: list[Statement] = field(default_factory=list)


@dataclass
class Fact:
    subject: str
    periods: list[Period]  # oldest first

    @property
    def current(self) -> Period | None:
        """The value now: the last period, unless an ending closed the subject."""
        last = self.periods[-1] if self.periods else None
        return None if last is None or last.ending else last

    def at(self, when: str) -> Period | None:
        """The value that held at `when` (ISO 8601)."""
        held = None
        for p in self.periods:
            if p.since <= when:
                held = p
        return None if held is None or held.ending else held

    def brief(self) -> dict[str, Any]:
        """memory.profile's fact: {subject, value, since, source, evidence, history (each with its evidence:
        path and lines)}."""
        now = self.current
        assert now is not None
        ev = now.statement
        return {
            "subject": self.subject,
            "value": now.value,
            "since": now.since,
            "source": ev.source,
            "evidence": {"path": ev.path, "startLine": ev.start_line, "endLine": ev.end_line, "text": ev.text},
            "history": [
                {
                    "value": p.value,
                    "from": p.since,
                    "until": p.until,
                    **({"ended": True} if p.ending else {}),
                    # where the earlier value was said, as for the current one: "where did I say that?"
                    "evidence": {
                        "path": p.statement.path,
                        "startLine": p.statement.start_line,
                        "endLine": p.statement.end_line,
                    },
                }
                for p in self.periods[:-1]
            ],
        }


def facts(statements: Iterable[Statement], as_of: str | None = None) -> dict[str, Fact]:
    """Subject → its Fact, from statements in any order (only those said at or before `as_of`)."""
    by: dict[str, list[Statement]] = {}
    for s in statements:
        if as_of is None or s.said <= as_of:
            by.setdefault(s.subject, []).append(s)
    out: dict[str, Fact] = {}
    for subject, ss in by.items():
        ss.sort(key=lambda s: (s.said, s.path, s.start_line))
        periods: list[Period] = []
        for s in ss:
            last = periods[-1] if periods else None
            if last is not None and last.ending == s.ending and (s.ending or _same(last.value, s.value)):
                last.sayings.append(s)  # said again: the same period
                continue
            if s.ending and last is not None and _ends_an_earlier(s, periods):
                continue  # "handed in my notice at Halden" said after the new job: the old one ended, not the new
            if last is not None and last.until is None:
                last.until = s.said
            if s.ending and not periods:
                continue  # an ending of nothing known
            periods.append(Period(s.value, s.said, None, s.ending, s, [s]))
        if periods:
            out[subject] = Fact(subject, periods)
    return out
