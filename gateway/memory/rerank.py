"""Optional re-ranking of search results: time decay and maximal marginal relevance (MMR).

Functions over hits (memory/hit.py's Hit), pure but for `stored_vectors`, which
reads its inputs from the engine's ChunkReader. The memory service applies them, when `memory.search.timeDecay` /
`memory.search.mmr` are on, to a candidate pool a few times larger than `k`:

- **Time decay**: `score × 0.5 ** (ageDays / halfLifeDays)`. The age is `now − date` (the hit's `date`)
  for a transcript chunk (its newest message) and a day file (`memory/YYYY-MM-DD.md`, any folder);
  other notes — `MEMORY.md`, `LEARNINGS.md`, keyed memories and other evergreen files — never decay
  (`decay_dates`); nor does anything dated in the future (age is clamped at 0).
- **MMR**: picks, one at a time, the item maximising `λ · score − (1 − λ) · max similarity to the items
  already picked`, so near-duplicates make room for something new. Similarity is the cosine of stored
  vectors when every item has one, else the Jaccard overlap of the items' word sets. `λ = 1` is plain
  ranking by score. The returned items keep their own scores (the order is MMR's).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Callable, Mapping, Sequence

import numpy as np

from ..timeutil import parse_iso
from .hit import Hit
from .index.sources import SESSIONS
from .layout import day_of
from .ports import ChunkReader

_WORD = re.compile(r"\w+", re.UNICODE)
SECONDS_PER_DAY = 86_400.0


def decay_dates(results: Sequence[Hit]) -> list[datetime | None]:
    """The date each result decays by: a transcript chunk's or a day file's, None for evergreen notes."""
    return [parse_iso(r.date or "") if r.source == SESSIONS or day_of(r.path) else None for r in results]


def decay_factor(age_days: float, half_life_days: float) -> float:
    """0.5 ** (age / half-life); 1 for age ≤ 0."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be > 0")
    return 0.5 ** (max(0.0, age_days) / half_life_days)


def apply_time_decay(
    results: Sequence[Hit], dates: Sequence[datetime | None], now: datetime, half_life_days: float
) -> list[Hit]:
    """The results with decayed scores, best first (ties keep their order). `dates[i]` is the date of
    `results[i]`, None for evergreen items (unchanged score)."""
    if len(dates) != len(results):
        raise ValueError("one date per result")
    out = []
    for r, d in zip(results, dates):
        if d is not None:
            age = (now - d).total_seconds() / SECONDS_PER_DAY
            r = r._replace(score=round(float(r.score) * decay_factor(age, half_life_days), 6))
        out.append(r)
    return sorted(out, key=lambda r: -r.score)  # sorted() is stable


def token_set(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if len(w) > 1)


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str], empty: float = 0.0) -> float:
    """|a ∩ b| / |a ∪ b|; `empty` when both are empty (0: nothing in common; 1: equally nothing)."""
    if not a and not b:
        return empty
    return len(a & b) / len(a | b)


def cosine(u: np.ndarray, v: np.ndarray) -> float:
    nu, nv = float(np.linalg.norm(u)), float(np.linalg.norm(v))
    if nu == 0.0 or nv == 0.0:
        return 0.0
    return float(np.dot(u, v) / (nu * nv))


def mmr_select(relevance: Sequence[float], k: int, lam: float, similarity: Callable[[int, int], float]) -> list[int]:
    """Indices of at most `k` items in MMR order. Ties go to the earlier (better-ranked) item."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError("lambda must be in [0, 1]")
    left = list(range(len(relevance)))
    picked: list[int] = []
    max_sim = [0.0] * len(relevance)
    while left and len(picked) < k:
        best = max(left, key=lambda i: (lam * relevance[i] - (1.0 - lam) * max_sim[i], -i))
        picked.append(best)
        left.remove(best)
        for i in left:
            s = similarity(i, best)
            if s > max_sim[i]:
                max_sim[i] = s
    return picked


def mmr_rerank(
    results: Sequence[Hit], k: int, lam: float, vectors: Mapping[int, np.ndarray] | None = None
) -> list[Hit]:
    """At most `k` results in MMR order. `vectors[i]` is result i's stored vector; cosine is used only
    when every result has one, else Jaccard over the snippets' word sets."""
    n = len(results)
    if vectors is not None and n and all(i in vectors for i in range(n)):
        m = np.stack([np.asarray(vectors[i], dtype=np.float32) for i in range(n)])
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        m = (m / np.where(norms == 0, 1.0, norms)).astype(np.float32, copy=False)
        sims = m @ m.T

        def sim(i: int, j: int) -> float:
            return float(sims[i, j])
    else:
        sets = [token_set(r.snippet) for r in results]

        def sim(i: int, j: int) -> float:
            return jaccard(sets[i], sets[j])

    order = mmr_select([float(r.score) for r in results], k, lam, sim)
    return [results[i] for i in order]


async def stored_vectors(
    reader: ChunkReader, results: Sequence[Hit], ids: Mapping[tuple[str, int, int], int] | None = None
) -> dict[int, np.ndarray] | None:
    """Stored vectors of the results' chunks (index in `results` → vector), when there are any. `ids`:
    chunk ids by hit key (the search's): looked up by id when every result's is there (a chunk no longer
    at its key, after a sync since, is left out), else by key."""
    if not results:
        return None
    keys = [r.key for r in results]
    known = {key: ids[key] for key in keys if key in ids} if ids is not None else {}
    vecs = await reader.vectors_at(sorted(set(keys)), known if len(known) == len(set(keys)) else None)
    return {i: vecs[key] for i, key in enumerate(keys) if key in vecs} or None
