"""Fusing the full-text and vector candidate lists, and spreading results over files.

Reciprocal rank fusion: Σ weight / (rrfK + rank), normalised by its largest possible value so that a
chunk ranked first by every list scores 1; or a weighted blend of the BM25 score relative to the best
one and the cosine similarity. fts-only scores are BM25 relative to the best hit; vector-only scores are
the cosine similarity (clipped to [0, 1]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar


@dataclass
class Candidate:
    id: int
    score: float = 0.0
    fts_rank: int | None = None
    vec_rank: int | None = None
    bm25: float | None = None
    cosine: float | None = None
    related_rank: int | None = None  # rank in the full-text list of the query's related words


def fuse(
    fts: Sequence[tuple[int, float]],
    vec: Sequence[tuple[int, float]],
    *,
    method: str,
    rrf_k: int,
    text_weight: float,
    vector_weight: float,
    related: Sequence[tuple[int, float]] = (),
    related_weight: float = 0.0,
) -> list[Candidate]:
    """fts: (id, bm25) best first (bm25 negative, lower is better); vec: (id, cosine) best first;
    related: what the query's related words find (search/related.py), a lighter third list."""
    cands: dict[int, Candidate] = {}
    for r, (cid, s) in enumerate(fts, start=1):
        c = cands.setdefault(cid, Candidate(cid))
        c.fts_rank, c.bm25 = r, s
    for r, (cid, s) in enumerate(vec, start=1):
        c = cands.setdefault(cid, Candidate(cid))
        c.vec_rank, c.cosine = r, s
    best_related = min((s for _, s in related), default=0.0)
    for r, (cid, _s) in enumerate(related, start=1):
        c = cands.setdefault(cid, Candidate(cid))
        c.related_rank = r
    wt = text_weight if fts else 0.0
    wv = vector_weight if vec else 0.0
    if wt + wv == 0:
        wt, wv = (1.0 if fts else 0.0), (1.0 if vec else 0.0)
    best_bm25 = min((s for _, s in fts), default=0.0)
    for c in cands.values():
        if method == "rrf":
            s = 0.0
            if c.fts_rank is not None:
                s += wt / (rrf_k + c.fts_rank)
            if c.vec_rank is not None:
                s += wv / (rrf_k + c.vec_rank)
            if c.related_rank is not None:
                s += related_weight / (rrf_k + c.related_rank)
            c.score = s / ((wt + wv) / (rrf_k + 1))
        else:
            ft = (c.bm25 / best_bm25) if (c.bm25 is not None and best_bm25 < 0) else 0.0
            if c.related_rank is not None and best_related < 0:
                ft = max(ft, related_weight * dict(related)[c.id] / best_related)
            vs = max(0.0, min(1.0, c.cosine)) if c.cosine is not None else 0.0
            c.score = (wt * ft + wv * vs) / (wt + wv)
        c.score = max(0.0, min(1.0, c.score))
    return sorted(cands.values(), key=lambda c: (-c.score, c.fts_rank or 1 << 30, c.vec_rank or 1 << 30))


def single_list_scores(items: Sequence[tuple[int, float]], kind: str) -> list[Candidate]:
    out = []
    if kind == "fts":
        best = min((s for _, s in items), default=0.0)
        for r, (cid, s) in enumerate(items, start=1):
            out.append(Candidate(cid, (s / best) if best < 0 else 0.0, fts_rank=r, bm25=s))
    else:
        for r, (cid, s) in enumerate(items, start=1):
            out.append(Candidate(cid, max(0.0, min(1.0, s)), vec_rank=r, cosine=s))
    return out


T = TypeVar("T")


def shared_ranks(values: Sequence[float]) -> list[int]:
    """1-based rank of each value, highest first; equal values share the best rank of their group."""
    vals = [round(v, 9) for v in values]
    first: dict[float, int] = {}
    for r, v in enumerate(sorted(vals, reverse=True), start=1):
        first.setdefault(v, r)
    return [first[v] for v in vals]


def _score_of(cr: Any) -> float:
    return float(cr[0].score)  # (Candidate, row)


def _path_of(cr: Any) -> str:
    return str(cr[1][1])  # (Candidate, row): the row's path


def spread_over_files(
    ranked: list[T],
    k: int,
    factor: float,
    score: Callable[[T], float] = _score_of,
    path: Callable[[T], str] = _path_of,
) -> list[T]:
    """The best `k` of `ranked` (best first), picked one at a time with each item's score scaled by
    `factor` ** (items picked from its file so far): a gentle push toward other conversations and notes,
    for questions whose answer is spread over several. Items keep their own scores. The defaults read
    (Candidate, chunk row) pairs; result dicts pass `score`/`path`."""
    if factor >= 1.0 or len(ranked) <= 1:
        return ranked[:k]
    # Each item's score and path read once (issue 46: they were read again for every item left at every
    # pick, k times the pool); the first of equal scaled scores is picked, as before.
    scores = [score(x) for x in ranked]
    paths = [path(x) for x in ranked]
    left = list(range(len(ranked)))
    picked: list[T] = []
    per_file: dict[str, int] = {}
    while left and len(picked) < k:
        best, top = 0, -math.inf
        for pos, i in enumerate(left):
            n = per_file.get(paths[i], 0)
            v = scores[i] * factor**n if n else scores[i]
            if v > top or pos == 0:
                best, top = pos, v
        i = left.pop(best)
        picked.append(ranked[i])
        per_file[paths[i]] = per_file.get(paths[i], 0) + 1
    return picked
