"""Which questions are about the person's own life (search/floor.py): those get the closest few notes
when nothing passes the similarity floor; questions about the world get nothing."""

from __future__ import annotations

import pytest

from gateway.memory.search.floor import own_life_question


@pytest.mark.parametrize(
    "query",
    [
        "Which fruit do I react to?",
        "Where's my bike",
        "When did I last see the dentist?",
        "Am I allergic to penicillin?",
        "Can I take my dog on the train?",
        "What did I eat before the gym?",
    ],
)
def test_a_question_about_the_persons_own_life_gets_the_fallback(query):
    assert own_life_question(query)


@pytest.mark.parametrize(
    "query",
    [
        "Do I need a visa for Japan?",
        "What is the capital of France? I forgot",
        "Can I freeze cooked rice?",
        "Should I bring an umbrella?",
        "Could we see the northern lights from Oslo?",
        "Where do I need to apply for a passport?",
        "How do I boil an egg?",
        "quantum chromodynamics lecture",
    ],
)
def test_a_question_about_the_world_gets_no_fallback(query):
    assert not own_life_question(query)
