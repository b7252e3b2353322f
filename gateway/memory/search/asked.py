"""A question read once (`Asked`): its terms, the time it asks about, the kind of answer it wants, the
names it asks about — what the steps after the search's candidates (search/timeline.py's `arrange`,
ledger/placement.py's `prefer_statements`) take instead of each reading the question's text again.
What a step may not need is read when first asked for (a question that asks about no earlier time
never looks for "before X").
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from ..index.chunking import text_date
from .query import answer_type_terms, query_terms
from .related import related_terms
from .snippets import SnippetContext, _term_needles

Intent = Literal["present", "past", "event", "words"]

# Words that say which time a question is about. They are not what it is about, so they are left out of
# the words searched (stopwords.TIME_WORDS) and decide the intent here.
_PAST = re.compile(
    r"\b(?:before|used to|originally|original|initially|at first|first|formerly|former|previous(?:ly)?|"
    r"prior|earlier|old|older|ago|back then|back when|in the past|"
    r"last (?:year|spring|summer|fall|autumn|winter|month|week|time))\b",
    re.I,
)
# These ask what holds now, whatever else the question says ("Am I still a member?", "my current role").
_PRESENT = re.compile(r"\b(?:now|nowadays|currently|current|these days|still|anymore|any more|at the moment)\b", re.I)
# A question: a question word or mark, or a verb of the present ("my boat is…", "do I…").
_A_QUESTION = re.compile(
    r"\?|^\W*(?:what|who|whom|whose|which|where|when|why|how)\b|\b(?:am|is|are|do|does|can|must|may)\b|\w'(?:s|re|m)\b",
    re.I,
)
# "What motivated her?", "Who painted it?": a question word then a verb in the past tense.
_PAST_VERB = re.compile(r"^\W*(?:what|who|which|why|how)\s+\w+ed\b", re.I)
# The verb a question is asked in: "Where do I live?" asks what holds; "When did I go?" about an event.
# ("has/have" asks what happened so far — "Where has she camped?" —, a modal what might be: no state.)
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_PARTICIPLE = r"(?:\w+ed|been|gone|done|seen|taken|made|read|got|gotten|become|begun|known|won|lost|left|met|bought|sold|had|written|given|eaten|driven|ridden|worn|grown|heard|felt|found|kept|told|thought|taught|brought|built|spent|sent)"
# A perfect ("has she camped", "have I been"), a modal ("would", "might"), or the past tense: no state.
_NOT_A_STATE = re.compile(
    rf"\b(?:(?:has|have|had)\s+(?:\w+\s+){{0,2}}?{_PARTICIPLE}|would|could|might|will|should|did|was|were)\b", re.I
)
_BEFORE = re.compile(r"\b(?:before|prior to|until)\s+(\w+(?:\s+\w+)?)", re.I)
# The proper names a question asks about ("What colour is Loon painted now?", "Where does Inês live now?"):
# capitalised words (any script's letters) not opening it, not "I".
_NAME = re.compile(r"(?<!^)(?<![.?!]\s)\b([^\W\d_]{2,})(?:'s|’s)?\b")
# ...and as the ledger's tie step reads them ("Dana", "Biscuit"): Latin capitals, not "I".
_LATIN_NAME = re.compile(r"(?<!^)(?<![.?!]\s)\b([A-Z][a-z]+)(?:'s|’s)?\b")


def temporal_intent(query: str) -> Intent:
    """What time a question asks about: the present ("Where do I live?", "Am I still a member?", "What's
    my code now?"), the past ("Where did I live before Ottawa?", "What was my old number?"), or an event
    ("When did I go to Rome?", "What did she paint?", "What happened on 7 July 2023?" — a question that
    names its date): only then does no statement supersede another."""
    if text_date(query) or _YEAR.search(query):
        return "event"
    if _PRESENT.search(query):
        return "present"
    if _PAST.search(query):
        return "past"
    if _NOT_A_STATE.search(query) or _PAST_VERB.search(query):
        return "event"
    if not _A_QUESTION.search(query):
        return "words"  # "boat colour": the newer first among equals, but no hit overtakes a better one
    return "present"


def later_terms(query: str) -> frozenset[str]:
    """What a question about the past names as the later state ("before Ottawa" → ottawa)."""
    return frozenset(t for m in _BEFORE.finditer(query) for t in query_terms(m.group(1)))


def _matcher(terms: list[str]) -> SnippetContext:
    """The terms and their related words, matched as the re-rank matches them (only which of them a text
    holds counts here, not their weights: no weights are worked out)."""
    return SnippetContext(terms, {}, _term_needles(terms + [w for w in related_terms(terms) if w not in terms]))


class Asked:
    """A question, read once. `text` as asked; the rest read from it when first wanted."""

    def __init__(self, text: str):
        self.text = text

    @cached_property
    def terms(self) -> list[str]:
        """Its search terms (query.py's `query_terms`)."""
        return query_terms(self.text)

    @cached_property
    def intent(self) -> Intent:
        return temporal_intent(self.text)

    @cached_property
    def kinds(self) -> frozenset[str]:
        """The term that only names the kind of answer wanted ("name" in "What's my cat's name?")."""
        return answer_type_terms(self.text)

    @cached_property
    def context(self) -> SnippetContext:
        """Its terms and their related words, to tell which a text holds."""
        return _matcher(self.terms)

    @cached_property
    def later(self) -> frozenset[str]:
        """What it names as the later state, for a question about the past ("before Ottawa" → ottawa)."""
        return later_terms(self.text) if self.intent == "past" else frozenset()

    @cached_property
    def names(self) -> list[str]:
        """The proper names it asks about, lowercased (the timeline's: any script)."""
        return [n.lower() for n in _NAME.findall(self.text.strip()) if n[0].isupper() and n[1:].islower()]

    @cached_property
    def about_names(self) -> SnippetContext:
        """What it asks of its names (its other terms and their related words): "work" in "Where does
        Sam work now?"."""
        names = self.names
        return _matcher([t for t in self.terms if t not in names])

    @cached_property
    def named(self) -> list[str]:
        """The proper names it asks about as the ledger's tie step reads them, lowercased."""
        return [n.lower() for n in _LATIN_NAME.findall(self.text.strip()) if n != "I"]


def asked_of(question: Asked | str) -> Asked:
    """The question read (a text is read here; an `Asked` is taken as it is)."""
    return question if isinstance(question, Asked) else Asked(question)
