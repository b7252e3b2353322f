"""The ledger's pre-filter: the fast way past text that states nothing about the person (most text).

A text holds one of `_MAY_STATE`'s words, or a lock's word with a digit, or one of `_PAIRS`' two words, or no rule of extract.py can
take a statement from it (tests/unit/test_ledger_forms.py's hypothesis test holds the two in step: a
new form's words go here with its rule). Split from extract.py by concern (issue 48).
"""

from __future__ import annotations

import re
from typing import Any

from .brands import VEHICLE_NAMES

_DIGIT = re.compile(r"\d")
# "Got a puppy!", "Moved to Dundee last week": a clause that starts with the verb is the person's own.
_FIRST_VERBS = (
    "got moved started joined bought adopted sold quit left switched changed booked signed renamed cancelled "
    "canceled accepted registered traded repainted finished dropped upped passed failed married engaged "
    "separated retired rented leased hired met called broke picked relocated handed resigned swapped upgraded "
    "rode replaced hung went landed enrolled welcomed transferred stepped ported brought born settled became "
    "allergic volunteering coaching"
).split()
# The things a person keeps, said with "the" ("the dog's vet", "the car's colour"), or a named one's vet.
_KEPT_NOUNS = (
    "dog cat puppy kitten pet tortoise rabbit hamster parrot horse car van bike motorbike boat canoe flat house "
    "apartment place kid kids baby"
).split()
_KEPT = re.compile(
    rf"\b(?:the|our) (?:{'|'.join(_KEPT_NOUNS)})(?:'s|’s)\s"
    r"|\b(?-i:[A-Z][a-z]+)(?:'s|’s) (?:new |old |usual )?(?:vet|vets|groomer|dog walker)\b"
    rf"|\b(?:the|our) {VEHICLE_NAMES}(?:'s|’s) (?:colou?r|paint|reg)",  # "the Niro's colour": a thing the person keeps
    re.I,
)


# Words without one of which a text states nothing about the person: "I/my/we…", the verbs a statement
# may start with ("Moved to Leeds"), what a code or number is called. Looked up as a set: C speed.
_MAY_STATE = frozenset(
    "i i'm im i've i'd my mine me myself we we're we've our us ourselves".split()
    + _FIRST_VERBS
    + "password passwords passcode passcodes pin combination combo code wifi wi-fi login number cell mobile".split()
    # a thing the person keeps, said with "the" (_KEPT): "The dog's vet is …", "Biscuit's vet is …"
    + [f"{w}'s" for w in _KEPT_NOUNS]
    + "vet vets groomer pins codes combinations combos logins opens unlocks seeing".split()
    + "home home's stayed stays new colour color".split()  # "Home is Leeds now", "Sam stayed over again", "New phone!"
    + ["dating"]  # "Been dating a guy called Felix"
)
# A lock said to be its number ("the alarm is 4455 now", "Mum's gate's 2290"): one of these with a digit.
_LOCKS = frozenset(w + t for w in "alarm keypad padlock gate locker".split() for t in ("", "'s"))
# Two words together, each too common alone: the child's teacher or school said by "her/his/their" ("Her
# teacher is Mrs Khan"), an activity said with its day ("Training is Wednesdays now").
_DAYS = [d + "day" + s for d in "mon tues wednes thurs fri satur sun".split() for s in ("", "s")]
_PAIRS = (
    (frozenset("teacher school nursery".split()), frozenset("her his their kids kids'".split())),
    (frozenset("training rehearsal rehearsals practice lessons sessions class".split()), frozenset(_DAYS)),
)
_PAIRS_BYTES = tuple((frozenset(w.encode() for w in a), frozenset(w.encode() for w in b)) for a, b in _PAIRS)
_PAIR_FIRST = frozenset(w for a, _ in _PAIRS for w in a)  # one look-up first: most text holds none of them
_PAIR_FIRST_BYTES = frozenset(w.encode() for w in _PAIR_FIRST)
_PUNCT_CHARS = '.,;:!?()[]{}"“”‘*#/\\<>=+&|~^`@$%'
_PUNCT = str.maketrans({c: " " for c in _PUNCT_CHARS})
# The same for ASCII text, as bytes (bytes.translate is a table lookup, ~3x str.translate with a dict): the
# punctuation and the ASCII characters str.split() splits at that bytes.split() does not (\x1c-\x1f).
_ASCII_SPLIT = "".join(c for c in _PUNCT_CHARS if c.isascii()).encode() + b"\x1c\x1d\x1e\x1f"
# The table lowers ASCII letters in the same pass (what str.lower does to ASCII text): no str.lower first.
_LOWER_PUNCT_BYTES = bytes.maketrans(
    _ASCII_SPLIT + b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b" " * len(_ASCII_SPLIT) + b"abcdefghijklmnopqrstuvwxyz"
)
_MAY_STATE_BYTES = frozenset(w.encode() for w in _MAY_STATE)
_LOCKS_BYTES = frozenset(w.encode() for w in _LOCKS)


# Every word any test below looks for, in one set: text holding none of them (most text) is passed over
# in one look-up of its words (the locks and the pairs had one each).
_ANY = _MAY_STATE | _LOCKS | _PAIR_FIRST
_ANY_BYTES = _MAY_STATE_BYTES | _LOCKS_BYTES | _PAIR_FIRST_BYTES


def _may_state(text: str) -> bool:
    """The fast way past what states nothing about the person (most text): none of `_MAY_STATE`'s words,
    nor a lock's word with a digit, nor both words of a pair. (ASCII text, most of it, is split as bytes:
    the same words, at under half the cost, issue 46.)"""
    if text.isascii():  # lowered and split at punctuation by one table (issue 46: ~35% of this call)
        raw = text.encode().translate(_LOWER_PUNCT_BYTES).split()
        return not _ANY_BYTES.isdisjoint(raw) and _holds(set(raw), _MAY_STATE_BYTES, _LOCKS_BYTES, _PAIRS_BYTES, text)
    words = text.lower().replace("’", "'").translate(_PUNCT).split()
    return not _ANY.isdisjoint(words) and _holds(set(words), _MAY_STATE, _LOCKS, _PAIRS, text)


def _holds(found: set[Any], may: frozenset[Any], locks: frozenset[Any], pairs: Any, text: str) -> bool:
    """The tests one by one, for text holding one of their words."""
    return (
        not may.isdisjoint(found)
        or (not locks.isdisjoint(found) and _DIGIT.search(text) is not None)
        or any(not a.isdisjoint(found) and not b.isdisjoint(found) for a, b in pairs)
    )
