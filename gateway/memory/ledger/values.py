"""A statement's value as a person reads it in their profile: the span of the sentence that says what the
subject is ("home: Glasgow", "partner: Noor", "employer: design lead at Northpine Health", "code:wifi:
otter-blue-7"), not the sentence (that stays the statement's evidence).

Each subject has a kind of value — a place, a name, a job at an employer, a code, a number, a date, the
cue word itself (a diet) — and the span is looked for by that kind's rules, the subject's cue first;
`span` gives None when no rule finds one (extract.py then falls back to the words after the verb, and a
value found later in the same message, "… His name's Mateo.", may replace it: `name_in`). Pure; English.
"""

from __future__ import annotations

import re

MAX_VALUE = 120

# A name: capitalised words, with the small words names hold ("Bank of Ireland", "Mile End", "St Werburgh's").
_CAP = r"(?:[A-Z][\w'’.&-]*|[0-9][\w'’.-]*[A-Za-z][\w'’.-]*)"
_NAME = rf"{_CAP}(?:\s+(?:(?:of|de|da|del|van|von|le|la|and|&)\s+)?{_CAP})*"
# Capitalised words that start a sentence or name no one.
_NOT_NAMES = frozenset(
    """I I'm I’m I've I’ve I'd I'll Im The A An My Our We We're We’re Also And But So Just Got Now New Then Today
    Yesterday Tomorrow Finally Officially It It's It’s This That He She They His Her Their Me Us Yes No Oh Ok
    Okay Well Anyway Actually Still Big Quick Update Moving Monday Tuesday Wednesday Thursday Friday Saturday
    Sunday January February March April May June July August September October November December Dr Mr Mrs Ms
    Mx Prof""".split()
)
_TITLES = ("Dr", "Mr", "Mrs", "Ms", "Mx", "Prof", "Dr.", "Mr.", "Mrs.", "Ms.")
_TRAIL = re.compile(
    r"\s+(?:now|today|yesterday|again|too|as well|these days|at last|finally|officially|last \w+|this \w+"
    r"|next \w+|for (?:about|almost|nearly|over|a|the|two|three|four|five|six|\d+)\b.*|since\b.*|who\b.*"
    r"|which\b.*|where\b.*|when\b.*|because\b.*|but\b.*|so\b.*|and (?:i|we|it|he|she|they)\b.*)$",
    re.I | re.S,
)


def _tidy(v: str) -> str:
    v = v.strip(" \t.,;:!?\"'“”‘’()")
    prev = None
    while prev != v:
        prev, v = v, _TRAIL.sub("", v).strip(" \t.,;:!?\"'“”‘’()")
    return v[:MAX_VALUE]


def _names(text: str) -> list[str]:
    """The names in a text, in order, without the capitalised words that name no one."""
    out = []
    for m in re.finditer(_NAME, text):
        words = m.group(0).split()
        lead = ""
        while words and words[0].strip(".,") in _NOT_NAMES:
            w = words.pop(0)
            if w in _TITLES and words:  # "Dr Osei", "Mrs Okonjo": the title belongs to the name
                lead = w + " "
                break
        if words:
            out.append((lead + " ".join(words)).rstrip(".,"))
    return out


_CALLED = re.compile(
    rf"\b(?:(?:renam|relaunch|rebrand)\w*\s+(?:[\w'’ ]+?\s+)?(?:to|as)|called|named|name(?:'s|’s| is| was)|goes by)"
    rf"\s+(?:(?:her|him|them|it)\s+)?(?:now\s+)?({_NAME})"
)
RENAMED = re.compile(rf"\b(?:renam|relaunch|rebrand)\w*\s+(?:[\w'’ ]+?\s+)?(?:to|as)\s+({_NAME})")
_NAME_THEN_MY = re.compile(rf"({_NAME}),\s*$")
# "Tariq is my boyfriend now", "Priyanka is my line manager": the name, then "is my" and the cue
_NAME_IS_MY = re.compile(rf"({_NAME})\s+(?:is|was|'s|’s)\s+(?:now\s+|still\s+)?(?:my|our)\s+(?:new\s+)?(?:[\w-]+\s+)?$")
# "switched GPs to Dr Lewis", "changed vets to Meadow Vets": the practice changed to
_SWITCHED_TO = re.compile(rf"\s+(?:over\s+)?to\s+({_NAME})")
_AFTER_COLON = re.compile(rf"[^:.!?]{{0,40}}:\s*({_NAME})")
_STILL_AT = re.compile(rf"\bstill (?:at|with)\s+(?:the\s+)?({_NAME})")
_BEFORE_CUE = re.compile(rf"({_NAME})\s+$")
_LAST_NAME = re.compile(rf"(?:,|[—–:]|\s-)\s*({_NAME})\s*[.!]*$")
_AND_I = re.compile(rf"\b({_NAME})\s+and\s+(?:I|me)\b|\b(?:[Mm]e|I)\s+and\s+({_NAME})\b")
_WITH = re.compile(rf"\b(?:with|seeing|dating|to|is|are|'s|’s|was)\s+(?:now\s+|still\s+)?(?:a \w+ named\s+)?({_NAME})")
_PLACE = re.compile(
    rf"\b[Hh]ome(?:'s|’s| is)\s+(?:now\s+|still\s+)?({_NAME})(?!\s+(?:is|are)\b)"
    rf"|\b(?:in|to|into|from|near|at|outside)\s+((?:the\s+)?{_NAME}(?:\s*(?:,|in)\s*{_NAME})?)|\b(?:a|an)\s+({_NAME})\s+resident\b"
    rf"|\bresident (?:of|in)\s+({_NAME})"
)
_CODE = re.compile(
    r"(?:\bis|\bare|\bwas|:|\bto|\bnow|=)\s+(?:now\s+|still\s+)?['\"“‘]?([^\s'\"”’,;()]*[\w\d][^\s'\"”’,;()]*)", re.I
)
_DIGITS = re.compile(r"\+?\(?\d[\d ().-]{3,}\d|\b[A-Z]{0,4}\d[\dA-Z-]{2,}\b")
_ROLE_AT = re.compile(
    rf"\b(?:i'm|i’m|i am|i'll be|i will be|be|as|now|became|becoming|promoted to|started as|hired as|joined as)\s+"
    rf"(?:(?-i:[A-Z])\w+,\s+)?"  # "I'm Rafa, sous-chef at …": a self-introduction
    rf"(?:(?:a|an|the|their|our)\s+)?((?:(?!at\b|for\b|with\b)[\w-]+\s+){{0,3}}?[\w-]+)\s+(?:at|for|with)\s+(?:the\s+)?({_NAME})",
    re.I,
)
_FREELANCE = re.compile(r"\b(?:self-employed|a freelancer|freelance)\b", re.I)
_OFFERED = re.compile(
    rf"\boffered (?:a|an|the) ((?:[\w-]+ ){{0,3}}?[\w-]+) (?:job|post|position|role)\b[^.!?]{{0,160}}?\b(?:at|with) (?:the )?({_NAME})"
)
# "Quayside Kitchen in the Baltic Triangle offered me the top job": the employer is who offered
_OFFERED_BY = re.compile(rf"({_NAME})(?:\s+(?:in|on|at|from)\s+(?:the\s+)?{_NAME})?\s+offered me\b")
_AT_ORG = re.compile(rf"\b(?:at|for|with|joined|joining|join)\s+(?:the\s+)?({_NAME})")
_AS_ROLE = re.compile(
    r"\bas\s+(?:a|an|the)?\s*((?:[\w-]+\s+){0,3}?[\w-]+?)(?=\s*(?:[,.;!]|$|\s+(?:at|for|in|on|and|since|from)\b))", re.I
)
_MONTHS = r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
_DAYS = r"(?:mon|tues?|wed(?:nes)?|thu(?:rs?)?|fri|sat(?:ur)?|sun)(?:day)?s?"
_WHEN = re.compile(
    rf"\b(?:(?:{_DAYS})\s+)?(?:the\s+)?(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})|(?:{_MONTHS})\s+\d{{1,2}}(?:st|nd|rd|th)?)"
    rf"(?:,?\s+\d{{4}})?(?:,?\s+(?:at\s+)?\d{{1,2}}(?:[:.]\d\d)?\s*(?:am|pm)?)?"
    rf"|\b(?:{_DAYS})(?:\s+(?:night|evening|morning|afternoon)s?)?(?:,?\s+(?:at\s+)?\d{{1,2}}(?:[:.]\d\d)?\s*(?:am|pm))?",
    re.I,
)
_DOSE = re.compile(r"\b(?:([A-Za-z][\w-]{2,})\s+)?(\d+(?:\.\d+)?\s*(?:mg|mcg|milligrams?|micrograms?|ml))\b", re.I)
_DOSE_STOP = frozenset("to on at of the a an my is was now from up down take takes taking took dose".split())
_DOSE_OF = re.compile(r"\s+of\s+([A-Za-z][\w-]{2,})")
_DOSE_THEN = re.compile(r"\s+([A-Za-z][\w-]{3,})\b(?<!tablets)(?<!daily)(?<!twice)(?<!every)(?<!each)")
_ALLERGY = re.compile(
    r"\b(?:allergic to|intoleran\w* (?:to|of)|allerg(?:y|ies) (?:is|are)|swell\w* up (?:with|from|after)|hives (?:from|with|after))\s+([\w -]+?)(?=\s*(?:[,.;!]|$|\s+(?:and|but|so|now|too)\b))|\b(?!(?:m|am|i'm|i’m|is|are|my|an?|the|no)\b)([\w-]+)\s+(?:allergy|intoleran\w*)",
    re.I,
)
_CLUB_NAMED = re.compile(
    rf"\b(?:member of|support)\s+(?:the\s+)?({_NAME})|({_NAME})\s+(?:membership|fan|supporter|through and through)"
)
_CLUB = re.compile(
    r"\b(?:the|a|an|my|our)\s+((?:[\w'’-]+\s+){0,2}?(?:club|society|choir|gym|league|group|band|association|team))\b",
    re.I,
)
_DIET = re.compile(
    r"\b(?:vegetarian|vegan|pescatarian|meat-free|dairy-free|gluten-free|keto|plant-based|low-carb|paleo|flexitarian"
    r"|halal|kosher)\b",
    re.I,
)
_SCHOOL = re.compile(
    r"\b((?!(?:Her|His|Their|The|My|Our|A|An|Got|He|She)\b)(?:[A-Z][\w'’-]*\s+){1,3}(?:[Pp]rimary|[Ss]chool|[Aa]cademy|[Nn]ursery|[Cc]ollege|High))\b"
)
_BIRTH_DATE = re.compile(
    rf"\b(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})|(?:{_MONTHS})\s+\d{{1,2}}(?:st|nd|rd|th)?)\b(?:,?\s+\d{{4}})?",
    re.I,
)
_NO_ALLERGY = re.compile(r"\bno (?:known )?allerg", re.I)
_THING = re.compile(
    r"\b(?:drive|drives|ride|rides|bought|got|have|own|leased|picked up|collected|adopted|rescued|is|are|now"
    r"|rode|(?:traded|swapped|exchanged) (?:[\w'’-]+ ){0,3}?(?:in )?for|upgraded to|switched to)\s+"
    r"(?:(?:a|an|the|my|our|this)\s+)((?:[\w'’.-]+\s+){0,4}?[\w'’-]+)(?=\s*(?:[,.;!—–]|$|\s+(?:called|named|for|from|and|but|since|last|this|today|because|so|on|at|after|when|with|yesterday|into|around|through|to)\b))",
    re.I,
)
_SPECIFIC = re.compile(r"[A-Z0-9]")
_NETWORK = re.compile(rf"\b(?:to|on|with|from)\s+(?:a\s+|an\s+|the\s+)?({_NAME})")
_AGE_GROUP = re.compile(r"\b(?:under-?\d+s?|u\d\ds?)\b", re.I)
_MASKED = re.compile(r"\[redacted: [^\]\n]{1,40}\]")  # memory/secrets.py's mask
_NOT_A_CODE = frozenset("the a an my our your his her their this that it same still just now also on in at".split())
_ROLE = re.compile(
    r"\b(?:promoted to|made|became|new role as|new role is|title is|role is|now (?:a|an|the))\s+(?:be\s+)?(?:a\s+|an\s+|the\s+|our\s+)?"
    r"((?:[\w-]+\s+){0,3}?[\w-]+)(?=\s*(?:[,.;!]|$|\s+(?:at|for|in|on|and|since|from|of the|now)\b))",
    re.I,
)
_LEVEL = re.compile(
    r"\b(?:(?:complete |total |absolute )?beginners?|improvers?|(?:upper[- ]|lower[- ]|pre-)?intermediate|advanced"
    r"|elementary|fluent|conversation(?:al)?|[ABC][12](?:\.\d)?|(?:grade|level|stage|book) \d+)\b(?:\s+(?:level|group|class|set))?",
    re.I,
)
COLOUR = (
    r"(?:(?:dark|light|pale|bright|deep|navy|forest|racing|sky|royal|lime|olive|midnight|burnt|bottle|baby|hot"
    r"|british racing|matt|matte|metallic)\s+)?(?:red|orange|yellow|green|blue|purple|pink|black|white|grey|gray"
    r"|silver|gold|brown|cream|beige|teal|turquoise|maroon|burgundy|navy|bronze|copper|mustard|lilac|lavender"
    r"|ivory|charcoal)\b"
)
_COLOUR_SAID = re.compile(
    rf"\b(?:(?:is|are|was|'s|’s|now|to|in|it|her|him|them)\s+(?:(?:now|all|a|an|dull|boring|plain|ugly|lovely|nice|horrible)\s+)*"
    rf"|(?:re)?(?:painted|sprayed)\s+(?:[\w'’-]+\s+){{0,3}}?)({COLOUR})",
    re.I,
)
_PLATE = re.compile(r"\b(?=[A-Z0-9 -]{0,9}\d)[A-Z0-9]{2,4}[ -]?[A-Z0-9]{2,4}\b")  # "KX19 ABC", "7ABC123"


def colour_in(text: str) -> str | None:
    """A colour a text gives something ("she's forest green now", "painted it cream"), or None."""
    m = _COLOUR_SAID.search(text)
    return m.group(1).lower() if m else None


_CUE_APPOSITION = re.compile(r"[,:]\s+(?:the|a|an|my)\s+([^,.;!?]+)")

NAMED = frozenset({"partner", "manager", "pet", "child", "teacher", "vet", "dentist", "doctor", "landlord", "project"})
PLACES = frozenset({"home", "hometown"})
_CUE_VALUES = frozenset({"diet"})


def _first_name(text: str) -> str | None:
    names = _names(text)
    return names[0] if names else None


def _named(subject: str, s: str, cue: re.Match[str]) -> str | None:
    after = s[cue.end() :]
    if m := _CALLED.search(s):
        return _first_name(m.group(1))
    if subject == "partner" and (m := re.match(r"(\w+), (?:my|our) other half", cue.group(0))):  # "Sam, my other half"
        return _first_name(m.group(1))
    if subject == "partner" and "stay" in cue.group(0).lower():  # "Sam from work stayed over again"
        return _first_name(s[: cue.start()])
    if m := _NAME_THEN_MY.search(s, 0, cue.start()):  # "Chorizo, my rescue greyhound"
        return _first_name(m.group(1))
    if (m := _NAME_IS_MY.search(s, 0, cue.start())) and (n := _first_name(m.group(1))):
        return n
    if re.search(r"\b(?:switched|changed|moved)\s+$", s[: cue.start()], re.I) and (m := _SWITCHED_TO.match(after)):
        return _first_name(m.group(1))
    if subject == "teacher" and cue.group(0).lower().startswith("teaches"):  # "Mr Hale teaches her class now"
        return _first_name(s[: cue.start()])
    if subject == "partner" and (m := _AND_I.search(s)):
        return _first_name(m.group(1) or m.group(2))
    if subject == "partner" and (m := _LAST_NAME.search(after)):  # "Met someone at the climbing wall, Hamid."
        return _first_name(m.group(1))
    # "registered at Wensum Vets", "Park Road Surgery": a practice named with the cue word as its last word
    if s[cue.start()].isupper() and (m := _BEFORE_CUE.search(s, 0, cue.start())) and (n := _first_name(m.group(1))):
        return f"{n} {cue.group(0)}"
    # "my cat Mochi", "my manager Nadia", "Met my new manager today: Nadia"
    if (m := re.match(rf"\s*(?:today|now|these days)?\s*[:,]?\s*({_NAME})", after)) and (n := _first_name(m.group(1))):
        return n
    if (m := _AFTER_COLON.match(after)) and (n := _first_name(m.group(1))):  # "a new vet in Leeds: Oak Vets"
        return n
    if (m := _WITH.search(after)) and (n := _first_name(m.group(1))):
        return n
    if (m := _WITH.search(s)) and (n := _first_name(m.group(1))):
        return n
    return None


def _place(s: str, cue: re.Match[str]) -> str | None:
    # "left the flat in Leith behind for a house in Hove": the home is where the move went
    for where in (s[cue.end() :],) if cue.group(0).endswith("behind for") else (s[cue.start() :], s):
        for m in _PLACE.finditer(where):
            raw = next(g for g in m.groups() if g)
            lead = "the " if raw.lower().startswith("the ") else ""
            names = _names(raw[len(lead) :])
            if names:
                return _tidy(lead + ", ".join(names) if lead and len(names) == 1 else ", ".join(names))
    return None


def _freelance(m: re.Match[str]) -> str:
    return m.group(0).lower().removeprefix("a ").replace("freelancer", "freelance")


def _employer(s: str, cue: re.Match[str]) -> str | None:
    # "went freelance", "I'm self-employed now": freelance said by the cue itself; said elsewhere ("I work at
    # Deloitte with a freelance photographer") it is the person's work only when no employer is named
    if (m := _STILL_AT.search(s)) and (org := _first_name(m.group(1))):  # "freelance on this, but still at Google"
        return org
    if m := _FREELANCE.search(cue.group(0)):
        return _freelance(m)
    if org := _employer_named(s):
        return org
    return _freelance(m) if (m := _FREELANCE.search(s)) else None


def _employer_named(s: str) -> str | None:
    if (m := _OFFERED.search(s)) and (org := _first_name(m.group(2))):
        return _tidy(f"{m.group(1)} at {org}")
    if (m := _OFFERED_BY.search(s)) and (org := _first_name(m.group(1))):
        return org
    if m := _ROLE_AT.search(s):
        role, org = m.group(1), _first_name(m.group(2))
        if org and not re.match(r"(?:work|working|going|based|living|staying)\b", role, re.I):
            return _tidy(f"{role} at {org}")
    m = _AT_ORG.search(s)
    org = _first_name(m.group(1)) if m else None
    if org:
        if r := _AS_ROLE.search(s):
            return _tidy(f"{r.group(1)} at {org}")
        return org
    return None


def span(subject: str, s: str, cue: re.Match[str]) -> str | None:
    """The value span of `subject` in the clause `s` whose cue is `cue`, or None."""
    kind = subject.split(":", 1)[0]
    v: str | None = None
    if kind in NAMED:
        v = _named(kind, s, cue)
    elif kind in PLACES:
        v = _place(s, cue)
    elif kind == "employer":
        v = _employer(s, cue)
    elif kind == "code":
        tail = s[cue.start() :]
        m = _CODE.search(tail) or _DIGITS.search(tail) or _DIGITS.search(s)
        if masked := _MASKED.search(tail):  # a secret the index keeps masked (memory/secrets.py): the mask whole
            v = masked.group(0)
        elif m:
            v = m.group(1) if m.re is _CODE else m.group(0)
            if m.re is _CODE and not re.search(r"\d", v) and (d := _DIGITS.search(tail)):
                v = d.group(0)
            elif m.re is _CODE and v.lower() in _NOT_A_CODE:  # "is the name of my dog": no code said
                v = None
    elif kind == "number":
        if m := _DIGITS.search(s):
            v = m.group(0).strip(" ().")
    elif kind == "birthday":  # a day of a month, never a weekday ("my birthday is on Friday" is this year's)
        if m := _BIRTH_DATE.search(s):
            v = m.group(0)
    elif kind in ("appointment", "schedule"):
        if m := _WHEN.search(s):
            v = m.group(0)
    elif kind == "medication":
        if m := _DOSE.search(s):
            name = m.group(1) if m.group(1) and m.group(1).lower() not in _DOSE_STOP else ""
            if not name and (of := _DOSE_OF.match(s, m.end()) or _DOSE_THEN.match(s, m.end())):  # "20mg of omeprazole"
                name = of.group(1)
            v = f"{name} {m.group(2)}".strip()
    elif kind == "allergy":
        if _NO_ALLERGY.search(s):
            v = "none"
        elif m := _ALLERGY.search(s):
            v = m.group(1) or m.group(2)
    elif kind == "membership":
        if (m := _AT_ORG.search(s) or _CLUB_NAMED.search(s)) and (n := _first_name(next(g for g in m.groups() if g))):
            v = n
    elif kind == "phone":  # "switched to a Vodafone contract", "I'm on Giffgaff now"
        if m := _NETWORK.search(s):
            v = _first_name(m.group(1))
    elif kind == "coaching":  # "coaching the under-9s on Saturdays": the group coached
        if m := _AGE_GROUP.search(s):
            v = m.group(0)
    elif kind == "role":
        if m := _OFFERED.search(s) or _ROLE.search(s):  # "offered a senior engineer position at X" → the role
            v = m.group(1)
    elif kind == "course":  # "beginner level", "moved up to the improvers group", "B1"
        if m := _LEVEL.search(s):
            v = m.group(0)
    elif kind == "detail":  # "the car's colour is dark blue now", "resprayed it racing green", "reg KX19 ABC"
        if re.match(r"reg|number|licen", cue.group(0), re.I):
            v = m.group(0) if (m := _PLATE.search(s, cue.end())) else None
        else:
            v = colour_in(s[cue.start() :]) or colour_in(s)
    elif kind in _CUE_VALUES:  # "my diet is mostly plant-based now": the diet, not the word "diet"
        v = m.group(0).lower() if cue.group(0).lower() == "diet" and (m := _DIET.search(s)) else cue.group(0).lower()
    elif kind == "school":  # "a place at Beech Hill nursery", "goes to Park View School"
        if m := _SCHOOL.search(s):
            v = m.group(1)
    elif kind in ("vehicle", "pet", "device"):
        # "my car, the 2012 grey Honda Civic"; "I drive a blue Skoda": a thing named, not the cue word again
        named = [a for a in _CUE_APPOSITION.finditer(s, cue.end()) if _SPECIFIC.search(a.group(1))]
        if not named and kind == "vehicle":  # "replaced the stolen bike: a secondhand Trek" (the cue past the old)
            named = [a for a in _CUE_APPOSITION.finditer(s) if _SPECIFIC.search(a.group(1))]
        m = named[0] if named else _THING.search(s)
        if m and (_SPECIFIC.search(m.group(1)) or " " in m.group(1).strip()):
            v = m.group(1)
        elif (
            kind == "device" and cue.group(0)[:1].isupper() and " " in cue.group(0)
        ):  # "treated myself to an Apple Watch": the make named
            v = cue.group(0)
    return _tidy(v) if v and _tidy(v) else None


# A name given in the message around a statement: "I met someone at a meetup. His name's Mateo."
_GIVEN_NAME = re.compile(rf"\b(?:name(?:'s|’s| is)|called|named)\s+(?:(?:her|him|them)\s+)?({_NAME})")
_APPOSITION = re.compile(r"^\s*(?:[—–:]|-\s)\s*(?:(?:a|an|the|my|our)\s+)?([^.!?;—–,]+)")


def club_in(clause: str) -> str | None:
    """The club a clause names by its kind, when no name is given: "a member of the climbing club" → climbing club."""
    m = _CLUB.search(clause)
    return m.group(1) if m else None


def name_in(message: str) -> str | None:
    """A name the message gives someone or something ("his name's Mateo", "it's called Side Quests")."""
    m = _GIVEN_NAME.search(message)
    return _first_name(m.group(1)) if m else None


def first_name_said(text: str) -> str | None:
    """The first name said in a text, a possessive's aside ("Valentine's plan: Lucía …" → Lucía)."""
    return _first_name(re.sub(r"\b\w+['’]s\b", "", text))


def last_name(text: str) -> str | None:
    """The last name said in a text: whom a "she" or "he" after it points to."""
    names = _names(text)
    return names[-1] if names else None


def apposition(rest: str) -> str | None:
    """What a clause names right after it ("bought a car — a used 2019 Subaru Forester, blue")."""
    m = _APPOSITION.match(rest)
    return _tidy(m.group(1)) if m and _SPECIFIC.search(m.group(1)) else None
