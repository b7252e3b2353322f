"""Recall from the ledger: a question about a subject gets that subject's statement as a candidate,
even when it shares no word with the question.

1. **Which subject** (asking.py's `subjects_of`): the lexicon's words in the question, else the subject
   whose description the question's embedding is closest to (lexicon.py's `about`).
2. **Which thing of it**: of the subject's facts (a qualified subject has several: the shed's code, the
   wifi's), the one whose statements are closest to the question (embeddings; the overlap of words
   without them), if close enough.
3. **Which time** (asking.py's `when_asked`): the present, unless the question asks about an earlier time —
   "originally"/"at first" (the first value), "before X"/"previous"/"used to"/"old"/"… before?" (the
   value before X's, or before the current one), a date, "in March", "last spring", "in the summer",
   "two months ago" (the value valid then; relative dates resolved against `asOf` where given, else
   now). X may be an event of another subject ("Where did I work before I moved?": the time of the
   move, the home's statement whose words X names, else its latest change): the value valid just
   before it. A question in the past tense that names no earlier time ("What was the amount I was
   approved for?") asks about the present. For the present, a home whose value a service's cue names
   ("Riverside Vets": NOT_A_HOME) is that service's place, not where the person lives: the home said
   before it answers.
4. **Where it goes** (placement.py's `lead`): the chosen statement first, as a hit of its own (dated, with `fact`:
   subject, value, since); for the present, the hits that show a superseded value of the same fact are
   marked `supersededBy` and go after those that do not.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Mapping, Sequence

import numpy as np

from ...timeutil import parse_iso, to_iso
from .asking import (
    _ASKS,
    _SOMEONE_ELSE,
    _WORD,
    ABOUT_OTHERS,
    Question,
    _words,
    _without_event,
    subjects_of,
    when_asked,
)
from .facts import Fact, Period
from .lexicon import BY_NAME, SUBJECTS

# (WordLlama's cosines are small: a question and the description of its subject score ~0.3, unrelated
# ones below ~0.2.)
SUBJECT_COSINE = 0.3  # a question this close to a subject's description is about it (no cue word)
SUBJECT_MARGIN = 0.08  # ...and this much closer than to the next subject
QUALIFIER_BONUS = 0.3  # a fact whose qualifier the question names ("the shed code") beats the others
MAX_VECTORS = 4096  # statement vectors kept between searches (the least recently used go first)
# What one question's choice of fact weighs (a life has a few dozen codes; an imported archive may have
# thousands of statements of one subject, and each search would embed them all): the facts whose
# qualifier it names and those sharing most words with it, and the latest sayings of each.
RANK_FACTS = 64
RANK_SAYINGS = 6


Embed = Callable[[list[str]], Awaitable[np.ndarray]]


class LedgerRecall:
    """Picks the statement a question asks about. `embed`: the memory's embedding provider (None: words
    only). Keeps the vectors of the subjects' descriptions and of recent statements."""

    def __init__(self, embed: Embed | None):
        self.embed = embed
        self._about: np.ndarray | None = None
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    async def _vecs(self, texts: list[str]) -> list[np.ndarray] | None:
        if self.embed is None:
            return None
        # The answer is built from what is in hand here: the kept vectors may be dropped meanwhile (past
        # MAX_VECTORS, by this search or one beside it), which raised KeyError and lost the ledger's lead.
        have: dict[str, np.ndarray] = {}
        for t in texts:
            if (v := self._vectors.get(t)) is not None:
                have[t] = v
                self._vectors.move_to_end(t)
        todo = [t for t in dict.fromkeys(texts) if t not in have]
        if todo:
            out = await self.embed(todo)
            for t, v in zip(todo, out):
                n = float(np.linalg.norm(v))
                have[t] = self._vectors[t] = v / n if n > 0 else v
            while len(self._vectors) > MAX_VECTORS:
                self._vectors.popitem(last=False)
        return [have[t] for t in texts]

    async def subjects(self, query: str) -> list[str]:
        """The subjects a question is about: by cue words, else by the embedding of its description. A
        question about someone else's life ("Where do my parents live?") is about none of the person's."""
        query = _without_event(query)
        if _SOMEONE_ELSE.search(query):
            return [s for s in subjects_of(query) if s in ABOUT_OTHERS]
        named = subjects_of(query)
        if named or self.embed is None or not _ASKS.search(query):
            return named  # a few words that name no subject ("boat colour"): no embedding is asked
        vecs = await self._vecs([query, *(s.about for s in SUBJECTS)])
        if vecs is None:
            return []
        q, about = vecs[0], np.stack(vecs[1:])
        sims = about @ q
        order = np.argsort(-sims)
        best, second = float(sims[order[0]]), float(sims[order[1]])
        if best >= SUBJECT_COSINE and best - second >= SUBJECT_MARGIN:
            return [SUBJECTS[int(order[0])].name]
        return []

    async def vector(self, text: str) -> np.ndarray | None:
        """The (unit) embedding of a text, None without a local model."""
        vecs = await self._vecs([text])
        return vecs[0] if vecs else None

    async def pick(
        self, query: str, known: Mapping[str, Fact], now: datetime, asked: Sequence[str] | None = None
    ) -> tuple[Fact, Period, Question] | None:
        """The fact a question asks about (of `known`: ledger/facts.py's facts, as of the time the search
        is as of) and its period for the time asked, or None. `asked`: the subjects the question asks
        about (the rest of `known` are its "before X" event's: `event_subjects`); None: all of them."""
        if not known:
            return None
        q = when_asked(query, now)
        mine = [f for f in known.values() if asked is None or f.subject.split(":", 1)[0] in asked]
        ranked = await self._rank(query, mine)
        if not ranked:
            return None
        fact = ranked[0]
        ids = {id(f) for f in mine}
        period = _period(fact, q, [f for f in known.values() if id(f) not in ids])
        return (fact, period, q) if period is not None else None

    async def rank(self, query: str, candidates: list[Fact]) -> list[Fact]:
        """`candidates` (facts of the question's subjects), the one it asks about first."""
        return await self._rank(query, candidates)

    async def _rank(self, query: str, candidates: list[Fact]) -> list[Fact]:
        """The facts of the question's subjects, the one it asks about first: the one whose qualifier it
        names, then the one whose statements are closest to it (embeddings; shared words without)."""
        if len(candidates) == 1:
            return candidates
        qwords = set(_words(query))
        named = set(_WORD.findall(query.lower()))  # every word, "7" too: "box 17" is not "box 7"
        if len(candidates) > RANK_FACTS:
            candidates = sorted(candidates, key=lambda f: _prefilter(f, named, qwords), reverse=True)[:RANK_FACTS]
        texts = [_latest_texts(f) for f in candidates]
        vecs = await self._vecs([query, *(t for ts in texts for t in ts)])
        best: list[float] = []
        if vecs is not None:  # each fact's closest saying, in one product (a family may hold thousands)
            sims = np.stack(vecs[1:]) @ vecs[0]
            starts = np.cumsum([0, *(len(ts) for ts in texts[:-1])])
            best = np.maximum.reduceat(sims, starts).tolist()
        scored: list[tuple[float, int]] = []
        for i, (f, ts) in enumerate(zip(candidates, texts)):
            # named whole: each of its words in the question ("the shed code"; "the locker code for box 17")
            bonus = QUALIFIER_BONUS if _qualifier_named(f, named) else 0.0
            if vecs is not None:
                sim = float(best[i])
            else:
                sim = max((len(qwords & set(_words(t))) / max(1, len(qwords)) for t in ts), default=0.0)
            scored.append((sim + bonus, i))
        scored.sort(reverse=True)
        return [candidates[i] for _, i in scored]


def _qualifier_named(fact: Fact, named: set[str]) -> bool:
    qual = fact.subject.split(":", 1)[1] if ":" in fact.subject else ""
    return bool(qual) and set(_WORD.findall(qual)) <= named


def _prefilter(fact: Fact, named: set[str], qwords: set[str]) -> tuple[bool, int, str]:
    """Cheap order of a subject's many facts before the embeddings weigh the first RANK_FACTS: its
    qualifier named, then the words its latest sayings share with the question, then the newest."""
    shared = max((len(qwords & set(_words(t))) for t in _latest_texts(fact)), default=0)
    return (_qualifier_named(fact, named), shared, fact.periods[-1].statement.said if fact.periods else "")


def _latest_texts(fact: Fact) -> list[str]:
    """The texts of a fact's latest RANK_SAYINGS sayings, newest first."""
    out: list[str] = []
    for p in reversed(fact.periods):
        for s in reversed(p.sayings):
            out.append(s.text)
            if len(out) == RANK_SAYINGS:
                return out
    return out


def _period(fact: Fact, q: Question, events: Sequence[Fact] = ()) -> Period | None:
    live = [p for p in fact.periods if not p.ending]
    if not live:
        return None
    if q.asked == "present":
        # an ending too: "Am I still a member?" is answered by "I quit" — but not a value that is another
        # subject's place ("registered the dog at Riverside Vets, near the new place": a vet, no home)
        last = fact.periods[-1]
        if _elsewhere(fact, last) and (held := [p for p in live if p is not last and not _elsewhere(fact, p)]):
            return held[-1]
        return last
    if q.asked == "first":
        return live[0]
    if q.asked == "at" and q.at:
        return fact.at(q.at)
    # before: the value before the one that names X, else before X's event (another subject's change),
    # else before the current one
    if q.before:
        for i, p in enumerate(fact.periods):
            words = set(_words(p.value + " " + p.statement.text))
            if i and q.before & words:
                prev = [x for x in fact.periods[:i] if not x.ending]
                return prev[-1] if prev else None
        if (when := _event_time(q, events)) is not None:
            held = [p for p in live if p.since < when]
            return held[-1] if held else None
    prev = [p for p in fact.periods[:-1] if not p.ending]
    return prev[-1] if prev else None


# A dwelling is never a service's place: a home value one of these subjects' cues names ("Riverside
# Vets", "the Rose Lane dental practice") is that subject's, caught by the home's cue in the same sentence.
NOT_A_HOME = ("vet", "dentist", "doctor", "school")


def _elsewhere(fact: Fact, period: Period) -> bool:
    """Whether a period of the home gives another subject's place as its value (see NOT_A_HOME)."""
    return fact.subject == "home" and any(BY_NAME[s].cues.search(period.value) for s in NOT_A_HOME)


def _event_time(q: Question, events: Sequence[Fact]) -> str | None:
    """When X of "before X" happened: the latest statement of X's subjects that names X's words beyond
    its cue ("moved to Leeds": Leeds), else — X naming nothing more ("before I moved") — their latest
    change."""
    periods = [p for f in events for p in f.periods]
    if not periods:
        return None
    cue_words = {w for s in subjects_of(q.event) for m in BY_NAME[s].cues.finditer(q.event) for w in _words(m.group())}
    named = q.before - cue_words
    if named:
        periods = [p for p in periods if named & set(_words(p.value + " " + " ".join(s.text for s in p.sayings)))]
    return max((p.since for p in periods), default=None)


def embed_with(provider: Any) -> Embed | None:
    """The embedding function of a provider that is enabled (None otherwise)."""
    if provider is None or not getattr(provider, "enabled", False):
        return None

    async def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(await provider.embed(texts), dtype=np.float32)

    return embed


def as_of_time(as_of: str | None) -> datetime:
    """The time a search is as of: `asOf`, or now."""
    dt = parse_iso(as_of) if as_of else None
    return dt if dt is not None else datetime.now(timezone.utc)


def parse_as_of(text: str) -> str | None:
    """`asOf` as the index writes times (ISO 8601 UTC); a date alone means the end of that day. None when
    it is neither a date nor a datetime."""
    text = text.strip()
    dt = parse_iso(text)
    if dt is None:
        return None
    if len(text) == 10:  # a date: all of that day
        dt = dt + timedelta(days=1) - timedelta(milliseconds=1)
    return to_iso(dt)
