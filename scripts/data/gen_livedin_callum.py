#!/usr/bin/env python3
"""Generate scripts/data/livedin-callum.json: Callum Reid, a student in Glasgow (a DEVELOPMENT person for
issue 48: tune on him). Labelled turns → checked scenario (see livedin_build.py).

    python3 scripts/data/gen_livedin_callum.py           # write livedin-callum.json
    python3 scripts/data/gen_livedin_callum.py --check   # only verify the committed JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from livedin_build import A, Q, U, run  # noqa: E402

PERSON = "Callum Reid (dev, written for issue 48: a Glasgow student whose course, flat, job and girlfriend change)"

SESSIONS = [
    (
        "2025-01-13 23:40",
        [
            U(
                "right so im callum, 2nd year physics at glasgow uni, living in the murano street halls which "
                "smell permanently of pot noodle. need u to remember stuff bc i wont",
                "course.physics",
                "flat.murano",
            ),
            A(
                "Deal, Callum. Second-year physics at Glasgow and a room in Murano Street halls: noted, pot "
                "noodle and all.",
                "course.physics",
                "flat.murano",
            ),
        ],
    ),
    (
        "2025-01-18 14:05",
        [
            U(
                "work wise im doing weekend shifts at Bean Scene on byres rd, making flat whites for people in gilets",
                "job.cafe",
            ),
            A("Weekend barista shifts at Bean Scene on Byres Road. The gilet crowd tips badly, I hear.", "job.cafe"),
            U(
                "shona's the manager there, she does the rota on a whiteboard and guards it like the crown jewels",
                "boss.shona",
            ),
        ],
    ),
    (
        "2025-01-25 19:30",
        [
            U(
                "isla's coming over for burns night, we're making haggis from a tin lol. 6 months together on monday",
                "partner.isla",
            ),
            A("Tinned haggis and six months with Isla. Neeps and tatties optional but encouraged.", "partner.isla"),
        ],
    ),
    (
        "2025-01-28 21:00",
        [
            U(
                "joined the shinty club at uni, training wednesday nights. already took a caman to the shin",
                "club.shinty",
            ),
            A("Shinty on Wednesday nights: shin pads are not optional.", "club.shinty"),
        ],
    ),
    (
        "2025-02-02 10:15",
        [
            U(
                "cycle to uni on my old blue trek every day, locked with the combo one, 3391. writing it here "
                "bc i forgot it twice last week",
                "bike.trek",
                "lock.3391",
            ),
            A("Blue Trek, lock combination 3391. Saved so you're not stuck outside the library again.", "lock.3391"),
        ],
    ),
    (
        "2025-02-05 20:10",
        [
            U(
                "dinner is chicken nuggets again, 4th night running. i basically live on nuggets and kebabs, peak student",
                "diet.meat",
            ),
            A("Nuggets four nights running. A bag of frozen veg in the oven tray would count as progress."),
        ],
    ),
    (
        "2025-02-09 21:50",
        [
            U("can u explain why the hamiltonian is hermitian like im five. exam in 2 wks"),
            A(
                "Energy is something you measure, and measurements must give real numbers. Hermitian operators "
                "are exactly the ones whose eigenvalues are always real, so the energy operator has to be one."
            ),
            U("ok that actually helps cheers"),
        ],
    ),
    (
        "2025-02-16 12:40",
        [
            U(
                "birthday was yesterday, 20 now, 15 feb babyyy. mum posted a tin of tablet down from oban",
                "stable.birthday",
                "stable.hometown",
            ),
            A("Happy 20th for yesterday! Homemade tablet from Oban beats any cake."),
        ],
    ),
    (
        "2025-02-23 18:00",
        [
            U("got the uni gym membership, £150 for the year. going to get massive (going to go twice)", "gym.uni"),
            A("The uni gym for £150 a year. Twice is still twice more than zero.", "gym.uni"),
        ],
    ),
    (
        "2025-03-04 16:20",
        [
            U("phone screen smashed AGAIN. pixel 6 is basically a spiderweb now", "phone.pixel"),
            A(
                "A cracked Pixel 6: a repair shop can swap the screen for around £100, or it's time to upgrade.",
                "phone.pixel",
            ),
        ],
    ),
    (
        "2025-03-12 22:30",
        [
            U(
                "dad was out on the boat all week, mackerel everywhere apparently. 25 yrs fishing out of oban and "
                "he still sends me photos of every catch",
                "stable.dad",
            ),
            A("Twenty-five years a fisherman and still proud of every mackerel. That's lovely."),
        ],
    ),
    (
        "2025-03-20 11:00",
        [
            U(
                "summer project sorted, dr ferguson's taking me on, simulating dark matter halos. sounds cool "
                "until u see the fortran",
                "project.halos",
                "super.ferguson",
            ),
            A(
                "Dark matter halo simulations with Dr Ferguson over the summer. Fortran builds character.",
                "project.halos",
            ),
        ],
    ),
    (
        "2025-04-02 17:45",
        [
            U("python help: my loop over a 1e6 numpy array takes forever, how do i speed it up"),
            A(
                "Vectorise it: replace the loop with array operations like `np.where` or `arr * 2 + 1`. If you "
                "truly need a loop, numba's `@njit` will compile it."
            ),
        ],
    ),
    (
        "2025-04-14 09:10",
        [
            U("tbh im not feeling physics anymore. the coding bits are the only bits i like. thinking about switching"),
            A("Worth a chat with your adviser of studies before the deadline. Second year is a common time to switch."),
        ],
    ),
    (
        "2025-05-06 20:00",
        [
            U(
                "isla's off to lyon on erasmus in sept and we've decided not to do long distance. so thats that. "
                "we're done. gutted",
                "partner.end",
            ),
            A("I'm sorry, Callum. Ending it kindly before she leaves is hard but honest. Go easy on yourself."),
        ],
    ),
    (
        "2025-05-20 15:30",
        [
            U(
                "adviser signed the form!! from september its computing science, goodbye fortran. mum thinks ive "
                "lost my mind",
                "course.cs",
            ),
            A("Computing science from September. Your Python questions were a clue all along.", "course.cs"),
        ],
    ),
    (
        "2025-06-01 13:20",
        [
            U("bike got nicked outside the library. cut right through the lock. raging", "bike.stolen"),
            A("That's rotten. Report it to Police Scotland with the frame number if you have it."),
        ],
    ),
    (
        "2025-06-10 19:10",
        [
            U("cancelled the gym, never went lol", "gym.end"),
            A("At least you know now. Cancelling beats paying for guilt."),
        ],
    ),
    (
        "2025-06-22 18:40",
        [
            U(
                "bought a secondhand raleigh off gumtree for 90 quid, green, squeaks like a mouse. new lock as "
                "well, 7702, dont let me forget",
                "bike.raleigh",
                "lock.7702",
            ),
            A("Green Raleigh for £90, lock 7702. A drop of oil will sort the squeak.", "bike.raleigh", "lock.7702"),
        ],
    ),
    (
        "2025-07-05 12:00",
        [
            U(
                "handed in my notice at bean scene. shona was nice about it. the cafe is dead over summer anyway",
                "job.quit",
            ),
            A("Leaving on good terms with Shona is the way to do it."),
        ],
    ),
    (
        "2025-07-14 23:15",
        [
            U(
                "first shift pulling pints at the thistle & fiddle on argyle st, 4 nights a week. legs are "
                "destroyed but the tips are unreal",
                "job.bar",
                "role.bar",
                "shifts.four",
            ),
            A("Four nights behind the bar at the Thistle & Fiddle. Good tips, sore legs.", "job.bar", "shifts.four"),
            U("big kev runs the place and writes the rota, he calls everyone 'big man' even the women", "boss.kev"),
            A("Big Kev and his rota. Stay on his good side and the shifts will be good ones.", "boss.kev"),
        ],
    ),
    (
        "2025-08-02 11:30",
        [
            U(
                "started bouldering at the climbing place on the southside with euan, £35 a month. forearms are "
                "on fire",
                "gym.climb",
            ),
            A("Bouldering on the Southside for £35 a month. The forearm burn fades after a few weeks.", "gym.climb"),
        ],
    ),
    (
        "2025-08-20 17:00",
        [
            U(
                "MOVED. me euan and stacey got a 3 bed on gibson street, my room is tiny but its not halls. "
                "sink has no plug",
                "flat.gibson",
            ),
            A("A three-bed on Gibson Street with Euan and Stacey. A universal plug is about £2.", "flat.gibson"),
        ],
    ),
    (
        "2025-08-28 18:25",
        [
            U(
                "front door keypad at the flat is 1948, stacey wrote it on the fridge which kind of defeats the point",
                "code.1948",
            ),
            A("Flat door keypad 1948. Maybe wipe it off the fridge.", "code.1948"),
        ],
    ),
    (
        "2025-09-06 14:45",
        [
            U("help me split the bills fairly, rent 1350, energy 120, wifi 30, my room's smaller"),
            A(
                "If your room is about two-thirds the size of the others, weight rent by room size and split "
                "energy and wifi evenly: roughly £370 rent for you and £500 each for them, plus £50 each for bills."
            ),
        ],
    ),
    (
        "2025-09-12 01:30",
        [
            U(
                "kev's made me a keyholder!! i open up and cash up on my own now. 50p more an hour and a massive bunch of keys",
                "role.keyholder",
            ),
            A("A keyholder at the Thistle & Fiddle, opening and cashing up. Kev trusts you.", "role.keyholder"),
        ],
    ),
    (
        "2025-09-18 13:00",
        [
            U(
                "signed up for the hillwalking club at freshers fair, ben lomond on saturday. my knees are done with sticks and balls",
                "club.hillwalk",
            ),
            A(
                "The hillwalking club and Ben Lomond for a first outing. Take layers; it's colder at the top.",
                "club.hillwalk",
            ),
        ],
    ),
    (
        "2025-09-25 22:20",
        [
            U("refurb iphone 13 arrived, finally no more spiderweb. 200 quid from backmarket", "phone.iphone"),
            A("An iPhone 13 from Back Market. Get a case on it before the first night out.", "phone.iphone"),
        ],
    ),
    (
        "2025-10-08 16:00",
        [
            U(
                "honours project allocated: an app that predicts when the 4 bus will actually turn up. dr achebe "
                "is my supervisor, seems sound",
                "project.bus",
                "super.achebe",
            ),
            A(
                "A bus arrival predictor with Dr Achebe. Every Glaswegian will thank you.",
                "project.bus",
                "super.achebe",
            ),
        ],
    ),
    (
        "2025-10-19 02:10",
        [
            U(
                "niamh from the climbing wall stayed over again. i think we're a thing now?? she made me breakfast",
                "partner.niamh",
            ),
            A("Breakfast is a strong sign. Sounds like you and Niamh are a thing."),
        ],
    ),
    (
        "2025-10-28 10:30",
        [
            U("dentist checkup at woodlands road booked for 16 december 10am", "appt.dec16"),
            A("Dentist on Woodlands Road, 16 December at 10am.", "appt.dec16"),
        ],
    ),
    (
        "2025-11-02 17:15",
        [
            U(
                "told kev i can only do fri and sat from now on with the honours project. he grumbled but fine",
                "shifts.two",
            ),
            A("Fridays and Saturdays only, so the project gets your weekdays.", "shifts.two"),
        ],
    ),
    (
        "2025-11-04 18:30",
        [
            U("driving test booked, 9 december at shieldhall. terrified", "test.dec9"),
            A("9 December at Shieldhall. Get a few lessons in around the test routes.", "test.dec9"),
        ],
    ),
    (
        "2025-11-09 22:05",
        [
            U("landlord changed the keypad after stacey's ex turned up at 3am. 5620 now", "code.5620"),
            A("New keypad number 5620. Sensible after that.", "code.5620"),
        ],
    ),
    (
        "2025-11-16 12:10",
        [
            U("allergic to penicillin btw, nearly died age 7, put that somewhere safe", "stable.allergy"),
            A("Penicillin allergy, severe reaction as a child. Always tell a doctor or pharmacist."),
        ],
    ),
    (
        "2025-11-22 19:40",
        [
            U(
                "three weeks veggie now thanks to niamh. her lentil dal is elite, not even missing the chicken",
                "diet.veggie",
            ),
            A("Three weeks vegetarian and a dal worth staying for. Keep an eye on iron and B12.", "diet.veggie"),
        ],
    ),
    (
        "2025-11-30 20:40",
        [
            U(
                "examiner's off sick so they moved me to 13 january, 8.40am. more time to stall at roundabouts",
                "test.jan13",
            ),
            A("13 January at 8:40 then. More practice time.", "test.jan13"),
        ],
    ),
    (
        "2025-12-08 09:20",
        [
            U("woodlands road rang, hygienist off, shoved me to 6 jan at 2.15", "appt.jan6", "x~appt.dec16"),
            A("Check-up moved to 6 January at 2:15pm.", "appt.jan6"),
        ],
    ),
    (
        "2025-12-12 19:00",
        [
            U("whats my bike code again, standing in the rain"),
            A("It's 7702.", "lock.7702"),
            U("legend"),
        ],
    ),
]

QUESTIONS = [
    Q("Where am I staying these days?", "current", ["flat.gibson"], ["flat.murano"]),
    Q("Where did I end up moving to?", "current", ["flat.gibson"], ["flat.murano"]),
    Q("What degree am I studying now?", "current", ["course.cs"], ["course.physics"]),
    Q("Where do I work part-time now?", "current", ["job.bar"], ["job.cafe"]),
    Q("Who does my rota now?", "current", ["boss.kev"], ["boss.shona"]),
    Q("Who's my girlfriend now?", "current", ["partner.niamh"], ["partner.isla"]),
    Q("Am I still with Isla?", "current", ["partner.end", "partner.niamh"], ["partner.isla"]),
    Q("What bike do I ride now?", "current", ["bike.raleigh"], ["bike.trek"]),
    Q("What's my bike lock code?", "current", ["lock.7702"], ["lock.3391"]),
    Q("Where do I work out these days?", "current", ["gym.climb"], ["gym.uni"]),
    Q("What phone have I got?", "current", ["phone.iphone"], ["phone.pixel"]),
    Q("What's my project about now?", "current", ["project.bus"], ["project.halos"]),
    Q("Who's supervising me?", "current", ["super.achebe"], ["super.ferguson"]),
    Q("When is my driving test?", "current", ["test.jan13"], ["test.dec9"]),
    Q("What's my role at the bar now?", "current", ["role.keyholder"], ["role.bar"]),
    Q("How many nights a week am I working?", "current", ["shifts.two"], ["shifts.four"]),
    Q("Do I still have a gym membership?", "current", ["gym.end"], ["gym.uni"]),
    Q("What did I get after my bike was stolen?", "current", ["bike.raleigh"], ["bike.trek"]),
    Q("What colour is my bike?", "current", ["bike.raleigh"], ["bike.trek"]),
    Q("Do I eat meat these days?", "current", ["diet.veggie"], ["diet.meat"]),
    Q("Who did I start seeing?", "current", ["partner.niamh"], ["partner.isla"]),
    Q("When's my dentist appointment?", "current", ["appt.jan6"], ["appt.dec16"]),
    Q("What's the code for our front door?", "current", ["code.5620"], ["code.1948"]),
    Q("Which uni club am I in?", "current", ["club.hillwalk"], ["club.shinty"]),
    Q("Where did I live before the move?", "history", ["flat.murano"]),
    Q("What was I studying originally?", "history", ["course.physics"]),
    Q("Who was I going out with before Niamh?", "history", ["partner.isla"]),
    Q("What was my bike lock code originally?", "history", ["lock.3391"]),
    Q("Where did I work before the bar?", "history", ["job.cafe"]),
    Q("What sport did I play at uni originally?", "history", ["club.shinty"]),
    Q("What was the door code when we moved in?", "history", ["code.1948"]),
    Q("When's my birthday?", "stable", ["stable.birthday"]),
    Q("Where am I from?", "stable", ["stable.hometown"]),
    Q("What does my dad do?", "stable", ["stable.dad"]),
    Q("What am I allergic to?", "stable", ["stable.allergy"]),
]


if __name__ == "__main__":
    sys.exit(run(PERSON, SESSIONS, QUESTIONS, Path(__file__).resolve().parent / "livedin-callum.json", sys.argv[1:]))
