"""The offline extractor: statements about the person found in what they said, by rules and the lexicon.

A statement is a sentence of the person's own (a user message of a transcript, a line of a note) that
is not a question, a request, a wish or a plan ("I might move to Leeds"), speaks of the person ("I",
"my", "we"), and names a subject of the lexicon (lexicon.py). Its value is the span that names what the
subject is now, by the subject's kind (values.py: "home: Dundee", "partner: Nadia"), else the words after
its verb; one message gives each subject one value. An ending ("we broke up", "I quit the choir", "no
longer …") closes the subject. A correction, a keyed memory
`profile.<subject>` (memory.profile's corrections), is a statement with its value as said.

Pure and blocking (the pipeline runs it in a thread); English first.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Iterable

from ..index.chunking import Chunk
from ..layout import KEYED_DIR
from ..ports import Statement
from .distill import LEDGER_NOTES, parse_note
from .endings import ENDING, ENDING_ONLY, ENDING_WORDS, ends
from .lexicon import BY_NAME, Subject
from .prefilter import _KEPT, _may_state
from .lexicon import hinted as lexicon_hinted
from .values import NAMED, RENAMED, apposition, club_in, colour_in, first_name_said, last_name, name_in, span
from .which import LOCKED_THINGS, which
from .whose import (
    _owned,
    _made,
    _PAST_THING,
    _EVENT_OFF,
    FAMILY_SUBJECTS,
    _DROPPED_I,
    _MOVED_AFTER_COMMA,
    _KEEP,
    _KIDS_OWN,
    _KID_OWNER,
    _ME,
    _ME_WORDS,
    _NOT_FAMILY,
    _NOT_YET,
    _NOT_YET_WORDS,
    _OBJECT_FIRST,
    _OTHERS,
    _OTHERS_WORDS,
    _QUESTION,
    _RELATIVE_FIRST,
    _REQUEST,
    _TAG,
    _WITH_ME,
)

CORRECTION_PREFIX = "profile."  # a keyed memory `profile.<subject>` corrects that subject
MAX_TEXT = 600  # a statement's evidence text, at most (the message it was said in)
MAX_VALUE = 120
MAX_PER_SENTENCE = 2  # subjects one sentence may give a value to

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
# Clauses of a sentence that may each say something of their own ("my contact is my mum — she lives in Leeds").
_CLAUSE = re.compile(r"\s+[—–-]\s+|;\s*|,\s+(?=(?:and|but|so|though|although|while)\b)")
_DIGIT = re.compile(r"\d")
# "The garage keypad got reset; the new number is 0804": a lock's number is its code
_LOCK_SAID = re.compile(r"\b(?:keypad|padlock|alarm|lock|combination|key ?safe|code)\b", re.I)
_BARE_CODE = re.compile(r"[#*]?\d{3,8}")
_ANNIVERSARY = re.compile(r"\b(?:\w+|\d+) (?:weeks|months|years) together\b", re.I)
_PRONOUN = re.compile(r"\b(?:she|he)(?:'s|’s| is)\b", re.I)
_ACCEPTED = re.compile(r"\b(?:said yes|accepted|took it|taking it|signed the contract|start on|starting on)\b", re.I)
_STATED = re.compile(r"\b(?:is|are|was)\b|:", re.I)
_STATED_WORDS = frozenset({"is", "are", "was"})  # its words: one of them, or ":" (ASCII text)
_START = re.compile(
    r"\b(?:now|new|newly|switched|changed|started|joined|got(?! (?:made redundant|laid off|let go))|bought|adopted|moved (?:to|into|in)|promoted|hired"
    r"|official|renamed|upped|increased|raised|lowered|reduced|signed|behind for)\b",
    re.I,
)
_VALUE_PATTERNS = (
    re.compile(r"\b(?:called|named|renamed (?:it|him|her|them)?(?: to)?)\s+(.+)", re.I),
    re.compile(r"\b(?:is|are|was|'s|’s)\s+(?:now\s+|still\s+|actually\s+)?(.+)", re.I),
    re.compile(r"\b(?:to|into|at|for|with|on)\s+((?:[A-Z0-9][\w'’&.-]*\s*){1,4})"),
)
_CUT = re.compile(r"\s*(?:[,;:(]|\s-\s|\s—\s|\bbut\b|\bbecause\b|\bso\b|\bsince\b|\bwhich\b|\band I\b).*$", re.S)


_USER = "User: "  # how a chunk shows a user message (another speaker's: "Assistant: ", a name)


def sentences(text: str) -> list[str]:
    """The sentences of a text, each cut into its clauses."""
    out: list[str] = []
    for s in _SENTENCE.findall(text):
        out.extend(c.strip() for c in _CLAUSE.split(s) if len(c.strip()) > 3)
    return out


def value_of(sentence: str, cue: re.Match[str]) -> str:
    """What the sentence says the subject is: the words after its verb or preposition, after the cue."""
    tail = sentence[cue.end() :] if cue.end() < len(sentence) else ""
    for pat in _VALUE_PATTERNS:
        for where in (tail, sentence):
            m = pat.search(where)
            if m:
                v = _CUT.sub("", m.group(1)).strip(" .!\"'“”")
                if v:
                    return v[:MAX_VALUE]
    return sentence.strip(" .!")[:MAX_VALUE]


def statements_of(sentence: str, message: str = "") -> list[tuple[str, str, bool]]:
    """(subject, value, ending) of each subject the sentence gives a value to ([] for a question, a
    wish, or a sentence not about the person). `message`: the whole message it is part of (what a
    code opens may be named in the sentence before)."""
    return [(subject, value, ending) for subject, value, ending, _ in _statements(sentence, message)]


# "First night in the new apartment": a cue that starts with "new" states the person's own even bare.
_OWN_NOUNS = frozenset({"vet", "dentist", "doctor", "manager", "landlord"})
# Subjects whose value is its span or nothing: a hometown with no place, a code with no code in it.
_BORN = re.compile(r"\bborn (?:on )?(?:a )?$", re.I)
_SPAN_ONLY = frozenset({"hometown", "code", "birthday"})
_WHEN_SAID = re.compile(
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)",
    re.I,
)
# The words each of these expressions starts with (tests/unit/test_memory_ledger_values.py holds them in step).
_WORDS = re.compile(r"[a-z]+")
_PROJECT_CUE = BY_NAME["project"].cues
_WEEKDAY = re.compile(r"(?:mon|tues|wednes|thurs|fri|satur|sun)day", re.I)
# A value of these names the thing (or a teacher, a colour), or there is none: "the teacher said my past
# tense is decent" names no teacher, "I love the colour blue" is no detail of anything.
_THINGS = frozenset({"vehicle", "pet", "device", "teacher", "detail"})


def _first_words(name: str) -> str:
    return name_in(f"called {name}") or name


_NOUN_FIRST = re.compile(r"appointment|check-?up|exam|scan", re.I)


def _statements(
    sentence: str, message: str = "", known: list[Subject] | None = None
) -> list[tuple[str, str, bool, bool]]:
    """statements_of's, each with whether its value is a span of its kind (values.py) or the words after
    the verb."""
    low = sentence.lower()
    hinted = lexicon_hinted(low) if known is None else known  # `known`: those of a text holding this one
    if not hinted:  # most clauses name no subject: their words looked up, no expression searched
        return []
    # The clause's words, looked up before an expression is searched: an expression none of whose first
    # words the clause holds cannot match (ASCII text: [a-z]+ runs are its words; other text searches).
    words = frozenset(_WORDS.findall(low))
    plain = sentence.isascii()
    # "The dog's vet is …", "the flat's landlord", "Biscuit's new vet": a thing the person keeps, said as theirs
    me = (not plain or not words.isdisjoint(_ME_WORDS)) and _ME.search(sentence) is not None
    me = me or ("'s" in low or "’s" in low) and _KEPT.search(sentence) is not None
    if (
        not me
        and not _DROPPED_I.search(sentence)
        and not ("," in sentence and ("moved" in low or "relocated" in low) and _MOVED_AFTER_COMMA.search(sentence))
    ):
        # Without "I", "my", "we"…, only a code or number given bare is the person's ("The code is 7340",
        # "The cabin wifi password is moose"): a number with its digits, a code with digits or said to be;
        # and a subject named new ("First night in the new apartment in Mile End", "New job starts Monday").
        digits = bool(_DIGIT.search(sentence))
        stated = ":" in sentence or (
            (not plain or not words.isdisjoint(_STATED_WORDS)) and bool(_STATED.search(sentence))
        )
        hinted = [
            s
            for s in hinted
            if (s.name == "number" and digits)
            or (s.name == "code" and (digits or stated))
            or (  # "Training moved to Thursdays": an activity's day said bare (not "born Friday night")
                s.name == "schedule"
                and (m := s.cues.search(sentence)) is not None
                and not _WEEKDAY.match(m.group(0))
                and not _OTHERS.search(sentence)
            )
            or (  # "Sam stayed over again", "Eight months together this week": a partner by what is done
                s.name == "partner"
                and ("stay" in low or "together" in low)
                and (m := s.cues.search(sentence)) is not None
                and ("stay" in m.group(0) or "together" in m.group(0))
            )
            or (
                "new " in low  # the words first: a cue expression costs more
                and (m := s.cues.search(sentence)) is not None
                and (
                    m.group(0).lower().startswith("new ")
                    # "New dentist: Smile Clinic", "New manager started today, a guy called Ben"
                    or (s.name in _OWN_NOUNS and sentence[max(0, m.start() - 4) : m.start()].lower() == "new ")
                )
            )
            # "Her teacher is Mrs Khan", "Their school is Greenhill Primary": the child's, said by its pronoun
            or (s.name in _KIDS_OWN and _KID_OWNER.search(sentence) is not None)
            # "Eye exam booked for Tuesday 9 April": a booking with its date said bare
            or (
                s.name == "appointment"
                and _WHEN_SAID.search(sentence) is not None
                and s.cues.search(sentence) is not None
            )
        ]
        if not hinted:
            return []
    s = _TAG.sub("", sentence.strip()).strip()
    # Without the person in it, only a code or a number is a statement (above); one that speaks only of
    # someone else ("she lives in Leeds") is not the person's.
    if (  # "Booked him in at Allerton Vets": the person's verb first, someone else only its object
        not me
        and (not words.isdisjoint(_OTHERS_WORDS) or "'s" in low or "’s" in low)
        and _OTHERS.search(s)
        and not _OBJECT_FIRST.search(s)
    ):
        # of someone else's, only a code or number the person is told ("Mum's key safe is 6042 from today"),
        # and the child's teacher or school said by "her", "his", "their"
        kids = any(h.name in _KIDS_OWN for h in hinted) and _KID_OWNER.search(s) is not None
        hinted = [
            h for h in hinted if (h.name in ("code", "number") and _DIGIT.search(s)) or (kids and h.name in _KIDS_OWN)
        ]
    if (
        not hinted
        or not s
        or _QUESTION.search(s)
        or (_REQUEST.match(s) and not _KEEP.search(s))
        or (not words.isdisjoint(_NOT_YET_WORDS) and _NOT_YET.search(s))
    ):
        return []
    # `started` is read only beside an ending: searched only where an ending's word is
    started = not words.isdisjoint(ENDING_WORDS) and _START.search(s) is not None
    endings = (
        [e.group(0) for e in ENDING.finditer(s)]
        if not words.isdisjoint(ENDING_WORDS) and (not started or ENDING_ONLY.search(s) is not None)
        else []
    )
    someone_else = bool(_RELATIVE_FIRST.search(s)) and not _WITH_ME.search(s)
    if someone_else and _NOT_FAMILY.search(s):
        return []
    out: list[tuple[str, str, bool, bool]] = []
    seen: set[str] = set()
    for subj in hinted:
        m = subj.cues.search(s)
        if subj.name == "schedule" and m is not None and "born" in low and _BORN.search(s, 0, m.start()):
            continue  # "born on a Friday night", "a boy, born Friday night": a birth, not a weekly night
        if subj.name == "appointment":  # "booked an eye exam": the thing booked names it, not "booked"
            m = _NOUN_FIRST.search(s) or m
        if m is None or (someone_else and subj.name not in FAMILY_SUBJECTS):
            continue
        if subj.name == "partner" and "off" in low and _EVENT_OFF.search(message or s):
            continue
        if subj.name in _OWN_NOUNS and m is not None:
            m = _owned(s, m, subj.cues)
        if m is None or (subj.name == "project" and not _made(s, m)):
            continue
        if subj.name == "employer" and m.group(0)[:7].lower() == "offered" and not _ACCEPTED.search(message or s):
            continue  # an offer is a statement once taken ("… I said yes!"), not while it is weighed
        while m is not None and _PAST_THING.search(s, max(0, m.start() - 24), m.start()):
            m = subj.cues.search(s, m.end())  # "the old wifi … is still on the printer": the value as it was
        if m is None:
            continue
        if subj.name == "number" and not _DIGIT.search(s):  # "a number of things" gives no number
            continue
        name = subj.name
        if subj.qualified:
            q = which(subj, s, m, message)
            if not q and subj.name == "detail":  # "I love the colour blue": a detail of nothing
                continue
            name = f"{name}:{q}" if q else name
        if name in seen:
            continue
        seen.add(name)
        # an ending closes the subjects it can end: "My partner Sam quit smoking", "I gave up coffee, my dog …"
        ending = any(ends(subj.name, e) for e in endings)
        # beside a start, an ending-only cue ends work unless the clause names the new employer: "I'm between
        # jobs right now" ends it, "I retired from the army in 2019 and now work at Tesco" is Tesco
        found = span(name, s, m) if not ending or (started and subj.name == "employer") else None
        ending = ending and found is None
        cue_said = m.group(0).lower().lstrip(" \t.,!")
        if (
            found is None
            and not ending
            and (
                (subj.name == "home" and cue_said.startswith("home")) or (subj.name == "partner" and "stay" in cue_said)
            )
        ):
            continue  # "Home is where the heart is", "the kids' friends stayed over again": nothing named
        if (
            found is None
            and not ending
            and subj.name in _SPAN_ONLY
            and (
                subj.name != "code" or m.group(0).lower().startswith("code")
            )  # "my wifi password is the name of my dog"
            # "My hometown is Sligo": a name after the verb is its place ("I'm from the future" names none)
            and not (
                subj.name == "hometown" and (v := value_of(s, m))[:1].isupper() and v != s.strip(" .!")[:MAX_VALUE]
            )
        ):
            continue  # "I'm from the future", "I wrote some code today": no place, no code said
        if found is None and not ending and subj.name == "employer" and m.group(0)[:7].lower() == "offered":
            continue  # "offered a job in Edinburgh and I said yes": no employer named, the words are no value
        out.append((name, "" if ending else (found or value_of(s, m)), ending, found is not None))
        if len(out) >= MAX_PER_SENTENCE:
            break
    return out


def from_chunks(path: str, chunks: Iterable[Chunk], fallback_date: str | Callable[[], str]) -> list[Statement]:
    """The statements of one file, from its chunks as the index stores them: each user message of a
    transcript (the core spans of its chunks) once, or each line of a note; a correction for a keyed
    memory `profile.<subject>`. `fallback_date`: a chunk's date where it has none, or what gives it (asked
    once, and only where a statement needs it: most files state nothing, issue 46)."""
    chunks = list(chunks)
    day = functools.cache(fallback_date) if callable(fallback_date) else functools.partial(str, fallback_date)
    if path.startswith(KEYED_DIR + "/"):
        return _correction(path, chunks, day())
    if path.startswith(LEDGER_NOTES + "/"):  # the model's statements (distill.py), as it wrote them
        found: dict[int, Statement] = {}
        for c in chunks:
            for s in parse_note(path, c.text):
                found.setdefault(c.start_line + s.start_line - 1, s)
        return [s._replace(start_line=line, end_line=line) for line, s in sorted(found.items())]
    out: list[Statement] = []
    seen: set[tuple[int, str]] = set()
    # In the file's order whatever order the chunks come in: a line two chunks share is read from the
    # first, and the statements come out by line and subject (same file → same statements, same order).
    for c in sorted(chunks, key=lambda c: (c.start_line, c.end_line)):
        # A note's chunk at once: most chunks of most notes state nothing. A transcript's messages are each
        # looked at alone (_add), so its chunk is not looked at first (that read every message twice).
        if not c.spans and not _may_state(c.text):
            continue
        if c.spans:
            text = c.text
            for line, kind, a, b in c.spans:
                if kind == 0 and text.startswith(_USER, a, b):  # a user message's words
                    _add(out, seen, path, line, line, text[a + len(_USER) : b], c.date, day)
        elif not path.startswith("sessions/"):
            for i, line_text in enumerate(c.text.split("\n")):
                if line_text.strip() and not line_text.lstrip().startswith("#"):
                    _add(out, seen, path, c.start_line + i, c.start_line + i, line_text.strip(" -*"), c.date, day)
    return sorted(out, key=lambda s: (s.start_line, s.subject))


def message_statements(words: str, known: list[Subject] | None = None) -> list[tuple[str, str, bool]]:
    """(subject, value, ending) of each subject one message gives a value to, once each: of a subject
    said twice, the value that names something ("Accepted an offer! I'm going to be design lead at
    Northpine Health." → the second); a value that names nothing takes what the message names around it
    ("bought a car — a used 2019 Subaru Forester", "I met someone. His name's Mateo.")."""
    found: dict[str, tuple[str, str, bool, bool]] = {}
    at = 0
    clauses = sentences(words)
    for sent in clauses:
        where = words.find(sent, at)
        at = where + len(sent) if where >= 0 else at
        # a message of one clause: the subjects its words hint at are the clause's (looked up once)
        said = _statements(sent, words, known if len(clauses) == 1 else None)
        if (
            not said
            and ("renam" in sent or "relaunch" in sent or "rebrand" in sent)  # RENAMED's words (it is cased)
            and (renamed := RENAMED.search(sent))
            and _ME.search(sent)
            and (made := _PROJECT_CUE.search(words))
        ):
            # "…a podcast called Side Quests, so we renamed ours to Small Hours": what was renamed is named before
            said = [(f"project:{made.group(0).lower()}", _first_words(renamed.group(1)), False, True)]
        for subject, value, ending, spanned in said:
            if not ending and not spanned:
                kind = subject.split(":", 1)[0]
                better = apposition(words[at:]) if where >= 0 else None
                if better is None and kind in NAMED:
                    better = name_in(words)
                # "Harriet owns the place; she's the one I answer to": the name said before the pronoun
                if better is None and kind in NAMED and where >= 0 and (he := _PRONOUN.search(sent)):
                    better = last_name(words[: where + he.start()])
                if better is None and kind == "partner" and (anniversary := _ANNIVERSARY.search(sent)):
                    # "Eight months together this week": whom with is the name the message gives, or none
                    better = first_name_said(words.replace(anniversary.group(0), ""))
                    if better is None:
                        continue
                if better is None and kind == "detail" and ":" in subject:  # "Repainted Loon! She's green now."
                    better = colour_in(words[at:])
                if better is None and kind == "membership" and ":" in subject:
                    # "joined the choir": the club is its name; "a member of the climbing club": its kind
                    better = club_in(sent) or subject.split(":", 1)[1]
                value, spanned = (better, True) if better else (value, False)
                if not spanned and kind in _THINGS:  # "nick my bike so I changed the lock": no vehicle named
                    continue
            if (
                subject == "number"
                and _BARE_CODE.fullmatch(value)  # "the new number is 7:30" is no lock's code
                and _LOCK_SAID.search(words)
                and (thing := LOCKED_THINGS.search(words))
            ):
                subject = f"code:{thing.group(1).lower()}"  # "the garage keypad got reset; the new number is 0804"
            old = found.get(subject)
            if old is None or (not old[2] and not old[3] and not ending and spanned):
                found[subject] = (subject, value, ending, spanned)
    return [(subject, value, ending) for subject, value, ending, _ in found.values()]


def _add(
    out: list[Statement],
    seen: set[tuple[int, str]],
    path: str,
    a: int,
    b: int,
    words: str,
    date: str | None,
    day: Callable[[], str],
) -> None:
    if not _may_state(words) or not (known := lexicon_hinted(words.lower())):
        return
    for subject, value, ending in message_statements(words, known):
        if (a, subject) in seen:
            continue
        seen.add((a, subject))
        out.append(Statement(subject, value, date or day(), path, a, b, words[:MAX_TEXT], "extractor", ending))


def _correction(path: str, chunks: list[Chunk], fallback_date: str) -> list[Statement]:
    """A keyed memory `memory/keyed/<category>/profile.<subject>.md`: its value corrects the subject (an
    empty value, "-", closes it)."""
    name = path.rsplit("/", 1)[-1].removesuffix(".md")
    if not name.startswith(CORRECTION_PREFIX) or not chunks:
        return []
    subject = name[len(CORRECTION_PREFIX) :].replace("_", ":")
    if subject.split(":", 1)[0] not in BY_NAME:
        return []
    body = [ln for c in chunks for ln in c.text.split("\n") if ln.strip() and not ln.startswith(("#", "---"))]
    body = [ln for ln in body if not re.match(r"^(?:key|category|created|updated|version):", ln)]
    value = " ".join(" ".join(body).split())[:MAX_VALUE]
    c = chunks[0]
    ending = value in ("", "-")
    return [
        Statement(
            subject,
            "" if ending else value,
            c.date or fallback_date,
            path,
            c.start_line,
            chunks[-1].end_line,
            value,
            "correction",
            ending,
        )
    ]
