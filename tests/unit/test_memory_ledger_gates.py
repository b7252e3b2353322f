"""The ledger's word gates (issue 46): an expression is searched only where the clause holds one of the
words its matches start with. In ASCII text a match of `\\b(?:word…)\\b` is one of those words whole, so a
clause without any of them cannot match: the gate changes the cost, never the statements."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.memory.ledger.extract import _STATED, _STATED_WORDS, _WORDS
from gateway.memory.ledger.lexicon import hinted as lexicon_hinted
from gateway.memory.ledger.values import RENAMED
from gateway.memory.ledger.whose import _ME, _ME_WORDS

_PIECES = [
    "i",
    "I",
    "i'm",
    "I've",
    "im",
    "my",
    "My",
    "mine",
    "me",
    "myself",
    "we",
    "We're",
    "we've",
    "our",
    "us",
    "ourselves",
    "is",
    "Is",
    "are",
    "was",
    "WAS",
    ":",
    "mine2",
    "_me",
    "me_",
    "4my",
    "is-",
    "x",
    "the",
    "dog",
    "renamed",
    "Renamed it to Small Hours",
    "relaunched as Nova",
    "rebrand",
    "'",
    "’",
    ".",
    ",",
    " ",
    "-",
    "\n",
]


def _alternatives(pattern: re.Pattern[str]) -> list[str]:
    inner = pattern.pattern.split(r"\b(?:", 1)[1].split(r")\b", 1)[0]
    return inner.split("|")


def test_the_gate_words_are_the_first_words_of_the_expressions() -> None:
    assert {_WORDS.match(a.lower()).group(0) for a in _alternatives(_ME)} == _ME_WORDS  # type: ignore[union-attr]
    assert {_WORDS.match(a.lower()).group(0) for a in _alternatives(_STATED)} == _STATED_WORDS  # type: ignore[union-attr]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=12).map(" ".join) | st.text(alphabet="imewusoardtIW':_ 2.", max_size=30)
)
def test_an_ascii_clause_without_a_gate_word_never_matches(text: str) -> None:
    words = frozenset(_WORDS.findall(text.lower()))
    if _ME.search(text):
        assert not words.isdisjoint(_ME_WORDS)
    if _STATED.search(text):
        assert ":" in text or not words.isdisjoint(_STATED_WORDS)
    if RENAMED.search(text):
        assert "renam" in text or "relaunch" in text or "rebrand" in text


_PREFIXES = sorted(lexicon_hinted.prefixes)
_FLAT = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in sorted(_PREFIXES, key=len, reverse=True)) + ")")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_PREFIXES + [p[:-1] for p in _PREFIXES] + _PIECES + ["s", "ed", "-", "é"]), max_size=16)
)
def test_the_grouped_prefix_expression_finds_what_the_flat_one_did(parts: list[str]) -> None:
    for text in ("".join(parts), " ".join(parts)):
        low = text.lower()
        assert [m.group() for m in lexicon_hinted._prefix.finditer(low)] == [m.group() for m in _FLAT.finditer(low)]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(_PIECES + ["MY", "Password", "K", "İ", "Alarm", "4455", "Her", "Teacher", "\x1c"]), max_size=12
    )
)
def test_the_prefilter_reads_ascii_text_as_its_lowered_words(parts: list[str]) -> None:
    from gateway.memory.ledger.prefilter import _ANY, _LOCKS, _MAY_STATE, _PAIRS, _PUNCT, _holds, _may_state

    text = " ".join(parts)
    words = text.lower().replace("’", "'").translate(_PUNCT).split()  # the str path, for any text
    assert _may_state(text) == (not _ANY.isdisjoint(words) and _holds(set(words), _MAY_STATE, _LOCKS, _PAIRS, text))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["Caroline: hi", "Mel Jones: ok then", "no tag here", "x: y", "Bob:no", ""]), max_size=12)
)
def test_a_transcript_names_its_speakers_as_the_full_count_said(texts: list[str]) -> None:
    from gateway.memory.index.chunking import _SPEAKER_TAG, NAMED_SHARE, _names_speakers

    assert _names_speakers(texts) == (sum(1 for t in texts if _SPEAKER_TAG.match(t)) >= NAMED_SHARE * len(texts))


def test_a_non_ascii_clause_is_searched_whole_where_case_folding_makes_an_ascii_word() -> None:
    """Under re.I the long s `ſ` matches `s`: `iſ` is "is" to the expressions though no [a-z] word of the
    clause is — a non-ASCII clause is never gated (review of write46: a mutant gating it passed every test)."""
    from gateway.memory.ledger.extract import statements_of

    for text in ("The gate code iſ abc", "The cabin wifi password iſ moose"):
        plain = text.replace("ſ", "s")
        assert statements_of(text) == statements_of(plain) != []
