"""Which query words a big index searches: the rarest first, within a postings budget.

A full-text search costs about the sum of its words' document counts (every chunk that matches any
OR-ed word is scored), so on a big index (PRUNE_MIN_CHUNKS chunks or more) the words are taken rarest
first while that sum stays within POSTINGS_BUDGET of all chunks (the rarest always). Skipped words have
the lowest IDF, so they would have moved the ranking least; they still count in the re-ranking of the
candidates and in the vector search. Each engine's FullText counts the documents its own way (FTS5's
vocabulary table, PostgreSQL's GIN index) and asks `rarest_within_budget` which to keep.
"""

from __future__ import annotations

from typing import Sequence

POSTINGS_BUDGET = 0.05  # of all chunks
PRUNE_MIN_CHUNKS = 20_000


def prunes(words: int, total: int) -> bool:
    """Whether a search of `words` words over `total` chunks chooses among them."""
    return words >= 2 and total >= PRUNE_MIN_CHUNKS


def rarest_within_budget(doc_counts: Sequence[int], total: int) -> list[int]:
    """The words to search (indexes into `doc_counts`, in order): rarest first while the sum of their
    document counts stays within POSTINGS_BUDGET of all `total` chunks (rarest_within)."""
    return rarest_within(doc_counts, POSTINGS_BUDGET * total)


def rarest_within(counts: Sequence[int], budget: float) -> list[int]:
    """The words to rank (indexes into `counts`, in order): rarest first while the sum of their counts
    stays within `budget` rows; the rarest word that occurs at all always (a word in no chunk costs
    nothing and finds nothing, so it never uses up the choice)."""
    keep: set[int] = set()
    used = 0
    for i in sorted(range(len(counts)), key=lambda i: counts[i]):
        if used and used + counts[i] > budget:
            break
        keep.add(i)
        used += counts[i]
    return sorted(keep)
