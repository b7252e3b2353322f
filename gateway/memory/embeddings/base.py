"""The embedding provider base class: capabilities are attributes, work is `embed`.

A provider turns texts into L2-normalised float32 vectors of `dims` dimensions. It may be remote; it
must never block the event loop (CPU work goes to a thread). Failures raise EmbeddingError, which says
whether a retry may help and when.
"""

from __future__ import annotations

import numpy as np


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

    async def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dims) float32, each row of unit length."""
        raise NotImplementedError

    async def close(self) -> None:
        return None


def normalise(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim == 1:
        v = v.reshape(1, -1)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(v / norms, dtype=np.float32)
