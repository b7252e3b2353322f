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
# A query's related words (search/related.py) are a lighter list of their own (0.15 of the query's words'
# weight in fusion), searched after the query's words: their budget is this share of all chunks, and no
# word of theirs is searched when even the rarest is over it (issue 46: one such word common in the
# index, alone in its list, made that second search cost more than the first).
EXTRA_BUDGET = 0.01


def prunes(words: int, total: int, extra: bool = False) -> bool:
    """Whether a search of `words` words over `total` chunks chooses among them (`extra`: the query's
    related words, chosen from even when there is one)."""
    return words >= (1 if extra else 2) and total >= PRUNE_MIN_CHUNKS


def extra_within_budget(doc_counts: Sequence[int], total: int) -> list[int]:
    """The related words to search (indexes into `doc_counts`, in order): rarest first while the sum of
    their document counts stays within EXTRA_BUDGET of all `total` chunks; none guaranteed."""
    return extra_within(doc_counts, EXTRA_BUDGET * total)


def extra_within(counts: Sequence[int], budget: float) -> list[int]:
    """As rarest_within, but no word is kept for being the rarest: none when even it is over `budget`."""
    keep: set[int] = set()
    used = 0
    for i in sorted(range(len(counts)), key=lambda i: counts[i]):
        if used + counts[i] > budget:
            break
        keep.add(i)
        used += counts[i]
    return sorted(keep)


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
