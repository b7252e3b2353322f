"""Whose a clause is and in what mood: the person's own ("I", "my", "we", a verb with the "I" dropped),
someone else's ("she lives in Leeds", "my sister's vet"), the child's ("her teacher is …"), and whether it
states at all (a question, a request, a wish or a plan states nothing). The expressions extract.py reads a
clause with before it looks for a subject; split from extract.py by concern (issue 48).
"""

from __future__ import annotations

import re

from .prefilter import _FIRST_VERBS

_ME = re.compile(r"\b(?:i|i'm|i’m|i've|i’ve|i'd|im|my|mine|me|myself|we|we're|we’re|we've|our|us|ourselves)\b", re.I)
# The words _ME's matches start with (in ASCII text a match is one of these whole: "i'm" starts with "i"):
# a clause holding none of them is not searched (tests/unit/test_memory_ledger_gates.py holds them in step).
_ME_WORDS = frozenset("i im my mine me myself we our us ourselves".split())

_OTHERS = re.compile(
    r"\b(?:he|she|they|his|her|their|him|them|he's|she's|they're)\b"
    r"|\b(?!(?:It|That|What|There|Here|Who|Where|How|Let|Today|Everything|Everyone|Home)'s)(?-i:[A-Z][a-z]+)'s\b",
    re.I,
)

# "My cousin is getting married": a sentence about someone else the person knows (unless "…and I").
_RELATIVE_FIRST = re.compile(
    r"^\W*(?:\w+:\s*)?(?:so\s+|also\s+|and\s+)?my (?:cousin|sister|brother|friend|best friend|mum|mom|mother|dad|"
    r"father|parents|aunt|uncle|neighbou?r|colleague|grand\w+|niece|nephew|in-laws?|son|daughter|kids?|children|baby"
    r"|little one|eldest|youngest)\b",
    re.I,
)

_WITH_ME = re.compile(r"^\W*(?:\w+:\s*)?(?:so\s+|also\s+|and\s+)?my (?:best )?\w+(?: \w+)? and (?:i|me)\b", re.I)

FAMILY_SUBJECTS = frozenset({"child", "school", "teacher", "pet", "vet"})

# A move after a comma, the "I" dropped ("Officially a Londoner now, moved to Peckham").
_MOVED_AFTER_COMMA = re.compile(r",\s+(?:just\s+|finally\s+)?(?:moved|relocated) (?:to|into)\b", re.I)
_DROPPED_I = re.compile(  # at the clause's start (anchored: a clause that does not start so fails at once)
    r"^\W*(?:(?:just|finally|also|so|and|officially|today|now)\s+)*(?:been seeing|been dating|dating|home(?:'s|’s| is)|"
    + "|".join(_FIRST_VERBS)
    + r")\b",
    re.I,
)

_OBJECT_FIRST = re.compile(
    r"^\W*(?:(?:just|finally|also|so|and)\s+)*(?:booked|registered|took|signed)\s+(?:him|her|them)\b", re.I
)

_QUESTION = re.compile(
    r"\?\s*$|^\W*(?:what|who|whom|whose|which|where|when|why|how|do|does|did|can|could|should|is|are|am|will|would)\b",
    re.I,
)

_NOT_YET = re.compile(
    r"\b(?:if|would|might|maybe|perhaps|thinking (?:of|about)|considering|plan(?:ning)? to(?! (?-i:[A-Z]))|want(?:s|ed)? to|hope to|hoping"
    r"|wish(?! me luck)|someday|one day|should i|could i|not sure|wondering|tempted)\b",
    re.I,
)

# A statement with a request tacked on ("The code is 4826, can you keep it for me?") is still a statement.
_TAG = re.compile(r",\s*(?:can|could|would|will) you\b[^,]*\?\s*$|,\s*(?:right|ok|okay|yeah)\s*\?\s*$", re.I)

# The child's teacher and school, said of the child by a pronoun ("her teacher", "their school") or a name's.
_KIDS_OWN = frozenset({"teacher", "school"})

_KID_OWNER = re.compile(
    r"\b(?:her|his|their|the kids'?|(?-i:[A-Z])[a-z]+(?:'s|’s))(?: new| class| form)? (?:teacher|school|nursery|form tutor)\b"
    r"|\b(?:he|she|they)(?: now)? (?:goes|go) to (?-i:[A-Z])",
    re.I,
)

# Someone the person knows who is not family: nothing said of theirs is the person's, not even a vet.
_NOT_FAMILY = re.compile(
    r"^\W*(?:so\s+|also\s+|and\s+)?my (?:neighbou?r|colleague|friend|best friend|cousin|boss)(?:'s|’s)", re.I
)

_NOT_YET_WORDS = frozenset(
    "if would might maybe perhaps thinking considering plan planning want wants wanted hope hoping wish someday one "
    "should could not wondering tempted".split()
)

_OTHERS_WORDS = frozenset("he she they his her their him them".split())

# "Help me plan a menu, all vegan": a request asks, like a question ("Help me remember: the code is 4471",
# a request to keep something, states it).
_KEEP = re.compile(r"\b(?:remember|note|keep|save)\b|:", re.I)

_REQUEST = re.compile(
    r"\W*(?:(?:please|ok|okay|now|so|and|also)\s+)*(?:help|give|tell|show|remind|write|suggest|plan|find|draft|list"
    r"|explain|translate|recommend|check|look up)\s+(?:me|us|a|an|the|my|our|some|what|how)\b",
    re.I,
)


# "The barbecue got rained out so we called it off": an event called off, not the person's relationship
_EVENT_OFF = re.compile(
    r"\b(?:trip|party|gig|match|game|barbecue|bbq|meeting|picnic|holiday|dinner|walk|hike|session|training|rehearsal"
    r"|class|lesson|shoot|match|race|sale|viewing|interview|launch|event|wedding|match|outing|visit)s?\b[^.!?]{0,160}?\bcalled (?:it|the \w+) off",
    re.I,
)


# "the old wifi", "my previous landlord", "my ex-boss": the thing named as it was, not a value given now.
# "an old Fiat Panda" is an aged one, still theirs.
_PAST_THING = re.compile(
    r"(?<!\ba )(?<!\ban )\b(?:old|previous|former|ex|stolen|nicked|crashed)[\s-]+(?:\w+\s+)?$", re.I
)


def _owned(s: str, m: re.Match[str], cues: re.Pattern[str]) -> re.Match[str] | None:
    """The cue of a person ("doctor", "manager") said as the person's: "my/our/new doctor", "the dentist
    is …", "the vet we use", "registered with a GP" — not "the ER doctor says", "a vet appointment"."""
    for c in cues.finditer(s, m.start()):
        if _OWNER_BEFORE.search(s[: c.start()]) or _OWNER_AFTER.match(s[c.end() :]) or " " in c.group(0):
            return c
    return None


def _made(s: str, m: re.Match[str]) -> bool:
    """Whether a thing the person makes ("podcast", "app") is theirs: "my/our app", "started a podcast",
    "… called Lamplight" — not "their banking app", "a Raptors game"."""
    return bool(_OWNER_BEFORE.search(s[: m.start()]) or _MAKING.search(s) or _NAMING.search(s))


# "registered Biscuit at …", "booked him in with …": the pet's practice, said through what was done there;
# "switched vets to …", "found an NHS dentist, …": a practice changed to or found
_OWNER_BEFORE = re.compile(
    r"\b(?:my|our|new|the kids'?|(?:registered|booked) (?:[\w-]+ )?(?:in )?(?:with|at)(?: a| the)?"
    r"|switched|changed|found (?:a|an)(?: new)?|(?:i|we) (?:now )?see (?:a|an))\s+(?:[\w-]+\s+)?$",
    re.I,
)


_OWNER_AFTER = re.compile(r"\s*(?:is\b|'s\b|’s\b|we\b|i\b|here is\b|now is\b)", re.I)


_MAKING = re.compile(
    r"\b(?:i|we)(?:'ve|’ve|'re|’re| have| had| are)?\s+(?:just\s+|finally\s+|now\s+)?(?:started|launched|built|made|make|run|running|"
    r"relaunch\w*|renamed|set up|founded|writ\w+|wrote|host\w*|record\w*)\b|^\W*(?:started|launched|built|renamed)\b",
    re.I,
)


_NAMING = re.compile(r"\b(?:called|named|renamed)\b", re.I)
