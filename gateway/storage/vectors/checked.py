"""Readers of exact vectors for the in-memory machinery's answers (matrix.py's re-score, the ANN graph's
candidates): what the store of record holds now, through rows.py's port."""

from __future__ import annotations

import numpy as np

from .matrix import Fetch, _exact, _top
from .rows import VectorBatch, VectorRows


def fetcher(rows: VectorRows, dims: int) -> Fetch:
    """`matrix_knn`'s reader of exact vectors, over the port: (which ids are still stored, their vectors)."""

    async def fetch(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        got = await rows.fetch(ids.tolist())
        at = {int(i): j for j, i in enumerate(got.ids)}
        found = np.fromiter((int(i) in at for i in ids), dtype=bool, count=len(ids))
        order = [at[int(i)] for i in ids if int(i) in at]
        return found, got.vecs[order].reshape(-1, dims) if order else np.empty((0, dims), dtype=np.float32)

    return fetch


def filtered_top(
    batch: VectorBatch, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, whole: bool = False
) -> list[tuple[int, float]] | None:
    """ANN candidates' stored rows re-scored exactly and filtered; None when fewer than n pass the filter
    (a narrow filter: the exact search answers) unless they were the `whole` graph."""
    keep = np.fromiter(
        (
            s in sources and (session_key is None or s != "sessions" or k == session_key)
            for s, k in zip(batch.sources, batch.keys)
        ),
        dtype=bool,
        count=len(batch),
    )
    if int(keep.sum()) < n and not whole:
        return None
    scores = _exact(np.ascontiguousarray(batch.vecs[keep]), q)
    ids = batch.ids[keep]
    good = np.isfinite(scores)
    return _top(ids[good], scores[good], n)
