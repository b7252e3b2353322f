"""The lexicon of life subjects: what a statement about the person can give a value to.

Each subject has the words that name it in a statement or a question (`cues`, English) and a short
description (`about`) that the embedding model matches a question against when it shares no cue word
("Who am I going out with?" → partner). Subjects are checked in the order of `SUBJECTS`, the specific
before the general ("landlord" before "home", "vet" before "pet", "teacher" before "child"). A
`qualified` subject can hold several things at once (the shed's code and the wifi password are both
codes): the word that names which one (`qualifier`) makes it a subject of its own ("code:shed").

Written from what people tell an assistant about their lives, not from any benchmark's sentences; what it
covers and misses is documented in docs/memory.md ("The ledger").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .hints import Hints
from .endings import CLAUSE_END, LOCK_NUMBER, PUT_DOWN, RETIRED_TAIL
from .values import COLOUR
from .brands import (
    DEVICE_NAMES,
    DEVICE_NOUNS,
    DEVICES,
    NETWORK_NAMES,
    PHONE_NETWORKS,
    VEHICLE_MAKES,
    VEHICLE_MODELS,
    VEHICLE_NAMES,
    hint_words,
)


@dataclass(frozen=True)
class Subject:
    name: str
    about: str  # a description, for the embedding match of a question
    cues: re.Pattern[str]
    qualified: bool = False
    by_cue: bool = False  # qualified by the cue word itself (a podcast, an app), not the word before it
    # Words one of which every match of `cues` holds ("pill*": a word starting so): a clause holding
    # none is not searched. The cue expressions cost ~8 µs a search; a clause's words looked up once in
    # hints.py make most clauses free. tests/unit/test_memory_ledger.py holds hints and cues in step.
    hints: tuple[str, ...] = ()


def _w(words: str) -> tuple[str, ...]:
    return tuple(words.split())


# how the names of medicines end (generic names): metformin, sertraline, omeprazole, amlodipine, ramipril …
DRUG = r"[a-z]+(?:formin|aline|oxetine|alopram|prazole|dipine|pril|sartan|statin|olol|azepam|triptan|cillin|mycin|cycline|oxacin|thyroxine|trigine|tiapine|idone|ximab|umab|gliptin|flozin|setron|tadine|rizine|sone|lone|profen|amol|codeine|adol)\b"
# a time or a day something is at or on (not "at 5%", "on 2 wheels")
APPOINTED = (
    r"(?:\d{1,2}(?:[:.]\d\d)?\s*(?:am|pm)?\b(?![%.,]?\d)(?!\s*(?:%|percent|wheels|miles|km|kg|days|weeks|months|years))"
    r"|tomorrow|tonight|today|noon|midday|(?:mon|tues|wednes|thurs|fri|satur|sun)day|the \d)"
)
_COLOURED = _w("car van bike boat canoe kayak scooter motorbike door shed")


def _cue(words: str) -> re.Pattern[str]:
    # not a possessive: "my daughter's birthday", "our team's growth" say nothing of the daughter or team
    return re.compile(rf"\b(?:{words})\b(?!['’]s\b)", re.I)


SUBJECTS: tuple[Subject, ...] = (
    Subject(
        "code",
        "a password, passcode, PIN, lock combination, door code or wifi login: how to get in or get online",
        _cue(
            r"passwords?|passcodes?|pins?(?: numbers?| codes?)?|combinations?|combos?|(?:door|access|entry|key) ?codes?"
            r"|code(?<!dress code)(?<!some code)(?<!source code)(?<!zip code)(?<!post code)(?<!bar code)(?<!qr code)(?<!morse code)s?"
            r"|wi-?fi|logins?"
            # opens with a code, not "opens with 6am classes", "unlocks with 10 minutes to spare"
            rf"|(?:opens|unlocks) with (?=(?:[#*]|[a-z]{{1,2}})?{LOCK_NUMBER.format(3)})"
            # a lock said to be its number: "the alarm is 4455 now", "the gate's 2290 these days"
            # only a bare code of 3-8 digits (a gate's of 4-8): not a time, a size, an age or a decade
            rf"|(?:alarm|keypad|padlock|locker)(?:'s|’s| is)(?: now| still)? (?={LOCK_NUMBER.format(3)})"
            rf"|gate(?:'s|’s| is)(?: now| still)? (?={LOCK_NUMBER.format(4)})"
        ),
        qualified=True,
        hints=_w(
            "password* passcode* pin pins combination* combo* code* keycode* wifi wi-fi login* opens unlocks"
            " alarm keypad padlock gate locker"
        ),
    ),
    Subject(
        "number",
        "a phone number, account number, membership number, policy or reference number",
        _cue(
            r"(?:phone|mobile|account|policy|reference|membership|customer|licen[cs]e|passport) numbers?|numbers? (?:is|are)"
            r"|(?:cell|mobile) is|(?:new|a|my) (?:\w+ )?number"
        ),
        hints=_w("number* cell mobile"),
    ),
    Subject(
        "landlord",
        "who owns the home the person rents: the landlord, landlady or letting agent",
        _cue(r"landlord|landlady|letting agent|rent (?:it |the \w+ )?from|owns the (?:flat|house|apartment)"),
        hints=_w("landlord* landlady letting rent owns"),
    ),
    Subject(
        "birthday",
        "the person's birthday: the day and month they were born, their date of birth",
        _cue(
            r"(?:my|our) birthday(?! (?:party|present|gift|cake|dinner|drinks|meal|plans?|trip|card)s?\b)|date of birth|\bborn on"
        ),
        hints=_w("birthday date born"),
    ),
    Subject(
        "hometown",
        "where the person comes from: the town they grew up in, were born in, their hometown",
        _cue(
            r"grew up|i'?m from|i am from|originally from|born (?:in|and raised)|hometown|home town"
            r"|spent (?:my|our) (?:whole |entire )?(?:childhood|early years) in"
        ),
        hints=_w("grew from born hometown town spent"),
    ),
    Subject(
        "home",
        "where the person lives: their home, flat, apartment, house, town or city, address",
        _cue(
            r"(?:i|we)(?:'ve| have|'re| are| now| still)* (?:\w+ )?(?:live|living|moved|relocated)|moving in|move in"
            r"|(?<!from the )(?<!near the )(?<!to the )new (?:flat|house|apartment|place|home)|(?:my|our|the) (?:new )?address|resident|got the keys|settled in|moving day"
            r"|(?:i'm|i’m|i am|we're|we’re|we are) (?:now )?(?:based|living|settled) in"
            # a home said through a thing in it: "my bed is now in a tenement in X", "all our stuff is in X now"
            r"|(?:my|our) (?:bed|stuff|things|boxes|furniture|sofa|plants) (?:is|are|'s|’s|finally|now|all)"
            r"(?: (?:now|all|finally|officially|safely))* (?:in|at)\b(?=(?:\s+[\w'’-]+){0,12}?\s+(?-i:[A-Z][a-z]))"
            # a dwelling taken: "signed for a one-bed flat in X", "I rent a room in X", "bought a house in X"
            r"|(?:signed (?:for|up for)|signed (?:a|the) (?:lease|tenancy)(?: agreement)? (?:on|for)|rent(?:ing)?|rented"
            r"|bought|buying|moved into|share|sharing|picked up the keys to) (?:a|an|the|my|our) (?:[\w-]+ ){0,3}?"
            r"(?:flat|house|apartment|room|studio|place|bungalow|cottage|terrace|condo|bedsit|tenement|loft|maisonette)\b"
            r"(?=[^.!?]{0,200}?\b(?:in|at|near|off) (?-i:[A-Z]))"
            r"|^\W*(?:(?:just|finally|officially|so|and)\s+)*(?:moved|relocated) (?:to|into|over to)\b"
            r"|, (?:just |finally )?(?:moved|relocated) (?:to|into)\b"  # "Officially a Londoner now, moved to …"
            # "Home is Brighton now", "home's a flat in Leith": home said as the subject of its sentence
            r"|^\W*(?:(?:so|and|now)\s+)?home(?:'s|’s| is)\b"
            # a move said as the old home left behind: "left the flat in Leith behind for a house in Hove"
            r"|left (?:the|my|our) (?:[\w-]+ ){0,3}?(?:flat|house|apartment|room|studio|place|home)\b[^.!?]{0,160}?\bbehind for\b"
        ),
        hints=_w(
            "live living moved relocated moving move flat house apartment place home address resident keys settled based"
            " bed stuff things boxes furniture sofa plants room studio bungalow cottage terrace condo"
            " bedsit tenement loft maisonette"
        ),
    ),
    Subject(
        "manager",
        "who the person reports to at work: their manager, boss, line manager or supervisor",
        # "she's the one I answer to": the boss said as who the person answers to
        _cue(r"(?:line )?manager|boss|supervisor|report(?:s|ing)? (?:in )?to|reports? into|(?:i|we) answer to"),
        hints=_w("manager* boss supervisor report* answer"),
    ),
    Subject(
        "team",
        "the team or department the person works in at their job, their colleagues",
        _cue(
            r"(?:my|new|our) (?:team|department|squad|group)|moved teams|switched teams|joined the \w+ team"
            # "I'm in the Search team", "got moved to the mobile squad", "transferred to the legal department"
            r"|(?:moved(?: over)?|transferred|switched|put|(?:i|we)(?:'m|’m| am|'re|’re| are)) (?:now )?(?:in|on|to|into) the [\w-]+ (?:[\w-]+ )?(?:team|department|squad)\b"
        ),
        hints=_w("team teams department squad group"),
    ),
    Subject(
        "role",
        "the person's job title, position or role at work",
        _cue(
            r"job title|title is|my role|new role|position|promoted|promotion"
            # a step up said without the word: "I've been made deputy head", "stepped up to sous chef"
            r"|(?:been|got|was|i'm|i’m|i am|i've|i’ve) (?:just |finally |officially )?made (?!redundant|an? offer|to\b|it\b)(?=(?:a |an |the )?[\w-]+)"
            r"|stepped up (?:to|as)|bumped (?:me )?up to"
        ),
        hints=_w("title role position promot* made stepped bumped"),
    ),
    Subject(
        "employer",
        "where the person works: their employer, company, firm, job, the restaurant, shop, kitchen or office they work at",
        _cue(
            r"work (?:at|for)|working (?:at|for)|employer|new job|my job(?! title)|hired|job offer|start(?:ed|ing)? at|joined \w+ as"
            r"|quit my job|left my job|handed in my notice(?! (?:on|at|to|with) (?:the |my |our )?(?:[\w-]+ ){0,2}(?:club|choir|society|gym|league|group|band|team)\b)|accepted (?:an|the|their) offer"
            # an ending without the word "job": "I resigned", "got made redundant", "my last day at X"
            r"|resigned|made redundant|laid off|let go from|last day (?:at|with)|walked out of my job|my contract (?:at|with) (?=work\b|(?:the )?(?-i:[A-Z]))"
            r"|(?:(?:i|i've|i’ve|i have|i'm|i’m|i am|we)\s+(?:now\s+|just\s+|finally\s+|officially\s+)?|^\W*(?:just\s+|finally\s+)?)retired"
            rf"{RETIRED_TAIL}"
            # work said without an employer: "went freelance", "I'm self-employed now", "I'm between jobs"
            r"|went (?:freelance|self-employed)|(?:i'm|i’m|i am) (?:now )?(?:freelance|self-employed|a freelancer)"
            r"|between jobs|(?:i'm|i’m|i am) (?:now )?(?:unemployed|out of work)"
            # "I work nights as a staff nurse on the cardiac ward at X": the role, where, then the employer
            r"|work(?:s|ing)?(?: (?:nights|days|shifts|weekends|part-time|full-time|part time|full time))? as (?:a|an)"
            r" (?:[\w-]+ ){1,7}?(?:at|for)"
            # an offer taken: "I've been offered a charge nurse post at X. I said yes!" (extract.py: said yes)
            r"|offered (?:me )?(?:a|an|the) (?:[\w-]+ ){0,4}?(?:job|post|position|role)"
            r"|(?:i'm|i am|i'll be|i will be|going to be) (?:a |an |the )?(?:(?!\w+ing\b)\w+ ){1,4}at \w+"
            r"|(?:i'm|i’m|i am) (?-i:[A-Z])\w+, (?:a |an |the )?(?:[\w-]+ ){0,3}?[\w-]+ at (?-i:[A-Z])\w*"
            # "still at Google", a start said as a first day ("first day at Ocado"), a job landed or taken
            # (not asked: "Am I still at Halden?" asks whether the job goes on, not which one it is)
            r"|(?:still(?<!am i still)(?<!are we still)|first (?:day|week|shift|morning)) (?:at|with) (?=(?:the )?(?-i:[A-Z]))"
            r"|(?:landed|taken|took) (?:a|an|the) (?:[\w-]+ ){0,3}?(?:job|post|position|role) (?:at|with)"
        ),
        hints=_w(
            "work working employer job hired first start started starting joined notice offer offered at resigned redundant laid"
            " let last walked contract retired freelance self-employed freelancer jobs unemployed"
        ),
    ),
    Subject(
        "partner",
        "the person's partner: who they are dating, seeing or with, girlfriend, boyfriend, wife, husband",
        _cue(
            r"partner|girlfriend|boyfriend|wife|husband|fianc[ée]e?|dating|seeing (?:someone|somebody|a \w+)"
            r"|going out with|made it official|it'?s official|moved in together|engaged|married|broke up|split up"
            r"|met someone|met somebody|first date|(?:going on |been on )?dates? with|ended things|went our separate ways"
            # without a cue word: "we called it off", "we've been together since May", "moved in with Sam"
            r"|(?:(?:we|i|and i|and me)\s+(?:\w+\s+)?|^\W*(?:just\s+|finally\s+)?)(?:called|broke) it off"
            r"|(?:we|and i|and me)\s+(?:\w+\s+)?called it (?:a day|quits)|(?:and i|and me)(?:'re|’re| are) (?:done|over|finished)\b(?! with)"
            # "I'm with Sofia now": with someone, said with "now" (not a network: "I'm with Vodafone now")
            rf"|(?:i'm|i’m|i am) (?:now )?with (?!{NETWORK_NAMES})(?-i:[A-Z])\w+ now\b"
            # a partner said by an action that repeats: "Sam stayed over again", "Jo stays over most nights"
            r"|stayed over again|stays over|(?:has|'s|’s) been staying over|keeps staying over"
            r"|(?:we(?:'ve|’ve| have)|i(?:'ve|’ve| have)) been together|been together (?:for|since)|seeing each other"
            # an anniversary: "eight months together this week", "two years together today"
            r"|(?:weeks|months|years) together (?:this|today|next|last)\b"
            # endings: "I'm single again", "she dumped me", "he left me", "we broke off the engagement"
            rf"|(?:i'm|i’m|i am) single|single again|dumped me{CLAUSE_END}|(?:he|she|they) left me{CLAUSE_END}|broke off (?:the|our) engagement"
            # "my other half Sam", "Sam, my other half": only with the name ("with my other half" names no one)
            r"|(?:my|our) other half,? (?=(?-i:[A-Z])\w+)|(?-i:[A-Z])\w+, (?:my|our) other half\b"
            r"|moved in with (?-i:[A-Z])\w*|(?:been|started) seeing (?-i:[A-Z])\w*|(?:i've|i’ve|i have) been with (?-i:[A-Z])\w+ (?:for|since)"
            r"|(?:am|was) i seeing|i(?:'m| am| was) seeing"
            r"|\bme and (?-i:[A-Z])\w+ (?:are|'re|’re) (?:now |finally |officially )?(?:official|an item|a couple|exclusive|engaged|married|together)"
            r"|we(?:'re| are) together|(?:and i|and me|we)(?:'re|’re| are) (?:now |finally |officially )?(?:official|an item"
            r"|a couple|exclusive|engaged|married)"
        ),
        hints=_w(
            "partner* girlfriend* boyfriend* wife husband fianc* dating seeing going official together engaged married broke split met date"
            " item couple exclusive dates ended went called broke each moved been single dumped left half stayed stays staying done over finished now"
        ),
    ),
    Subject(
        "vet",
        "the vet, veterinary practice or clinic that looks after the person's pet",
        _cue(r"vets?|veterinar\w*|animal hospital"),
        hints=_w("vet vets veterinar* animal"),
    ),
    Subject(
        "dentist",
        "the dentist or dental practice that looks after the person's teeth",
        _cue(r"dentists?|dental|orthodontist|hygienist"),
        hints=_w("dentist* dental orthodontist hygienist"),
    ),
    Subject(
        "doctor",
        "the person's doctor, GP, surgery, clinic, therapist or specialist",
        _cue(r"doctor|gps?|physician|surgery|therapist|physio(?:therapist)?|consultant|specialist"),
        hints=_w("doctor gp gps physician surgery therapist physio* consultant specialist"),
    ),
    Subject(
        "teacher",
        "the teacher of the person's child: who teaches their son's or daughter's class",
        _cue(r"teacher|teaches (?:her|his|their) class|form tutor|class teacher|head of year"),
        hints=_w("teacher teaches tutor head"),
    ),
    Subject(
        "school",
        "the school, nursery or college the person's child goes to",
        _cue(
            r"(?:his|her|their|the kids'?|(?:son|daughter|kids?|child)(?:'s|’s)) school|nursery|goes to (?:school|\w+ (?:primary|school|academy))"
            # "my son goes to Park View School", "started at Oakfield Primary", "we moved her to Riverside School"
            r"|(?:goes|go|going|started|starts|starting|moved (?:him|her|them)|place) (?:to|at) (?:(?-i:[A-Z])[\w'’-]* ){1,3}(?:primary|school|academy|nursery|college)\b"
        ),
        hints=_w("school nursery primary academy"),
    ),
    Subject(
        "medication",
        "a medicine the person takes: its name, dose in milligrams, pills, prescription",
        _cue(
            r"medication|medicine|pills?|tablets?|dose|dosage|mg|\d+(?:\.\d+)?(?:mg|mcg)|milligrams?|prescri\w+|inhaler"
            # a drug named by how drug names end, with being on it, taking it or stopping it: "I'm on metformin now"
            rf"|(?:(?:i'm|i’m|i am) (?:now |still )?on|put (?:me|us) on|(?:started|starting|stopped|taking|take|came off|coming off)(?: taking)?) (?:the )?(?={DRUG})"
        ),
        hints=_w(
            "medication medicine pill* tablet* dose dosage mg milligram* prescri* inhaler on put started starting stopped taking take came coming"
        ),
    ),
    Subject(
        "allergy",
        "what the person is allergic to: an allergy or intolerance",
        # or by the reaction: "my mouth swells up with kiwi", "I come out in hives from shellfish"
        _cue(
            r"allergic|allergy|allergies|intoleran\w+|swell(?:s|ed)? up (?:with|from|after)|(?:come|break)s? out in hives"
        ),
        hints=_w("allergic allergy allergies intoleran* swell swells swelled come comes break breaks"),
    ),
    Subject(
        "diet",
        "what the person eats: their diet, vegetarian, vegan, meat, dairy, gluten",
        _cue(
            r"vegetarian|vegan|pescatarian|eat(?:ing)? meat|no meat|meat-free|dairy-free|gluten-free|keto|plant-based|plant based"
            r"|low-carb|low carb|paleo|flexitarian|halal|kosher|diet"
        ),
        hints=_w(
            "diet vegetarian vegan pescatarian meat meat-free dairy-free gluten-free keto plant-based plant low-carb low paleo flexitarian halal kosher"
        ),
    ),
    Subject(
        "pet",
        "the person's pet: their dog, cat or other animal, its name or breed",
        _cue(
            r"dog|puppy|cat|kitten|pet|rabbit|hamster|parrot|tortoise|guinea pig|(?:adopted|rescued) (?:a|an|two)"
            rf"|{PUT_DOWN}"  # an ending without the animal's word
            # a pet said by its breed: "Chorizo, my rescue greyhound", "our spaniel Bramble"
            r"|(?:my|our) (?:[\w-]+ )?(?:greyhound|lurcher|whippet|labrador|spaniel|terrier|collie|poodle|beagle|dachshund"
            r"|husky|retriever|pug|cockapoo|labradoodle|sheepdog|staffie|schnauzer|corgi|tabby|siamese|ragdoll|persian)s?"
        ),
        hints=_w(
            "dog puppy cat kitten pet rabbit hamster parrot tortoise guinea adopted rescued put greyhound* lurcher*"
            " whippet* labrador* spaniel* terrier* collie* poodle* beagle* dachshund* husky husky's huskies retriever*"
            " pug pugs cockapoo* labradoodle* sheepdog* staffie* schnauzer* corgi* tabby tabbies siamese ragdoll* persian*"
        ),
    ),
    Subject(
        "vehicle",
        "the person's vehicle: the car, van, bike, bicycle or motorbike they drive or ride",
        _cue(
            r"car|van|(?:new|my|our) wheels|bike(?! (?:lock|shed|rack|code|combination))|bicycle|e-?bike|motorbike|scooter|drive a|ride a|cycle to work"
            rf"|{VEHICLE_NAMES}"  # a make or model named alone: "picked up a secondhand Leaf"
        ),
        hints=_w("car van wheels bike bicycle e-bike ebike motorbike scooter drive ride cycle")
        + hint_words(VEHICLE_MAKES + VEHICLE_MODELS),
    ),
    Subject(
        "device",
        "the person's phone, laptop, tablet, watch, e-reader or games console: its make and model",
        # "(which|what) phone": a question's words (a question states nothing, so only asking names it so)
        _cue(rf"(?:new|my|our|which|what) (?:{'|'.join(DEVICE_NOUNS)})|{DEVICE_NAMES}"),
        qualified=True,  # by what kind of device it is (brands.device_kind): the phone and the laptop are two
        hints=DEVICE_NOUNS + hint_words(list(DEVICES)) + tuple(f"{w}s" for w in hint_words(list(DEVICES))),
    ),
    Subject(
        "detail",
        "a detail of something the person has: the colour or registration of their car, bike, boat or door",
        _cue(
            r"colou?r|(?:re)?painted|resprayed|registration|reg plate|number plate|licen[cs]e plate"
            # a colour said of the thing with no colour word: "my bike is bright orange now"
            rf"|(?:my|our) (?:{'|'.join(_COLOURED)})(?:'s|’s| is| are) (?:now |all |still )*(?={COLOUR})"
        ),
        qualified=True,  # by the thing and the attribute (which.py): "detail:car colour"
        hints=_w("colour color colours colors painted repainted resprayed registration plate") + _COLOURED,
    ),
    Subject(
        "child",
        "the person's children: son, daughter, kids, baby",
        _cue(
            r"(?:my|our) (?:son|daughter|kids?|children|baby(?: girl| boy)?|little one|eldest|youngest)"
            # a birth: "we had a baby boy", "welcomed our son Finn", "our baby girl arrived"
            r"|(?:had|welcomed) (?:a|our|my) (?:baby(?: girl| boy)?|son|daughter)|baby (?:girl|boy) (?:arrived|is here)"
        ),
        hints=_w("son daughter kid kids children baby little eldest youngest welcomed"),
    ),
    Subject(
        "schedule",
        "which day or evening a regular activity is on: training, practice, rehearsal, class night",
        _cue(
            r"(?:training|practice|rehearsals?|sessions?|class|classes|lessons?|meet-?ups?)(?: \w+)? (?:is|are|on|moved)"
            r"|(?:club|group|choir|team|class|band) (?:now )?meets (?:on|every)"
            r"|(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s? (?:night|evening)s?"  # not "born …" (extract.py)
        ),
        qualified=True,
        hints=_w(
            "training practice rehearsal* session* class classes meets lesson* meet-up* meetup* monday* tuesday* wednesday* thursday* friday* saturday* sunday*"
        ),
    ),
    Subject(
        "course",
        "a course or class the person takes and their level in it",
        _cue(
            r"course|level|grade|module|beginners?|intermediate|advanced|[abc][12] class"
            r"|moved up (?:to|a|into)|(?:improvers?|beginners?|intermediate|advanced) (?:group|class|set)"
        ),
        qualified=True,  # by what it teaches (which.py): "course:spanish"
        hints=_w("course level grade module beginner beginners intermediate advanced class moved improver improvers"),
    ),
    Subject(
        "membership",
        "a club, gym, choir, society or group the person is a member of",
        _cue(
            # "handed in my notice on the book club": an ending of a club said as a job's
            r"handed in my notice (?:on|at|to|with) (?=(?:the |my |our )?(?:[\w-]+ ){0,2}(?:club|choir|society|gym|league|group|band|team)\b)"
            # a club supported: "I support Celtic", "I'm a Spurs fan", "Everton through and through"
            r"|(?:i|we) (?:still |now )?support (?=(?:the )?(?-i:[A-Z]))|(?:i'm|i’m|i am|i've been|i’ve been|always been) (?:an? )?(?:massive |huge |big |lifelong |die-hard |diehard )?(?-i:[A-Z])\w+ (?:fan|supporter)"
            r"|(?-i:[A-Z])\w+ through and through|season ticket (?:at|for)"
            r"|member|membership|joined the|quit the|left the(?! (?:[\w-]+ ){0,2}(?:flat|house|apartment|place|room|studio|home)\b)|signed up (?:to|for)|club|gym|choir|society|league"
        ),
        qualified=True,
        hints=_w(
            "member membership joined quit left signed club gym choir society league handed support fan supporter through season"
        ),
    ),
    Subject(
        "coaching",
        "who or what age group the person coaches, volunteers with or leads",
        _cue(r"coach(?<!the coach)(?<!a coach)(?<!by coach)(?:ing)?|volunteer(?:ing)?|age group|under-?\d+s?|u\d\ds?"),
        hints=_w("coach coaching volunteer* age under* u0* u1* u2* u3* u4* u5* u6* u7* u8* u9*"),
    ),
    Subject(
        "project",
        "the name of something the person is making: a project, app, side project, gadget, podcast, blog",
        _cue(r"project|app|side project|podcast|blog|newsletter|band|gadget|robot|game"),
        qualified=True,
        by_cue=True,
        hints=_w("project app side podcast blog newsletter band gadget robot game"),
    ),
    Subject(
        "appointment",
        "an appointment, booking or meeting the person has at a date and time",
        _cue(
            r"appointment|booked|booking|check-?up|scheduled for|exam|scan"
            # moved by the practice: "they've put me in for Tuesday 27 January", "rebooked me for the 3rd"
            r"|put (?:me|us|him|her) (?:in|down) for|(?:rebooked|rescheduled|moved) (?:me|us|it)(?: to| for)"
            # a thing of the person's at a time: "my code review is at 10 tomorrow", "our viewing is on Friday"
            rf"|(?:my|our) (?!birthday|anniversary|birth)(?:[\w-]+ ){{1,2}}(?:is|'s|’s) (?:at|on) (?={APPOINTED})"
        ),
        qualified=True,
        hints=_w(
            "appointment booked booking check-up checkup check scheduled exam scan put rebooked rescheduled moved"
        ),
    ),
    Subject(
        "phone",
        "the person's phone, mobile plan, network or contract",
        # a contract of a phone ("my contract at Deloitte ended" is work's)
        _cue(
            r"phone plan|mobile plan|(?:phone|mobile|sim|airtime|network) contract|network|sim"
            rf"|{NETWORK_NAMES} (?:contract|plan|sim)|contract (?:with|on) {NETWORK_NAMES}"
            # the network named with being on it or going to it: "I'm on Vodafone now", "ported my number to iD Mobile"
            rf"|(?:i'm|i’m|i am|we're|we’re|we are) (?:now )?(?:on|with) {NETWORK_NAMES}(?! (?:bank|tv|broadband|news))"
            rf"|(?:switched|moved|ported|went|changed)(?: [\w-]+){{0,3}} (?:to|over to) {NETWORK_NAMES}"
            rf"|(?:deal|plan|sim|sim-only|contract) (?:with|on|from) {NETWORK_NAMES}"
        ),
        hints=_w("phone mobile contract network networks sim") + hint_words(PHONE_NETWORKS),
    ),
)

BY_NAME = {s.name: s for s in SUBJECTS}

# The subjects a clause's words hint at (hints.py): most clauses name none, and their cues are never searched.
hinted = Hints(SUBJECTS)
