"""Words people use for the same thing when they talk about their lives: a question says "boss", the
memory says "manager"; "teeth" and "dentist"; "where do I live" and "moved into the flat". Full-text
search finds only the words it is given, and a small local embedding model does not bridge such pairs
reliably, so a search also looks for the related words of each query word (`related_terms`) — as a
lighter list of its own in the rank fusion (RELATED_LIST_WEIGHT of the query's own words' list), and at
RELATED_WEIGHT of their rarity in the re-rank's match (search/searcher.py, search/snippets.py).

Each group is one thing named several ways (synonyms, the role and the person, the thing and what one
does with it). A word may sit in several groups. Keep groups tight: a loose association ("car" and
"road") finds more noise than answers. Single lowercase words only (phrases are their words).
"""

from __future__ import annotations

from typing import Iterable

_GROUPS = """
boss manager supervisor superior
employer company job work workplace employed hired
job role position title career occupation profession
colleague coworker teammate
salary pay wage income raise
office workplace
retire retired retirement retiring
home live living lives house flat apartment address moved moving
city town village hometown neighbourhood neighborhood area
landlord landlady owner letting tenancy lease rent renting
roommate flatmate housemate
partner boyfriend girlfriend husband wife spouse fiance fiancee dating seeing relationship
married marriage wedding engaged engagement
divorce divorced separated split
son daughter child children kid kids baby
mother mom mum mum's father dad parents
brother sister sibling siblings
grandmother grandma granny grandfather grandpa grandparents
friend mate buddy pal
teacher teaching teaches tutor class classroom
school pupil student
doctor gp physician
dentist dental teeth tooth
vet veterinarian
pet dog cat puppy kitten
medication medicine pill pills tablet tablets dose dosage prescription prescribed mg
allergy allergic allergies intolerant intolerance
diet vegetarian vegan pescatarian eat eating food
drink alcohol sober
health healthy condition diagnosis diagnosed
exercise workout training gym
practice training practise session sessions
car drive driving vehicle
bike bicycle cycle cycling ride riding
motorbike motorcycle scooter
commute commuting
phone cell mobile number text call
email address inbox
password passcode code pin combination passphrase login
wifi internet online network broadband router
lock padlock keypad combination
bank account card
subscription plan membership member subscribed
gym climbing bouldering
club team squad
coach coaching coaches
hobby hobbies pastime
podcast show episode
name called named rename renamed
birthday born birth
appointment booked booking scheduled
evening night nights tonight
morning mornings
weekend saturday sunday
holiday vacation trip travel
flight flying fly plane
hotel accommodation
passport visa
favourite favorite prefer preferred
colour color
hometown grew raised born
language speak speaking learn learning course lesson lessons level
"""


def _build() -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for line in _GROUPS.strip().splitlines():
        words = line.split()
        for w in words:
            out.setdefault(w, set()).update(x for x in words if x != w)
    return {w: frozenset(rel) for w, rel in out.items()}


RELATED = _build()
# A related word counts this much of what the query's own word would (in the re-rank's match), and its
# full-text hits rank after the query's own.
RELATED_WEIGHT = 0.6
# The weight of their full-text list in rank fusion, beside the query's own words' (1).
RELATED_LIST_WEIGHT = 0.15


def related_terms(terms: Iterable[str]) -> list[str]:
    """The related words of the query's terms, less the terms themselves, in a stable order."""
    terms = list(terms)
    have = set(terms)
    out: dict[str, None] = {}
    for t in terms:
        for w in sorted(RELATED.get(t, ())):
            if w not in have:
                out.setdefault(w, None)
    return list(out)
