"""`none`: no embeddings at all; memory search is full-text only."""

from __future__ import annotations

import numpy as np

from .base import EmbeddingError, EmbeddingProvider


class NoEmbeddings(EmbeddingProvider):
    name = "none"
    model = ""
    dims = 0

    @property
    def enabled(self) -> bool:
        return False

    async def embed(self, texts: list[str]) -> np.ndarray:
        raise EmbeddingError("embeddings are disabled (memory.embeddings.provider = none)", retryable=False)
