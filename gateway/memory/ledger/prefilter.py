"""The ledger's pre-filter: the fast way past text that states nothing about the person (most text).

A text holds one of `_MAY_STATE`'s words, or a lock's word with a digit, or no rule of extract.py can
take a statement from it (tests/unit/test_ledger_forms.py's hypothesis test holds the two in step: a
new form's words go here with its rule). Split from extract.py by concern (issue 48).
"""

from __future__ import annotations

import re

from .brands import VEHICLE_NAMES

_DIGIT = re.compile(r"\d")
# "Got a puppy!", "Moved to Dundee last week": a clause that starts with the verb is the person's own.
_FIRST_VERBS = (
    "got moved started joined bought adopted sold quit left switched changed booked signed renamed cancelled "
    "canceled accepted registered traded repainted finished dropped upped passed failed married engaged "
    "separated retired rented leased hired met called broke picked relocated handed resigned swapped upgraded "
    "rode replaced hung went landed enrolled welcomed transferred stepped ported brought born settled became"
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
    # "Her teacher is Mrs Khan", "Training is Wednesdays now", "Been dating a guy called Felix"
    + "teacher school nursery training rehearsal practice dating".split()
)
# A lock said to be its number ("the alarm is 4455 now", "Mum's gate's 2290"): one of these with a digit.
_LOCKS = frozenset(w + t for w in "alarm keypad padlock gate locker".split() for t in ("", "'s"))
_PUNCT_CHARS = '.,;:!?()[]{}"“”‘*#/\\<>=+&|~^`@$%'
_PUNCT = str.maketrans({c: " " for c in _PUNCT_CHARS})
# The same for ASCII text, as bytes (bytes.translate is a table lookup, ~3x str.translate with a dict): the
# punctuation and the ASCII characters str.split() splits at that bytes.split() does not (\x1c-\x1f).
_ASCII_SPLIT = "".join(c for c in _PUNCT_CHARS if c.isascii()).encode() + b"\x1c\x1d\x1e\x1f"
_PUNCT_BYTES = bytes.maketrans(_ASCII_SPLIT, b" " * len(_ASCII_SPLIT))
_MAY_STATE_BYTES = frozenset(w.encode() for w in _MAY_STATE)
_LOCKS_BYTES = frozenset(w.encode() for w in _LOCKS)


def _may_state(text: str) -> bool:
    """The fast way past what states nothing about the person (most text): none of `_MAY_STATE`'s words,
    nor a lock's word with a digit. (ASCII text, most of it, is split as bytes: the same words, at under
    half the cost, issue 46.)"""
    low = text.lower()
    if low.isascii():
        raw = low.encode().translate(_PUNCT_BYTES).split()
        return not _MAY_STATE_BYTES.isdisjoint(raw) or (
            not _LOCKS_BYTES.isdisjoint(raw) and _DIGIT.search(text) is not None
        )
    words = low.replace("’", "'").translate(_PUNCT).split()
    return not _MAY_STATE.isdisjoint(words) or (not _LOCKS.isdisjoint(words) and _DIGIT.search(text) is not None)
