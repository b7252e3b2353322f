"""The embedding provider base class: capabilities are attributes, work is `embed`.

A provider turns texts into L2-normalised float32 vectors of `dims` dimensions. It may be remote; it
must never block the event loop (CPU work goes to a thread). Failures raise EmbeddingError, which says
whether a retry may help and when.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import structlog

log = structlog.get_logger("gateway.memory")


class EmbeddingError(RuntimeError):
    def __init__(self, message: str, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class EmbeddingProvider:
    name: str = ""
    model: str = ""
    dims: int = 0  # 0 until known (a remote model whose size is not configured)
    multimodal: bool = False
    remote: bool = False
    # Keep its vectors in the embedding cache (worth it when embedding costs time or money).
    cached: bool = True
    max_batch: int = 64
    # Per-text character cap applied before embedding (very long texts add little and cost a lot).
    max_chars: int = 8000
    # `type(self)()` in another process gives the same vectors from `embed_sync`: a large sync may then
    # embed in worker processes (CPU-bound Python holds the GIL, so threads would share one core).
    portable: bool = False

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """`embed` for a caller already off the event loop (portable providers only)."""
        raise NotImplementedError

    @property
    def enabled(self) -> bool:
        return True

    @property
    def signature_dims(self) -> int:
        """The dimensions the index signature records (signature.py): its own, or what a provider that
        learns its size from its first answer was asked for."""
        return self.dims

    async def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dims) float32, each row of unit length."""
        raise NotImplementedError

    async def warm(self) -> None:
        """Load what the first embedding needs (a local model) ahead of it."""
        return None

    async def close(self) -> None:
        return None


def provider_name(p: EmbeddingProvider) -> str:
    """How errors name a provider: "embedding provider openai (text-embedding-3-small)"."""
    return f"embedding provider {p.name} ({p.model})"


def usable(v: np.ndarray) -> np.ndarray:
    """Which rows of a 2-d array are usable vectors: every value finite, not all zero. A NaN row makes
    every cosine with it NaN (sqlite-vec answers NULL distances), a zero row has no direction."""
    return np.isfinite(v).all(axis=1) & (np.abs(v).max(axis=1, initial=0.0) > 0)


def check_vectors(vectors: Any, who: str, rows: int, dims: int = 0) -> np.ndarray:
    """`vectors` as (rows, dims) float32 when every row is usable, else EmbeddingError naming `who` (the
    provider and model) and what is wrong. Nothing of such a batch may be cached or stored: one bad
    answer (then healthy again) must not poison searches for good."""
    try:
        v = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:  # ragged rows, nulls, strings
        raise EmbeddingError(f"{who} returned malformed vectors ({exc}); none were stored") from None
    if v.ndim == 1 and rows == 1:
        v = v.reshape(1, -1)
    if v.ndim != 2 or v.shape[0] != rows or v.shape[1] == 0:
        raise EmbeddingError(f"{who} returned malformed vectors (shape {v.shape} for {rows} texts); none were stored")
    if dims and v.shape[1] != dims:
        raise EmbeddingError(
            f"{who} returned {v.shape[1]}-d vectors, expected {dims}-d; none were stored", retryable=False
        )
    ok = usable(v)
    if not ok.all():
        finite = np.isfinite(v).all(axis=1)
        nan, zero = int((~finite).sum()), int((finite & ~ok).sum())
        what = ", ".join(
            p for p in (f"{nan} with NaN or infinite values" if nan else "", f"{zero} all zeros" if zero else "") if p
        )
        raise EmbeddingError(
            f"{who} returned unusable vectors ({what}, of {rows}); none were stored, the chunks are retried later"
        )
    return np.ascontiguousarray(v)


def normalise(vectors: Any, who: str = "the embedding provider") -> np.ndarray:
    """Rows of unit length; raises EmbeddingError (check_vectors) for NaN, infinite or zero rows."""
    v = check_vectors(vectors, who, 1 if isinstance(vectors, np.ndarray) and vectors.ndim == 1 else len(vectors))
    return np.ascontiguousarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype=np.float32)


def drop_unusable(found: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cached vectors less the unusable ones (NaN, infinite, all zeros: cached before providers' answers
    were checked): those texts are embedded again and their entries replaced."""
    good = {h: v for h, v in found.items() if np.isfinite(v).all() and v.any()}
    if len(good) < len(found):
        log.warning("memory_embedding_cache_unusable", dropped=len(found) - len(good))
    return good
