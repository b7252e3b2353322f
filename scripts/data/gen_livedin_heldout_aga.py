#!/usr/bin/env python3
"""Generate scripts/data/livedin-heldout-aga.json: a HELD-OUT lived-in person for issue 48. Nobody tunes
on her: do not read this script's turns or the JSON while working on recall; only run the benchmark.
Labelled turns → checked scenario (see livedin_build.py).

    python3 scripts/data/gen_livedin_heldout_aga.py           # write livedin-heldout-aga.json
    python3 scripts/data/gen_livedin_heldout_aga.py --check   # only verify the committed JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from livedin_build import A, Q, U, run  # noqa: E402

PERSON = "Agnieszka 'Aga' Wróbel (HELD OUT, written for issue 48: a lorry driver who becomes a driving instructor)"

SESSIONS = [
    (
        "2025-01-06 06:10",
        [
            U(
                "Morning. Aga here. I drive artics for Humber Freight out of the Hull docks, class 1, mostly "
                "nights to Felixstowe and back. I need somewhere to keep my life that isn't the cab visor.",
                "job.hgv",
            ),
            A(
                "Good morning, Aga. Class 1 nights for Humber Freight is a lot to juggle; tell me what to keep "
                "and ask whenever you need it.",
                "job.hgv",
            ),
            U(
                "Home is a terrace on Newland Avenue in Hull with my husband Colin, our lad Kuba and a very fat cat.",
                "home.hull",
                "partner.colin",
                "kuba.home",
            ),
            A("A full house on Newland Avenue. What's the cat's name?"),
            U("Pierogi. A grey Maine Coon the size of a small dog, and he knows it.", "stable.breed"),
        ],
    ),
    (
        "2025-01-12 14:30",
        [
            U(
                "Dave Pickering is the transport manager at the depot. He does the tachos, the rota and the "
                "shouting, so anything about shifts goes through him.",
                "boss.dave",
            ),
            A(
                "Dave Pickering, transport manager: shifts and tachographs go through him. Noted.",
                "boss.dave",
            ),
        ],
    ),
    (
        "2025-01-19 10:00",
        [
            U(
                "Blood test says my thyroid is lazy. The doctor started me on levothyroxine, 50 micrograms every "
                "morning before tea.",
                "dose.50",
            ),
            A(
                "Levothyroxine 50 micrograms each morning, on an empty stomach, half an hour before tea or food. "
                "It takes a few weeks to feel a difference.",
                "dose.50",
            ),
            U("Half an hour without tea. This will be the hardest part of the whole thing."),
        ],
    ),
    (
        "2025-01-26 19:40",
        [
            U(
                "Can you plan my run tomorrow? Hull docks to Felixstowe, 44-tonne artic, I want my 45-minute "
                "break somewhere with a decent café."
            ),
            A(
                "A63 and M18 to the A1(M), then the A14 across: about 230 miles. At 4½ hours of driving you'll "
                "be near Cambridge; Cambridge Services on the A14 has showers and a café that does a proper "
                "breakfast. Watch the low bridge warnings if you divert through Huntingdon."
            ),
            U("Huntingdon I always avoid. Thanks."),
        ],
    ),
    (
        "2025-02-02 12:15",
        [
            U(
                "Sorting my phone contract. My number is 07700 900233, been the same since I came over from "
                "Poland, can you keep it in case I lose the SIM card?",
                "phone.old",
            ),
            A("Your mobile number is 07700 900233. Kept safe.", "phone.old"),
        ],
    ),
    (
        "2025-02-05 17:50",
        [
            U(
                "My own car off the clock is a silver Skoda Octavia estate, 2014, 160,000 miles. It failed its MOT "
                "on a wiper blade, of all things.",
                "car.octavia",
            ),
            A(
                "A 2014 Octavia estate at 160,000 miles failing on a wiper is a compliment, really. Swap the blade "
                "and get the retest within ten working days.",
                "car.octavia",
            ),
        ],
    ),
    (
        "2025-02-09 20:00",
        [
            U(
                "Wednesday darts at the Polar Bear is the best night of my week. Our team is the Avenue Arrows "
                "and I'm the one who can actually count.",
                "darts",
            ),
            A(
                "Captain of arithmetic for the Avenue Arrows at the Polar Bear on Wednesdays, then.",
                "darts",
            ),
            U("What's the checkout for 121?"),
            A("T20, T11, bull — or T17, T10, D20 if you prefer finishing on double top."),
        ],
    ),
    (
        "2025-02-16 11:30",
        [
            U(
                "Breakfast in the cab is always the same, a kielbasa sandwich from the Polish shop. Colin says "
                "I'm 40% sausage.",
                "diet.meat",
            ),
            A("A kielbasa sandwich before a night run is a tradition, whatever Colin says.", "diet.meat"),
        ],
    ),
    (
        "2025-02-23 09:20",
        [
            U(
                "Pierogi is off his food. Booked him in at Newland Park Vets for Tuesday at 5.",
                "vet.newland",
            ),
            A(
                "Newland Park Vets on Tuesday at 5. Big cats like Maine Coons can get dental trouble, so ask them "
                "to check his teeth.",
                "vet.newland",
                "stable.breed",
            ),
        ],
    ),
    (
        "2025-03-02 16:45",
        [
            U(
                "Make me a recipe card for my mum's pierogi ruskie for Kuba, he wants to cook for his mates: 500 "
                "g flour, 250 ml warm water, potato, twaróg, fried onion."
            ),
            A(
                "Pierogi ruskie (makes about 40): mix 500 g flour, 250 ml warm water, 2 tbsp oil and a pinch of "
                "salt into a soft dough and rest it 30 minutes. Filling: 600 g mashed potato, 300 g twaróg, one "
                "big onion fried golden, salt and lots of pepper. Roll thin, cut 8 cm rounds, fill, pinch shut, "
                "boil until they float plus two minutes, then fry in butter with more onion."
            ),
            U("He'll burn the onion but it's a start."),
        ],
    ),
    (
        "2025-03-09 18:00",
        [
            U(
                "My brother Paweł rang from Gdynia. Twenty-five years welding ship hulls at the yard and he still "
                "says it's the best job there is.",
                "stable.brother",
            ),
            A(
                "A shipyard welder for twenty-five years — Paweł must have built half the Baltic fleet.",
                "stable.brother",
            ),
            U(
                "I was born in Gdańsk, just down the coast, and moved to Hull at 24. He never left.",
                "stable.born",
            ),
        ],
    ),
    (
        "2025-03-16 08:30",
        [
            U(
                "The doctor wants to see me about the thyroid again. She asked what I'm taking: I told her still "
                "the 50 micrograms each morning."
            ),
            A("That's right, 50 micrograms of levothyroxine every morning.", "dose.50"),
        ],
    ),
    (
        "2025-03-30 21:10",
        [
            U(
                "Colin moved his things out today. Nine years and it's done, we've both known for a while. Kuba "
                "is staying with me.",
                "x~partner.colin",
                "kuba.home",
            ),
            A("I'm sorry, Aga. Even when it's expected it's a lot. Go gently this week and let people feed you."),
        ],
    ),
    (
        "2025-04-06 13:00",
        [
            U(
                "Blood results back: the doctor upped me to 75 micrograms. Same routine, same no tea for half an hour.",
                "dose.75",
                "x~dose.50",
            ),
            A("75 micrograms each morning from now on.", "dose.75"),
        ],
    ),
    (
        "2025-04-13 15:20",
        [
            U(
                "Write a short note for the neighbours: vans keep parking across the back alley of Newland Avenue "
                "and the bin lorry can't get down."
            ),
            A(
                "Dear neighbours, the bin lorry couldn't get down the back alley again this week because of vans "
                "parked across it. Please keep the alley clear on Thursdays so everyone's bins get emptied. "
                "Thank you! — Aga, no. 58"
            ),
        ],
    ),
    (
        "2025-04-27 10:10",
        [
            U(
                "I've decided. I'm training to teach people to drive: ADI part one booked. Fifteen years of "
                "nights is enough for anyone's back."
            ),
            A(
                "Good for you, Aga. Part one is the theory and hazard perception; with your years on the road "
                "the hazard bit will be second nature."
            ),
        ],
    ),
    (
        "2025-05-11 19:30",
        [
            U(
                "Rugby at Craven Park tonight, Hull KR against the old enemy. Red and white since I came to this "
                "city and I'm not changing.",
                "stable.rugby",
            ),
            A("Up the Robins, then. Wrap up, it's cold on the terraces in May too.", "stable.rugby"),
        ],
    ),
    (
        "2025-05-25 11:00",
        [
            U(
                "Quit the darts. The Polar Bear without Colin's mates glaring is fine, but Wednesdays are study "
                "nights now and my arm was never that good.",
                "darts.end",
            ),
            A("Study nights over darts: the ADI exams will thank you."),
        ],
    ),
    (
        "2025-06-03 20:20",
        [
            U(
                "Forty-five today, 3 June. Kuba made me a cake with the candles spelling 54 by mistake.",
                "stable.birthday",
            ),
            A("Happy 45th, Aga! A cake from Kuba with the digits backwards is the best kind.", "stable.birthday"),
        ],
    ),
    (
        "2025-06-15 09:40",
        [
            U(
                "Hospital form asks for allergies. Penicillin put me in A&E at 19, hives everywhere, so that one "
                "always goes on the form.",
                "stable.allergy",
            ),
            A("Penicillin allergy, written on every form. Good.", "stable.allergy"),
            U("And blood group is O negative, the one everyone wants at the donor session.", "stable.blood"),
        ],
    ),
    (
        "2025-07-05 08:00",
        [
            U(
                "No more kielbasa for me. Haven't touched meat since the first of July, it's lentils and twaróg "
                "from here on.",
                "diet.veg",
                "x~diet.meat",
            ),
            A(
                "Meat-free since 1 July, then. Twaróg and lentils will keep your protein up on long days.",
                "diet.veg",
            ),
        ],
    ),
    (
        "2025-07-20 17:30",
        [
            U(
                "Passed my part three! Last shift for Humber Freight is Friday. Minster School of Motoring have "
                "given me a franchise, so it's learners and three-point turns from August.",
                "job.instructor",
                "x~job.hgv",
            ),
            A(
                "Congratulations, Aga — a fully qualified driving instructor with a Minster franchise!",
                "job.instructor",
            ),
        ],
    ),
    (
        "2025-08-03 12:30",
        [
            U(
                "Linda Oyelaran runs the franchise. Every pupil, every lesson slot and every complaint goes "
                "through her diary, and she's strict but fair.",
                "boss.linda",
            ),
            A("Linda Oyelaran holds the diary and runs the franchise: strict but fair sounds right.", "boss.linda"),
        ],
    ),
    (
        "2025-08-10 14:50",
        [
            U(
                "The school's dual-control Ceed is sitting on my drive now, and the Octavia estate went to my "
                "nephew for a pound and a hug.",
                "car.ceed",
                "x~car.octavia",
            ),
            A(
                "A Kia Ceed with dual controls for lessons, and the old Skoda stays in the family.",
                "car.ceed",
            ),
        ],
    ),
    (
        "2025-08-17 19:00",
        [
            U(
                "New business cards came: people book lessons on 07700 900418, a separate line so pupils don't "
                "ring at 2 a.m.",
                "phone.new",
            ),
            A("07700 900418 on the cards for bookings and calls now.", "phone.new"),
        ],
    ),
    (
        "2025-08-24 10:20",
        [
            U("Theory test help for my pupil Megan: what's the overall stopping distance at 50 mph in the dry?"),
            A("53 metres: 15 m thinking plus 38 m braking, about 13 car lengths. In the wet it roughly doubles."),
            U("And at 70?"),
            A("96 metres in the dry: 21 m thinking, 75 m braking, about 24 car lengths."),
        ],
    ),
    (
        "2025-09-07 16:00",
        [
            U(
                "Kuba's off to Leeds on Sunday. An electrician's apprenticeship with a firm in Holbeck, and a "
                "room in a shared house in Armley. The house is going to be very quiet.",
                "kuba.leeds",
            ),
            A(
                "An apprenticeship in Leeds and his own room in Armley — a big step for him, a quiet one for you.",
                "kuba.leeds",
            ),
        ],
    ),
    (
        "2025-09-21 18:30",
        [
            U("Budget for Kuba's first month in Leeds: rent £480, bus pass £70, food £160, phone £15. Enough?"),
            A(
                "That's £725 before going out. An apprentice's first-year pay is often around £1,100 a month, so "
                "he'd have about £375 left; a work-boots fund and a small emergency pot would be wise."
            ),
        ],
    ),
    (
        "2025-10-04 09:15",
        [
            U(
                "Signed for the bungalow by the Westwood in Beverley. Newland Avenue was all stairs and students, "
                "this is all sky and cows.",
                "home.beverley",
                "x~home.hull",
            ),
            A(
                "The Westwood on your doorstep, congratulations! Cows are quieter neighbours than students.",
                "home.beverley",
            ),
        ],
    ),
    (
        "2025-10-12 11:45",
        [
            U(
                "Pierogi's records went over to the Minster practice on Flemingate, five minutes away. He hated "
                "the bus to the old one.",
                "vet.beverley",
            ),
            A("Minster Vets on Flemingate looks after Pierogi now. Five minutes is kinder.", "vet.beverley"),
        ],
    ),
    (
        "2025-10-26 08:45",
        [
            U(
                "Joined the Hornsea sea-swimmers: Saturdays at 8, all year, no wetsuits. Brr.",
                "saturday.swim",
            ),
            A(
                "Saturday 8 a.m. in the North Sea with the Hornsea crowd — build up slowly and bring a flask.",
                "saturday.swim",
            ),
        ],
    ),
    (
        "2025-11-02 20:10",
        [
            U(
                "Ruth's toothbrush has taken up residence in my bathroom cup. I think that means something, and "
                "I think I'm happy about it.",
                "partner.ruth",
            ),
            A("A toothbrush moving in usually does mean something. I'm glad, Aga.", "partner.ruth"),
            U("She's the one who talked me into the sea. Met her on the beach in October."),
        ],
    ),
    (
        "2025-11-16 10:30",
        [
            U(
                "Thyroid again. Results still low, so it's 100 micrograms now, the white and the pink tablet together.",
                "dose.100",
            ),
            A("100 micrograms every morning now.", "dose.100"),
        ],
    ),
    (
        "2025-11-30 15:15",
        [
            U("Help me word a birthday card for Ruth. She's 47, loves cold water, bad puns and crosswords."),
            A(
                "'To Ruth, who makes the North Sea feel warm: happy birthday. May your year be full of fair "
                "tides, good clues and terrible puns. Love, Aga.'"
            ),
        ],
    ),
    (
        "2025-12-07 13:20",
        [
            U(
                "Need new glasses for teaching. Booked an eye test at Specsavers in Beverley for Tuesday 3 "
                "February at 10:30.",
                "optician.feb3",
            ),
            A("Eye test: Tuesday 3 February, 10:30, Specsavers in Beverley.", "optician.feb3"),
        ],
    ),
    (
        "2025-12-14 17:40",
        [
            U(
                "Pupil wants to know what happens at the show me tell me bit of the test. Give me the two I should "
                "drill her on."
            ),
            A(
                "Tell me: how to check the tyres have enough tread (1.6 mm across the central three quarters). "
                "Show me: how to demist the windscreen while driving. Those two come up often."
            ),
        ],
    ),
    (
        "2026-01-04 11:00",
        [
            U("Pharmacy asked how much levothyroxine I'm on for the repeat, I went blank."),
            A("You take 100 micrograms of levothyroxine each morning.", "dose.100"),
        ],
    ),
    (
        "2026-01-11 09:50",
        [
            U(
                "Specsavers moved me: a lesson clashed, so instead of the 3rd it's Tuesday 17 February at 14:00.",
                "optician.feb17",
                "x~optician.feb3",
            ),
            A("Tuesday 17 February at 14:00 instead, then.", "optician.feb17"),
        ],
    ),
    (
        "2026-01-25 19:20",
        [
            U("Paweł turns 50 in March. Write me a short toast in English I can say over video, funny but not cruel."),
            A(
                "'To my big brother Paweł: fifty years old and still the strongest man in Gdynia, at least in "
                "his own opinion. Thank you for teaching me to ride a bike, to fix a fuse and to never let the "
                "Baltic win. Sto lat!'"
            ),
        ],
    ),
    (
        "2026-02-08 08:30",
        [
            U("Lesson cancelled, so I'm in the café by the Westwood. Ruth is bringing croissants and the crossword."),
            A("Croissants, a crossword and no learners: a good Sunday."),
        ],
    ),
]

QUESTIONS = [
    Q("Which town do I live in now?", "current", ["home.beverley"], ["home.hull"]),
    Q("What do I do for a living these days?", "current", ["job.instructor"], ["job.hgv"]),
    Q("Who's my boss these days?", "current", ["boss.linda"], ["boss.dave"]),
    Q("Who am I with these days?", "current", ["partner.ruth"], ["partner.colin"]),
    Q("What's my partner's name?", "current", ["partner.ruth"], ["partner.colin"]),
    Q("What car am I driving at the moment?", "current", ["car.ceed"], ["car.octavia"]),
    Q("Where do I take the cat when he's poorly?", "current", ["vet.beverley"], ["vet.newland"]),
    Q("What number do I give out for calls now?", "current", ["phone.new"], ["phone.old"]),
    Q("What's my thyroid dose at the moment?", "current", ["dose.100"], ["dose.50", "dose.75"]),
    Q("Am I still playing darts on Wednesdays?", "current", ["darts.end"], ["darts"]),
    Q("Where does Kuba live these days?", "current", ["kuba.leeds"], ["kuba.home"]),
    Q("Do I eat meat at the moment?", "current", ["diet.veg"], ["diet.meat"]),
    Q("When's my eye test?", "current", ["optician.feb17"], ["optician.feb3"]),
    Q("What do I do on Saturday mornings now?", "current", ["saturday.swim"]),
    Q("Where did I live before Beverley?", "history", ["home.hull"]),
    Q("Which haulage firm did I work for?", "history", ["job.hgv"]),
    Q("Who was my transport manager?", "history", ["boss.dave"]),
    Q("Who was I with before Ruth?", "history", ["partner.colin"]),
    Q("What car did I have before the Kia?", "history", ["car.octavia"]),
    Q("What dose of levothyroxine was I first put on?", "history", ["dose.50"]),
    Q("What was my old phone number?", "history", ["phone.old"]),
    Q("When's my birthday?", "stable", ["stable.birthday"]),
    Q("Which city am I originally from?", "stable", ["stable.born"]),
    Q("What does my brother do?", "stable", ["stable.brother"]),
    Q("What breed is Pierogi?", "stable", ["stable.breed"]),
    Q("Which rugby team do I follow?", "stable", ["stable.rugby"]),
    Q("Which medicine must I never be given?", "stable", ["stable.allergy"]),
    Q("What's my blood group?", "stable", ["stable.blood"]),
]


if __name__ == "__main__":
    sys.exit(
        run(PERSON, SESSIONS, QUESTIONS, Path(__file__).resolve().parent / "livedin-heldout-aga.json", sys.argv[1:])
    )
