"""How people state each subject of the lexicon (tests/data/ledger_paraphrases.json, issue 48): the share
of everyday paraphrases the offline extractor takes is measured per subject and held at the corpus's
`floor`; no negative (a question, a wish, someone else's fact, the word in another sense) gives its
subject a statement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.memory.ledger.extract import message_statements
from gateway.memory.ledger.prefilter import _may_state

CORPUS = json.loads((Path(__file__).parent.parent / "data" / "ledger_paraphrases.json").read_text("utf-8"))
SUBJECTS = sorted(k for k in CORPUS if not k.startswith("_"))


def taken(message: str, subject: str) -> list[tuple[str, bool]]:
    """(value, ending) of each statement of `subject` (any qualifier) the message gives, as the index reads it."""
    if not _may_state(message):
        return []
    return [(v, e) for s, v, e in message_statements(message) if s.split(":", 1)[0] == subject]


def right(message: str, subject: str, expect: str) -> bool:
    got = taken(message, subject)
    if expect == "END":
        return any(e for _, e in got)
    return any(not e and expect.lower() in v.lower() for v, e in got)


def coverage(subject: str) -> float:
    say = CORPUS[subject]["say"]
    return sum(right(m, subject, x) for m, x in say) / len(say)


@pytest.mark.parametrize("subject", SUBJECTS)
def test_each_subject_is_taken_in_most_of_the_ways_people_say_it(subject):
    assert len(CORPUS[subject]["say"]) >= 10
    missed = [m for m, x in CORPUS[subject]["say"] if not right(m, subject, x)]
    assert coverage(subject) >= CORPUS[subject]["floor"], missed


@pytest.mark.parametrize(("subject", "message"), [(s, m) for s in SUBJECTS for m in CORPUS[s]["not"]])
def test_what_states_nothing_gives_the_subject_nothing(subject, message):
    assert taken(message, subject) == []


if __name__ == "__main__":  # the table of docs/memory.md: python -m tests.unit.test_ledger_paraphrases
    total = hit = 0
    for s in SUBJECTS:
        say = CORPUS[s]["say"]
        n = sum(right(m, s, x) for m, x in say)
        total, hit = total + len(say), hit + n
        bad = [m for m in CORPUS[s]["not"] if taken(m, s)]
        print(f"{s:12} {n:3}/{len(say):<3} {n / len(say):.2f}  negatives taken {len(bad)}")
        for m, x in say:
            if not right(m, s, x):
                print(f"     miss: {m!r} -> {taken(m, s)} want {x!r}")
        for m in bad:
            print(f"     FALSE: {m!r} -> {taken(m, s)}")
    print(f"all {hit}/{total} {hit / total:.3f}")
