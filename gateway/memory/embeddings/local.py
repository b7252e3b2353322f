"""`local`: WordLlama, the 256-d static embedding model shipped inside the wordllama wheel (offline).

The model is loaded once per process (thread-safe) from the package directory with downloads disabled
(the packaged tokenizer is otherwise looked for in the wrong folder). Embedding runs in a thread.

Embedding is WordLlama's own computation (the mean of the texts' token vectors, then L2 norm), done
without its padded (batch × longest text × 256) gather: texts are tokenised unpadded in one
`encode_batch_fast` call (Rust, parallel over the cores, GIL released) and each text's token vectors are
summed on their own, which stays in the CPU cache. Same vectors, about twice as fast.
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
_tokenizer: Any = None  # an unpadded copy of the model's tokenizer (the model's own one pads)
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


def _unpadded_tokenizer(wl: Any) -> Any:
    global _tokenizer
    if _tokenizer is None:
        with _lock:
            if _tokenizer is None:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_str(wl.tokenizer.to_str())
                tok.no_padding()
                tok.no_truncation()
                _tokenizer = tok
    return _tokenizer


def embed_texts(wl: Any, texts: list[str]) -> np.ndarray:
    """Mean of each text's token vectors, L2-normalised (WordLlama's `embed(norm=True)`); float32."""
    tok = _unpadded_tokenizer(wl)
    table = wl.embedding
    vocab = table.shape[0]
    encs = (tok.encode_batch_fast(texts, add_special_tokens=False) if hasattr(tok, "encode_batch_fast")
            else tok.encode_batch(texts, add_special_tokens=False))
    out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
    for i, enc in enumerate(encs):
        ids = enc.ids
        if not ids:
            continue
        idx = np.asarray(ids, dtype=np.intp)
        np.clip(idx, 0, vocab - 1, out=idx)
        np.sum(table[idx], axis=0, dtype=np.float32, out=out[i])
    # The mean's divisor does not change the direction: normalising the sums is the same.
    return out

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
            vecs = embed_texts(wl, [t[: self.max_chars] for t in texts])
        except Exception as exc:  # pragma: no cover - the bundled model does not fail on text
            raise EmbeddingError(f"local embedding failed: {exc}", retryable=False) from exc
        return normalise(vecs)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def warm(self) -> None:
        await asyncio.to_thread(load_wordllama)
