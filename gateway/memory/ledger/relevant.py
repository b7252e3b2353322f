"""The ledger's current facts a chat message is about: what the recall block the model sees starts with
("## What is true now", memory/present.py), beside the one the search put first.

A message touches more than one subject of a life ("Mateo wants me to move in with him, should I give
notice on my place?": the partner and the home), and names things whose current value the ledger knows
("Can you book the vet for Mochi?": the pet). So, for the message:

1. each subject it asks about or names (ledger/recall.py's `subjects`: cue words, the common ways to ask,
   else the embedding of its description) gives its fact closest to the message (recall.py's ranking);
2. each fact whose current value's name or number (a capitalised word, digits: "Mateo", "Northpine",
   "7340") the message says, written so, is relevant too;

the current value only (a subject that ended gives none), at most `limit`, in that order. Pure but for
the ranking's embeddings.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from .facts import Fact, Period
from .placement import _NAMING, _STOP
from .recall import LedgerRecall

RELEVANT_FACTS = 3  # current facts a chat turn's recall adds beside the search's lead, at most


async def relevant(
    recall: LedgerRecall, message: str, known: Mapping[str, Fact], subjects: Sequence[str], limit: int = RELEVANT_FACTS
) -> list[tuple[Fact, Period]]:
    """The current facts of `known` (every subject's) that `message` is about (see the module)."""
    out: list[tuple[Fact, Period]] = []
    seen: set[str] = set()

    def add(fact: Fact) -> None:
        if fact.subject not in seen and fact.current is not None and len(out) < limit:
            seen.add(fact.subject)
            out.append((fact, fact.current))

    for family in subjects:
        mine = [f for f in known.values() if f.subject.split(":", 1)[0] == family and f.current is not None]
        ranked = await recall.rank(message, mine) if mine else []
        if ranked:
            add(ranked[0])
    said = _proper_words(message)
    if said:
        for fact in sorted(known.values(), key=lambda f: f.periods[-1].since, reverse=True):
            now = fact.current
            if now is not None and said & _value_names(now.value):
                add(fact)
    return out


def _proper_words(text: str) -> set[str]:
    """The names and numbers a message says, as written (lowercased): capitalised words and digits."""
    return {w.lower() for w in _NAMING.findall(text) if len(w) > 2} - _STOP - {"i'm", "i've", "i'll", "i'd"}


def _value_names(value: str) -> set[str]:
    return {w.lower() for w in _NAMING.findall(value) if len(w) > 2 and not _ORDINARY.match(w)} - _STOP


# Capitalised words a value may open with that name nothing ("Started Spanish…", "Thursday").
_ORDINARY = re.compile(
    r"^(?:The|A|An|My|Our|Started|Moved|Got|New|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)$"
)
