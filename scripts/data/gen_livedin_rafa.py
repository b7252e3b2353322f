#!/usr/bin/env python3
"""Generate scripts/data/livedin-rafa.json: Rafa Ortega, a Valencian chef in Liverpool (a DEVELOPMENT
person for issue 48: tune on him). Labelled turns → checked scenario (see livedin_build.py).

    python3 scripts/data/gen_livedin_rafa.py           # write livedin-rafa.json
    python3 scripts/data/gen_livedin_rafa.py --check   # only verify the committed JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from livedin_build import A, Q, U, run  # noqa: E402

PERSON = "Rafa Ortega (dev, written for issue 48: a chef whose home, kitchen, boss and partner change)"

SESSIONS = [
    (
        "2025-02-03 21:40",
        [
            U(
                "Evening. I'm Rafa, sous-chef at Salt & Ember on Bold Street, and after a double shift my memory "
                "is soup. Can you be my notebook?",
                "job.saltember",
            ),
            A(
                "Happy to be your notebook, Rafa. Sous-chef at Salt & Ember on Bold Street will give you plenty "
                "to keep track of; tell me things as they come up.",
                "job.saltember",
            ),
            U(
                "Home is a flat above a launderette on Lodge Lane in Toxteth. Always warm, always smells of "
                "fabric softener.",
                "home.toxteth",
            ),
            A(
                "A flat over a launderette in Toxteth: warm in winter at least, and you'll never run out of "
                "clean aprons.",
                "home.toxteth",
            ),
        ],
    ),
    (
        "2025-02-09 11:15",
        [
            U(
                "The owner at Salt & Ember is Gino Ferraro. He signs off the rota and the menus and he's my boss, "
                "for my sins.",
                "boss.gino",
            ),
            A("Noted: Gino Ferraro owns Salt & Ember and you report to him.", "boss.gino"),
            U("He's fine really. Just shouts about the price of olive oil every Monday."),
        ],
    ),
    (
        "2025-02-14 16:30",
        [
            U(
                "Valentine's plan: Lucía finishes at the library at six and I've booked us a table at a tapas "
                "place I don't cook at, for once. Eight months together this week.",
                "partner.lucia",
            ),
            A(
                "A night on the other side of the pass with Lucía, lovely. Enjoy being served for a change, and "
                "happy eight months.",
                "partner.lucia",
            ),
        ],
    ),
    (
        "2025-02-20 08:50",
        [
            U(
                "GP says my blood pressure is too high for a man of 38. She's put me on amlodipine, 5 mg once a day.",
                "dose.5",
            ),
            A(
                "Amlodipine 5 mg once a day, got it. Take it at the same time every day; swollen ankles are a "
                "common side effect, so mention them if they turn up.",
                "dose.5",
            ),
            U("Fourteen-hour shifts and tasting salty sauces all day, what did I expect."),
        ],
    ),
    (
        "2025-02-27 22:10",
        [
            U(
                "Need to scale my arroz negro from 4 portions to 60 for a wedding. 400 g bomba rice, 1.2 litres "
                "fish stock, 2 sachets squid ink, 1 onion, 4 garlic cloves."
            ),
            A(
                "Multiply by 15: 6 kg bomba rice, 18 litres fish stock, 30 sachets of ink, 15 onions, 60 garlic "
                "cloves. Don't scale the depth, though: cook it in four wide pans or the bottom will stew instead "
                "of forming a socarrat."
            ),
            U("Four pans it is. Do I salt the stock the same?"),
            A(
                "Salt to taste at the end rather than multiplying: stock reduces differently in a big batch, and "
                "the ink is already salty."
            ),
        ],
    ),
    (
        "2025-03-05 19:00",
        [
            U(
                "Paperwork for my lock-up garage on Smithdown Road, where the paella pans and catering gear live. "
                "The keypad code is 2719.",
                "code.1",
            ),
            A(
                "Lock-up on Smithdown Road: keypad 2719. I'll keep it for when you're standing there with your "
                "arms full of pans.",
                "code.1",
            ),
        ],
    ),
    (
        "2025-03-09 12:20",
        [
            U(
                "My sister Marta rang from Madrid after a run of nights on the labour ward. Eleven years a "
                "midwife and babies at 3 a.m. are still her normal.",
                "stable.sister",
            ),
            A(
                "Eleven years delivering babies in Madrid — Marta keeps hours even worse than a kitchen's.",
                "stable.sister",
            ),
            U(
                "We grew up in Benimaclet, in Valencia, so Madrid still feels like a foreign country to me.",
                "stable.hometown",
            ),
            A("A Valencian abroad on both sides, then: you in Liverpool, her in Madrid."),
        ],
    ),
    (
        "2025-03-16 10:40",
        [
            U(
                "Chorizo, my rescue greyhound, is limping on his back left leg. Booked him in at Allerton Vets "
                "for Tuesday.",
                "vet.allerton",
                "stable.breed",
            ),
            A(
                "Poor Chorizo. Ex-racers often strain a muscle sprinting; Allerton Vets will also check his pads "
                "for corns, which greyhounds get a lot.",
                "vet.allerton",
            ),
            U(
                "He's six and came from the Greyhound Trust. Laziest animal alive apart from the sprinting.",
                "stable.breed",
            ),
        ],
    ),
    (
        "2025-03-22 17:00",
        [
            U(
                "Rode the cream Vespa Primavera into town in the sleet again. 125cc of pure stubbornness, she "
                "gets me to Bold Street in twelve minutes.",
                "vehicle.vespa",
            ),
            A(
                "A Vespa in Liverpool sleet is commitment. Heated grips and proper gloves would make those twelve "
                "minutes kinder.",
                "vehicle.vespa",
            ),
        ],
    ),
    (
        "2025-03-29 20:30",
        [
            U(
                "Pub quiz at the Lodge tonight with a football round. I'm Everton through and through, so anything "
                "about Goodison is mine.",
                "stable.team",
            ),
            A("Then you're the blue on the team. Brush up on the move to Bramley-Moore Dock; quizmasters love it."),
            U("Who won the FA Cup in 1995?"),
            A("Everton, 1–0 against Manchester United, Paul Rideout with the header."),
        ],
    ),
    (
        "2025-04-05 09:15",
        [
            U(
                "Signed up for five-a-side at the Power League in Garston, Sundays at 10. The doctor said "
                "exercise, so.",
                "club.fiveaside",
            ),
            A(
                "Five-a-side in Garston on Sunday mornings: good for the blood pressure, as long as you warm up first.",
                "club.fiveaside",
            ),
        ],
    ),
    (
        "2025-04-11 23:05",
        [
            U(
                "Help me cost a dish: 180 g hake at £16/kg, 60 g chorizo at £12/kg, 150 g white beans at £3/kg, "
                "40 ml olive oil at £9 a litre."
            ),
            A(
                "Hake £2.88, chorizo £0.72, beans £0.45, oil £0.36: £4.41 a plate. At a 28% food-cost target the "
                "menu price is about £15.75; round it to £16."
            ),
            U("Gino wants 25% on everything new."),
            A("At 25% it's £17.64, so £17.50 or £18 on the menu."),
        ],
    ),
    (
        "2025-04-17 18:20",
        [
            U(
                "Started a Portuguese evening class at the Bluecoat, Tuesdays 7 till 9. A Spaniard learning "
                "Portuguese, my abuela would laugh.",
                "class.tuesday",
            ),
            A(
                "Tuesday evenings at the Bluecoat, 7 to 9. Your Spanish will help with the reading, less with "
                "the vowels.",
                "class.tuesday",
            ),
        ],
    ),
    (
        "2025-04-26 15:00",
        [
            U("At the lock-up with a crate of pans on my hip, what's the keypad code?"),
            A("It's 2719 for the Smithdown Road lock-up.", "code.1"),
        ],
    ),
    (
        "2025-05-04 12:30",
        [
            U(
                "Lucía and I called it a day last night. No drama, she's off to Leeds for a PhD and we both knew.",
                "x~partner.lucia",
            ),
            A("I'm sorry, Rafa. Ending it kindly still hurts. Eat something you didn't cook yourself this week."),
        ],
    ),
    (
        "2025-05-11 20:45",
        [
            U(
                "Blood pressure review: still 150 over 95, so the GP doubled my dose. 10 mg every morning from "
                "tomorrow.",
                "dose.10",
            ),
            A(
                "10 mg each morning from tomorrow, then. Go easy on tasting the salty sauces and keep an eye on "
                "your ankles.",
                "dose.10",
            ),
        ],
    ),
    (
        "2025-05-24 22:30",
        [
            U(
                "Can you help me write to the council? The bins behind the launderette on Lodge Lane haven't been "
                "emptied in three weeks and the rats have noticed."
            ),
            A(
                "Dear Sir or Madam, I am writing about the bins behind the launderette on Lodge Lane, Toxteth, "
                "which have not been collected for three weeks. Rats are now visible in the yard during the day. "
                "Please arrange a collection and let me know what caused the missed rounds. Yours faithfully, "
                "Rafael Ortega."
            ),
            U("Add that it's a food business two doors down, that usually gets them moving."),
        ],
    ),
    (
        "2025-06-02 19:10",
        [
            U(
                "Big news: Quayside Kitchen in the Baltic Triangle offered me the top job and I said yes. From "
                "July the menu and the pass are mine.",
                "job.quayside",
            ),
            A(
                "Head chef at Quayside Kitchen — congratulations, Rafa! Your own menu in the Baltic Triangle from "
                "July.",
                "job.quayside",
            ),
            U("Told Gino this morning. He shouted about olive oil, then hugged me."),
        ],
    ),
    (
        "2025-06-15 14:00",
        [
            U(
                "A couple want a quote for paella for 80 at their wedding in August. Write me a short friendly "
                "email with two options."
            ),
            A(
                "Hi both, thanks for thinking of me! Option one: seafood paella cooked on site in three big pans, "
                "with bread and alioli, £14 a head. Option two: the same plus a vegetable paella and a Valencian "
                "salad, £17 a head. Both include the pans, burners and clearing up. Happy to talk it through. "
                "Rafa"
            ),
        ],
    ),
    (
        "2025-07-06 21:50",
        [
            U(
                "First week at Quayside done. Harriet Cole owns the place and runs front of house; she's the one "
                "I answer to now, and she actually reads the invoices.",
                "boss.harriet",
            ),
            A(
                "Harriet Cole, owner and front of house at Quayside, and the person you report to. An owner who "
                "reads invoices is a gift.",
                "boss.harriet",
            ),
        ],
    ),
    (
        "2025-07-13 08:30",
        [
            U(
                "Someone nicked the Vespa from outside the flat overnight. The police gave me a crime number and "
                "a shrug.",
                "x~vehicle.vespa",
            ),
            A(
                "That's rotten, Rafa. Send the crime number to your insurer today; some policies cover a hire "
                "scooter while they process the claim."
            ),
        ],
    ),
    (
        "2025-07-20 16:40",
        [
            U(
                "The landlord changed the lock-up keypad after a break-in two doors down. 2719 is dead, it's 5530 now.",
                "code.2",
                "x~code.1",
            ),
            A("Updated: the Smithdown Road lock-up is 5530, not 2719.", "code.2", "x~code.1"),
        ],
    ),
    (
        "2025-08-03 10:05",
        [
            U(
                "Hung up the boots. My knee has had enough of Sunday mornings in Garston and so have I.",
                "club.end",
            ),
            A("Fair enough. Swimming or a bike would be kinder to the knee and still good for your heart."),
        ],
    ),
    (
        "2025-08-10 19:30",
        [
            U("Planning four days in Lisbon in October. Where should a chef eat that isn't on every list?"),
            A(
                "A tasca in Alfama for grilled sardines at lunch, a bifana from a counter in Baixa, the market "
                "at Campo de Ourique rather than Time Out, and a pastel de nata from somewhere with a queue of "
                "locals, not tourists."
            ),
            U("And a phrase for asking if they have a table for one?"),
            A("'Tem mesa para um?' — and practise the nasal vowel before you go."),
        ],
    ),
    (
        "2025-08-24 22:00",
        [
            U(
                "Dev from the cheese stall at Baltic Market stayed over again. Chorizo has decided he's his "
                "person now, so I suppose that's settled.",
                "partner.dev",
            ),
            A(
                "Chorizo's approval is a strong reference. Sounds like a good thing with Dev, Rafa.",
                "partner.dev",
            ),
        ],
    ),
    (
        "2025-09-06 12:00",
        [
            U(
                "Got the keys! Left the launderette flat in Toxteth behind for a little two-up two-down off "
                "Picton Road in Wavertree. Chorizo has a garden.",
                "home.wavertree",
                "x~home.toxteth",
            ),
            A(
                "Congratulations on the keys! A garden in Wavertree is a big upgrade for a greyhound.",
                "home.wavertree",
            ),
            U("Boxes everywhere. Dev carried the fridge, I carried the knives."),
        ],
    ),
    (
        "2025-09-14 18:15",
        [
            U(
                "Registered Chorizo at Riverside Vets on Smithdown Road, five minutes' walk from the new place. "
                "The old practice was a bus ride away.",
                "vet.riverside",
            ),
            A("Riverside Vets on Smithdown Road it is, for Chorizo from now on.", "vet.riverside"),
        ],
    ),
    (
        "2025-09-21 20:00",
        [
            U(
                "Our language group at the Bluecoat shifts to Thursday evenings from next week, same 7 till 9; "
                "the teacher got a job elsewhere on Tuesdays.",
                "class.thursday",
                "x~class.tuesday",
            ),
            A("Thursday evenings at the Bluecoat from next week, then.", "class.thursday"),
        ],
    ),
    (
        "2025-10-05 09:40",
        [
            U(
                "Finally replaced the stolen scooter: a secondhand Brompton, racing green, folds up under the pass "
                "at work.",
                "vehicle.brompton",
            ),
            A(
                "A folding bike that tucks under the pass is perfect for a kitchen in the Baltic Triangle. Get a "
                "proper D-lock anyway.",
                "vehicle.brompton",
            ),
        ],
    ),
    (
        "2025-10-18 15:30",
        [
            U("Quick one, I'm at the Smithdown Road garage with the paella pans again, which number?"),
            A("5530 — that's been the lock-up's keypad code since July.", "code.2"),
        ],
    ),
    (
        "2025-10-26 21:15",
        [
            U(
                "Write me an Instagram caption for Quayside's autumn menu: hake with white beans, wild mushroom "
                "rice, quince tart."
            ),
            A(
                "Autumn has landed at Quayside 🍂 Hake on white beans, wild mushroom rice that tastes of the woods, "
                "and a quince tart we're not sharing. Book a table before the clocks go back again."
            ),
        ],
    ),
    (
        "2025-11-02 11:10",
        [
            U(
                "Marta keeps asking what I want for my birthday on the 11th of November. I'm turning 39 and I "
                "want a sharpening stone and a nap.",
                "stable.birthday",
            ),
            A("Thirty-nine on 11 November: a whetstone and a nap is a very chef's wish list.", "stable.birthday"),
        ],
    ),
    (
        "2025-11-16 20:20",
        [
            U(
                "The garage keypad got reset again after the landlord's yearly check; the new number is 0804. "
                "It's on my hand in biro until you've got it.",
                "code.3",
            ),
            A("Got it: 0804 opens the lock-up now. You can wash your hand.", "code.3"),
        ],
    ),
    (
        "2025-11-25 17:00",
        [
            U(
                "Booked a check-up with the dentist at last: Friday 9 January, 8:20, the practice on Rose Lane. "
                "Two years since the last one, don't tell anyone.",
                "dentist.jan9",
            ),
            A("Friday 9 January at 8:20 on Rose Lane. Your secret is safe.", "dentist.jan9"),
        ],
    ),
    (
        "2025-12-08 22:40",
        [
            U("Christmas set menu for Quayside, three courses. I need a vegan main that isn't a sad nut roast."),
            A(
                "Roast celeriac steak with romesco, crispy chickpeas and charred leeks, finished with a sherry "
                "vinegar dressing. It carves at the table like a joint, which keeps it festive."
            ),
            U("Harriet will love that it carves at the table. Starter?"),
            A("Beetroot cured in orange with a horseradish yoghurt — swap the yoghurt for whipped tofu for vegans."),
        ],
    ),
    (
        "2025-12-15 09:00",
        [
            U(
                "Pastry want a pavlova with kiwi on the Christmas menu. I can't even taste it, my mouth swells up "
                "with kiwi, so someone else signs that one off.",
                "stable.allergy",
            ),
            A(
                "Then the pastry chef tastes the kiwi, not you. Keep antihistamines in the office just in case.",
                "stable.allergy",
            ),
        ],
    ),
    (
        "2025-12-20 19:45",
        [
            U(
                "Rose Lane rang: the 9th is off because the hygienist is off sick. They've put me in for Tuesday "
                "27 January at 15:10 instead.",
                "dentist.jan27",
                "x~dentist.jan9",
            ),
            A("Moved, then: Tuesday 27 January at 15:10, Rose Lane.", "dentist.jan27"),
        ],
    ),
    (
        "2026-01-04 21:00",
        [
            U("What's the number for the lock-up these days? Brain's gone after New Year's service."),
            A("The Smithdown Road lock-up opens with 0804 now.", "code.3"),
            U("Legend. Dev's making me take tomorrow off."),
        ],
    ),
    (
        "2026-01-12 18:30",
        [
            U(
                "Marta is visiting from Madrid in February. Plan me a Liverpool day for someone who hates "
                "museums and loves markets."
            ),
            A(
                "Morning at the Baltic Market for breakfast, a ferry across the Mersey, lunch at Lark Lane, a walk "
                "round Sefton Park, then tapas somewhere you don't work so you both sit down."
            ),
        ],
    ),
    (
        "2026-01-20 10:00",
        [
            U(
                "Chorizo had his booster at the practice round the corner and behaved like a gentleman. First "
                "time ever."
            ),
            A("A gentleman greyhound at the vet's, what a milestone. Treats are earned."),
        ],
    ),
]

QUESTIONS = [
    Q("Whereabouts in Liverpool do I live now?", "current", ["home.wavertree"], ["home.toxteth"]),
    Q("Which restaurant am I cooking at these days?", "current", ["job.quayside"], ["job.saltember"]),
    Q("What's my job title at the moment?", "current", ["job.quayside"], ["job.saltember"]),
    Q("Who do I report to at work now?", "current", ["boss.harriet"], ["boss.gino"]),
    Q("Am I seeing anyone right now?", "current", ["partner.dev"], ["partner.lucia"]),
    Q("What's my other half called?", "current", ["partner.dev"], ["partner.lucia"]),
    Q("What do I ride around town these days?", "current", ["vehicle.brompton"], ["vehicle.vespa"]),
    Q("Which practice looks after my dog now?", "current", ["vet.riverside"], ["vet.allerton"]),
    Q("What opens the garage where I keep the catering gear?", "current", ["code.3"], ["code.1", "code.2"]),
    Q("What strength are my blood pressure pills now?", "current", ["dose.10"], ["dose.5"]),
    Q("Do I still play football on Sundays?", "current", ["club.end"], ["club.fiveaside"]),
    Q("Which evening is my Portuguese lesson?", "current", ["class.thursday"], ["class.tuesday"]),
    Q("When's my next dental appointment?", "current", ["dentist.jan27"], ["dentist.jan9"]),
    Q("Where was I living before the move?", "history", ["home.toxteth"]),
    Q("Which restaurant was I sous-chef at?", "history", ["job.saltember"]),
    Q("Who was I seeing before Dev?", "history", ["partner.lucia"]),
    Q("What did I ride before the folding bike?", "history", ["vehicle.vespa"]),
    Q("What was the lock-up code originally?", "history", ["code.1"]),
    Q("What dose did I start my blood pressure tablets on?", "history", ["dose.5"]),
    Q("Who looked after Chorizo before I moved house?", "history", ["vet.allerton"]),
    Q("When's my birthday?", "stable", ["stable.birthday"]),
    Q("Which city did I grow up in?", "stable", ["stable.hometown"]),
    Q("What does Marta do for a living?", "stable", ["stable.sister"]),
    Q("Which football club do I support?", "stable", ["stable.team"]),
    Q("Which fruit do I react to?", "stable", ["stable.allergy"]),
    Q("What kind of dog is Chorizo?", "stable", ["stable.breed"]),
]


if __name__ == "__main__":
    sys.exit(run(PERSON, SESSIONS, QUESTIONS, Path(__file__).resolve().parent / "livedin-rafa.json", sys.argv[1:]))
