"""The fast way to a clause's subjects: the lexicon's subjects whose hint words the clause holds.

Each subject's cue expression costs ~8 µs a search; a clause's words looked up once in a table make most
clauses free (a clause holding none of a subject's hints is never searched with its cues). A hint is a
word ("vet") or a prefix ("pill*"); a dose written as one word ("20mg") hints at medication, and "is
at / is on" at an appointment ("my code review is at 10"). Split from lexicon.py by concern (issue 48).
"""

from __future__ import annotations

import re
from typing import Generic, Iterable, Protocol, Sequence, TypeVar


class _Hinted(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def hints(self) -> tuple[str, ...]: ...


Subject = TypeVar("Subject", bound=_Hinted)  # lexicon.py's Subject

_TOKEN = re.compile(r"[a-z0-9][a-z0-9'-]*")


class Hints(Generic[Subject]):
    """`hints(low)`: the subjects whose hints the (lowercased) text holds, in the lexicon's order."""

    def __init__(self, subjects: Sequence[Subject]) -> None:
        self.subjects = tuple(subjects)
        # word → the subjects it hints at; a prefix hint ("pill*") → its subjects, found by one expression
        self.words: dict[str, set[int]] = {}
        self.prefixes: dict[str, set[int]] = {}
        for i, s in enumerate(self.subjects):
            for h in s.hints:
                (self.prefixes if h.endswith("*") else self.words).setdefault(h.rstrip("*"), set()).add(i)
        self._words = frozenset(self.words)
        self._prefix = _longest_first(self.prefixes)
        names = [s.name for s in self.subjects]
        self._medication = names.index("medication")
        self._appointment = names.index("appointment")

    def __call__(self, low: str) -> list[Subject]:
        low = low.replace("’", "'")
        found: set[int] = set()
        tokens = _TOKEN.findall(low)
        if "'s" in low:  # "the dog's vet": the possessive's word too
            tokens += [t[:-2] for t in tokens if t.endswith("'s")]
        for w in self._words.intersection(tokens):
            found |= self.words[w]
        for m in self._prefix.finditer(low):
            found |= self.prefixes[m.group()]
        if "mg" in low or "mcg" in low:  # a dose written as one word ("20mg"): no hint word holds it
            found.add(self._medication)
        if " is at " in low or " is on " in low or "'s at " in low or "'s on " in low:  # "my code review is at 10"
            found.add(self._appointment)
        return [self.subjects[i] for i in sorted(found)]


def _longest_first(prefixes: Iterable[str]) -> re.Pattern[str]:
    """One expression for the prefix hints: at a word's start, the longest prefix there. The prefixes are
    grouped by their first character (`\\b(?:p(?:assword|ill)|…)`): `re` tries a group's alternatives only
    where its character is, not every alternative at every word (~18 → ~10 µs a clause, issue 46); each
    group keeps the longest first, so the match is the one the flat longest-first alternation gives."""
    by_first: dict[str, list[str]] = {}
    for p in sorted(prefixes, key=len, reverse=True):
        by_first.setdefault(p[:1], []).append(p)
    return re.compile(
        r"\b(?:"
        + "|".join(
            re.escape(c) + "(?:" + "|".join(re.escape(p[1:]) for p in group) + ")" for c, group in by_first.items()
        )
        + ")"
    )
