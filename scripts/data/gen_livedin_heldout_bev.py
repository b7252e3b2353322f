#!/usr/bin/env python3
"""Generate scripts/data/livedin-heldout-bev.json: Bev Hollis, a retired postie in Adelaide (HELD OUT for
issue 48: nobody tunes on her; do not read this file or the JSON while working on recall, only run the
benchmark on the JSON). Labelled turns → checked scenario (see livedin_build.py).

    python3 scripts/data/gen_livedin_heldout_bev.py           # write livedin-heldout-bev.json
    python3 scripts/data/gen_livedin_heldout_bev.py --check   # only verify the committed JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from livedin_build import A, Q, U, run  # noqa: E402

PERSON = "Bev Hollis (HELD OUT, written for issue 48: a retired postie in Adelaide who moves, works again and dates)"

SESSIONS = [
    (
        "2025-02-03 09:20",
        [
            U(
                "G'day. My granddaughter Chloe set this thing up for me so here goes. I'm Bev, 65, just finished "
                "up after 33 years as a postie with Australia Post, and I'm still rattling round the old house on "
                "Braund Road in Prospect. Three bedrooms and just me and the dog.",
                "stable.postie",
                "home.prospect",
            ),
            A(
                "Lovely to meet you, Bev, and congratulations on finishing up. Thirty-three years of rounds is a "
                "lot of letterboxes. A three-bedroom house in Prospect for you and the dog: I'll remember it.",
                "home.prospect",
            ),
        ],
    ),
    (
        "2025-02-08 16:05",
        [
            U(
                "Biscuit is my cocker spaniel, nine years old, more ears than brains. Her vet is Dr Anand at the "
                "Prospect Road Vet Clinic, she's had him since she was a pup",
                "stable.breed",
                "vet.anand",
            ),
            A(
                "Noted: Biscuit, a nine-year-old cocker spaniel, sees Dr Anand at Prospect Road Vet Clinic. Those "
                "ears will keep him busy.",
                "vet.anand",
            ),
        ],
    ),
    (
        "2025-02-14 07:40",
        [
            U(
                "Valentines day. Six years since my Graham passed. I still put two cups out some mornings without "
                "thinking, silly old thing.",
                "stable.graham",
            ),
            A("Not silly at all, Bev. Forty years of habit doesn't leave quickly. Go gently today."),
            U("Anyway. Enough of that, the lawn won't mow itself."),
        ],
    ),
    (
        "2025-02-19 13:10",
        [
            U(
                "Doing Tuesdays and Thursdays volunteering at the Vinnies on Prospect Road now, sorting donations. "
                "Found a fur coat in a bag of tea towels yesterday. Keeps me out of mischief",
                "job.vinnies",
            ),
            A(
                "Two days a week at the Vinnies shop sorting donations sounds right up your alley, and the fur "
                "coat is a great find.",
                "job.vinnies",
            ),
        ],
    ),
    (
        "2025-02-25 18:30",
        [
            U(
                "need to triple my pumpkin scone recipe for the church morning tea. 250g mashed pumpkin, 2 tbsp "
                "butter, half cup sugar, 1 egg, 2.5 cups SR flour"
            ),
            A(
                "Tripled: 750 g mashed pumpkin, 6 tbsp butter, 1½ cups sugar, 3 eggs, 7½ cups self-raising flour. "
                "Bake in two batches so the middle ones rise properly."
            ),
            U("Lovely. Flo from church will be sick with jealousy"),
        ],
    ),
    (
        "2025-03-04 11:45",
        [
            U(
                "Dr Lim says my sugars are up, pre-diabetic bordering on the real thing. He's started me on "
                "metformin 500mg, one tablet with tea.",
                "dose.500",
                "gp.lim",
            ),
            A(
                "Metformin 500 mg once a day with your evening meal, from Dr Lim. Taking it with food helps with "
                "the tummy upsets it can cause at first.",
                "dose.500",
            ),
            U(
                "And my glass of red every night with tea is staying, I told him that much. A woman has to have "
                "some vices.",
                "diet.red",
            ),
        ],
    ),
    (
        "2025-03-10 17:20",
        [
            U(
                "Pennant season's on! I'm playing lead in the Prospect Bowling Club Saturday side, division 5. "
                "We're hopeless but the afternoon tea is excellent",
                "team.prospect",
            ),
            A(
                "Lead for Prospect's Saturday pennant side: the one who sets the tone. Division 5 with a good "
                "afternoon tea is a fine place to be.",
                "team.prospect",
            ),
        ],
    ),
    (
        "2025-03-16 10:00",
        [
            U(
                "The silver Camry needs her rego again, $900 odd. She's a 2008 but she's never once let me down, "
                "Graham bought her new.",
                "car.camry",
            ),
            A(
                "A 2008 silver Camry that's never let you down is worth the rego. Keep her serviced and she'll go on.",
                "car.camry",
            ),
        ],
    ),
    (
        "2025-03-22 09:05",
        [
            U(
                "Started aqua aerobics at the Prospect pool, Mon and Wed 9am. A lot of old chooks in floral caps "
                "and now I'm one of them lol",
                "club.aqua",
            ),
            A("Aqua aerobics twice a week is kind on the joints. The floral cap is compulsory, I hear.", "club.aqua"),
        ],
    ),
    (
        "2025-03-29 20:15",
        [
            U(
                "Chloe is despairing of my Nokia. It's the flip one, I can ring and text, what more does a woman need",
                "phone.nokia",
            ),
            A(
                "A Nokia flip that rings, texts and lasts a week on a charge does the job. Chloe will try to "
                "convert you eventually.",
                "phone.nokia",
            ),
        ],
    ),
    (
        "2025-04-05 14:30",
        [
            U(
                "Got myself an Ancestry subscription. I'm tracing the Hollis side back to Cornwall, tin miners "
                "apparently! Explains the short legs",
                "project.tree",
            ),
            A(
                "Cornish tin miners on the Hollis side: lots of them came to the copper towns of South Australia "
                "in the 1840s, so look at Burra and Moonta records too.",
                "project.tree",
            ),
            U("Ooh Moonta. Will do"),
        ],
    ),
    (
        "2025-04-12 19:00",
        [
            U(
                "Leanne and the kids came down from Mount Barker for Easter lunch. All 4 grandkids tearing round "
                "the yard, Chloe the only one who helped wash up.",
                "kid.mtbarker",
                "stable.grandkids",
            ),
            A(
                "A full house at Easter with Leanne's family up from Mount Barker and four grandkids. Chloe sounds "
                "like a keeper."
            ),
            U("How long for a 2.2kg leg of lamb? Doing it again for Anzac day"),
            A("About 1 hour 50 at 180°C for medium, then rest it 15 minutes under foil."),
        ],
    ),
    (
        "2025-04-20 21:10",
        [
            U(
                "Birthday tomorrow, 66, don't tell anyone. 21 April, same day as the Queen had, God rest her.",
                "stable.birthday",
            ),
            A("Happy birthday for tomorrow, Bev. Sharing it with the Queen is good company."),
        ],
    ),
    (
        "2025-04-26 15:45",
        [
            U(
                "Joined the ukulele group at U3A on Fridays. We murder Beatles songs every week and nobody complains",
                "class.uke",
            ),
            A("Fridays at U3A with a ukulele: Here Comes the Sun will never be the same.", "class.uke"),
        ],
    ),
    (
        "2025-04-27 18:20",
        [
            U(
                "Port lost AGAIN. Barracked for them since I was a girl in Whyalla and it never gets any easier",
                "stable.footy",
                "stable.born",
            ),
            A("A lifelong Port Adelaide supporter from Whyalla: you've earned every grey hair. Next week."),
        ],
    ),
    (
        "2025-05-03 12:00",
        [
            U(
                "Bit of goss. There's a widower at bowls, Ray Pellegrini, and he keeps bringing me lemon slice. "
                "I think I'm being courted?? At my age!"
            ),
            A("Lemon slice is a serious sign. Enjoy it, Bev."),
        ],
    ),
    (
        "2025-05-10 10:30",
        [
            U(
                "Bupa want $214 a month for my hospital and extras now. Daylight robbery. That's my health fund "
                "for you",
                "insurer.bupa",
            ),
            A(
                "That's a steep jump for Bupa hospital and extras. It's worth comparing funds before the next "
                "premium rise; switching keeps your waiting periods served.",
                "insurer.bupa",
            ),
            U("Help me write a letter to council about the stobie pole outside mine, it's leaning like a drunk"),
            A(
                "Dear Sir or Madam, I am writing about the stobie pole outside my house on Braund Road, which now "
                "leans noticeably towards the footpath. I am concerned it is unsafe for pedestrians..."
            ),
        ],
    ),
    (
        "2025-05-18 20:40",
        [
            U(
                "Well. Ray asked if he could call me his lady friend and I said yes!! Chloe screamed down the "
                "phone. We're going to the pictures Thursday.",
                "partner.ray",
            ),
            A("Oh Bev, that's lovely news. Ray and the lemon slice won. Enjoy the pictures.", "partner.ray"),
        ],
    ),
    (
        "2025-05-26 11:15",
        [
            U("Leanne reckons I should downsize. Had a look at a few units down Glenelg way with the agent."),
            A("Near the beach would be lovely for you and Biscuit. Look for a yard and a short walk to the shops."),
            U("What's my vet's name again? Biscuit's ear is off again"),
            A("Dr Anand at the Prospect Road clinic looks after her.", "vet.anand"),
        ],
    ),
    (
        "2025-06-02 15:00",
        [
            U(
                "Well I've gone and done it, I'm a working woman again! Coastal Seedlings in Somerton Park took me "
                "on, Mon Wed Fri mornings, on the register mostly. Told Vinnies I'll still pop in when I can.",
                "job.nursery",
                "role.casual",
                "roster.mwf",
                "x~job.vinnies",
            ),
            A(
                "Good on you, Bev: three mornings a week on the register at Coastal Seedlings, Monday, Wednesday "
                "and Friday. You'll come home with more plants than pay.",
                "job.nursery",
                "role.casual",
                "roster.mwf",
            ),
        ],
    ),
    (
        "2025-06-08 17:50",
        [
            U(
                "The owner is Marg Tully, she's run the place 30 years and knows every plant by its Latin name. "
                "Scary but fair",
                "boss.marg",
            ),
            A(
                "Marg Tully, owner for thirty years and Latin-fluent. Scary but fair is a good boss to have.",
                "boss.marg",
            ),
        ],
    ),
    (
        "2025-06-15 08:30",
        [
            U(
                "Given the aqua class the flick. Shoulder's been crook since April and that pool is freezing in "
                "June anyway",
                "club.end",
            ),
            A("Sensible. Get the shoulder looked at, and there's no prize for freezing."),
        ],
    ),
    (
        "2025-06-24 19:30",
        [
            U("Whats the best way to pack good china for a move? Mum's Royal Doulton, I'd die if it broke"),
            A(
                "Wrap each piece in packing paper, not newspaper (the ink transfers). Stand plates on their edges "
                "like records, never flat, and fill every gap so nothing moves. Mark the box FRAGILE on all sides."
            ),
            U("On their edges. Who knew. Thank you love"),
        ],
    ),
    (
        "2025-07-05 18:00",
        [
            U(
                "GOT THE KEYS!!! Little two bedroom unit on Partridge Street, Glenelg North, ten minutes' stroll "
                "to the jetty. Biscuit has already claimed the sunny corner.",
                "home.unit",
            ),
            A(
                "Congratulations on the keys! A two-bedroom unit on Partridge Street, Glenelg North, near the "
                "jetty, and Biscuit has her corner. Welcome home.",
                "home.unit",
            ),
        ],
    ),
    (
        "2025-07-12 13:25",
        [
            U(
                "Sold the Camry to a P-plater from Marion for $3500, felt like giving away a child. Then went and "
                "treated myself to new wheels — a little red Kia Picanto, 20,000 on the clock.",
                "car.kia",
                "x~car.camry",
            ),
            A(
                "A red Kia Picanto with only 20,000 km: easy to park at the beach. The Camry went to a good home, "
                "I'm sure.",
                "car.kia",
            ),
        ],
    ),
    (
        "2025-07-19 10:40",
        [
            U(
                "Took Biscuit to the animal hospital on Jetty Road for her ears. Dr Sophie there was lovely, so "
                "that's us sorted, no more driving back up to the old suburb",
                "vet.jetty",
            ),
            A("Dr Sophie on Jetty Road, close to home. Biscuit's ears are in good hands.", "vet.jetty"),
        ],
    ),
    (
        "2025-07-27 16:10",
        [
            U(
                "Had a roll-up with the Holdfast Bay mob. They've popped me straight in their Wednesday side as "
                "second. Nice bunch, better biscuits than Prospect",
                "team.holdfast",
                "x~team.prospect",
            ),
            A("Second in Holdfast Bay's Wednesday side, and better biscuits. A good move all round.", "team.holdfast"),
        ],
    ),
    (
        "2025-08-03 12:30",
        [
            U(
                "Found myself a new doctor down here, Dr Okafor at the Brighton Road clinic. Young, kind, actually "
                "listens.",
                "gp.okafor",
            ),
            A("Dr Okafor at Brighton Road: a doctor who listens is worth the change.", "gp.okafor"),
        ],
    ),
    (
        "2025-08-09 17:00",
        [
            U(
                "Jayden put one of those lockboxes by the front door with a spare key in, in case I have a fall, "
                "heaven forbid. Code is 4471",
                "code.4471",
            ),
            A("Lockbox by the front door, code 4471. A sensible idea from Jayden.", "code.4471"),
        ],
    ),
    (
        "2025-08-16 09:50",
        [
            U(
                "Ashford Hospital finally wrote - cataract op on the left eye is 2 September, 7.30am, no food after midnight."
            ),
            A("Left eye on 2 September at Ashford. Arrange a lift home; you won't be driving that day."),
        ],
    ),
    (
        "2025-08-24 20:05",
        [
            U(
                "Jayden's passed his old iPhone 11 down to me. I've sent 14 selfies by accident, all chin",
                "phone.iphone",
            ),
            A(
                "Welcome to the iPhone 11, Bev. The chin photos are a rite of passage; the side button is the culprit.",
                "phone.iphone",
            ),
        ],
    ),
    (
        "2025-09-01 19:45",
        [
            U(
                "Ray's moving back up to Mildura to be near his daughter and her bubs. We had a good long talk "
                "over a pie and decided to leave it there. No hard feelings. Just a bit sad",
                "partner.end",
            ),
            A("That's a grown-up way to part, Bev, but sad all the same. Be kind to yourself this week."),
        ],
    ),
    (
        "2025-09-06 14:20",
        [
            U("Eye done! I can see the colour of my own curtains. They're hideous"),
            A("Ha! Welcome to high definition. Keep the drops going and no bending to pull weeds for a bit."),
        ],
    ),
    (
        "2025-09-09 06:50",
        [
            U(
                "Joined the Tuesday sunrise walkers on the Esplanade, 5km to Brighton and back with a coffee at the "
                "end. Best thing I've done all year",
                "exercise.walk",
            ),
            A(
                "Five kilometres along the sea at sunrise, then coffee. Your shoulder will thank you too.",
                "exercise.walk",
            ),
        ],
    ),
    (
        "2025-09-20 21:00",
        [
            U(
                "Haven't touched a drop since the eye op, and honestly I sleep better. Ray would have laughed",
                "diet.dry",
            ),
            A("Better sleep is a good trade. Good on you."),
        ],
    ),
    (
        "2025-09-28 11:35",
        [
            U(
                "Big news at work. Marg's sold up and retired to Victor Harbor! A young fella called Hamish Doyle "
                "bought the place, he's the one signing my timesheets now",
                "boss.hamish",
                "x~boss.marg",
            ),
            A(
                "Hamish Doyle signing your timesheets now, and Marg off to Victor Harbor. New broom at Coastal Seedlings.",
                "boss.hamish",
            ),
        ],
    ),
    (
        "2025-10-06 16:15",
        [
            U(
                "Hamish has put me in charge of the seedling benches - ordering, the watering rota, the lot. Proper "
                "title on a badge and 50c more an hour!",
                "role.lead",
            ),
            A("In charge of the seedling benches with a badge to prove it. Well deserved, Bev.", "role.lead"),
        ],
    ),
    (
        "2025-10-14 10:10",
        [
            U("Dr Okafor's doubled my tablets, two with tea now. HbA1c was 7.1, not great not terrible", "dose.1000"),
            A("Two tablets with your evening meal now. Ask Dr Okafor when she wants the next blood test.", "dose.1000"),
        ],
    ),
    (
        "2025-10-20 18:40",
        [
            U(
                "Hamish has me on Tuesdays and Saturdays now instead of the three mornings. Saturdays are chaos, "
                "every man and his dog wants tomato seedlings",
                "roster.tusat",
            ),
            A("Tuesdays and Saturdays, then, after your sunrise walk on Tuesdays. Busy woman.", "roster.tusat"),
        ],
    ),
    (
        "2025-10-27 20:20",
        [
            U(
                "The family tree's gone in the drawer for now. Every spare hour is going into a quilt for Chloe's "
                "21st in March, blues and yellows, I'm on square 40 of 120",
                "project.quilt",
                "x~project.tree",
            ),
            A(
                "A blue and yellow quilt for Chloe's 21st, 40 squares down and 80 to go. She'll treasure it.",
                "project.quilt",
            ),
        ],
    ),
    (
        "2025-11-03 19:15",
        [
            U(
                "Leanne's Dave got posted to Darwin with the Army so they're packing up Mount Barker. They fly out "
                "on the 20th. I'm gutted, I won't see the little ones for months",
                "kid.darwin",
                "x~kid.mtbarker",
            ),
            A(
                "That's a long way to Darwin, Bev. Video calls on the new phone will help, and flights from "
                "Adelaide are direct.",
                "kid.darwin",
            ),
        ],
    ),
    (
        "2025-11-12 13:00",
        [
            U(
                "Rang round all morning. Ditched Bupa, it's HCF from the 1st of December, saves me $38 a month. Go me",
                "insurer.hcf",
                "x~insurer.bupa",
            ),
            A("HCF from 1 December and $38 a month back in your pocket. Nice work.", "insurer.hcf"),
        ],
    ),
    (
        "2025-11-20 17:30",
        [
            U(
                "Had the carpet blokes in so I changed the lockbox numbers after. 0815 now, Jayden's the only one "
                "who knows. Well, and you",
                "code.0815",
            ),
            A("Lockbox changed to 0815. Your secret's safe with me.", "code.0815"),
        ],
    ),
    (
        "2025-11-28 15:50",
        [
            U(
                "Gave away the strumming. Fridays I'm at the watercolour group now, painted a pelican that looks "
                "like a handbag",
                "class.paint",
            ),
            A(
                "Watercolours on Fridays, and a pelican-handbag for the fridge. Everyone starts somewhere.",
                "class.paint",
            ),
        ],
    ),
    (
        "2025-12-06 19:25",
        [
            U(
                "Christmas list. 4 grandkids, $50 each, Chloe's into candles, Jayden gaming, the little two "
                "anything that makes noise. Ideas?"
            ),
            A(
                "Chloe: a good soy candle and a holder. Jayden: a game store gift card. The little ones: a "
                "xylophone and a bubble machine, and apologise to Leanne in advance."
            ),
            U("Bubble machine to Darwin, ha. Leanne will disown me"),
        ],
    ),
    (
        "2025-12-12 11:05",
        [
            U("Ashford's sent the letter for the right eye: 4 February 2026, 7am arrival", "appt.feb4"),
            A("Right eye on 4 February 2026, arrive 7am. Same drill as the first one.", "appt.feb4"),
        ],
    ),
    (
        "2026-01-08 09:40",
        [
            U(
                "Surgeon's on leave, they've pushed the other one back to Wednesday 18 Feb. Same drill, no brekkie",
                "appt.feb18",
                "x~appt.feb4",
            ),
            A("Wednesday 18 February now, nothing to eat from midnight.", "appt.feb18"),
        ],
    ),
    (
        "2026-01-14 18:55",
        [
            U("Lamington recipe for Australia Day please, a big tray for the walkers"),
            A(
                "Bake a butter sponge in a 20×30 cm tin a day ahead, cut into squares, dip in a thin chocolate "
                "icing and roll in desiccated coconut. Set on a rack for an hour."
            ),
        ],
    ),
    (
        "2026-01-18 08:15",
        [
            U("which days do I work again? brain like a sieve this morning"),
            A("Tuesdays and Saturdays at Coastal Seedlings, on the seedling benches.", "roster.tusat"),
            U("Ta love. Off to water the petunias"),
        ],
    ),
]

QUESTIONS = [
    Q("Which suburb am I living in these days?", "current", ["home.unit"], ["home.prospect"]),
    Q("Where did I end up moving to?", "current", ["home.unit"], ["home.prospect"]),
    Q("Where am I working these days?", "current", ["job.nursery"], ["job.vinnies"]),
    Q("What's my role at work now?", "current", ["role.lead"], ["role.casual"]),
    Q("Who's my boss at the moment?", "current", ["boss.hamish"], ["boss.marg"]),
    Q("Which days am I rostered on?", "current", ["roster.tusat"], ["roster.mwf"]),
    Q("Am I seeing anyone at the moment?", "current", ["partner.end"], ["partner.ray"]),
    Q("Who do I bowl for these days?", "current", ["team.holdfast"], ["team.prospect"]),
    Q("What am I driving now?", "current", ["car.kia"], ["car.camry"]),
    Q("What did I replace my old car with?", "current", ["car.kia"], ["car.camry"]),
    Q("What colour is my car?", "current", ["car.kia"], ["car.camry"]),
    Q("Which vet does Biscuit go to now?", "current", ["vet.jetty"], ["vet.anand"]),
    Q("Am I still doing aqua aerobics?", "current", ["club.end"], ["club.aqua"]),
    Q("What do I do to keep fit these days?", "current", ["exercise.walk"], ["club.aqua"]),
    Q("How much metformin am I taking now?", "current", ["dose.1000"], ["dose.500"]),
    Q("What did the doctor change my dose to?", "current", ["dose.1000"], ["dose.500"]),
    Q("Who's my GP now?", "current", ["gp.okafor"], ["gp.lim"]),
    Q("Do I still have a glass of red with my tea?", "current", ["diet.dry"], ["diet.red"]),
    Q("What phone have I got now?", "current", ["phone.iphone"], ["phone.nokia"]),
    Q("What's my spare-time project at the moment?", "current", ["project.quilt"], ["project.tree"]),
    Q("When's my next eye surgery?", "current", ["appt.feb18"], ["appt.feb4"]),
    Q("What's the code for the spare key box?", "current", ["code.0815"], ["code.4471"]),
    Q("Where does Leanne live now?", "current", ["kid.darwin"], ["kid.mtbarker"]),
    Q("Which health fund am I with?", "current", ["insurer.hcf"], ["insurer.bupa"]),
    Q("Which U3A group do I go to on Fridays now?", "current", ["class.paint"], ["class.uke"]),
    Q("Where did I live before the move?", "history", ["home.prospect"]),
    Q("Where did I volunteer before I got the job?", "history", ["job.vinnies"]),
    Q("Who was my boss originally at the nursery?", "history", ["boss.marg"]),
    Q("What did I drive before the Kia?", "history", ["car.camry"]),
    Q("Who was I seeing before we split up?", "history", ["partner.ray"]),
    Q("What was the spare key code originally?", "history", ["code.4471"]),
    Q("How much metformin was I on in March?", "history", ["dose.500"]),
    Q("What date was my second eye op first set for?", "history", ["appt.feb4"]),
    Q("When's my birthday?", "stable", ["stable.birthday"]),
    Q("What breed is Biscuit?", "stable", ["stable.breed"]),
    Q("How long was I a postie?", "stable", ["stable.postie"]),
    Q("What was my late husband's name?", "stable", ["stable.graham"]),
    Q("Which town did I grow up in?", "stable", ["stable.born"]),
    Q("Which footy team do I barrack for?", "stable", ["stable.footy"]),
    Q("How many grandkids have I got?", "stable", ["stable.grandkids"]),
]


if __name__ == "__main__":
    sys.exit(
        run(PERSON, SESSIONS, QUESTIONS, Path(__file__).resolve().parent / "livedin-heldout-bev.json", sys.argv[1:])
    )
