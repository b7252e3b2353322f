"""`local`: WordLlama, the 256-d static embedding model shipped inside the wordllama wheel (offline).

The model is loaded once per process (thread-safe) from the package directory with downloads disabled
(the packaged tokenizer is otherwise looked for in the wrong folder). Embedding runs in a thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import numpy as np

from .base import EmbeddingError, EmbeddingProvider, normalise

_lock = threading.Lock()
_model: Any = None
DEFAULT_MODEL = "wordllama-l2-supercat-256"


def load_wordllama() -> Any:
    """The shared WordLlama instance (loaded on first use)."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                import wordllama
                from wordllama import WordLlama

                _model = WordLlama.load(cache_dir=os.path.dirname(wordllama.__file__), disable_download=True)
    return _model


class LocalEmbeddings(EmbeddingProvider):
    name = "local"
    model = DEFAULT_MODEL
    dims = 256
    max_batch = 512
    max_chars = 6000

    def __init__(self, model: str = "") -> None:
        if model and model != DEFAULT_MODEL:
            raise ValueError(f"memory.embeddings.model: the local provider only has {DEFAULT_MODEL!r}")

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        wl = load_wordllama()
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        try:
            vecs = wl.embed([t[: self.max_chars] for t in texts], norm=True, batch_size=64)
        except Exception as exc:  # pragma: no cover - the bundled model does not fail on text
            raise EmbeddingError(f"local embedding failed: {exc}", retryable=False) from exc
        return normalise(vecs)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def warm(self) -> None:
        await asyncio.to_thread(load_wordllama)
