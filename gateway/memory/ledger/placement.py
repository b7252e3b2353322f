"""Where the ledger's statement goes among a search's hits (recall.py chose it).

- `lead`: the chosen statement first, as a hit of its own (dated, with `fact`) unless a hit shows it;
  for the present, hits that show a superseded value of the fact — its statement, or only the names and
  numbers of the old value ("Theo", "4826") — are marked `supersededBy` (the date of the value that came
  after theirs) and go after every other hit; a hit naming the current value is not superseded (a
  restatement of it is no newer value), nor is the chosen statement for the present. For an earlier
  time the chosen statement is marked superseded when its value stopped holding.
- `outdated`: the hits hold something newer about the subject than the ledger knows (a change the
  extractor did not see): the ledger steps aside. A hit naming only an old value is not newer; one where
  the person names the subject and a name or number the fact never had is, whatever its vector; so is
  one whose stored vector is close to that of the hit showing the ledger's statement and which shares a
  word of substance with it (the extractor missed the newer statement, or gave it another subject).
- `prefer_statements`: among tied hits, the one where the person states something of whom the
  question names beats those that only mention them (asked, or told by the assistant) — not a newer
  statement of the person's naming a place, name or number the stating hit names (the arrangement put
  it level with it as newer news of the same thing: "our group at the Athenaeum moves to Thursdays").
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..hit import Hit, HitFact
from ..index.sources import session_key_of
from ..search.asked import Asked, asked_of
from ..search.stopwords import STOPWORDS
from ..sentences import norm as _norm
from ..sentences import own_words, sentences
from .facts import Fact, Period
from .lexicon import BY_NAME
from .asking import _ASKS, _STOP, Question

LEAD_SCORE = 1.0
NAMED_AFTER_CUE = 40  # characters after a subject's cue word where a new value's name counts


# A hit whose stored vector is this close to the statement's is about the same subject (the timeline's
# measure, search/timeline.py SAME_SUBJECT_COSINE).
SAME_SUBJECT_COSINE = 0.35


def outdated(
    results: Sequence[Hit],
    vectors: dict[int, np.ndarray] | None,
    statement: np.ndarray | None,
    fact: Fact,
    period: Period,
) -> bool:
    """Whether the hits hold something newer about the same subject than the ledger's current value —
    a change the extractor did not see ("Traded the Corolla in for a Leaf"): then the ledger does not
    lead (`newer_first`)."""
    return newer_hit(results, vectors, statement, fact, period) is not None


def newer_first(results: list[Hit], i: int, fact: Fact) -> list[Hit]:
    """The results with the hit `i` (newer than all the ledger knows of the fact: `newer_hit`) first, and
    the hits showing a statement of the fact after every other one, marked superseded by it."""
    newer = results[i]._replace(superseded_by=None)
    known = {_norm(s.text)[:120] for p in fact.periods for s in p.sayings}
    when = newer.date or ""
    fresh: list[Hit] = []
    stale: list[Hit] = []
    for j, r in enumerate(results):
        if j == i:
            continue
        if any(k and k in _norm(r.snippet) for k in known):
            stale.append(r._replace(superseded_by=max(r.superseded_by or "", when)))
        else:
            fresh.append(r)
    out = [newer, *fresh, *stale]
    ceiling = 1.0
    for n, r in enumerate(out):
        ceiling = LEAD_SCORE if n == 0 else min(ceiling, float(r.score))
        out[n] = r._replace(score=round(ceiling, 6))
    return out


def newer_hit(
    results: Sequence[Hit],
    vectors: dict[int, np.ndarray] | None,
    statement: np.ndarray | None,
    fact: Fact,
    period: Period,
) -> tuple[int, bool] | None:
    """The first hit that says something newer about the fact than its current value (see `outdated`),
    and whether it names the new value after the subject's cue word (a new value said: it may lead;
    otherwise only its vector says it is about the subject, and the ledger just steps aside); None when
    none does."""
    last = max(s.said for s in period.sayings)
    known = {_norm(s.text)[:120] for p in fact.periods for s in p.sayings}
    was, now = stale_names(fact, period), _names(period)
    current = set().union(*(_named(s.text) for s in period.sayings))
    ever = set().union(*(_named(s.text) for p in fact.periods for s in p.sayings))
    cues = BY_NAME[fact.subject.split(":", 1)[0]].cues if fact.subject.split(":", 1)[0] in BY_NAME else _NEVER
    qualified = ":" in fact.subject
    # The hits that show the current statement (their stored vectors and words): a newer hit alike to
    # one of them in vector and words is about the same thing, however its own sentence embeds.
    said = _norm(period.statement.text)[:120]
    shown = [
        (vectors.get(j) if vectors else None, _content(r.snippet))
        for j, r in enumerate(results)
        if said and said in _norm(r.snippet)
    ]
    for i, r in enumerate(results):
        v = vectors.get(i) if vectors else None
        snip = r.snippet
        if (r.date or "") <= last or any(k and k in _norm(snip) for k in known):
            continue
        if was and was.search(snip.lower()) and not now.search(snip.lower()):  # an old value named again
            continue
        # Only the person's own words can say something newer: a question states nothing, and the
        # assistant's answer to it ("your storage code is 7340") restates what the ledger knows.
        own = [x for t in own_words(snip) for x in sentences(t) if not x.endswith("?")]
        # ...and of those, only a sentence with a word of change or of the subject: "Traded the Corolla
        # in for a Leaf", not "Thanks, grabbing the decorations" after asking for the code. Words that
        # name the current statement's things without a word of change ("the insurance on the Subaru is
        # $140") speak of the current value.
        says = " ".join(x for x in own if _CHANGE.search(x) or cues.search(x))
        if not says or (current & _named(says) and not _CHANGE.search(says)):
            continue
        # A sentence naming the subject, then a name or number the fact never had ("The landlady here is
        # Dona Filomena", "my new manager is Paulo Reis"; not "a Christmas menu, all vegan"): a new
        # value, however far the vectors are.
        # (Not for a qualified subject: "the locker code for box 10 is 1010" is another thing's code.)
        if not qualified and any(
            _value_after(x[m.end() : m.end() + NAMED_AFTER_CUE]) - ever for x in own for m in cues.finditer(x)
        ):
            return i, True
        if v is None:
            continue
        n = float(np.linalg.norm(v))
        if n > 0 and statement is not None and float(v @ statement) / n >= SAME_SUBJECT_COSINE:
            return i, False
        words = _content(snip)
        if n > 0 and any(_alike(v / n, words, sv, sw) for sv, sw in shown):
            return i, False
    return None


def _content(snippet: str) -> set[str]:
    """The words of substance of the person's own words in a snippet (four letters or more, no stopword)."""
    words = re.findall(r"[a-z][a-z'’-]{3,}", " ".join(own_words(snippet)).lower())
    return {w for w in words if w not in _STOP and w not in STOPWORDS}


def _alike(v: np.ndarray, words: set[str], other: np.ndarray | None, other_words: set[str]) -> bool:
    """Two hits about the same thing: their stored vectors close and a word of substance shared."""
    if other is None:
        return False
    n = float(np.linalg.norm(other))
    return n > 0 and float(v @ other) / n >= SAME_SUBJECT_COSINE and bool(words & other_words)


# Words that say a value changed (a statement without one that names the current value repeats it).
_CHANGE = re.compile(
    r"\b(?:now|new|newly|no longer|any ?more|instead|switched|swapped|traded|replaced|changed|sold|bought|got"
    r"|moved|started|joined|quit|left|ended|cancell?ed|upgraded|downgraded|renamed)\b",
    re.I,
)
_SENTENCE_START = re.compile(r"(?:^|[.!?:;—–-]\s+|\n)\s*\S+")


def _named(text: str) -> set[str]:
    """The names and numbers a text says (lowercased), a capitalised word opening a sentence left out."""
    starts = {m.end() for m in _SENTENCE_START.finditer(text)}
    return {
        m.group().lower()
        for m in _NAMING.finditer(text)
        if len(m.group()) > 2 and (m.end() not in starts or any(c.isdigit() for c in m.group()))
    } - _STOP


# The words of a value that name it: a proper name or a number ("Marcus", "4826", "Northpine Health"),
# not the words around it ("for about a month").
# What may stand between a subject's cue and its value ("our vet is now Wensum", "drive a Fiat", "work at
# Arup"): a verb of being, an article, a word of change — not an event's preposition or noun ("the vet on
# Monday", "the vet appointment is at 3pm", "the vet said Pepper…").
_VALUE_GLUE = re.compile(
    r"(?:[\s:,\-–—]|\b(?:is|are|was|['’]s|now|still|currently|called|named|at|with|for|a|an|the|my|our|new|"
    r"newly|secondhand|second-hand|used|these days|nowadays|here|there|actually|officially)\b)*",
    re.I,
)
# Names and numbers that date or measure a mention rather than name a value: weekdays, months, times,
# quantities with a unit ("2kg", "3pm", "10:30", "5th").
_NOT_A_VALUE = re.compile(
    r"(?:mon|tues|wednes|thurs|fri|satur|sun)day|january|february|march|april|may|june|july|august|september"
    r"|october|november|december|today|tomorrow|tonight|\d+(?:[.:]\d+)?\s*[a-z]{1,4}|\d{1,2}[.:]\d\d"
)


def _value_after(after: str) -> set[str]:
    """The name or number in value position just after a subject's cue (`after` is the text following
    it), lowercased; empty when an event's words come first or what follows only dates or measures."""
    rest = after[_VALUE_GLUE.match(after).end() :]  # type: ignore[union-attr]
    m = _NAMING.match(rest)
    if not m or len(m.group()) <= 2 or _NOT_A_VALUE.fullmatch(m.group().lower()):
        return set()
    return {m.group().lower()} - _STOP


_NAMING = re.compile(r"\b(?:[A-Z][\w'’-]*[a-z0-9][\w'’-]*|[\w-]*\d[\w-]*)\b")
_NEVER = re.compile(r"\b$^")  # matches nothing


def _names(period: Period) -> re.Pattern[str]:
    """An expression for the naming words of a period's value (lowercased text; nothing when it has none)."""
    words = {w.lower() for w in _NAMING.findall(period.value) if len(w) > 2 and w.lower() not in _STOP}
    if not words:
        return _NEVER
    return re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b")


def stale_names(fact: Fact, period: Period) -> re.Pattern[str] | None:
    """The naming words of the values `period` superseded that it does not share ("Theo", not "Ezra";
    "4826", not "7340"): a hit holding one of them and none of the current value's is about the old value
    only, however it was worded (an assistant's restatement, a question that quotes it)."""
    now = {w.lower() for w in _NAMING.findall(period.value)}
    words = {
        w.lower()
        for p in fact.periods
        if p is not period and p.since < period.since and not p.ending
        for w in _NAMING.findall(p.value)
        if len(w) > 2 and w.lower() not in _STOP and w.lower() not in now
    }
    if not words:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b")


def statement_hit(fact: Fact, period: Period, score: float = LEAD_SCORE) -> Hit:
    """The statement of a fact's period as a hit of its own: where it was said, when, in whose words,
    with its `fact`."""
    ev = period.statement
    return Hit(
        ev.path,
        "sessions" if ev.path.startswith("sessions/") else "memory",
        ev.start_line,
        ev.end_line,
        score,
        # the person's own words: a transcript's user message (the model's statements quote one too)
        ("User: " + ev.text)
        if ev.source == "model" or (ev.source == "extractor" and ev.path.startswith("sessions/"))
        else ev.text,
        session_key=session_key_of(ev.path) or None,
        date=ev.said,
        fact=fact_of(fact, period),
    )


def fact_of(fact: Fact, period: Period) -> HitFact:
    """A hit's `fact`: the subject, the value and since when (until when, for an earlier one)."""
    return HitFact(fact.subject, period.value, period.since, period.until or None)


def lead(results: list[Hit], fact: Fact, period: Period, q: Question, k: int) -> list[Hit]:
    """The results with the chosen statement first (a hit of its own, unless one of them shows it
    already: that one moves up), and for the present the hits showing a superseded value of the fact
    marked and moved after the rest. Scores stay in [0, 1] and non-increasing."""
    ev = period.statement
    said = _norm(ev.text)[:120]
    first: Hit | None = None
    rest: list[Hit] = []
    for r in results:
        if first is None and said and said in _norm(r.snippet):
            first = r
        else:
            rest.append(r)
    if first is None:
        first = statement_hit(fact, period)
    # The statement chosen is superseded only when the value it gives stopped holding: never for the
    # present (a later restatement of the same value, "Your code is 7340", does not supersede it).
    first = first._replace(
        score=LEAD_SCORE,
        fact=fact_of(fact, period),
        superseded_by=period.until if period.until and q.asked != "present" else None,
    )
    if q.asked == "present":
        old = {_norm(s.text)[:120] for p in fact.periods if p is not period for s in p.sayings}
        old.discard(said)
        was, now = stale_names(fact, period), _names(period)
        fresh: list[Hit] = []
        stale: list[Hit] = []
        for r in rest:
            snip = _norm(r.snippet)
            if any(o and o in snip for o in old) or (was and was.search(snip) and not now.search(snip)):
                # by the value that came after the one it shows (the one of its time), else the current
                when = r.date or ""
                stale.append(
                    r._replace(
                        superseded_by=next((p.since for p in fact.periods if when and p.since > when), period.since)
                    )
                )
            else:
                if r.superseded_by and now.search(snip) and not (was and was.search(snip)):
                    # it says the current value: what superseded it was a restatement
                    r = r._replace(superseded_by=None)
                fresh.append(r)
        rest = fresh + stale
    out = [first, *rest][:k]
    ceiling = 1.0
    for i, r in enumerate(out[1:], start=1):
        ceiling = min(ceiling, float(r.score))
        out[i] = r._replace(score=round(ceiling, 6))
    return out


# Ties between hits that only mention someone ("What's Dana's son called?": every chunk naming Dana
# scores alike; the arrangement put a newer mention a step above an older statement, search/timeline.py)
# go to the one where the person says something of them, not asks or is told.
TIE = 1e-5  # scores this close are a tie (the arrangement's steps are 1e-6)


def _states(snippet: str, names: list[str]) -> bool:
    """Whether the person's own words in a snippet (its `User:` parts; all of it when unlabelled) hold a
    sentence naming one of `names` that is not a question."""
    for text in own_words(snippet):
        for sent in sentences(text):
            low = sent.lower()
            if any(re.search(rf"\b{re.escape(n)}\b", low) for n in names) and not _ASKS.search(sent):
                return True
    return False


def _own_names(snippet: str) -> set[str]:
    """The names and numbers (`_named`) of the person's own statements in a snippet (not questions)."""
    return set().union(*(_named(x) for t in own_words(snippet) for x in sentences(t) if not _ASKS.search(x)))


def _same_thing(snippet: str, stated: set[str]) -> bool:
    """Whether the person's own words in a snippet state something naming one of `stated`."""
    return bool(_own_names(snippet) & stated)


def prefer_statements(question: Asked | str, results: list[Hit]) -> list[Hit]:
    """Among (nearly) equally scored hits, those where the person states something of whom the question
    names come before those that only mention them (asks, is told, or states something else naming none
    of their names and numbers), the order otherwise kept; one that had been marked superseded by a hit
    that only mentions the name is not superseded by it. No name in the question: the results as they are. (Run
    before the ledger's step, which has the last word on what is current.) `question`: search/asked.py's
    reading of it (its `named`: capitalised words not opening it, not "I"; a text is read here)."""
    if len(results) < 2:
        return results
    names = asked_of(question).named
    if not names:
        return results
    out: list[Hit] = []
    i = 0
    while i < len(results):
        j = i + 1
        while j < len(results) and float(results[j - 1].score) - float(results[j].score) <= TIE:
            j += 1
        run = results[i:j]
        i = j
        if len(run) == 1:  # no tie: nothing to prefer
            out.extend(run)
            continue
        states = [_states(r.snippet, names) for r in run]
        # A hit that does not state the name gives way, unless the person states something there that
        # names a place, name or number a hit stating it names ("Started a Portuguese class at the
        # Bluecoat", then "our group at the Bluecoat moves to Thursdays"): the arrangement put it there,
        # as newer news of the same thing.
        stated = set().union(*(_own_names(r.snippet) for r, st in zip(run, states) if st))
        mere = [not st and not _same_thing(r.snippet, stated) for r, st in zip(run, states)]
        if any(states) and any(mere):
            mentions = {r.date or "" for r, m in zip(run, mere) if m}
            order = sorted(range(len(run)), key=lambda n: mere[n])
            scores = [r.score for r in run]
            moved = []
            for n, score in zip(order, scores):
                r = run[n]._replace(score=score)
                if states[n] and r.superseded_by in mentions:
                    r = r._replace(superseded_by=None)
                moved.append(r)
            run = moved
        out.extend(run)
    return out
