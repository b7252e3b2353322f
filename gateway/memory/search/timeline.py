"""What is true now: hits that say something about the same subject, ordered by when it was said.

A memory of a life holds old and new statements side by side ("the code is 4826", months later "the code
is 7340"). Relevance alone cannot tell them apart — they match the question equally well, and the old
one was often said more plainly — so after the search ranks a pool of hits, `arrange` re-orders it:

1. **One hit per statement.** Hits of different files that repeat each other (the same text, or a
   shared sentence of 25+ characters) become one: the best-ranked stays and says how often and when it
   was said (`said`, `firstSaid`, `lastSaid`). (Overlapping windows of one transcript are not
   repeats: they show different parts of it.)
2. **What the question asks about** (search/asked.py's `temporal_intent`, read once with the rest of
   the question: `Asked`): the present ("now", "still", "current", or a
   question in the present tense: "Where do I live?"), the past ("before", "used to", "originally",
   "first", "old", "previous", "last year", …), an event ("When did I go to Rome?", "Where has she
   camped?"), where no statement supersedes another, or no question at all — a few words ("boat
   colour"), where equally relevant hits are ordered newest first and marked, but none overtakes a
   better one.
3. **The latest statement wins** for the present: a hit about the same subject as one of the best three
   but older (their stored vectors close, or — the question naming someone or something, "Loon" — both
   naming it and the newer saying in a statement that it changed: "Repainted Loon, she's forest green
   now"; itself scoring at least half of it; among the first five, so
   that the order of what is shown changes, not what it is) takes that hit's place, just above it, and
   the older is marked `supersededBy` (the newer one's date). For the past the older leads instead,
   and "before X" puts what names X after the rest. Equally relevant hits are ordered the same way.
4. A hit that only asks (every sentence a question) never takes another's place: a question asked again
   is not a newer statement.

Pure functions over hits (memory/hit.py's Hit) and their stored vectors (index → vector; without them,
the overlap of the snippets' words stands in).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from ...timeutil import parse_iso
from ..hit import Hit
from ..sentences import norm, sentences, statements
from .asked import Asked, asked_of
from .snippets import SnippetContext, _find, matched_terms

DUPLICATE_SENTENCE_CHARS = 25  # a shared sentence this long makes two hits one statement
SAME_SUBJECT_COSINE = 0.35  # stored vectors this close: two hits are about the same subject
SAME_SUBJECT_WORDS = 0.3  # without vectors: the Jaccard overlap of their words instead
RELEVANT_ENOUGH = 0.5  # a hit takes another's place only if it scores at least this share of it
TOP_CONTESTED = 3  # only the best few hits can be overtaken: the answer's place is what is contested
# ...and only by a hit among the first this many: the order of what is shown first changes, not what it is.
WINDOW = 5


_WORD3 = re.compile(r"\w{3,}")  # a word of three characters or more (\w+ runs, the shorter left out)


@dataclass
class _Hit:
    result: Hit
    score: float
    date: str  # ISO 8601 (sorts as time); "" when undated
    text: str  # the snippet, normalised
    long: list[str]  # its sentences of DUPLICATE_SENTENCE_CHARS or more with a word of the query, normalised
    words: frozenset[str] | None  # its words of three letters or more, once `_words` has been asked
    asks: bool
    vec: np.ndarray | None
    terms: frozenset[str]  # the query terms it contains
    said: list[str] = field(default_factory=list)  # the dates of the hits merged into this one
    _said_as: list[str] | None = None  # its sentences (memory/sentences.py), split when first asked

    @property
    def said_as(self) -> list[str]:
        if self._said_as is None:
            self._said_as = sentences(self.result.snippet)
        return self._said_as


def _has_term(text: str, needles: Sequence[tuple[str, str, bool]]) -> bool:
    """Whether `text` holds any of the terms (`bool(matched_terms(text, ctx))` for a context's `needles`,
    stopping at the first)."""
    low = text.lower()
    for _term, needle, word_start in needles:
        i = low.find(needle)  # (most needles are not there at all: no call for them)
        if i >= 0 and (i == 0 or not word_start or _find(low, needle, word_start) >= 0):
            return True
    return False


def _hits(results: Sequence[Hit], ctx: SnippetContext) -> list[_Hit]:
    """What folding repeats needs of each hit (its text and long sentences); `prepare` adds the rest to
    the few hits that can overtake or be overtaken. (Issue 46: a snippet is split into sentences only
    where it can matter — the lines holding a word of the query, for `long`; all of it only when it has a
    "?", for `asks`: without one no sentence of it asks.)"""
    out = []
    needles = ctx.needles
    for r in results:
        snip = r.snippet
        low = snip.lower()
        # (a sentence holds only what its snippet holds: the needles not in the snippet are not looked for)
        there = [n for n in needles if n[1] in low]
        said_as = sentences(snip) if "?" in snip else None
        out.append(
            _Hit(
                r,
                float(r.score),
                r.date or "",
                _normalised(low),
                _long(snip, low, there, said_as) if there else [],
                None,
                bool(said_as) and all(s.endswith("?") for s in said_as),  # type: ignore[union-attr]
                None,
                frozenset(),
                _said_as=said_as,
            )
        )
    return out


def _normalised(low: str) -> str:
    """memory/sentences.py's `norm` of a lowercased text, `" ".join(low.split())`, without splitting it
    where that is the text with its line breaks as spaces: no other white space (every character
    `str.split` splits at but the space is unprintable), no two spaces together, none at either end
    (issue 46: most snippets; half the time of the split and join)."""
    flat = low.replace("\n", " ")
    if flat.isprintable() and "  " not in flat and flat[:1] != " " and flat[-1:] != " ":
        return flat
    return " ".join(low.split())


def _long(snip: str, low: str, there: list[tuple[str, str, bool]], said_as: list[str] | None) -> list[str]:
    """The snippet's sentences of DUPLICATE_SENTENCE_CHARS or more that hold one of `there` (needles the
    snippet holds), normalised, in order: those of its lines that hold one (a sentence is within a line;
    an ASCII line's lowercase is its sentences' lowercases joined; any other line is read whole). `low`:
    the snippet lowercased (its lines are the snippet's, lowercased)."""
    if said_as is None:
        lines = snip.split("\n")
        if len(lines) > 1:
            found = [n[1] for n in there]
            keep = [
                ln for ln, lo in zip(lines, low.split("\n")) if not ln.isascii() or any(map(lo.__contains__, found))
            ]
            said_as = sentences("\n".join(keep)) if len(keep) < len(lines) else sentences(snip)
        else:
            said_as = sentences(snip)
    return [norm(s) for s in said_as if len(s) >= DUPLICATE_SENTENCE_CHARS and _has_term(s, there)]


def _unit(v: np.ndarray) -> np.ndarray | None:
    """A stored vector made unit length (None for a zero one): what `_same_subject` compares."""
    # (np.linalg.norm's own sum for a vector, without its checks: the same float)
    n = float(np.sqrt(v.dot(v))) if v.ndim == 1 and v.dtype.kind == "f" else float(np.linalg.norm(v))
    return v / n if n > 0 else None


def _repeats(a: _Hit, b: _Hit) -> bool:
    """The same statement said again: in another file (overlapping windows of one transcript show
    different parts of it), the same text, or a shared sentence of DUPLICATE_SENTENCE_CHARS or more that
    holds a word of the question (not a pleasantry both happen to say)."""
    if a.result.path == b.result.path:
        return False
    return a.text == b.text or any(map(b.text.__contains__, a.long)) or any(map(a.text.__contains__, b.long))


def _same_subject(a: _Hit, b: _Hit, kinds: frozenset[str]) -> bool:
    """Whether `b` is about what `a` is: their stored vectors close (or, without vectors, their words
    overlapping) — unless `b` matched the question only in the word that names the kind of answer
    ("name" in "What's my cat's name?") where `a` matched what it is about ("cat")."""
    if b.terms and b.terms <= kinds and not a.terms <= kinds:
        return False
    if a.vec is not None and b.vec is not None:
        return float(a.vec @ b.vec) >= SAME_SUBJECT_COSINE
    aw, bw = _words(a), _words(b)
    if not aw or not bw:
        return False
    return len(aw & bw) / len(aw | bw) >= SAME_SUBJECT_WORDS


def _words(h: _Hit) -> frozenset[str]:
    if h.words is None:
        h.words = frozenset(_WORD3.findall(h.result.snippet.lower()))
    return h.words


def _merge_repeats(hits: list[_Hit]) -> list[_Hit]:
    """One hit per statement: a hit repeating a better-ranked one is folded into it."""
    kept: list[_Hit] = []
    for h in hits:
        into = None
        path, text, long = h.result.path, h.text, h.long
        for k in kept:  # (`_repeats`, inline: 55 pairs a search of 11 hits)
            if k.result.path != path and (
                k.text == text
                or (k.long and any(map(text.__contains__, k.long)))
                or (long and any(map(k.text.__contains__, long)))
            ):
                into = k
                break
        if into is None:
            h.said = [h.date] if h.date else []
            kept.append(h)
        elif h.date:
            into.said.append(h.date)
    return kept


def _last(h: _Hit) -> str:
    """When the hit's statement was last said (merged repeats included)."""
    return max(h.said, default=h.date)


def arrange(
    results: Sequence[Hit], question: Asked | str, vectors: Mapping[int, np.ndarray] | None = None
) -> list[Hit]:
    """The results (best first) re-ordered as the module says, annotated; scores kept in [0, 1] and
    non-increasing. `question`: search/asked.py's reading of it (a text is read here). `vectors`: result
    index → its stored vector (only those of `Arrangement.wanted` are looked at)."""
    return prepare(results, question).finish(vectors)


@dataclass
class Arrangement:
    """What `arrange` decides before it compares stored vectors: the hits with repeats folded, and
    `wanted`, the indexes (in the results given) of the few hits whose vectors it compares — a caller
    reads only those (issue 46: the search read the vectors of its whole pool for at most five)."""

    hits: list[_Hit]
    q: Asked
    pairs: list[tuple[_Hit, _Hit]]  # (a, b): b could take a's place, if about the same subject
    index_of: dict[int, int]  # id(hit) → its index in the results given
    wanted: list[int]

    def finish(self, vectors: Mapping[int, np.ndarray] | None = None) -> list[Hit]:
        hits, q = self.hits, self.q
        intent = q.intent
        if intent == "event":  # an event's hits keep their order: nothing to compare
            return _annotated(hits, {id(h): h.score for h in hits}, {})
        if vectors:
            by_index = self.hits_by_index
            for i in self.wanted:
                h = by_index[i]
                v = vectors.get(i)
                h.vec = _unit(v) if v is not None else None
        kinds = q.kinds
        names = q.names if intent == "present" else []
        # Each hit's place: its own score, or just above the best-ranked hit it overtakes.
        place = {id(h): h.score for h in hits}
        newer_of: dict[int, str] = {}
        for a, b in self.pairs:
            if not (_same_subject(a, b, kinds) or (names and _renamed_change(a, b, names, q.about_names))):
                continue
            if intent in ("present", "words"):
                if _last(a) and _last(b) > _last(a):
                    if intent == "present":  # (a search of a few words only orders equals by date)
                        place[id(b)] = max(place[id(b)], place[id(a)] + 1e-6)
                    newer_of[id(a)] = max(newer_of.get(id(a), ""), _last(b))
                elif _last(b) and _last(a) > _last(b) and not a.asks:  # the newer leads already
                    newer_of[id(b)] = max(newer_of.get(id(b), ""), _last(a))
            elif (q.later and a.terms & q.later and not b.terms & q.later) or (
                not (q.later and b.terms & q.later) and _last(a) and _last(b) and _last(b) < _last(a)
            ):
                # The past: the older first, and before what the question names as the later state.
                place[id(b)] = max(place[id(b)], place[id(a)] + 1e-6)
        return _annotated(hits, place, newer_of)

    @property
    def hits_by_index(self) -> dict[int, _Hit]:
        return {self.index_of[id(h)]: h for h in self.hits[:WINDOW]}


def prepare(results: Sequence[Hit], question: Asked | str) -> Arrangement:
    """`arrange` up to the stored vectors: call `finish` with those of `wanted` (result index → vector)."""
    q = asked_of(question)
    if not results:
        return Arrangement([], q, [], {}, [])
    intent = q.intent
    # Equally relevant hits: the newer first for the present, the older for the past.
    sign = {"present": -1, "words": -1, "past": 1, "event": 0}[intent]
    ranked = sorted(
        range(len(results)),
        key=lambda i: (-float(results[i].score), sign * _epoch(results[i].date)),
    )
    ordered = [results[i] for i in ranked]
    ctx = q.context
    hits = _merge_repeats(_hits(ordered, ctx))
    if intent == "event":
        return Arrangement(hits, q, [], {}, [])
    index_of = {id(r): old for old, r in zip(ranked, ordered)}
    index_of = {id(h): index_of[id(h.result)] for h in hits[:WINDOW]}
    for h in hits[:WINDOW]:
        h.terms = matched_terms(h.result.snippet, ctx)
    kinds = q.kinds
    # The pairs compared: a among the best few, b after it within the window, relevant enough and not
    # only asking; b not matching only the word that names the kind of answer where a matches more.
    pairs = []
    for i, a in enumerate(hits[:TOP_CONTESTED]):
        for b in hits[i + 1 : WINDOW]:
            if not (b.asks or b.score < RELEVANT_ENOUGH * a.score):
                pairs.append((a, b))
    by_vector = {
        id(h): h
        for a, b in pairs
        if not (b.terms and b.terms <= kinds and not a.terms <= kinds)  # (`_same_subject`'s first test)
        for h in (a, b)
    }
    return Arrangement(hits, q, pairs, index_of, sorted(index_of[k] for k in by_vector))


def _annotated(hits: list[_Hit], place: dict[int, float], newer_of: dict[int, str]) -> list[Hit]:
    """The hits in the order of their places, each with its score and what it says of repeats and of
    newer statements."""
    order = sorted(hits, key=lambda h: -place[id(h)])
    out = []
    ceiling = 1.0
    for h in order:
        # Scores stay in [0, 1] and follow the new order (a hit that moved up takes the score it overtook).
        ceiling = min(ceiling, max(h.score, min(1.0, place[id(h)])))
        score = round(ceiling, 6)
        if len(h.said) <= 1 and id(h) not in newer_of and score == h.result.score:
            out.append(h.result)  # nothing to change (most hits)
            continue
        changes: dict[str, Any] = {"score": score}
        if len(h.said) > 1:
            changes.update(said=len(h.said), first_said=min(h.said), last_said=max(h.said))
        if id(h) in newer_of:
            changes["superseded_by"] = newer_of[id(h)]
        out.append(h.result._replace(**changes))
    return out


# A sentence saying something changed: "now", "new", "no longer", "switched", a verb of doing again.
_CHANGED = re.compile(
    r"\b(?:now|new|newly|no longer|any ?more|instead|switched|swapped|changed|moved|renamed|re[a-z]{3,}ed)\b", re.I
)
# A verb of change said of the name itself ("Repainted Loon", "Sam moved to Leeds"): not any re…ed word
# ("Sam reached Lisbon" changes nothing of Sam).
_CHANGE_VERB = (
    r"(?:switched|swapped|changed|moved|renamed|repainted|rebuilt|relocated|rehomed|rebranded|redecorated"
    r"|retrained|remarried|resprayed|reupholstered)"
)


def _renamed_change(a: _Hit, b: _Hit, names: list[str], asked: SnippetContext) -> bool:
    """A newer hit about what the question names, saying it changed, is about the same thing as an
    older one naming it, however far apart their stored vectors are ("painted cream, named Loon" and
    "Repainted Loon: she's forest green now") — when its sentence also says what is asked ("Sam works at
    Google now" for "Where does Sam work now?") or says the change of the name itself ("Repainted Loon");
    a sentence sharing only the name ("Had dinner with Sam, he has a new puppy") is about something else."""
    for n in names:
        pat = re.compile(rf"\b{re.escape(n)}\b")
        if not pat.search(a.text):
            continue
        by_name = re.compile(
            rf"\b{_CHANGE_VERB}\s+{re.escape(n)}\b|\b{re.escape(n)}\s+(?:has\s+|had\s+|just\s+)?{_CHANGE_VERB}\b"
        )
        for s in statements(b.said_as):
            low = s.lower()
            if pat.search(low) and _CHANGED.search(s) and (by_name.search(low) or _has_term(s, asked.needles)):
                return True
    return False


def _epoch(date: object) -> float:
    return _epoch_of(date) if isinstance(date, str) and date else 0.0


@lru_cache(maxsize=4096)
def _epoch_of(date: str) -> float:
    """A hit's date as seconds (kept: the same hits' dates are sorted by again and again, issue 46)."""
    dt = parse_iso(date)
    return dt.timestamp() if dt else 0.0
