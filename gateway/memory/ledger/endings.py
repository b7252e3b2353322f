"""Endings and the bounds of the cues that end or name by a number: what a clause must say for an
ending word to close a subject ("dumped me last night", not "dumped me a load of homework"), which
subjects an ending word can end, and a lock's bare code. Every expression here is bounded (no `.*`)."""

from __future__ import annotations

import re

# The end of a clause, or a word of when: "dumped me last night", not "dumped me a load of homework".
CLAUSE_END = (
    r"(?=\s*(?:[.!?,;:)—–-]|$|(?:for|after|before|last|yesterday|today|tonight|this|on|in(?! it\b)|over|by|via)\b))"
)
# A lock's number: a bare code of {}-8 digits, not a time (7:30, 6am), a decade (1920s), a size or an age.
LOCK_NUMBER = (
    r"\d{{{},8}}\b(?![:.,]\d)(?!\s*(?:am|pm|a\.m|p\.m|o'?clock|h|hrs?|hours?|mins?|minutes?|mm|cm|m|km|metres?|meters?"
    r"|inches|in|ft|feet|foot|kg|g|lbs?|years?|yrs?|months?|weeks?|days?|x\b|by)\b)"
)
# "I retired", "retired from work last June", not "I retired my old running shoes" or "retired from running"
RETIRED_TAIL = (
    r"(?=\s*(?:[.!?,;:)—–-]|$|(?:last|this|in|on|at|after|early|today|yesterday|now|properly|officially|for good|at last"
    r"|from (?:(?-i:[A-Z])\w*|work|my job|my post|my role|the job|(?:the )?(?:\w+ )?(?:service|force|police|army|navy|council|nhs"
    r"|teaching|nursing|practice|firm|company|bank|civil service)))\b))"
)
# "We had to put Pepper to sleep", "I had to have our old cat put down": the person's own animal, at the clause's end
_ANIMAL = (
    r"dog|cat|puppy|kitten|pup|rabbit|bunny|hamster|parrot|budgie|tortoise|horse|pony|guinea pig|ferret|greyhound"
    r"|lurcher|spaniel|terrier|collie|labrador"
)
_PUT_WHOM = (
    r"(?:(?:my|our|the) (?:(?:poor|old|lovely|beloved|sweet|dear)\s+){0,2}"
    rf"(?:{_ANIMAL})|(?-i:[A-Z])\w+|him|her)"
)
PUT_DOWN = (
    rf"(?:^\W*|\b(?:i|we)\s+(?:\w+\s+)?)had to (?:put {_PUT_WHOM}|have {_PUT_WHOM} put|have put {_PUT_WHOM})"
    rf" (?:down|to sleep){CLAUSE_END}(?!\s*(?:mode|button|setting))"
)

# an ending expression is searched only when one of these words is in the clause
ENDING_WORDS = frozenset(
    "broke split separated divorced quit left no not stopped cancelled canceled gave moved sold passed died retired "
    "ended went called broke handed resigned made laid let last walked scrapped written wrote rehomed single dumped "
    "contract put jobs unemployed work hung stepped and".split()
)
_ENDING_ONLY_WORDS = (
    r"between jobs|(?:i'm|i’m|i am) (?:now )?(?:unemployed|out of work)|single again|(?:i'm|i’m|i am) (?:now )?single(?!-)"
    rf"|(?:i|i've|i’ve|i have|i'm|i’m|i am|we) (?:now |just |finally |officially )?retired{RETIRED_TAIL}"
)
ENDING = re.compile(
    r"\b(?:broke up|split up|separated|divorced|quit|left (?:the|my)|no longer|not \w+ any ?more|stopped|cancell?ed"
    rf"|gave up|moved out|sold (?:the|my)|passed away|died|retired{RETIRED_TAIL}|ended|went our separate ways"
    r"|(?:called|broke) it off|called it (?:a day|quits)|(?:and i|and me)(?:'re|’re| are) (?:done|over|finished)\b(?! with)|hung up (?:the|my) (?:boots|gloves)|stepped down (?:from|as)|handed in my notice|resigned|made redundant|laid off|let go from|last day (?:at|with)"
    r"|walked out (?:of my job|on)|scrapped (?:the|my|our)|written off|wrote off|rehomed|(?:i'm|i’m|i am) single"
    rf"|single again|dumped (?:me|him|her|them){CLAUSE_END}|left me{CLAUSE_END}|broke off (?:the|our) engagement"
    # a work contract ended ("My contract at Deloitte ended"), bounded: not the gym's, not "contract at … ended" any length
    r"|contract (?:at|with) (?:work|(?:the )?(?-i:[A-Z])[\w&'’.-]*(?: (?-i:[A-Z])[\w&'’.-]*){0,3})"
    r" (?:has |had |just |finally |officially )?ended"
    rf"|{PUT_DOWN}|{_ENDING_ONLY_WORDS})\b",
    re.I,
)
# Ending words that cannot end a subject: a partner is not quit, sold or retired from; a pet not resigned from
# or broken up with; work not sold, scrapped, put down or dumped.
_WORK_ENDS = (
    r"quit|retired|resigned|made redundant|laid off|let go|last day|handed in|walked out|contract|between jobs"
    r"|(?:i'm|i’m|i am) (?:now )?(?:unemployed|out of work)|hung up|stepped down"
)
_PARTNER_ENDS = (
    r"broke up|split up|separated|divorced|went our|called it|broke it|broke off|(?:and i|and me)|(?:i'm|i’m|i am) single"
    r"|single again|dumped|left me"
)
_THING_ENDS = r"sold|scrapped|written off|wrote off|rehomed|had to|passed away|died|gave up|cancel|stopped"
_NOT_ENDS = {
    "partner": re.compile(rf"(?:{_WORK_ENDS}|{_THING_ENDS})", re.I),
    "pet": re.compile(rf"(?:{_WORK_ENDS}|{_PARTNER_ENDS}|cancel|gave up|stopped)", re.I),
    "employer": re.compile(
        rf"(?:{_PARTNER_ENDS}|sold|scrapped|written off|wrote off|rehomed|had to|passed away|died)", re.I
    ),
}


def ends(subject: str, said: str) -> bool:
    """Whether the ending words `said` can end `subject`."""
    no = _NOT_ENDS.get(subject)
    return no is None or no.match(said) is None


# An ending said only as an ending: "I'm between jobs right now", "I'm single again, he moved to Leeds" are
# endings whatever else the clause says ("now", "moved to"), never a value
ENDING_ONLY = re.compile(rf"\b(?:{_ENDING_ONLY_WORDS})\b", re.I)
