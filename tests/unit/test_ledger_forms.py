"""The offline extractor's forms without the obvious cue word (issue 48's coverage): a home said through a
thing in it or a dwelling taken, endings without the subject's word, makes and models named alone,
plurals and variants of a subject's word, a relationship without a cue word, attributes of things as
subjects of their own, and codes said as what a thing "opens with". Each class with many phrasings,
the ones it must not take, and the properties that hold for any filling of its forms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.memory.index.chunking import make_chunk
from gateway.memory.ledger.brands import DEVICES, VEHICLE_MAKES, VEHICLE_MODELS, device_kind
from gateway.memory.ledger.extract import _may_state, from_chunks, message_statements, statements_of


def said(message: str) -> dict[str, tuple[str, bool]]:
    """subject → (value, ending) of one user message, as the index reads it (the fast path first)."""
    assert _may_state(message), message
    return {subject: (value, ending) for subject, value, ending in message_statements(message)}


@pytest.mark.parametrize(
    ("message", "value"),
    [
        ("My bed is now in a tiny flat in Leith.", "Leith"),
        ("The removal van came; my bed is now in a tenement in Marchmont, Edinburgh.", "Marchmont, Edinburgh"),
        ("All my boxes are in the new place in Hove now.", "Hove"),
        ("Our stuff is all in Whitby now.", "Whitby"),
        ("Got the keys, officially a Norwich resident now.", "Norwich"),
        ("I rent a room in a shared house in Levenshulme, Manchester.", "Levenshulme, Manchester"),
        ("Signed for a one-bed flat in Hillsborough, Sheffield, move-in is the 28th.", "Hillsborough, Sheffield"),
        ("Signed the lease on a flat in Didsbury.", "Didsbury"),
        ("I'm now renting a studio in Clapham.", "Clapham"),
        ("We bought a little cottage near Hexham!", "Hexham"),
        ("Just moved to Leeds.", "Leeds"),
        ("Finally relocated to Cardiff after months of boxes.", "Cardiff"),
    ],
)
def test_a_home_said_through_a_thing_or_a_dwelling_taken(message, value):
    assert said(message)["home"] == (value, False)


@pytest.mark.parametrize(
    "message",
    [
        "My things are in the car.",  # no place named: no home
        "I bought a house plant.",
        "My sister moved to Leeds.",  # someone else's move
        "I might rent a flat in Bristol next year.",  # a plan
    ],
)
def test_a_thing_somewhere_without_a_place_is_no_home(message):
    assert "home" not in {s for s, _, _ in message_statements(message)}


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        ("We called it off.", "partner"),
        ("Called it off with Sam last night.", "partner"),
        ("Tobias and I called it off on Friday.", "partner"),
        ("We broke it off in March.", "partner"),
        ("We went our separate ways.", "partner"),
        ("I handed in my notice.", "employer"),
        ("Handed in my notice today, four weeks left.", "employer"),
        ("I resigned from Vantage last week.", "employer"),
        ("I got made redundant.", "employer"),
        ("Got laid off from the warehouse.", "employer"),
        ("My last day at Acme was Friday.", "employer"),
        ("Today was my last day at Initech.", "employer"),
        ("I walked out of my job at Tesco.", "employer"),
        ("Cancelled my gym membership and sold the Civic.", "vehicle"),
        ("I'm single again.", "partner"),
        ("She dumped me last night.", "partner"),
        ("We broke off the engagement.", "partner"),
        ("I retired from teaching last summer.", "employer"),
        ("Finally retired after 30 years at the council.", "employer"),
        ("My contract at Deloitte ended on Friday.", "employer"),
        ("I'm between jobs at the moment.", "employer"),
        ("We had to put Pepper to sleep yesterday.", "pet"),
    ],
)
def test_an_ending_without_the_subjects_word_closes_it(message, subject):
    assert said(message)[subject] == ("", True)


@pytest.mark.parametrize(
    "message",
    [
        "We adopted a retired greyhound today!",  # "retired" of the dog
        "I live in a single room in Leeds now.",  # "single" of the room
        "My contract at Deloitte starts on Monday.",  # a work contract is no phone contract, and not ended
        "I dumped my stuff in the new flat in Leeds.",  # "dumped" of things, not of a partner
        "A piece broke off my bike, still love it.",
        "We had to put the kids to bed early.",
    ],
)
def test_an_ending_word_said_of_something_else_closes_nothing(message):
    found = {s: e for s, _, e in message_statements(message)}
    assert not any(found.values()) and "phone" not in found, found


def test_a_change_that_says_an_ending_word_is_no_ending():
    assert said("I left Acme and started at Globex.")["employer"][1] is False
    assert said("Got offered a senior engineer position at Brightwater Civils. Accepted this morning!")["employer"] == (
        "senior engineer at Brightwater Civils",
        False,
    )


@pytest.mark.parametrize(
    ("message", "subject", "value"),
    [
        ("Picked up a secondhand Leaf.", "vehicle", "secondhand Leaf"),
        ("I picked up a secondhand Niro on Saturday.", "vehicle", "secondhand Niro"),
        ("Traded the old Fiesta for a Mazda MX-5.", "vehicle", "Mazda MX-5"),
        ("My new wheels are a Kia Ceed.", "vehicle", "Kia Ceed"),
        ("I drive an old Fiat Panda, held together by rust.", "vehicle", "old Fiat Panda"),
        ("I now drive a Tesla.", "vehicle", "Tesla"),
        ("We bought a Skoda Octavia estate last week.", "vehicle", "Skoda Octavia estate"),
        ("Treated myself: bought a Brompton for the commute.", "vehicle", "Brompton"),
        ("Just bought an iPhone 15.", "device:phone", "iPhone 15"),
        ("I got a new phone, a Pixel 8.", "device:phone", "Pixel 8"),
        ("Upgraded to an iPhone 15 because work wanted it.", "device:phone", "iPhone 15"),
        ("Work gave me a ThinkPad, so I bought a MacBook Air for home.", "device:laptop", "MacBook Air"),
        ("I finally got a Kindle Paperwhite.", "device:e-reader", "Kindle Paperwhite"),
    ],
)
def test_a_make_or_model_named_alone_names_the_thing(message, subject, value):
    assert said(message)[subject] == (value, False)


@pytest.mark.parametrize(
    "message",
    [
        "Ford's profits were in the news again.",  # nobody's
        "I read an article about Tesla.",  # nothing the person has
        "I raked a leaf pile in the garden.",  # a make is written capitalised
        "My mum has a Golf.",  # someone else's
    ],
)
def test_a_make_said_in_passing_names_no_vehicle(message):
    assert not {s for s, _, _ in message_statements(message)} & {"vehicle", "device:phone"}


@pytest.mark.parametrize(
    ("message", "subject", "value"),
    [
        ("They changed the locker codes again, mine is 3317 from today.", "code:locker", "3317"),
        ("The pin numbers for the card are 2231 now.", "code:card", "2231"),
        ("Bank pins are 8812 now.", "code:bank", "8812"),
        ("New hospital, new locker: it opens with 8093 now.", "code:locker", "8093"),
        ("The garage opens with 5566 now.", "code:garage", "5566"),
        ("It opens with 4410.", "code", "4410"),
        ("Mum's care agency had the codes changed: the key safe is 6042 from today.", "code:safe", "6042"),
        ("My phone numbers changed, the mobile is 07700 900123.", "number", "07700 900123"),
        ("The alarm is 4455 now.", "code:alarm", "4455"),
        ("Mum's alarm is now 7781.", "code:alarm", "7781"),
        ("The gate's 2290 these days.", "code:gate", "2290"),
    ],
)
def test_plurals_variants_and_what_a_thing_opens_with(message, subject, value):
    assert said(message)[subject] == (value, False)


def test_opening_with_anything_but_a_number_is_no_code():
    assert statements_of("I open with a joke at every talk.") == []
    assert statements_of("The shop opens with a sale on Monday.") == []


@pytest.mark.parametrize(
    ("message", "value"),
    [
        ("Sam and I made it official.", "Sam"),
        ("Met someone at the pottery class, Ravi.", "Ravi"),
        ("Met someone at a wedding — Ines.", "Ines"),
        ("I met someone at the climbing wall, Hamid. Three dates so far.", "Hamid"),
        ("Been seeing Tom for a month.", "Tom"),
        ("Started seeing Priyanka in June.", "Priyanka"),
        ("Moved in with Dara.", "Dara"),
        ("I've been with Maya for two years.", "Maya"),
        ("Dinner with Grace, we've been together since last summer.", "Grace"),
        ("My other half Sam is on nights this week.", "Sam"),
    ],
)
def test_a_relationship_without_a_cue_word(message, value):
    assert said(message)["partner"] == (value, False)


@pytest.mark.parametrize(
    ("message", "subject", "value"),
    [
        ("The dog's vet is now Riverside Vets.", "vet", "Riverside Vets"),
        ("Biscuit's new vet is Crookes Exotic Pets, they know tortoises.", "vet", "Crookes Exotic Pets"),
        ("Our cat Pickle is registered at Wensum Vets on Dereham Road.", "vet", "Wensum Vets"),
        ("The flat's landlord is Mr Patel.", "landlord", "Mr Patel"),
        ("The house's landlady is Mrs Dhillon, she lives two doors down.", "landlord", "Mrs Dhillon"),
        ("The car's colour is red now.", "detail:car colour", "red"),
        ("The car's colour is a dull grey and I hate it.", "detail:car colour", "grey"),
        ("I had the car resprayed dark green in the end.", "detail:car colour", "dark green"),
        ("The colour of my bike is now matte black.", "detail:bike colour", "matte black"),
        ("I painted the front door yellow.", "detail:front door colour", "yellow"),
        ("Repainted Loon this weekend! She's forest green now.", "detail:loon colour", "forest green"),
        ("My new reg plate is KX19 ABC.", "detail:vehicle registration", "KX19 ABC"),
        ("Moved up to the improvers group in Spanish.", "course:spanish", "improvers group"),
        ("Started Spanish evening classes at the college, beginner level.", "course:spanish", "beginner level"),
    ],
)
def test_an_attribute_of_a_thing_is_a_subject_of_its_own(message, subject, value):
    assert said(message)[subject] == (value, False)


@pytest.mark.parametrize(
    "message",
    [
        "I love the colour blue.",  # a detail of nothing
        "The teacher said my past tense is finally decent.",  # no teacher named
        "I was offered a job at Google but turned it down.",  # an offer not taken
        "Big news: I got offered a job in Edinburgh and I said yes.",  # taken, but no employer named
    ],
)
def test_forms_that_name_nothing_give_no_junk_value(message):
    found = {s.split(":")[0] for s, _, _ in message_statements(message)}
    assert not found & {"detail", "teacher", "employer"}, message_statements(message)


@pytest.mark.parametrize(
    ("message", "value"), [("I went freelance in March.", "freelance"), ("I'm self-employed now.", "self-employed")]
)
def test_work_without_an_employer(message, value):
    assert said(message)["employer"] == (value, False)


def test_device_kinds():
    assert [device_kind(c) for c in ("iPhone 15", "new laptop", "Apple Watch", "my smartwatch", "iPads")] == [
        "phone",
        "laptop",
        "watch",
        "watch",
        "tablet",
    ]


def test_a_transcript_with_these_forms_gives_dated_statements_with_their_lines():
    messages = [
        "User: My bed is finally in the new place, a terrace in Heworth, York.",
        "Assistant: Welcome to York!",
        "User: Picked up a secondhand Niro on Saturday.",
        "Assistant: Nice.",
        "User: Handed in my notice at Halden today.",
    ]
    text, spans, off = "", [], 0
    for i, m in enumerate(messages):
        spans.append((i + 2, 0, off, off + len(m)))
        text += m + "\n"
        off += len(m) + 1
    chunk = make_chunk(2, len(messages) + 1, text, tuple(spans), "", "2025-07-27T21:30:00.000Z")
    got = [(s.subject, s.value, s.ending, s.start_line) for s in from_chunks("sessions/x.jsonl", [chunk], "")]
    assert got == [
        ("home", "Heworth, York", False, 2),
        ("vehicle", "secondhand Niro", False, 4),
        ("employer", "", True, 6),
    ]


# -- properties: any filling of the forms ---------------------------------------------------------

_PLACE = st.sampled_from(["Leeds", "Heworth", "Mile End", "Dundee", "Portobello", "St Ives", "Bath", "Didsbury"])
_NAME = st.sampled_from(["Sam", "Ruth", "Hamid", "Ines", "Tomasz", "Aisha", "Jo", "Oluwaseun"])
_CODE = st.from_regex(r"[1-9][0-9]{3,5}", fullmatch=True)
_MODEL = st.sampled_from(VEHICLE_MAKES + VEHICLE_MODELS)
_DEVICE = st.sampled_from([d.replace("-", " ") for d in DEVICES])

# (form, its filling, the subject it states, the value it gives for a filling)
_FORMS = [
    ("My bed is now in a flat in {}.", _PLACE, "home", str),
    ("Got the keys, officially a {} resident now.", _PLACE, "home", str),
    ("Signed for a two-bed house in {}, move-in is Friday.", _PLACE, "home", str),
    ("{} and I made it official.", _NAME, "partner", str),
    ("Met someone at a gig, {}.", _NAME, "partner", str),
    ("Been seeing {} for a few weeks.", _NAME, "partner", str),
    ("The locker opens with {} now.", _CODE, "code:locker", str),
    ("The gate codes changed, mine is {}.", _CODE, "code:gate", str),
    ("Picked up a secondhand {}.", _MODEL, "vehicle", "secondhand {}".format),
    ("I just bought a {}.", _DEVICE, "device", str),
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_FORMS).flatmap(lambda f: st.tuples(st.just(f), f[1])))
def test_a_statement_with_the_subjects_value_gives_that_value(case):
    (form, _, subject, value), filling = case
    found = said(form.format(filling))
    if subject == "device":  # which device is its kind: "device:phone", "device:laptop"
        [subject] = [s for s in found if s == f"device:{device_kind(filling)}"]
    assert found.get(subject) == (value(filling), False), (form.format(filling), found)


_QUESTION_FORMS = st.sampled_from(
    [
        "Is my bed in the flat in {} now?",
        "Did {} and I make it official?",
        "What does the locker open with now, {}?",
        "Where did I pick up the secondhand {}?",
        "Have I called it off with {}?",
        "Did I hand in my notice at {}?",
        "Who is the dog's vet, {}?",
        "What colour is the car now, {}?",
        "Which phone numbers did {} give me?",
    ]
)


@settings(max_examples=300, deadline=None)
@given(_QUESTION_FORMS, st.one_of(_PLACE, _NAME, _CODE, _MODEL))
def test_a_question_in_these_forms_never_states_anything(form, filling):
    assert statements_of(form.format(filling)) == []


# The words of the new forms, for the lexicon's two shortcuts (a clause's hints, a text's fast path).
_FORM_WORDS = (
    "I my we the our and Sam bed stuff boxes is are now in at Leeds rent renting a room flat signed for lease on "
    "moved relocated to called broke it off handed notice resigned made redundant laid let go from last day walked "
    "out of job picked up secondhand Leaf Niro Land Rover CR-V iPhone Pixel MacBook new phone laptop traded "
    "codes pins pin numbers combinations opens with 8093 unlocks met someone been seeing started moved with "
    "together each other dog's car's flat's Biscuit's vet landlord colour painted repainted resprayed reg plate "
    "registration grey green offered position post said yes accepted moved up improvers group Spanish beginners "
    "alarm gate's 4455 other half had to put down sleep went freelance self-employed between jobs . "
    # round two
    "Harbour offered me top job took answer to she's he's one Dev stayed stays over again Home home's home "
    "behind left house registered booked him her Meadow Vets rode replaced stolen nicked scooter Trek : "
    "padlock keypad shed reset new number 4471 ; put for Monday 3 March swell up with hives from come out "
    "peanuts a day quits done barbecue trip Sofia Vodafone are Chorizo , rescue greyhound spaniel Eight months years "
    "together this today week Lucía Valentine's Niro's colour dark blue bike orange van white Hi Jo , data analyst Ferrovia"
).split()


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_FORM_WORDS), min_size=1, max_size=12).map(" ".join))
def test_every_new_cue_match_holds_one_of_its_hints(text):
    from gateway.memory.ledger.lexicon import SUBJECTS, hinted

    for variant in (text, text.capitalize()):
        found = {s.name for s in hinted(variant.lower())}
        for subj in SUBJECTS:
            if subj.cues.search(variant):
                assert subj.name in found, (subj.name, variant)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_FORM_WORDS), min_size=1, max_size=14).map(" ".join))
def test_the_fast_path_never_passes_over_a_new_form(text):
    from gateway.memory.ledger.extract import sentences

    if any(statements_of(s, text) for s in sentences(text)):
        assert _may_state(text), text


def test_an_ending_of_an_earlier_value_said_after_the_new_one_leaves_the_new_one_holding():
    from gateway.memory.ledger.facts import facts
    from gateway.memory.ports import Statement

    def st_(value: str, day: str, text: str, ending: bool = False) -> Statement:
        return Statement(
            "employer", value, f"{day}T10:00:00.000Z", f"sessions/{day}.jsonl", 2, 2, text, "extractor", ending
        )

    halden = st_(
        "bridge inspector at Halden Partners", "2025-02-02", "I work days as a bridge inspector at Halden Partners"
    )
    brightwater = st_("senior engineer at Brightwater Civils", "2025-06-22", "Accepted a post at Brightwater Civils")
    notice = st_("", "2025-06-29", "Handed in my notice at Halden today.", ending=True)
    fact = facts([halden, brightwater, notice])["employer"]
    assert fact.current is not None and fact.current.value == "senior engineer at Brightwater Civils"
    # an ending naming the value that holds, or nothing, closes it as before
    for text in ("Handed in my notice at Brightwater today.", "I handed in my notice."):
        closed = facts([halden, brightwater, notice._replace(said="2025-09-01T10:00:00.000Z", text=text)])
        assert closed["employer"].current is None, text


# Round two (issue 48, forms found on a person nobody tuned on): each class with several phrasings.
@pytest.mark.parametrize(
    ("message", "subject", "value"),
    [
        # a job taken said as an offer accepted, the employer the one who offered
        (
            "Big news: Northgate Dental offered me the practice manager job and I said yes.",
            "employer",
            "Northgate Dental",
        ),
        ("Harbour Foods in Leith offered me the head chef post, and I accepted.", "employer", "Harbour Foods"),
        ("Brightwater offered me the role and I took it.", "employer", "Brightwater"),
        # a self-introduction: "I'm <Name>, <role> at <Org>"
        (
            "Evening. I'm Ines, staff nurse at Leeds General, and I'm shattered.",
            "employer",
            "staff nurse at Leeds General",
        ),
        ("Hi, I'm Jo, a data analyst at Ferrovia.", "employer", "data analyst at Ferrovia"),
        # a boss said as who the person answers to (a "she/he" points to the name said before it)
        ("Priya Shah runs the lab now; she's the one I answer to.", "manager", "Priya Shah"),
        ("Tom Reilly owns the garage and he's the one I answer to these days.", "manager", "Tom Reilly"),
        ("I answer to Dana Moss now.", "manager", "Dana Moss"),
        # a partner said by an action that repeats
        ("Sam stayed over again.", "partner", "Sam"),
        ("Jonah from the climbing wall stayed over again last night.", "partner", "Jonah"),
        ("Ana stays over most weekends now.", "partner", "Ana"),
        ("I'm with Sofia now.", "partner", "Sofia"),
        # home said as the subject of its sentence, and a move said as the old home left behind
        ("Home is Brighton now.", "home", "Brighton"),
        ("Home's a flat above a bakery in Leith.", "home", "Leith"),
        ("So home is Leith these days.", "home", "Leith"),
        ("Left the old house in Headingley behind for a cottage near Otley.", "home", "Otley"),
        ("We left our studio in Hackney behind for a house in Margate.", "home", "Margate"),
        # a pet's practice said through what was done there
        ("Registered Biscuit at Meadow Vets today.", "vet", "Meadow Vets"),
        ("Booked her in with Parkside Vets for her jabs.", "vet", "Parkside Vets"),
        # a vehicle ridden, and a thing's replacement (the stolen one is not the value)
        ("Rode my Triumph Bonneville to the coast.", "vehicle", "Triumph Bonneville"),
        ("Finally replaced the stolen bike: a secondhand Trek, matte black.", "vehicle", "secondhand Trek"),
        ("Replaced the nicked scooter: a Honda PCX this time.", "vehicle", "Honda PCX"),
        # a lock's new number is its code
        ("The shed padlock got reset; the new number is 4471.", "code:shed", "4471"),
        ("The garage keypad was changed, the new number is 0912.", "code:garage", "0912"),
        # an appointment moved by the practice
        ("The surgery rang and put me in for Monday 3 March at 9:40 instead.", "appointment", "Monday 3 March at 9:40"),
        # an allergy said by its reaction
        ("My lips swell up with peanuts.", "allergy", "peanuts"),
        ("I come out in hives from shellfish.", "allergy", "shellfish"),
    ],
)
def test_round_two_forms(message, subject, value):
    assert said(message).get(subject) == (value, False), said(message)


@pytest.mark.parametrize(
    "message",
    [
        "Lena and I called it a day last night.",
        "We called it quits after three years.",
        "Jess and I called it off last week.",
        "The wedding's off, so Tom and I are done.",
    ],
)
def test_a_relationship_ended_without_its_word(message):
    assert said(message)["partner"] == ("", True)


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        ("Brightwater offered me the role but I'm not sure yet.", "employer"),  # an offer weighed, not taken
        ("Northgate offered me a job.", "employer"),
        ("I'm Sam, staying at the Hilton.", "employer"),  # an introduction with no work in it
        ("My sister stayed over again.", "partner"),  # someone else's visit
        ("Sam stayed over after the party.", "partner"),  # once is no partner
        ("The kids' friends stayed over again.", "partner"),  # no one named
        ("I called it a day at six and went home.", "partner"),  # a working day ended
        ("The barbecue got rained out so we called it off.", "partner"),  # an event called off
        ("The trip to Skye was too dear, so we called it off.", "partner"),
        ("Tom and I are done with the kitchen.", "partner"),
        ("I'm with Vodafone now.", "partner"),  # a network, not a person
        ("Home is where the heart is.", "home"),  # no place
        ("Went home early.", "home"),
        ("Booked him in for a haircut.", "vet"),
        ("Registered Chorizo at the vets, five minutes' walk from the new place.", "home"),  # a home in passing
        ("My new number is 07700 900123.", "code"),  # a phone number, no lock
    ],
)
def test_round_two_refusals(message, subject):
    found = {s.split(":", 1)[0] for s, _, _ in message_statements(message)}
    assert subject not in found, message_statements(message)


@pytest.mark.parametrize(
    ("message", "subject", "value"),
    [
        # a pet said by its breed, named beside it
        ("Chorizo, my rescue greyhound, is limping again.", "pet", "Chorizo"),
        ("Our spaniel Bramble hates the rain.", "pet", "Bramble"),
        # a partner said by an anniversary, the name the message gives
        ("Two years together today, Noor and I went back to the pier.", "partner", "Noor"),
        ("Four months together this week and Jamie still laughs at my jokes.", "partner", "Jamie"),
        (
            "Valentine's plan: Lucía finishes at six and I've booked a table. Eight months together this week.",
            "partner",
            "Lucía",
        ),
    ],
)
def test_a_pet_by_its_breed_and_a_partner_by_an_anniversary(message, subject, value):
    assert said(message).get(subject) == (value, False), said(message)


@pytest.mark.parametrize(
    "message",
    [
        "The kids have spent three weeks together on the farm.",  # no anniversary
        "Six months together this week!",  # no one named: no value to give
        "My sister's labrador is called Rolo.",  # someone else's pet
    ],
)
def test_an_anniversary_or_breed_that_names_no_one_of_the_persons(message):
    found = {s for s, _, _ in message_statements(message)}
    assert not found & {"partner", "pet"}, message_statements(message)


@pytest.mark.parametrize(
    ("message", "subject", "value"),
    [
        # a named thing's colour ("the <make or model>'s colour"), and a colour said of a kept thing
        ("The Niro's colour is dark blue now.", "detail:niro colour", "dark blue"),
        ("My bike is bright orange now.", "detail:bike colour", "bright orange"),
        ("Our van is white now after the respray.", "detail:van colour", "white"),
    ],
)
def test_a_named_things_colour_and_a_colour_said_of_a_kept_thing(message, subject, value):
    assert said(message).get(subject) == (value, False), said(message)


@pytest.mark.parametrize("message", ["The van is white now.", "I love the colour blue.", "Is my bike orange now?"])
def test_a_colour_of_nothing_kept_is_no_detail(message):
    assert not any(s.startswith("detail") for s, _, _ in message_statements(message))


# --- cues that misfired on ordinary text (review items 1 and 2): each class refused, its forms kept ---


@pytest.mark.parametrize(
    "message",
    [
        # a lock said as its number: only a bare code, not a time, a size, an age, a decade or a short gate number
        "My alarm is 7:30 now.",
        "The alarm is 6am tomorrow.",
        "At Heathrow, our gate is 23 and boarding is at 7.",
        "The gate is 2290 mm wide.",
        "The padlock is 3 years old.",
        "The gate's 1920s ironwork is lovely.",
        "The locker is 180 cm tall.",
        "My alarm is 6.45 on weekdays.",
    ],
)
def test_a_lock_followed_by_a_time_size_age_or_year_gives_no_code(message):
    found = {s.split(":", 1)[0] for s, _, _ in message_statements(message)}
    assert "code" not in found, message_statements(message)


_LOCK = st.sampled_from(["alarm", "keypad", "padlock", "gate", "locker"])
_NOT_A_CODE = st.one_of(
    st.builds(lambda h, m: f"{h}:{m:02d}", st.integers(0, 23), st.integers(0, 59)),
    st.builds(lambda h, ap: f"{h}{ap}", st.integers(1, 12), st.sampled_from(["am", "pm", " am", " pm"])),
    st.builds(
        lambda n, u: f"{n} {u}", st.integers(1, 9999), st.sampled_from(["mm", "cm", "kg", "years", "months", "feet"])
    ),
    st.builds(lambda y: f"{y}s", st.integers(1800, 2020)),
    st.builds(str, st.integers(0, 99)),
)


@given(_LOCK, st.sampled_from([" is", "'s", " is now", " is still"]), _NOT_A_CODE)
@settings(max_examples=150, deadline=None)
def test_property_a_lock_word_then_a_time_size_age_or_year_is_no_code(lock, verb, thing):
    message = f"The {lock}{verb} {thing} today."
    found = {s.split(":", 1)[0] for s, _, _ in message_statements(message)}
    assert "code" not in found, (message, message_statements(message))


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        # an ending cue followed by an unrelated object ends nothing
        ("I had to put my foot down with the kids.", "pet"),
        ("We had to put the tent down in the rain.", "pet"),
        ("My neighbour had to put their dog to sleep.", "pet"),  # someone else's animal
        ("I had to put my phone to sleep mode.", "pet"),
        ("I retired my old running shoes.", "employer"),
        ("Just retired my old car.", "employer"),
        ("I retired from running after the knee injury.", "employer"),
        ("I retired the old laptop and bought a new one.", "employer"),
        ("She dumped me a load of homework.", "partner"),
        ("He dumped me with the washing up again.", "partner"),
        ("My contract at the gym ended last month.", "employer"),
        # "my other half" names no one without a name
        ("Watched a film with my other half.", "partner"),
        ("My other half is away this week.", "partner"),
        ("My other half of the sandwich fell on the floor.", "partner"),
    ],
)
def test_an_ending_or_partner_cue_said_of_something_else_gives_nothing(message, subject):
    found = {s.split(":", 1)[0] for s, _, _ in message_statements(message)}
    assert subject not in found, message_statements(message)


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        ("I had to put our old dog down last week.", "pet"),
        ("We had to have Biscuit put to sleep.", "pet"),
        ("I had to put her to sleep on Monday.", "pet"),
        ("I retired last June.", "employer"),
        ("I retired from the police force in May.", "employer"),
        ("He dumped me after three years.", "partner"),
        ("My contract with Acme Logistics has ended.", "employer"),
        # an ending said only as an ending stays one whatever "now" or "moved" the clause says
        ("I'm between jobs right now.", "employer"),
        ("I'm single again, he moved to Leeds.", "partner"),
        ("I'm now unemployed.", "employer"),
    ],
)
def test_an_ending_of_the_persons_own_still_closes_it(message, subject):
    assert said(message)[subject] == ("", True), said(message)


_ENDING_CUE = st.sampled_from(
    ["I had to put {} down.", "We had to put {} to sleep.", "I retired {}.", "She dumped me {}."]
)
_UNRELATED = st.sampled_from(
    [
        "my foot",
        "the tent",
        "my phone",
        "my old running shoes",
        "the old laptop",
        "a load of homework",
        "the bins",
        "my bike",
        "the kids' toys",
    ]
)


@given(_ENDING_CUE, _UNRELATED)
@settings(max_examples=80, deadline=None)
def test_property_an_ending_cue_followed_by_an_unrelated_object_ends_nothing(form, thing):
    message = form.format(thing)
    assert not any(e for _, _, e in message_statements(message)), (message, message_statements(message))


@pytest.mark.parametrize(
    ("message", "value"),
    [
        ("I work at Deloitte with a freelance photographer.", "Deloitte"),
        ("Started a new job at Google, hired a freelance designer for the flat.", "Google"),
        ("I'm a freelancer these days.", "freelance"),
    ],
)
def test_freelance_is_the_persons_work_only_when_said_of_them_or_nothing_else_is_named(message, value):
    assert said(message)["employer"] == (value, False), said(message)


def test_a_partner_named_in_apposition_to_my_other_half():
    assert said("Sam, my other half, is on nights.")["partner"] == ("Sam", False)


def test_a_long_input_of_near_misses_is_read_in_one_pass():
    # 200 KB of text each rule half-matches ("contract at work … ended", "had to put … down", a lock then
    # digits): bounded expressions read it without backtracking (a quadratic one took seconds)
    for unit in (
        "my contract at work ",
        "had to put my ",
        "the alarm is 12",
        "I retired the ",
        "my other half ",
        "left the flat ",
        "offered a senior job ",
        "the trip was off ",
        "bought a house ",
        "all now in ",
        "the locker opens with 12",
    ):
        text = unit * (200_000 // len(unit))
        assert isinstance(message_statements(text), list)
        assert isinstance(statements_of(text, text), list)
        assert isinstance(from_chunks("memory/n.md", [make_chunk(1, 1, text)], "2025-01-01T00:00:00.000Z"), list)


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        # an ending word ends only the subjects it can end: a partner is not quit, a pet not given up for coffee
        ("My partner Sam quit smoking.", "partner"),
        ("I gave up coffee, my dog Pepper doesn't care.", "pet"),
        ("My partner Sam gave up his allotment.", "partner"),
        ("I resigned from the committee, my cat Miso slept through it.", "pet"),
        # "left me"/"dumped me" with an object is no break-up
        ("She left me a voicemail about dinner.", "partner"),
        ("He left me a note on the fridge.", "partner"),
        ("Sam dumped me in it at the meeting.", "partner"),
    ],
)
def test_an_ending_word_that_cannot_end_the_subject_ends_nothing(message, subject):
    found = {s: e for s, _, e in message_statements(message)}
    assert not found.get(subject, False), message_statements(message)


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        ("I retired from Deloitte last year.", "employer"),
        ("She left me for her boss.", "partner"),
        ("Our dog Pepper died last night.", "pet"),
        ("I stopped working at Tesco.", "employer"),
    ],
)
def test_an_ending_word_that_can_end_the_subject_still_does(message, subject):
    assert said(message)[subject] == ("", True), said(message)


@pytest.mark.parametrize(
    "message",
    [
        "The gym opens with 6am classes now.",
        "The shop opens with 2 staff on Sundays.",
        "The pool unlocks with 10 minutes to spare.",
        "The alarm got reset, the new number is 7:30.",
    ],
)
def test_what_opens_or_a_locks_new_number_is_a_code_only_when_bare(message):
    found = {s.split(":", 1)[0] for s, _, _ in message_statements(message)}
    assert "code" not in found, message_statements(message)


def test_an_ending_only_cue_beside_a_new_employer_named_gives_the_new_one():
    assert said("I retired from the army in 2019 and now work at Tesco.")["employer"] == ("Tesco", False)


@given(
    st.sampled_from(
        ["Watched a film with", "Went for a walk with", "Cooked dinner for", "Had a row with", "Laughed at"]
    ),
    st.sampled_from(["", " again", " last night", " on Sunday", " this week", " of the sandwich"]),
)
@settings(max_examples=60, deadline=None)
def test_property_my_other_half_without_a_name_names_no_partner(lead, tail):
    message = f"{lead} my other half{tail}."
    found = {s for s, _, _ in message_statements(message)}
    assert "partner" not in found, (message, message_statements(message))
