"""How a question asks: which time (`when_asked`) and which subjects of the person's life
(`subjects_of`), by English rules and the lexicon — the part of ledger recall (recall.py) that reads the
question's words only. Relative dates resolve against the time given (`asOf`, else now).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

from ...timeutil import to_iso
from ..index.chunking import text_date
from .lexicon import SUBJECTS

Asked = Literal["present", "first", "before", "at"]

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
    ("my dog's vet", "the landlord of my flat": the vet, the landlord), and of several, the one its
    question word asks for ("Which vet does my dog go to?": the vet). A "before X" names its event, not
    what is asked ("What did I eat before the gym?" asks nothing of the membership: `event_subjects`)."""
    query = _without_event(query)
    asked = [name for name, how in ASKED_AS.items() if how.search(query)]
    if asked:
        return [s.name for s in SUBJECTS if s.name in asked]
    named = [s for s in SUBJECTS if s.cues.search(query)]
    heads = [s for s in named if not all(_owner(query, m) for m in s.cues.finditer(query))] or named
    # "Which vet does my dog go to?", "What car do I drive?": the thing the question word asks for.
    asked_for = [
        s
        for s in heads
        if any(
            _WHICH.search(query[: m.end() - len(m[0])]) and _HEAD_END.match(query[m.end() :])
            for m in s.cues.finditer(query)
        )
    ]
    return [s.name for s in (asked_for if len(asked_for) == 1 else heads)]


# "my dog's vet", "the vet for the cat", "the landlord of my flat": the cue names whose the thing asked is.
_OWNER_AFTER = re.compile(r"^(?:'s|’s|s'|s’)\b", re.I)
_OWNER_BEFORE = re.compile(r"\b(?:for|of|with|at|from) (?:the|my|our|his|her|their) (?:\w+ )?$", re.I)


_WHICH = re.compile(r"^\W*(?:which|what|whose)(?:'s| is)? (?:(?:my|the|our) )?(?:\w+ )?$", re.I)
# ...the noun the question word asks for ends its phrase ("Which vet does…", not "What is my bicycle lock…")
_HEAD_END = re.compile(
    r"^\s*(?:[?.!,]|$|(?:do|does|did|is|are|was|were|am|has|have|had|can|could|will|would|should|i|we|my)\b)", re.I
)


def _owner(query: str, m: re.Match[str]) -> bool:
    return bool(_OWNER_AFTER.match(query[m.end() :]) or _OWNER_BEFORE.search(query[: m.end() - len(m[0])]))
