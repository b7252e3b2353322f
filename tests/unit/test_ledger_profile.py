"""memory.profile's page (memory/ledger/profile.py), by property: paging by cursor gives every current
fact once, in the order of the whole, at any limit; history is cut to the newest; any string as a cursor
or subject is either used or refused naming its field — never a crash."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import Invalid
from gateway.memory.ledger.facts import facts
from gateway.memory.ledger.profile import decode_cursor, encode_cursor, page
from gateway.memory.ports import Statement

SUBJECTS = ["home", "partner", "code:shed", "code:gate", "pet", "employer", "course:spanish"]


def said(subject: str, value: str, day: int, ending: bool = False) -> Statement:
    when = f"2025-{1 + day // 28:02d}-{1 + day % 28:02d}T10:00:00.000Z"
    return Statement(subject, value, when, f"sessions/{day}.jsonl", 2, 2, value, "extractor", ending)


statements = st.lists(
    st.builds(
        said, st.sampled_from(SUBJECTS), st.sampled_from(["A", "B", "C", "D"]), st.integers(0, 300), st.booleans()
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(statements, st.integers(1, 8), st.integers(0, 3))
def test_pages_by_cursor_give_every_fact_once_in_order(ss, limit, history):
    whole = page(facts(ss), limit=500, history=100)["facts"]
    seen, cursor = [], None
    for _ in range(len(whole) + 2):
        res = page(facts(ss), limit=limit, cursor=cursor, history=history)
        assert len(res["facts"]) <= limit
        for f in res["facts"]:
            full = next(w for w in whole if w["subject"] == f["subject"])
            assert f["history"] == full["history"][len(full["history"]) - len(f["history"]) :]  # the newest
            assert len(f["history"]) == min(history, len(full["history"]))
            assert f.get("historyOmitted", 0) == len(full["history"]) - len(f["history"])
        seen += [f["subject"] for f in res["facts"]]
        cursor = res.get("nextCursor")
        if cursor is None:
            break
    assert seen == [f["subject"] for f in whole]
    assert [f["since"] for f in whole] == sorted((f["since"] for f in whole), reverse=True)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_cursor_is_used_or_refused_by_name(text):
    try:
        since, subject = decode_cursor(text)
    except Invalid as exc:
        assert exc.field == "cursor"
    else:
        assert isinstance(since, str) and isinstance(subject, str)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_subject_is_used_or_refused_by_name(text):
    try:
        res = page(facts([said("home", "Leeds", 1)]), subject=text)
    except Invalid as exc:
        assert exc.field == "subject" and "unknown subject" in exc.rule
    else:
        assert all(f["subject"].split(":")[0] == text.split(":")[0] for f in res["facts"])


def test_a_cursor_round_trips_and_names_the_last_fact_shown():
    assert decode_cursor(encode_cursor("2025-01-01T00:00:00.000Z", "code:shed")) == (
        "2025-01-01T00:00:00.000Z",
        "code:shed",
    )
    with pytest.raises(Invalid):
        decode_cursor(encode_cursor("x", "y")[:-3] + "!!")
    for foreign in ('"ab"', '{"a": 1, "b": 2}', "[1, 2]", '["a"]'):  # JSON, but not a cursor of ours
        with pytest.raises(Invalid):
            decode_cursor(base64.urlsafe_b64encode(foreign.encode()).decode())
