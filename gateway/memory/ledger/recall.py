"""Recall from the ledger: a question about a subject gets that subject's statement as a candidate,
even when it shares no word with the question.

1. **Which subject** (`subjects_of`): the lexicon's words in the question, else the subject whose
   description the question's embedding is closest to (lexicon.py's `about`).
2. **Which thing of it**: of the subject's facts (a qualified subject has several: the shed's code, the
   wifi's), the one whose statements are closest to the question (embeddings; the overlap of words
   without them), if close enough.
3. **Which time** (`when_asked`): the present, unless the question asks about an earlier time —
   "originally"/"at first" (the first value), "before X"/"previous"/"used to"/"old"/"… before?" (the
   value before X's, or before the current one), a date, "in March", "last spring", "in the summer",
   "two months ago" (the value valid then; relative dates resolved against `asOf` where given, else
   now). X may be an event of another subject ("Where did I work before I moved?": the time of the
   move, the home's statement whose words X names, else its latest change): the value valid just
   before it. A question in the past tense that names no earlier time ("What was the amount I was
   approved for?") asks about the present.
4. **Where it goes** (placement.py's `lead`): the chosen statement first, as a hit of its own (dated, with `fact`:
   subject, value, since); for the present, the hits that show a superseded value of the same fact are
   marked `supersededBy` and go after those that do not.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Literal, Mapping, Sequence

import numpy as np

from ...timeutil import parse_iso, to_iso
from ..index.chunking import text_date
from .facts import Fact, Period
from .lexicon import BY_NAME, SUBJECTS

Asked = Literal["present", "first", "before", "at"]

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

_FIRST = re.compile(
    r"\b(?:originally|original|initially|at first|at the start|first|to begin with|to start with"
    r"|(?:did|when) i (?:start|begin)|started (?:at|on|with|out|off))\b",
    re.I,
)
# "How old is my tortoise?", "ten years old": an age, not an earlier time.
_AGE = re.compile(r"\bhow old\b|\b(?:years?|months?|weeks?|days?) old\b", re.I)
_BEFORE = re.compile(r"\bbefore\s+(\w+(?:\s+\w+){0,3})", re.I)
_EARLIER = re.compile(
    r"\b(?:previous(?:ly)?|prior|used to|formerly|former|old|older|earlier|back then|back when|ago|in the past"
    r"|before)\b",
    re.I,
)
_MONTHS = "january february march april may june july august september october november december".split()
_IN_MONTH = re.compile(rf"\bin ({'|'.join(_MONTHS)})\b", re.I)
_LAST = re.compile(r"\blast (year|spring|summer|autumn|fall|winter|month|week)\b", re.I)
_SEASON_MONTH = {"spring": 4, "summer": 7, "autumn": 10, "fall": 10, "winter": 1}
# "in the spring", "this summer", "over the winter": the latest such season that has begun.
_SEASON = re.compile(r"\b(?:in|during|over|this|that)\s+(?:the\s+)?(spring|summer|autumn|fall|winter)\b", re.I)
_COUNT = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a couple of": 2, "a few": 3}
_AGO = re.compile(
    rf"\b({'|'.join(sorted(_COUNT, key=len, reverse=True))}|\d{{1,3}})\s+(day|week|month|year)s?\s+ago\b", re.I
)
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the my i me is are was were do does did what who which where when how am at to of in on for with "
    "now these days still currently current i'm it its and or be been have has had can get".split()
)


# "my parents", "my brother's": a question about another person's life, not the person's.
_SOMEONE_ELSE = re.compile(
    r"\bmy (?:parents|mum|mom|mother|dad|father|brother|sister|friend|best friend|cousin|aunt|uncle|"
    r"grand\w+|colleague|neighbou?r|son|daughter|kids?|child(?:ren)?|partner|wife|husband|girlfriend|boyfriend)(?:'s|s)?\b",
    re.I,
)
# ...except the subjects that are about the person's family or pets anyway.
ABOUT_OTHERS = frozenset({"teacher", "school", "child", "partner", "pet", "vet"})


_ASKS = re.compile(r"\?|^\W*(?:what|who|whom|whose|which|where|when|why|how|do|does|did|am|is|are|can)\b", re.I)


@dataclass
class Question:
    asked: Asked
    at: str | None = None  # "at": the time asked about (ISO 8601)
    before: frozenset[str] = frozenset()  # "before X": X's words
    event: str = ""  # "before X": X as said ("I moved to Leeds"), to find its subject


def when_asked(query: str, now: datetime) -> Question:
    """Which time a question asks about (see the module); relative dates against `now`."""
    if d := text_date(query):
        return Question("at", d)
    m = _IN_MONTH.search(query)
    if m:
        month = _MONTHS.index(m.group(1).lower()) + 1
        year = now.year if month <= now.month else now.year - 1
        return Question("at", to_iso(datetime(year, month, 15, tzinfo=timezone.utc)))
    m = _SEASON.search(query)
    if m and not _LAST.search(query):
        month = _SEASON_MONTH[m.group(1).lower()]
        year = now.year if month <= now.month else now.year - 1
        return Question("at", to_iso(datetime(year, month, 15, tzinfo=timezone.utc)))
    m = _AGO.search(query)
    if m:
        n = _COUNT.get(m.group(1).lower()) or int(m.group(1))
        return Question("at", to_iso(now - timedelta(days=n * _UNIT_DAYS[m.group(2).lower()])))
    m = _LAST.search(query)
    if m:
        unit = m.group(1).lower()
        if unit == "year":
            at = now - timedelta(days=365)
        elif unit == "month":
            at = now - timedelta(days=30)
        elif unit == "week":
            at = now - timedelta(days=7)
        else:
            # the last such season that is over: this year's if it ended before this month, else last year's
            month = _SEASON_MONTH[unit]
            year = now.year if month + 2 < now.month else now.year - 1
            at = datetime(year, month, 15, tzinfo=timezone.utc)
        return Question("at", to_iso(at))
    if _FIRST.search(query):
        return Question("first")
    m = _BEFORE.search(query)
    if m and (words := frozenset(_words(m.group(1))) - _NOT_AN_EVENT):
        return Question("before", before=words, event=m.group(1))
    if _EARLIER.search(_AGE.sub(" ", query)):
        return Question("before")
    return Question("present")


_NOT_AN_EVENT = frozenset("that this then it that's them".split())  # "before that": the previous value


def event_subjects(query: str) -> list[str]:
    """The subjects of a question's "before X" event ("before I moved": home), not asked about itself."""
    q = when_asked(query, datetime.now(timezone.utc)) if _BEFORE.search(query) else None
    return subjects_of(q.event) if q is not None and q.event else []


def _without_event(query: str) -> str:
    """The question without its "before X" ("Where did I work before I moved?" → "Where did I work")."""
    return _BEFORE.sub(" ", query) if _BEFORE.search(query) else query


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1]


# How a question asks about a subject in words no statement uses ("Where do I work?" — a statement says
# "I work at …", "joined …"): English, the common ways to ask, none from a benchmark's questions.
ASKED_AS: dict[str, re.Pattern[str]] = {
    "landlord": re.compile(
        r"\b(?:who owns (?:the|my|our) (?:place|flat|house|apartment|home)|who do (?:i|we) (?:pay (?:the )?rent to|rent from)"
        r"|(?:the )?(?:place|flat|house|apartment) (?:i|we) rent)\b",
        re.I,
    ),
    "role": re.compile(
        r"\b(?:what do i do for (?:a living|work)|what(?:'s| is) my (?:job(?! title)|occupation|profession|line of work)"
        r"|what was my job(?! title))\b",
        re.I,
    ),
    "vet": re.compile(
        r"\b(?:looks? after|treats?|sees?) (?:my |our |the )?(?:\w+(?:'s|’s) )?(?:health|dog|cat|pet|puppy|kitten"
        r"|tortoise|rabbit|hamster|parrot|guinea pig)s?\b",
        re.I,
    ),
    "teacher": re.compile(
        r"\b(?:who teaches (?:my |our )?(?:son|daughter|kids?|child(?:ren)?|boy|girl)"
        r"|(?:son|daughter|kid|child|children)(?:'s|’s|s'|s’)? (?:class )?teacher)\b",
        re.I,
    ),
    "school": re.compile(
        r"\b(?:(?:which|what) (?:school|nursery|college) (?:do|does|did) (?:my |the |our )?\w+ go to"
        r"|where (?:do|does|did) (?:my |the |our )?(?:kids?|children|son|daughter) go to school)\b",
        re.I,
    ),
    "vehicle": re.compile(r"\bwhat (?:am i|do i|did i) (?:driving|drive|riding|ride)\b", re.I),
    "employer": re.compile(
        r"\b(?:where (?:do|did) i work|where am i working|who (?:do|did) i work for|who employs me|employs me"
        r"|what do i do for (?:a living|work)|what(?:'s| is| was) my job\b(?! title)|(?:which|what) (?:company|firm|employer|organi[sz]ation)\b|who (?:pays|signs) my (?:wages|salary|pay|paycheck)"
        r"|who pays me\b|(?:who|where) (?:do|did) i get paid|(?:which|what) \w+ (?:do|did) i work (?:in|at|for)\b)",
        re.I,
    ),
    "manager": re.compile(
        r"\b(?:who (?:do|did) i (?:answer|report) to|who(?:'s| is| was) (?:above|over) me|who(?:'s| is) in charge of me"
        r"|who (?:manages|supervises) me|who do i work under)\b",
        re.I,
    ),
    "home": re.compile(
        r"\b(?:where (?:do|did) i live|where am i (?:living|based|staying)|where(?:'s| is) (?:my )?home"
        r"|where do i (?:stay|sleep|call home)|what(?:'s| is) my (?:address|postcode|zip)"
        r"|(?:which|what) (?:part of (?:town|the city)|city|town|village|neighbou?rhood|area|suburb|district|street)"
        r" (?:am i|do i live|is (?:my )?home|do i call home)"
        r"|where(?:'s| is) my (?:place|flat|house|apartment)\b)",
        re.I,
    ),
    "partner": re.compile(
        r"\b(?:who am i (?:with|seeing|going out with|dating|in a relationship with)|other half|better half|significant other"
        r"|am i (?:single|in a relationship|seeing anyone|with anyone)|who(?:'s| is) my (?:date|person|love)\b)",
        re.I,
    ),
    "code": re.compile(
        r"\b(?:what opens|opens my|(?:keypad|lock|door|gate|entry) number|unlock"
        r"|(?:punch|key|tap|type) in to (?:get|open)|(?:what|which) (?:number|digits) (?:gets|get|let) me in"
        r"|gets? me into)\b",
        re.I,
    ),
}


def subjects_of(query: str) -> list[str]:
    """The lexicon's subjects a question asks about, in the lexicon's order: those it asks about in a
    question's own words (ASKED_AS: "Who teaches my daughter?" asks for the teacher, not the child),
    else those it names by a cue word — less the ones named only as whose or what the asked thing is
    ("my dog's vet", "the landlord of my flat": the vet, the landlord)."""
    asked = [name for name, how in ASKED_AS.items() if how.search(query)]
    if asked:
        return [s.name for s in SUBJECTS if s.name in asked]
    named = [s for s in SUBJECTS if s.cues.search(query)]
    heads = [s for s in named if not all(_owner(query, m) for m in s.cues.finditer(query))]
    return [s.name for s in (heads or named)]


# "my dog's vet", "the vet for the cat", "the landlord of my flat": the cue names whose the thing asked is.
_OWNER_AFTER = re.compile(r"^(?:'s|’s|s'|s’)\b", re.I)
_OWNER_BEFORE = re.compile(r"\b(?:for|of|with|at|from) (?:the|my|our|his|her|their) (?:\w+ )?$", re.I)


def _owner(query: str, m: re.Match[str]) -> bool:
    return bool(_OWNER_AFTER.match(query[m.end() :]) or _OWNER_BEFORE.search(query[: m.start()]))


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
        return fact.periods[-1]  # an ending too: "Am I still a member?" is answered by "I quit"
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
