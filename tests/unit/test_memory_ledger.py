"""The ledger's pure parts (memory/ledger/): the offline extractor, facts and their validity, which time
a question asks about, and where the chosen statement goes among the hits."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.memory.index.chunking import make_chunk
from gateway.memory.ledger.extract import from_chunks, statements_of
from gateway.memory.ledger.facts import facts
from gateway.memory.hit import Hit
from gateway.memory.ledger.placement import lead, newer_first, newer_hit, outdated, prefer_statements
from gateway.memory.ledger.asking import event_subjects, subjects_of, when_asked
from gateway.memory.ledger.recall import LedgerRecall, parse_as_of
from gateway.memory.ports import Statement

NOW = datetime(2026, 3, 10, tzinfo=timezone.utc)


def subjects(sentence: str) -> list[str]:
    return [s for s, _, _ in statements_of(sentence)]


@pytest.mark.parametrize(
    ("sentence", "subject"),
    [
        ("I live in Leeds now, near the station.", "home"),
        ("We moved to a flat in Dundee last month.", "home"),
        ("My new manager is Fatima.", "manager"),
        ("I report to Jonas these days.", "manager"),
        ("My girlfriend Elin and I went hiking.", "partner"),
        ("Got a puppy! A beagle called Toast.", "pet"),
        ("My dentist is Dr Osei on Park Road.", "dentist"),
        ("I'm allergic to penicillin.", "allergy"),
        ("I've gone vegetarian.", "diet"),
        ("I drive a blue Skoda now.", "vehicle"),
        ("The wifi password is otter-blue-7.", "code:wifi"),
        ("The shed combination is 4471.", "code:shed"),
        # One of many alike, named by its number: a subject each (30 lockers are not one code said 30 times).
        ("The locker code for box 17 is 1017.", "code:locker box 17"),
        ("The code for locker 4 is 9912.", "code:locker 4"),
        ("I started a podcast called Night Owls.", "project:podcast"),
        ("I work at Globex as a tester.", "employer"),
    ],
)
def test_a_statement_names_its_subject(sentence, subject):
    assert subject in subjects(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "Where do I live?",  # a question asks
        "What's my wifi password?",
        "Do you know who my manager is",
        "I might move to Leeds next year.",  # a plan states nothing yet
        "I'm thinking about getting a dog.",
        "If I had a car I'd drive to Wales.",
        "She lives in Brampton with her dog.",  # someone else's life
        "Can you suggest a recipe with leeks?",
    ],
)
def test_questions_plans_and_other_peoples_lives_state_nothing(sentence):
    assert statements_of(sentence) == []


def test_an_ending_closes_its_subject():
    [(subject, value, ending)] = statements_of("Elin and I broke up last week.")
    assert (subject, value, ending) == ("partner", "", True)
    assert [e for _, _, e in statements_of("I quit the choir.")] == [True]
    # a change is no ending: "left … and joined" sets a new value
    assert [e for _, _, e in statements_of("I left Acme and started at Globex.")] == [False]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_extracts_without_failing_and_questions_never_state(text):
    for subject, value, ending in statements_of(text):
        assert subject and (value == "" if ending else isinstance(value, str))
    assert statements_of(text.rstrip() + "?") == [] or not text.strip()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=120), max_size=6))
def test_any_transcript_chunk_extracts_only_user_messages_with_their_lines(messages):
    text, spans, off = "", [], 0
    for i, m in enumerate(messages):
        label = ("User: " if i % 2 == 0 else "Assistant: ") + m
        spans.append((i + 2, 0, off, off + len(label)))
        text += label + "\n"
        off += len(label) + 1
    chunk = make_chunk(2, len(messages) + 2, text, tuple(spans), "", "2025-01-01T00:00:00.000Z")
    for s in from_chunks("sessions/x.jsonl", [chunk], "2024-01-01T00:00:00.000Z"):
        assert s.start_line % 2 == 0 and s.said == "2025-01-01T00:00:00.000Z" and s.source == "extractor"


def st_(subject: str, value: str, day: str, ending: bool = False, source: str = "extractor") -> Statement:
    return Statement(subject, value, f"{day}T10:00:00.000Z", f"sessions/{day}.jsonl", 2, 2, value, source, ending)


def test_facts_hold_from_their_statement_until_the_next_and_repeats_keep_their_since():
    got = facts(
        [
            st_("home", "Dundee", "2025-09-01"),
            st_("home", "Leeds", "2025-01-01"),
            st_("home", "leeds", "2025-03-01"),  # said again: the same period
            st_("partner", "Elin", "2025-02-01"),
            st_("partner", "", "2025-04-01", ending=True),
            st_("pet", "", "2025-04-01", ending=True),  # an ending of nothing known
        ]
    )
    home = got["home"]
    assert [(p.value, p.since[:10], (p.until or "")[:10]) for p in home.periods] == [
        ("Leeds", "2025-01-01", "2025-09-01"),
        ("Dundee", "2025-09-01", ""),
    ]
    assert home.current is not None and home.current.value == "Dundee"
    assert home.at("2025-05-01T00:00:00.000Z").value == "Leeds"  # type: ignore[union-attr]
    assert home.at("2024-05-01T00:00:00.000Z") is None
    assert got["partner"].current is None and "pet" not in got
    brief = home.brief()
    assert brief["value"] == "Dundee" and brief["history"] == [
        {
            "value": "Leeds",
            "from": "2025-01-01T10:00:00.000Z",
            "until": "2025-09-01T10:00:00.000Z",
            "evidence": {"path": "sessions/2025-01-01.jsonl", "startLine": 2, "endLine": 2},  # its first saying
        }
    ]
    # as of a time: nothing said after it
    assert (
        facts([st_("home", "Leeds", "2025-01-01"), st_("home", "Dundee", "2025-09-01")], "2025-06-01")[
            "home"
        ].current.value
        == "Leeds"
    )  # type: ignore[union-attr]


def test_a_correction_is_a_statement_of_its_own_and_the_later_one_holds():
    got = facts([st_("home", "Leeds", "2025-01-01"), st_("home", "York", "2025-02-01", source="correction")])
    assert got["home"].brief()["source"] == "correction" and got["home"].brief()["value"] == "York"


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        ("Where do I live now?", "present"),
        ("What was the amount I was pre-approved for?", "present"),  # past tense, no earlier time
        ("Who was my manager originally?", "first"),
        ("Where did I live before Ottawa?", "before"),
        ("What was my old phone number?", "before"),
        ("Where did I live in March?", "at"),
        ("Who was my landlord last spring?", "at"),
        ("What happened on 3 May 2025?", "at"),
        ("How old is my tortoise?", "present"),  # an age, not an earlier time
        ("My dog is ten years old, what should he eat?", "present"),
        ("What level did I start Spanish at?", "first"),
        ("Which gym did I join to start with?", "first"),
        ("What was my old bike?", "before"),
        ("Which shop did I work in before?", "before"),  # "before" that names no event: the previous value
        ("Who was I seeing before that?", "before"),
        ("Who was I going out with in the spring?", "at"),
        ("What was my number two months ago?", "at"),
    ],
)
def test_which_time_a_question_asks_about(question, asked):
    assert when_asked(question, NOW).asked == asked


def test_relative_dates_resolve_against_the_time_given():
    assert when_asked("Where did I live in March?", NOW).at == "2026-03-15T00:00:00.000Z"
    assert when_asked("Where did I live in March?", datetime(2025, 1, 5, tzinfo=timezone.utc)).at.startswith("2024-03")  # type: ignore[union-attr]
    assert when_asked("Where did I live before Ottawa?", NOW).before == frozenset({"ottawa"})
    # a season without "last": the latest that has begun; "N units ago" from the time given
    assert when_asked("Who was I going out with in the spring?", NOW).at == "2025-04-15T00:00:00.000Z"
    assert when_asked("Where was I living over the summer?", datetime(2025, 9, 1, tzinfo=timezone.utc)).at == (
        "2025-07-15T00:00:00.000Z"
    )
    assert when_asked("What was my code two months ago?", NOW).at == "2026-01-09T00:00:00.000Z"
    assert when_asked("What was my code a year ago?", NOW).at == "2025-03-10T00:00:00.000Z"


def test_as_of_takes_a_date_or_a_datetime():
    assert parse_as_of("2025-06-01") == "2025-06-01T23:59:59.999Z"
    assert parse_as_of("2025-06-01T12:00:00+02:00") == "2025-06-01T10:00:00.000Z"
    assert parse_as_of("last tuesday") is None and parse_as_of("") is None


def test_subjects_by_cue_and_none_for_someone_elses_life():
    assert subjects_of("What's my wifi password?") == ["code"]
    assert subjects_of("Who's my boss?") == ["manager"]


@pytest.mark.parametrize(
    ("question", "subject"),
    [  # the common ways to ask, in words no statement uses (recall.py ASKED_AS)
        ("Where do I work these days?", "employer"),
        ("Who employs me now?", "employer"),
        ("Which company am I at?", "employer"),
        ("Where am I living at the moment?", "home"),
        ("Where's home for me now?", "home"),
        ("Which town do I live in?", "home"),
        ("Who am I with these days?", "partner"),
        ("Who's my other half?", "partner"),
        ("What opens my locker?", "code"),
        ("Which keypad number gets me into storage?", "code"),
        ("Who pays my wages these days?", "employer"),
        ("Which shop did I work in before?", "employer"),
        ("Who do I answer to at work?", "manager"),
        ("Which part of town am I in at the moment?", "home"),
        ("What's my address now?", "home"),
        ("What do I punch in to get into the building?", "code"),
        ("Am I seeing anyone?", "partner"),
        ("Who owns the place I rent?", "landlord"),
        ("What am I driving now?", "vehicle"),
        ("Who's my better half?", "partner"),
        ("What do I do for a living?", "employer"),
        ("Which school do the kids go to?", "school"),
    ],
)
def test_a_question_in_its_own_words_names_its_subject(question, subject):
    assert subject in subjects_of(question)


@pytest.mark.parametrize(
    ("question", "subjects"),
    [  # the thing asked, not whose it is
        ("What's my dog's vet called?", ["vet"]),
        ("Who is the vet for the cat?", ["vet"]),
        ("Which practice looks after my tortoise?", ["vet"]),
        ("Who's the landlord of my flat?", ["landlord"]),
        ("Who teaches my daughter?", ["teacher"]),
        ("What's my dog called?", ["pet"]),
        ("Which vet does my dog go to now?", ["vet"]),
        ("What car does my partner drive?", ["vehicle"]),
        ("What is my bicycle lock combination?", ["code", "vehicle"]),  # the head is the last noun: both weigh
    ],
)
def test_an_attribute_of_a_thing_asks_about_the_attribute(question, subjects):
    assert subjects_of(question) == subjects


@pytest.mark.parametrize("question", ["Where do my parents live?", "Who is Dana with?", "What time is it?"])
def test_asking_about_someone_else_or_nothing_names_no_subject_of_the_person(question):
    assert not {"home", "partner", "employer", "code"} & set(subjects_of(question))


def hit(snippet: str, score: float, date: str, **more) -> Hit:
    return Hit(f"sessions/{date}.jsonl", "sessions", 2, 3, score, snippet, date=date, **more)


def test_ties_go_to_the_hit_that_states_something_of_the_person_named():
    ask = hit("User: which vet did Biscuit go to before? Assistant: Biscuit went to Crookes.", 0.814287, "2025-12-20")
    says = hit("User: Biscuit's new vet is Crookes Exotic Pets.", 0.814286, "2025-09-27", superseded_by="2025-12-20")
    other = hit("User: bought a new kettle.", 0.5, "2025-10-01")
    out = prefer_statements("Who looks after Biscuit's health?", [ask, says, other])
    assert [r.date for r in out] == ["2025-09-27", "2025-12-20", "2025-10-01"]
    assert out[0].superseded_by is None  # a mention does not supersede a statement
    assert [r.score for r in out] == [0.814287, 0.814286, 0.5]  # scores stay non-increasing
    # Not a tie, no name asked, or every hit states: the order stays.
    apart = [ask._replace(score=0.9), says]
    assert prefer_statements("Who looks after Biscuit's health?", apart) == apart
    assert prefer_statements("Who looks after my tortoise's health?", [ask, says]) == [ask, says]
    both = [hit("User: Biscuit sleeps a lot.", 0.8, "b"), hit("User: Biscuit is 31.", 0.8, "a")]
    assert prefer_statements("How old is Biscuit?", both) == both


async def test_a_home_that_is_another_subjects_place_does_not_answer_where_the_person_lives():
    """A home statement whose value a service's cue names ("Booked the cat in at Hillside Vets, round the
    corner from the new flat": the vet, no home) does not lead a present question about the home: the
    home said before it does. A home of its own kind still leads; with nothing else, that one stands."""
    recall = LedgerRecall(None)
    ss = [
        st_("home", "Gorgie", "2025-01-01"),
        st_("home", "Leith", "2025-06-01"),
        st_("home", "Hillside Vets", "2025-06-09"),
    ]
    _, period, _ = await recall.pick("Where do I live now?", facts(ss), NOW)  # type: ignore[misc]
    assert period.value == "Leith"
    _, period, _ = await recall.pick("Where do I live now?", facts([*ss, st_("home", "Portobello", "2025-09-01")]), NOW)  # type: ignore[misc]
    assert period.value == "Portobello"
    _, period, _ = await recall.pick("Where do I live now?", facts(ss[2:]), NOW)  # type: ignore[misc]
    assert period.value == "Hillside Vets"


async def test_the_pick_follows_the_question_and_lead_puts_it_first_and_marks_the_superseded():
    recall = LedgerRecall(None)  # words only
    ss = [
        st_("partner", "Elin", "2025-01-01"),
        st_("partner", "Noor", "2025-08-01"),
        st_("code:wifi", "otter-7", "2025-02-01"),
        st_("code:shed", "4471", "2025-03-01"),
        st_("code:shed", "9902", "2025-09-01"),
    ]
    assert await recall.subjects("Where do my parents live?") == []
    fact, period, q = await recall.pick("Who am I dating now?", facts([s for s in ss if s.subject == "partner"]), NOW)  # type: ignore[misc]
    assert period.value == "Noor" and q.asked == "present"
    _, period, _ = await recall.pick("Who was I dating before Noor?", facts(ss[:2]), NOW)  # type: ignore[misc]
    assert period.value == "Elin"
    fact, period, _ = await recall.pick("What's the shed code?", facts(ss[2:]), NOW)  # type: ignore[misc]
    assert fact.subject == "code:shed" and period.value == "9902"
    _, period, _ = await recall.pick("What was the shed code originally?", facts(ss[2:]), NOW)  # type: ignore[misc]
    assert period.value == "4471"
    # "before X", X another subject's change: the value valid just before it (its words, else its latest)
    moves = [
        st_("employer", "Boots", "2025-01-01"),
        st_("home", "Leeds", "2025-03-01"),
        st_("employer", "NHS Lothian", "2025-06-20"),
        st_("home", "Edinburgh", "2025-06-01"),
        st_("home", "Portobello", "2025-11-01"),
    ]
    q = "Where did I work before I moved to Edinburgh?"
    assert await recall.subjects(q) == ["employer"] and "home" in event_subjects(q)
    fact, period, _ = await recall.pick(q, facts(moves), NOW, ["employer"])  # type: ignore[misc]
    assert fact.subject == "employer" and period.value == "Boots"
    _, period, _ = await recall.pick("Where did I work before I moved?", facts(moves), NOW, ["employer"])  # type: ignore[misc]
    assert period.value == "NHS Lothian"  # the latest move: November's

    fact, period, q = await recall.pick("Who am I dating now?", facts(ss[:2]), NOW)  # type: ignore[misc]
    hits = [
        Hit("sessions/a.jsonl", "sessions", 2, 3, 0.9, "User: Elin", date="x"),
        Hit("sessions/c.jsonl", "sessions", 2, 3, 0.5, "User: leeks", date="y"),
    ]
    out = lead(hits, fact, period, q, 5)
    assert out[0].path == "sessions/2025-08-01.jsonl" and out[0].fact is not None and out[0].fact.value == "Noor"
    assert [r.snippet for r in out[1:]] == ["User: leeks", "User: Elin"]
    assert out[2].superseded_by == period.since
    assert all(0 <= r.score <= 1 for r in out) and [r.score for r in out] == sorted(
        (r.score for r in out), reverse=True
    )


def test_a_sentence_about_someone_the_person_knows_states_nothing_of_theirs():
    assert statements_of("My cousin Meera is getting married in June.") == []
    assert statements_of("My sister lives in Leeds.") == []
    assert subjects("My best friend Dana and I started a podcast.") == ["project:podcast"]


LINES = {2: ("2025-01-01T10:00:00.000Z", "I live in Leeds."), 4: ("2025-01-01T10:01:00.000Z", "We broke up.")}


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers(-5, 1000) | st.text(max_size=40),
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
            max_leaves=20,
        ).map(lambda v: __import__("json").dumps({"decisions": v} if isinstance(v, list) else v)),
    )
)
def test_any_model_answer_yields_only_checked_decisions(answer):
    from gateway.memory.ledger.distill import decisions_of

    good, bad = decisions_of(answer, LINES, 20)
    assert bad >= 0 and len(good) <= 20
    for d in good:
        assert d["op"] in ("add", "update", "close") and d["line"] in LINES
        assert d["subject"].split(":")[0] in {"home", "partner"} or d["subject"].split(":")[0].isalpha()
        assert (d["value"] == "") == (d["op"] == "close") and len(d["value"]) <= 120


def test_a_model_answer_in_prose_around_json_is_read_and_written_lines_parse_back():
    from gateway.memory.ledger.distill import decisions_of, parse_note

    good, bad = decisions_of(
        'Sure! {"decisions": [{"op": "update", "subject": "home", "value": "Leeds", "line": 2},'
        ' {"op": "close", "subject": "partner", "line": 4}, {"op": "add", "subject": "home", "value": "x", "line": true}]}',
        LINES,
        20,
    )
    assert [(d["op"], d["subject"], d["value"]) for d in good] == [
        ("update", "home", "Leeds"),
        ("close", "partner", ""),
    ]
    assert bad == 1
    note = (
        "# What the model distilled\n\n"
        "- 2025-01-01T10:00:00.000Z · update · home · Leeds · sessions/a.jsonl:2 · I live in Leeds.\n"
        "- 2025-01-01T10:01:00.000Z · close · partner ·  · sessions/a.jsonl:4 · We broke up.\n"
    )
    got = parse_note("memory/ledger/a.md", note)
    assert [(s.subject, s.value, s.ending, s.start_line, s.source) for s in got] == [
        ("home", "Leeds", False, 3, "model"),
        ("partner", "", True, 4, "model"),
    ]


CUE_WORDS = (
    "I i'm we my the a is now new code wifi password pin number cell live moved keys manager boss report team "
    "job title role work at for started joined hired offer girlfriend partner dating seeing official broke up "
    "vet dentist doctor GP teacher school dose mg pill allergic vegan meat dog cat car bike drive a kid son "
    "training practice Monday nights course level B1 member club gym choir coach under-10s U11 podcast app "
    "appointment booked exam phone plan sim landlord rent from grew up born in I'm from Leeds at as item couple"
    " exclusive and are 20mg 5mcg"
).split()


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(CUE_WORDS), min_size=1, max_size=12).map(" ".join))
def test_every_cue_match_holds_one_of_its_hints(text):
    """The hints only skip clauses no cue can match (lexicon.py): a match without a hint would be lost."""
    from gateway.memory.ledger.lexicon import SUBJECTS, hinted

    for variant in (text, text.capitalize(), text.upper()):
        found = {s.name for s in hinted(variant.lower())}
        for subj in SUBJECTS:
            if subj.cues.search(variant):
                assert subj.name in found, (subj.name, variant)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from(CUE_WORDS + ["Got", "Moved", "passcodes", "Cell", "."]), min_size=1, max_size=14).map(
        " ".join
    )
)
def test_the_fast_path_never_passes_over_a_statement(text):
    """`_may_state` (a set lookup) skips a text only when the rules would find nothing in it."""
    from gateway.memory.ledger.extract import _may_state, sentences

    if any(statements_of(s, text) for s in sentences(text)):
        assert _may_state(text), text


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(["my", "I", "i’m", "I'm", "we've", "Got", "PIN", "wi-fi", "code", "mine", "dog", "İ", "K"])
        | st.text(alphabet=" \t\n\x1c\x1d\x1f\x85\u2028.,;:!?()[]{}\"“”‘’'*#/\\<>=+&|~^`@$%-_abcé", max_size=3),
        max_size=10,
    ).map("".join)
)
def test_the_fast_paths_ascii_split_finds_the_words_the_unicode_one_does(text):
    """`_may_state` splits ASCII text as bytes (issue 46): the same words as splitting it as str."""
    from gateway.memory.ledger.prefilter import _MAY_STATE, _PUNCT, _may_state

    low = text.lower()
    assert _may_state(text) == (not _MAY_STATE.isdisjoint(low.replace("’", "'").translate(_PUNCT).split())), text


def test_what_the_person_is_doing_somewhere_is_no_employer():
    assert "employer" not in subjects("I'm sea swimming at Blackrock with a group.")
    assert "employer" not in subjects("I'm sitting at the station.")
    assert "employer" in subjects("I'm a nurse at St James's.")


@pytest.mark.parametrize(
    ("snippet", "date", "newer", "named"),
    [
        ("User: Traded in the Corolla for a secondhand Nissan Leaf.", "2025-09-01", True, True),  # a new make named
        ("User: I drive a Fiat Panda these days.", "2025-09-01", True, True),  # the subject's cue, a new name
        ("User: Traded in the Corolla for a secondhand Nissan Leaf.", "2025-03-01", False, False),  # said before
        ("User: what car do I have again?\nAssistant: You drive a Corolla.", "2025-09-01", False, False),  # asked, told
        (
            "User: what car do I have again? Thanks, off to the shops.\nAssistant: A Corolla.",
            "2025-09-01",
            False,
            False,
        ),
        ("User: The insurance on the Corolla is 140 a month.", "2025-09-01", False, False),  # the current value
        ("User: The old Fiesta is still in my dad's garage.", "2025-09-01", False, False),  # only an old value named
    ],
)
def test_the_ledger_steps_aside_only_for_a_newer_statement_of_the_persons_own(snippet, date, newer, named):
    """outdated(): a hit said after the current statement, about its subject (vectors alike), in the
    person's own words, not a question, with a word of change or of the subject — not a repeat of the
    current value nor a mention of an old one. One naming the subject by its cue and a name the fact
    never had is newer whatever its vector (`named`)."""
    fact = facts([st_("vehicle", "a Ford Fiesta", "2025-01-01"), st_("vehicle", "a Toyota Corolla", "2025-05-01")])[
        "vehicle"
    ]
    period = fact.periods[-1]
    same = np.ones(4, dtype=np.float32)
    hits = [Hit("sessions/x.jsonl", "sessions", 2, 3, 0.8, snippet, date=date)]
    assert outdated(hits, {0: same}, same / np.linalg.norm(same), fact, period) is newer
    assert outdated(hits, {0: -same}, same / np.linalg.norm(same), fact, period) is named  # vectors apart
    if newer:  # the newer hit leads, what shows the ledger's statements after it, marked
        both = [Hit("sessions/y.jsonl", "sessions", 2, 2, 0.9, "User: a Toyota Corolla", date="2025-05-01"), hits[0]]
        found = newer_hit(both, {0: same, 1: same}, same / np.linalg.norm(same), fact, period)
        assert found is not None and found[1] is named  # named: it may lead; else the ledger only steps aside
        out = newer_first(both, found[0], fact)
        assert out[0].snippet == snippet and out[1].superseded_by == date and out[0].score >= out[1].score


def test_a_newer_hit_alike_to_the_hit_of_the_statement_steps_the_ledger_aside():
    """The extractor missed the newer statement (or gave it another subject): a newer hit in the person's
    own words, with a word of change, whose stored vector is close to that of the hit showing the
    ledger's statement and which shares a word of substance with it, is about the same thing — however
    far the statement's own sentence embeds from it. Close in vector but sharing no word: not."""
    said = "The keypad code for my lock-up garage is 2719."
    stated = Statement(
        "code:garage", "2719", "2025-03-05T10:00:00.000Z", "sessions/a.jsonl", 2, 2, said, "extractor", False
    )
    fact = facts([stated])["code:garage"]
    period = fact.periods[-1]
    shown = Hit(
        "sessions/a.jsonl",
        "sessions",
        2,
        2,
        1.0,
        "User: The keypad code for my lock-up garage is 2719.",
        date="2025-03-05",
    )
    newer = Hit("sessions/b.jsonl", "sessions", 2, 3, 0.8, "", date="2025-11-16")
    near, far = np.array([1.0, 0.2, 0.0, 0.0], dtype=np.float32), np.array([0.0, 0.0, 1.0, 0.0], dtype=np.float32)
    statement = np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32)  # the sentence alone: far from both hits
    for words, vec, found in [
        ("User: The garage keypad got reset; the new number is 0804.", near, True),
        ("User: The garage keypad got reset; the new number is 0804.", far, False),  # vectors apart
        ("User: Booked a new haircut for Friday.", near, False),  # no word of substance shared
        ("User: What's the garage keypad number again?", near, False),  # a question states nothing
    ]:
        hits = [shown, newer._replace(snippet=words)]
        got = newer_hit(hits, {0: near, 1: vec}, statement, fact, period)
        assert (got == (1, False)) is found, (words, got)


def test_a_tie_is_not_undone_for_a_newer_statement_of_the_same_thing_that_does_not_name_it():
    """The arrangement put a newer statement of the same subject level with an older one naming what the
    question names ("Spanish"): the newer, in the person's own words and naming a place it names
    ("the Athenaeum"), keeps its place. One sharing nothing with it (another topic that happened to tie)
    gives way, as a hit where the person only asks or is told does."""
    older = hit("User: Started a Spanish class at the Athenaeum on Tuesdays.", 1.0, "2025-04-17")
    newer = hit("User: Our group at the Athenaeum moves to Thursday nights from next week.", 1.0, "2025-09-21")
    older = older._replace(superseded_by="2025-09-21")
    out = prefer_statements("Which night is my Spanish class?", [newer, older])
    assert [r.date for r in out] == ["2025-09-21", "2025-04-17"] and out[1].superseded_by == "2025-09-21"
    elsewhere = hit("User: Heading to my parents' for Christmas with Mateo.", 1.0, "2025-12-20")
    out = prefer_statements("Which night is my Spanish class?", [elsewhere, older._replace(superseded_by="2025-12-20")])
    assert [r.date for r in out] == ["2025-04-17", "2025-12-20"] and out[0].superseded_by is None


async def test_statement_vectors_dropped_past_the_cap_mid_pick_never_fail_the_pick(monkeypatch):
    """The kept vectors are dropped once they pass MAX_VECTORS; a pick needing some kept and some new ones
    then has to answer from what it holds (it raised KeyError, and the search lost the ledger's lead)."""
    from gateway.memory.embeddings.local import LocalEmbeddings
    from gateway.memory.ledger import recall as recall_mod
    from gateway.memory.ledger.recall import embed_with

    embed = embed_with(LocalEmbeddings())
    assert embed is not None
    ss = [st_(f"code:{q}", f"{q}-{i}", f"2025-0{1 + i}-01") for i, q in enumerate(["wifi", "shed", "gate", "bike"])]
    question = "What's the gate code now?"
    want = await LedgerRecall(embed).pick(question, facts(ss), NOW)
    assert want is not None and want[0].subject == "code:gate" and want[1].value == "gate-2"
    monkeypatch.setattr(recall_mod, "MAX_VECTORS", 3)
    recall = LedgerRecall(embed)
    assert await recall.pick(question, facts(ss[:2]), NOW) is not None  # the question and two statements: 3 kept
    got = await recall.pick(question, facts(ss), NOW)  # 3 kept + 2 new > 3: the kept ones dropped meanwhile
    assert got is not None and got[0].subject == "code:gate" and got[1].value == "gate-2"


async def test_a_subject_with_thousands_of_facts_weighs_a_bounded_few_and_still_finds_the_named_one():
    """An archive can hold thousands of one subject's facts (every code ever said): a question embeds at most
    RANK_FACTS facts' latest RANK_SAYINGS sayings (it embedded them all, 9.8 s p95 at 100k chunks), the
    one whose qualifier it names among them; the kept vectors are bounded, the least recently used go."""
    from gateway.memory.embeddings.local import LocalEmbeddings
    from gateway.memory.ledger import recall as recall_mod
    from gateway.memory.ledger.recall import RANK_FACTS, RANK_SAYINGS, embed_with

    inner = embed_with(LocalEmbeddings())
    assert inner is not None
    asked: list[int] = []

    async def embed(texts: list[str]) -> np.ndarray:
        asked.append(len(texts))
        return await inner(texts)

    things = [f"locker{i}" for i in range(2000)] + ["shed"]
    ss = [st_(f"code:{t}", f"{1000 + i}", "2025-01-01") for i, t in enumerate(things)]
    ss += [st_("code:shed", f"77{i:02d}", f"2025-0{2 + i}-01") for i in range(8)]  # said again and again
    recall = LedgerRecall(embed)
    got = await recall.pick("What's the shed code now?", facts(ss), NOW)
    assert got is not None and got[0].subject == "code:shed" and got[1].value == "7707"
    assert sum(asked) <= 1 + RANK_FACTS * RANK_SAYINGS, asked
    assert len(recall._vectors) <= recall_mod.MAX_VECTORS


async def test_the_current_statement_and_its_restatements_are_never_superseded_and_old_values_by_their_successor():
    recall = LedgerRecall(None)
    ss = [
        st_("code:storage", "4826", "2025-04-12"),
        st_("code:storage", "1593", "2025-07-19"),
        st_("code:storage", "7340", "2025-11-12"),
    ]
    fact, period, q = await recall.pick("What's my storage code?", facts(ss), NOW)  # type: ignore[misc]
    hits = [
        # the current statement, marked by the arrangement as superseded by a later restatement of it
        hit("User: 7340", 0.9, "2025-11-12T10:00:00.000Z", superseded_by="2025-12-03T10:00:00.000Z"),
        hit("User: what's the storage code? Assistant: it is 7340.", 0.8, "2025-12-03T10:00:00.000Z"),
        hit("Assistant: Your storage unit code is 4826.", 0.7, "2025-05-22T10:00:00.000Z", superseded_by="x"),
        hit("User: my code is 1593 now", 0.6, "2025-07-20T10:00:00.000Z", superseded_by="2025-12-03T10:00:00.000Z"),
    ]
    hits[0] = hits[0]._replace(path="sessions/2025-11-12.jsonl")
    out = lead(hits, fact, period, q, 5)
    assert out[0].fact is not None and out[0].fact.value == "7340" and out[0].superseded_by is None
    assert out[1].superseded_by is None  # says the current value
    # each old value superseded by the one that came after it, not by a restatement
    assert [(r.superseded_by or "")[:10] for r in out[2:]] == ["2025-07-19", "2025-11-12"]
    # asked about an earlier time: the value then, marked superseded when it stopped holding
    fact, period, q = await recall.pick("What was my storage code originally?", facts(ss), NOW)  # type: ignore[misc]
    out = lead([], fact, period, q, 5)
    assert out[0].fact is not None and out[0].fact.value == "4826" and (out[0].superseded_by or "")[:10] == "2025-07-19"


_VET = facts(
    [Statement("vet", "Wensum Vets", "2025-01-01T00:00:00Z", "sessions/a.jsonl", 2, 2, "Our vet is Wensum Vets.")]
)["vet"]


def _vet_newer(snippet: str) -> tuple[int, bool] | None:
    same = np.ones(4, dtype=np.float32)
    ledger_hit = Hit(
        "sessions/a.jsonl", "sessions", 2, 2, 0.9, "User: Our vet is Wensum Vets.", date="2025-01-01T00:00:00Z"
    )
    new = Hit("sessions/b.jsonl", "sessions", 2, 2, 0.5, snippet, date="2025-06-01T00:00:00Z")
    both = [ledger_hit, new]
    return newer_hit(both, {0: same, 1: -same}, same / np.linalg.norm(same), _VET, _VET.periods[-1])


@pytest.mark.parametrize(
    "snippet",
    [
        "User: Took Pepper to the vet on Monday for her jabs.",
        "User: The vet appointment is at 3pm tomorrow.",
        "User: The vet said Pepper needs to lose 2kg.",
        "User: The vet is at 10:30 on Friday.",
    ],
)
def test_a_routine_mention_of_the_subjects_cue_is_no_new_value(snippet):
    """newer_hit(): a weekday, a time, a quantity or a name that is not in value position after the cue
    ("the vet said Pepper…") says nothing new of the vet: with the vectors apart, nothing is newer."""
    assert _vet_newer(snippet) is None


def test_a_name_in_value_position_after_the_cue_is_a_new_value():
    assert _vet_newer("User: Our vet is now Riverside Animal Clinic.") == (1, True)


@settings(max_examples=60, deadline=None)
@given(
    event=st.sampled_from(
        [
            "on Monday",
            "appointment is at 3pm",
            "said Pepper needs to lose 2kg",
            "on Friday at 10:30",
            "bill was 120",
            "visit in March",
            "called about Pepper's jabs",
        ]
    ),
    lead_in=st.sampled_from(["Took Pepper to the vet", "The vet", "Saw the vet", "Booked the vet"]),
)
def test_property_an_event_at_the_vet_never_names_a_new_vet(event, lead_in):
    assert _vet_newer(f"User: {lead_in} {event}.") is None


def test_a_name_after_the_cue_and_here_is_a_new_value():
    assert _vet_newer("User: The vet here is Ana Moreira, she's lovely.") == (1, True)


@pytest.mark.parametrize(
    ("question", "asked", "event"),
    [
        ("What did I eat before the gym?", [], ["membership"]),
        ("What did I eat before I moved?", [], ["home"]),
        ("Where did I work before I joined the choir?", ["employer"], ["membership"]),
        ("What car did I drive before the Tesla?", ["vehicle"], ["vehicle"]),
    ],
)
def test_a_before_event_names_its_own_subject_not_what_is_asked(question, asked, event):
    """subjects_of(): "before the gym" is when, not what — the membership is the event's subject
    (event_subjects), and a meal asks nothing of it."""
    assert subjects_of(question) == asked and event_subjects(question) == event

    async def go() -> None:
        assert await LedgerRecall(None).subjects(question) == asked

    asyncio.run(go())
