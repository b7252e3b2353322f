"""Which candidates are hits at all: the similarity floor, and what a question about the person's own
life gets when nothing passes it.

- A candidate that shares no word with the query (in neither full-text list) and whose cosine is below
  `minSimilarity` is not a hit: a small memory would otherwise answer every query with all of its notes.
- A first-person question ("Which fruit do I react to?") asks about the person's own life, which the
  memory is about: when the floor leaves nothing, the closest few by cosine (FALLBACK_HITS, at least
  FALLBACK_SHARE of the floor) are its answer, not silence. They score low (× FALLBACK_SCALE: below the
  chat recall's `minScore`, so a turn is not handed notes that merely came closest), and the ledger's
  facts (answers.py) still lead where a subject is matched. A how-to ("How do I boil an egg?") asks
  about the world, not the person's life; it, and anything else that shares no word and is not close
  ("quantum chromodynamics lecture"), still gets nothing.
"""

from __future__ import annotations

import re
from typing import Sequence

from .fusion import Candidate

FALLBACK_HITS = 3
FALLBACK_SHARE = 0.6  # of minSimilarity: the fallback's own floor (0.15 at the default 0.25)
FALLBACK_SCALE = 0.4  # the fallback's scores, scaled (at most 0.4; the chat recall's minScore is 0.3)

_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i’m|i’ve)\b", re.I)
_QUESTION = re.compile(
    r"\?\s*$|^\W*(?:what|who|whom|whose|which|where|when|why|how|do|does|did|am|is|are|was|were|can|have|has)\b",
    re.I,
)


_HOW_TO = re.compile(r"^\W*how (?:do|can|could|should|would|to|might) (?:i|one|you|we)\b|^\W*how to\b", re.I)


def own_life_question(query: str) -> bool:
    """Whether a query is a question in the first person ("Which fruit do I react to?", "Where's my bike"),
    not a how-to ("How do I boil an egg?")."""
    q = query.strip()
    return bool(_FIRST_PERSON.search(q) and _QUESTION.search(q) and not _HOW_TO.search(q))


def above_floor(cands: Sequence[Candidate], query: str, min_similarity: float) -> tuple[list[Candidate], bool]:
    """The candidates that are hits (see the module), in their order, and whether they are the fallback's
    (their scores to be scaled by FALLBACK_SCALE)."""
    if min_similarity <= 0:
        return list(cands), False
    kept = [
        c for c in cands if c.fts_rank is not None or c.related_rank is not None or (c.cosine or 0.0) >= min_similarity
    ]
    if kept or not own_life_question(query):
        return kept, False
    floor = FALLBACK_SHARE * min_similarity
    close = sorted((c for c in cands if (c.cosine or 0.0) >= floor), key=lambda c: -(c.cosine or 0.0))
    chosen = {id(c) for c in close[:FALLBACK_HITS]}
    return [c for c in cands if id(c) in chosen], bool(chosen)
