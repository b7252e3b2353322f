"""The offline extractor's values and forms (memory/ledger/extract.py, values.py): a statement's value is
the span a person reads in their profile ("home: Glasgow"), not the sentence it was said in; statements
without the cue words are found by the documented forms; a question, a wish and someone else's life
state nothing. Table-driven, with general English sentences (none from the benchmark people)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.memory.index.chunking import make_chunk
from gateway.memory.ledger.extract import from_chunks, message_statements


def said(message: str) -> dict[str, str]:
    """subject → value ("<ended>" for an ending) of one message."""
    return {s: ("<ended>" if e else v) for s, v, e in message_statements(message)}


@pytest.mark.parametrize(
    ("message", "subject", "value"),
    [
        # a place
        ("Actually I now live in Glasgow since the spring, near the park.", "home", "Glasgow"),
        ("We moved to a flat in Leith last month.", "home", "Leith"),
        ("Got the keys today, officially a Galway resident now.", "home", "Galway"),
        ("First night in the new house in Harrogate, boxes everywhere.", "home", "Harrogate"),
        ("I grew up in Cork, by the river.", "hometown", "Cork"),
        ("I'm based in Aberdeen these days.", "home", "Aberdeen"),
        ("Ines and I are an item now.", "partner", "Ines"),
        # a name
        ("I've been seeing a guy named Felix for a few weeks.", "partner", "Felix"),
        ("Ines and I made it official last night!", "partner", "Ines"),
        ("Ravi and I are official now.", "partner", "Ravi"),
        ("I met someone at the climbing wall. Her name's Sunniva and she's lovely.", "partner", "Sunniva"),
        ("My new manager is Gwen Hughes.", "manager", "Gwen Hughes"),
        ("I report to Dominik since the reorg.", "manager", "Dominik"),
        ("We adopted a kitten! She's called Biscuit.", "pet", "Biscuit"),
        ("My dog Pepper hates the rain.", "pet", "Pepper"),
        ("Our dentist is Dr Lindqvist on Mill Lane.", "dentist", "Dr Lindqvist"),
        ("I started a blog called Slow Rivers.", "project:blog", "Slow Rivers"),
        ("We renamed our podcast to Deep Cuts.", "project:podcast", "Deep Cuts"),
        # a job at an employer
        ("I'm a staff nurse at Royal Infirmary.", "employer", "staff nurse at Royal Infirmary"),
        ("Started at Ferrovia on Monday as a data analyst.", "employer", "data analyst at Ferrovia"),
        ("Got a new job! I'm going to be head chef at Lantern House.", "employer", "head chef at Lantern House"),
        ("I work for Halden Logistics.", "employer", "Halden Logistics"),
        # a code, a number, a date
        ("The wifi password is heron-4-lake, can you keep it for me?", "code:wifi", "heron-4-lake"),
        ("The gate code changed, it's now 5521.", "code:gate", "5521"),
        ("My new number is 07700 900123.", "number", "07700 900123"),
        ("Booked a dental check-up for Friday 14 March at 9:30am.", "appointment:dental", "Friday 14 March at 9:30am"),
        ("Our band practice is on Wednesdays now.", "schedule:band", "Wednesdays"),
        ("I joined the choir in May.", "membership:choir", "choir"),
        ("Signed up at Ironworks Gym.", "membership:ironworks", "Ironworks Gym"),
        # a diet, an allergy, a dose, a vehicle
        ("I've gone vegan since January.", "diet", "vegan"),
        ("Turns out I'm allergic to kiwi.", "allergy", "kiwi"),
        ("Found out I have a peanut allergy.", "allergy", "peanut"),
        ("The doctor upped my dose to 75 mg of sertraline.", "medication", "sertraline 75 mg"),
        ("I drive a red Fiat Panda these days.", "vehicle", "red Fiat Panda"),
        ("Finally bought a car — a second-hand 2017 Toyota Yaris.", "vehicle", "second-hand 2017 Toyota Yaris"),
        ("I'm selling my car, the 2010 silver Golf.", "vehicle", "2010 silver Golf"),
        ("Moving day at last: we're in Stockbridge now, a flat above a bakery.", "home", "Stockbridge"),
        ("I've been going on dates with a man called Tobias.", "partner", "Tobias"),
        ("We rescued a lurcher last weekend, his name is Biscuit.", "pet", "Biscuit"),
        (
            "Treated myself to a bike: bought an e-bike, a Gazelle Ultimate, for the hills.",
            "vehicle",
            "Gazelle Ultimate",
        ),
        ("I work as a physio at the Meadowbank clinic.", "employer", "physio at Meadowbank"),
        ("I've been promoted to senior editor!", "role", "senior editor"),
        ("Registered with a GP at last: my doctor is Dr Okafor.", "doctor", "Dr Okafor"),
        ("The combination on my bike lock is 2208.", "code:bike", "2208"),
        ("Help me remember: the shed code is 4471.", "code:shed", "4471"),
        ("I take 20mg of omeprazole every morning.", "medication", "omeprazole 20mg"),
        ("I switched to a Vodafone contract last month.", "phone", "Vodafone"),
        ("I'm lactose intolerant, it turns out.", "allergy", "lactose"),
        ("I volunteer coaching the under-9s on Saturdays.", "coaching", "under-9s"),
        ("Football training moved to Thursday nights.", "schedule:football", "Thursday nights"),
        ("The cabin wifi password is moose.", "code:cabin", "moose"),
        ("The wifi password is [redacted: password], keep it.", "code:wifi", "[redacted: password]"),
        (
            "My wifi password is the name of my dog.",
            "code:wifi",
            "the name of my dog",
        ),  # no code word: as said  # a request to keep it states it
        ("Remind me: my new gate code is 9031.", "code:gate", "9031"),
        ("I joined a hiking club — Pentland Ramblers, out every Sunday.", "membership:hiking", "Pentland Ramblers"),
        # endings close
        ("Tobias and I ended things, it was mutual.", "partner", "<ended>"),
        ("Sam and I went our separate ways in June.", "partner", "<ended>"),
        ("Lena and I broke up on Sunday.", "partner", "<ended>"),
        ("I quit the choir last week.", "membership:choir", "<ended>"),
        # a thing named as it was ("my old car") is passed over for the one named after it
        ("My old car was a Ford, now I drive a Toyota Corolla.", "vehicle", "Toyota Corolla"),
    ],
)
def test_a_statement_s_value_is_the_span_that_names_it(message, subject, value):
    assert said(message).get(subject) == value, said(message)


def test_of_a_subject_said_twice_in_a_message_the_value_that_names_something_wins():
    got = said("Accepted an offer! I'm going to be a site engineer at Kestrel Build from June.")
    assert got["employer"] == "site engineer at Kestrel Build"


@pytest.mark.parametrize(
    "message",
    [
        "Who am I going out with these days?",
        "Do you remember where I live now?",
        "What's the gate code again?",
        "I might move to Galway next year.",
        "Thinking about getting a kitten, maybe called Biscuit.",
        "If I got the job at Ferrovia I'd be a data analyst.",
        "My sister moved to Leeds last month.",
        "My brother and his wife are official now, they got engaged.",
        "She lives in Harrogate with her dog.",
        "The ER doctor said it was nothing.",  # a doctor seen once is not the person's doctor
        "He wants me to come to a football game next week.",  # someone else's game is no project
        "They use a banking app at work.",
        "Help me plan a dinner for six, all vegetarian.",  # a request asks
        "Someone tried to steal my bike, so I changed the lock.",  # no vehicle named
        "Can you remind me what my doctor said?",
        "Dana had the baby, a boy, born Friday night.",  # a day said bare is no activity's
        "Reminder: the old wifi otter-blue-7 is still on the printer's settings.",  # a value as it was
        "My previous landlord still has my deposit.",
        "My ex-boss Karen called about the reference.",
    ],
)
def test_a_question_a_wish_and_someone_else_s_life_state_nothing(message):
    assert said(message) == {}, said(message)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_message_gives_short_values_and_a_question_none(text):
    for subject, value, ending in message_statements(text):
        assert subject and len(value) <= 120 and (value == "" if ending else value.strip() == value)
    assert message_statements(text.replace(".", " ").replace("!", " ").replace("\n", " ").rstrip() + "?") == []


def _chunk(lines: list[str], date: str, first: int = 2):
    """A transcript chunk of these messages (user, assistant, …), the first on line `first`."""
    text, spans, off = "", [], 0
    for i, m in enumerate(lines):
        label = ("User: " if i % 2 == 0 else "Assistant: ") + m
        spans.append((first + i, 0, off, off + len(label)))
        text += label + "\n"
        off += len(label) + 1
    return make_chunk(first, first + len(lines) - 1, text, tuple(spans), "", date)


def test_the_statement_keeps_the_message_as_evidence_and_the_span_as_value():
    chunk = _chunk(
        ["Moving day done! I now live in Portree, right by the harbour.", "Congratulations!"],
        "2025-04-02T09:00:00.000Z",
    )
    [s] = from_chunks("sessions/a.jsonl", [chunk], "2024-01-01T00:00:00.000Z")
    assert (s.subject, s.value, s.start_line) == ("home", "Portree", 2)
    assert s.text.startswith("Moving day done! I now live in Portree")


@settings(max_examples=50, deadline=None)
@given(st.permutations(range(4)))
def test_a_file_s_statements_do_not_depend_on_the_order_its_chunks_come_in(order):
    messages = [
        ["I live in Leeds now.", "Noted."],
        ["Actually we moved to Whitby, and my new manager is Gwen.", "Nice."],
        ["The shed code is 4471.", "Saved."],
        ["I drive a red Fiat Panda.", "Vroom."],
    ]
    chunks = [_chunk(pair, f"2025-0{i + 1}-01T00:00:00.000Z", 2 + 2 * i) for i, pair in enumerate(messages)]
    first = from_chunks("sessions/a.jsonl", chunks, "2024-01-01T00:00:00.000Z")
    again = from_chunks("sessions/a.jsonl", [chunks[i] for i in order], "2024-01-01T00:00:00.000Z")
    assert again == first and [s.start_line for s in first] == sorted(s.start_line for s in first)


PREFILTER_WORDS = (
    "I we he she they his her their him them he's she's they're Noor's it's if would might maybe perhaps thinking of "
    "about considering plan planning to want wants wanted hope hoping wish someday one day should i could not sure "
    "wondering tempted broke up split separated divorced quit left the my no longer any more anymore stopped "
    "cancelled canceled gave moved out sold passed away died retired ended longer went our separate ways x"
).split()


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PREFILTER_WORDS), min_size=1, max_size=10).map(" ".join))
def test_the_word_prefilters_never_skip_what_their_expression_would_match(text):
    """An expression is searched only when one of its first words is in the clause (extract.py): each match
    holds one of them, so the prefilter never changes what is found."""
    from gateway.memory.ledger import extract as ex

    low = text.lower()
    words = frozenset(ex._WORDS.findall(low))
    if ex._NOT_YET.search(text):
        assert not words.isdisjoint(ex._NOT_YET_WORDS), text
    if ex.ENDING.search(text):
        assert not words.isdisjoint(ex.ENDING_WORDS), text
    if ex._OTHERS.search(text):
        assert not words.isdisjoint(ex._OTHERS_WORDS) or "'s" in low, text


def test_a_longer_cue_names_its_own_subject_not_a_shorter_one_inside_it():
    """ "my job title" is the role's cue, not the employer's "my job" (lexicon.py)."""
    from gateway.memory.ledger.lexicon import BY_NAME

    assert BY_NAME["employer"].cues.search("What's my job title now?") is None
    assert BY_NAME["role"].cues.search("What's my job title now?") is not None
    assert BY_NAME["employer"].cues.search("I love my job at the bakery.") is not None


def test_a_masked_secret_said_again_is_a_new_value_not_the_old_one_repeated():
    from gateway.memory.ledger.facts import facts
    from gateway.memory.ports import Statement

    def pin(day: str) -> Statement:
        return Statement(
            "code:card",
            "[redacted: password]",
            f"{day}T10:00:00.000Z",
            f"sessions/{day}.jsonl",
            2,
            2,
            "My PIN is [redacted: password]",
            "extractor",
            False,
        )

    fact = facts([pin("2025-01-01"), pin("2025-06-01")])["code:card"]
    assert fact.current is not None and fact.current.statement.path == "sessions/2025-06-01.jsonl"
    assert [p.until for p in fact.periods] == ["2025-06-01T10:00:00.000Z", None]
