"""Which thing of a qualified subject a statement is about: the shed's code or the wifi's, the chess club or
the choir, the phone or the laptop, the Spanish class or the piano lessons, the car's colour or the
canoe's. Each such thing is a subject of its own ("code:shed", "device:phone", "detail:car colour"), so a
new value of one supersedes only that one. Pure; English; used by extract.py.
"""

from __future__ import annotations

import functools
import re

from .brands import device_kind
from .lexicon import Subject
from .values import COLOUR

# Words that name no thing: never a qualifier ("my code", "the new password").
_NOT_A_QUALIFIER = frozenset(
    """a an the my our your his her their its this that new old current same other another each every
    is are was were be been it i we you he she they me us them to of for on in at with from by and or
    i've we've they've i'd we'd i'm we're
    but so now still just also then there here what which who whose where when how why not no yes
    changed set reset updated remember note usual actual real big small little good great first second next
    last latest""".split()
)
_WORD = re.compile(r"[a-z][a-z'’-]*")


# What a code opens, named anywhere in its sentence (it names the code better than the word before "code").
LOCKED_THINGS = re.compile(
    r"\b(wi-?fi|internet|router|alarm|garage|gate|door|shed|locker|safe|storage|padlock|bike|building|office|"
    r"cabin|phone|laptop|computer|bank|card|account|email)\b",
    re.I,
)


def qualifier(sentence: str, cue: re.Match[str]) -> str:
    """Which thing of a qualified subject a sentence is about: the word before its cue ("the shed
    combination" → shed), else the noun after "for/of/on/to the|my" ("the code for the gate" → gate)."""
    before = _WORD.findall(sentence[: cue.start()].lower())
    if before and before[-1] not in _NOT_A_QUALIFIER and not before[-1].endswith(("'s", "’s")):
        return before[-1]
    after = re.search(
        r"\b(?:for|of|on|to|at)\s+(?:(?:the|my|our)\s+(?:\w+\s+)?)?([a-z][a-z-]+)", sentence[cue.end() :].lower()
    )
    if after and after.group(1) not in _NOT_A_QUALIFIER:
        return after.group(1)
    if before and len(before) >= 2 and before[-1].endswith(("'s", "’s")):
        return before[-1].rstrip("'’s")
    return ""


def _nearness(thing: re.Match[str], cue: re.Match[str]) -> tuple[bool, int]:
    """How near a thing a code opens is named to the code's cue ("changed the lock: the code of the gate
    is …" → gate); of a compound next to it, the first word comes first ("the garage door code" → garage)."""
    gap = max(0, thing.start() - cue.end(), cue.start() - thing.end())
    return (gap > 1, gap if gap > 1 else thing.start())


# A thing named by its number ("box 17", "locker 4b", "room 12"): which of many alike a code opens.
_NUMBERED = re.compile(
    r"\b(?:for|of|on|to|at|in)\s+(?:the\s+|my\s+|our\s+)?([a-z]+)\s+(?:no\.?\s*|#)?(\d+[a-z]?)\b", re.I
)
_CLUB_NOUN = re.compile(r"club|gym|choir|society|league", re.I)
_NEXT_WORD = re.compile(r"\s*(?:a |an |the |my |our )?([a-z][a-z-]+)", re.I)

# What a course or class is in: a language, an instrument, a sport or craft taught in classes. One class
# named so is one subject whatever the school or level ("Spanish evening classes at the college" and
# "moved up to the improvers group in Spanish" are both `course:spanish`).
_COURSE_TOPIC = re.compile(
    r"\b(spanish|french|german|italian|portuguese|japanese|mandarin|cantonese|chinese|korean|arabic|dutch|polish"
    r"|russian|irish|welsh|gaelic|greek|turkish|hindi|urdu|swedish|norwegian|danish|finnish|czech|latin|esperanto"
    r"|sign language|bsl|asl|piano|guitar|violin|cello|ukulele|drums|singing|swimming|pottery|ceramics|yoga"
    r"|pilates|salsa|tango|ballet|tap|karate|judo|taekwondo|jiu-?jitsu|boxing|fencing|climbing|coding|python"
    r"|photography|life drawing|drawing|painting|cooking|baking|sewing|knitting|first aid|driving|maths|math)\b",
    re.I,
)

# An attribute of a thing the person has: its colour (said with "colour", or as painting it) or its
# registration. The thing is the one whose attribute it is: "the car's colour" → car, "repainted Loon" →
# loon, "my bike is … colour" → bike.
_ATTRIBUTE = (("registration", re.compile(r"registration|reg\b|plate", re.I)),)
_POSSESSOR = re.compile(r"\b(?:the|my|our)\s+([a-z][a-z-]+)(?:'s|’s)\s+(?:new\s+)?$", re.I)
_PAINTED = re.compile(
    rf"\b(?:re)?(?:painted|sprayed)\s+(?:the\s+|my\s+|our\s+)?((?:[A-Za-z][\w-]*\s+)?[A-Za-z][\w-]*?)"
    rf"(?=\s+(?:{COLOUR})|\s+(?:this|last|today|yesterday|at|on|in)\b|\s*[,.!;]|$)",
    re.I,
)
_BEFORE_PAINT = re.compile(r"\b(?:the|my|our)\s+([a-z][\w-]+)\s+(?:re)?(?:painted|sprayed|resprayed)\b", re.I)
_NAMED = re.compile(r"\b(?:named|called)\s+([A-Z][\w-]+)")
_OF_THING = re.compile(r"\s+(?:of|on)\s+(?:the|my|our)\s+([a-z][a-z-]+)", re.I)
_MY_THING = re.compile(r"\b(?:my|our|the)\s+([a-z][a-z-]+)\s+(?:is|was|'s|’s)\b", re.I)
_MY_THING_AT = re.compile(r"(?:my|our) ((?:[\w-]+ ){0,1}[\w-]+) (?:is|'s|’s) (?:at|on)\b", re.I)
_NOT_THINGS = frozenset("it her him them this that new old same colour color one".split())


def _club(s: str, m: re.Match[str], q: str) -> str:
    """A membership's qualifier: the club a joining or quitting names ("quit the choir" → choir), the
    word before a club noun ("the chess club" → chess), else the club noun itself ("the gym")."""
    cue = m.group(0).lower()
    if cue.split()[0] in ("joined", "quit", "left", "signed") and (n := _NEXT_WORD.match(s, m.end())):
        return n.group(1).lower()
    if not q and _CLUB_NOUN.fullmatch(cue):
        return cue
    return q


def _detail(s: str, m: re.Match[str]) -> str:
    """ "<thing> <attribute>" of a detail statement ("car colour", "loon colour", "van registration")."""
    attribute = next((name for name, cue in _ATTRIBUTE if cue.match(m.group(0))), "colour")
    thing = ""
    for found in (
        _POSSESSOR.search(s, 0, m.start()),
        _BEFORE_PAINT.search(s),
        _NAMED.search(s),
        _PAINTED.search(s) if m.group(0).lower().endswith(("painted", "sprayed")) else None,
        _OF_THING.match(s, m.end()),
        _MY_THING.search(s),
    ):
        if found and found.group(1).lower() not in _NOT_THINGS:
            thing = found.group(1).lower()
            break
    if not thing and attribute == "registration":  # a registration is a vehicle's
        thing = "vehicle"
    return f"{thing} {attribute}" if thing else ""  # an attribute of nothing named is no subject


def which(subj: Subject, s: str, m: re.Match[str], message: str) -> str:
    """The qualifier of `subj` said in the clause `s` by its cue `m` ("" when nothing names which);
    `message`: the whole message (what a code opens may be named in the sentence before)."""
    if subj.by_cue:
        return m.group(0).lower().split()[-1]
    if subj.name == "device":  # "an iPhone 15", "my new laptop": the kind of device is which one
        return device_kind(m.group(0))
    if subj.name == "detail":
        return _detail(s, m)
    if subj.name == "course" and (topic := _COURSE_TOPIC.search(s) or _COURSE_TOPIC.search(message)):
        return topic.group(1).lower().replace("-", "")
    if subj.name == "code" and (things := list(LOCKED_THINGS.finditer(s))):
        near = min(things, key=functools.partial(_nearness, cue=m))
        q = near.group(1).lower().replace("-", "")
    elif subj.name == "code" and (thing := LOCKED_THINGS.search(message)):
        q = thing.group(1).lower().replace("-", "")
    elif subj.name == "appointment" and (thing := _MY_THING_AT.match(m.group(0))):
        q = thing.group(1).lower()  # "my code review is at 10": the code review
    else:
        q = qualifier(s, m)
    if subj.name == "membership":  # "joined the choir", "quit the choir": the club is the choir
        q = _club(s, m, q)
    if subj.name == "code" and (numbered := _NUMBERED.search(s)):
        # one of many alike ("the locker code for box 17"): each numbered thing is a subject of its own
        which = f"{numbered.group(1)} {numbered.group(2)}".lower()
        q = which if q in ("", numbered.group(1).lower()) else f"{q} {which}"
    return q
