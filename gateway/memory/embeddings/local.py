"""`local`: WordLlama, the 256-d static embedding model shipped inside the wordllama wheel (offline).

The model is loaded once per process (thread-safe) from the package directory with downloads disabled
(the packaged tokenizer is otherwise looked for in the wrong folder). Embedding runs in a thread.

Embedding is WordLlama's own computation (the mean of the texts' token vectors, then L2 norm; the
mean's divisor does not change the direction, so we normalise sums), done faster and with the same
vectors (tests compare them):

- The tokenizer is SentencePiece-style BPE: it turns spaces into "▁", prepends one, and has no
  pre-tokenizer, but no token of its vocabulary holds a "▁" after another character. So no token ever
  spans the start of a run of "▁", and a text's tokens are the tokens of its *segments* (a run of "▁"
  and what follows up to the next one — about a word with its punctuation) laid end to end.
- Words repeat (Zipf), so `SegmentVectors` keeps the summed token vectors of recent segments; a text's
  vector is the sum of its segments' rows, and only unseen segments go through the BPE model. Texts
  holding the tokenizer's special tokens (`<s>`, `</s>`, `<unk>`, matched before normalisation) take
  the plain path: `embed_texts`, which tokenises unpadded in one `encode_batch_fast` call and sums each
  text's token vectors on their own.
"""

from __future__ import annotations

import asyncio
import os
import re
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


def _encode(tok: Any, texts: list[str]) -> list[Any]:
    """Tokenise unpadded, in parallel (`encode_batch_fast` skips the offsets; older tokenizers lack it)."""
    if hasattr(tok, "encode_batch_fast"):
        return tok.encode_batch_fast(texts, add_special_tokens=False)
    return tok.encode_batch(texts, add_special_tokens=False)


def embed_texts(wl: Any, texts: list[str]) -> np.ndarray:
    """Mean of each text's token vectors, L2-normalised (WordLlama's `embed(norm=True)`); float32."""
    tok = _unpadded_tokenizer(wl)
    table = wl.embedding
    vocab = table.shape[0]
    encs = _encode(tok, texts)
    out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
    for i, enc in enumerate(encs):
        ids = enc.ids
        if not ids:
            continue
        idx = np.asarray(ids, dtype=np.intp)
        np.clip(idx, 0, vocab - 1, out=idx)
        np.sum(table[idx], axis=0, dtype=np.float32, out=out[i])
    return out


_SEGMENT = re.compile("\u2581+[^\u2581]*")  # a run of "▁" and what follows up to the next one
_SPECIALS = ("<s>", "</s>", "<unk>")


def _keys(text: str) -> list[str]:
    """The text's segments, each without its leading "▁" (a non-empty text)."""
    if text[0] != " " and "  " not in text and "\u2581" not in text:
        return text.split(" ")  # the common case; splitting a word off a "▁" run would not be exact
    return [seg[1:] for seg in _SEGMENT.findall("\u2581" + text.replace(" ", "\u2581"))]


class SegmentVectors:
    """A text's vector as the sum of its segments' rows in one matrix: the model's token table, a zero
    row, then `capacity` rows holding the summed tokens of segments of several tokens. A segment of one
    token is its token's row; one of several gets a row when seen a second time (until then its tokens'
    rows are summed), and when rows run out the least recently used half is given back.
    Thread-safe: one lock, taken per step of a few dozen texts, so a query never waits long."""

    def __init__(self, wl: Any, capacity: int = 65_536, part_keys: int = 4096) -> None:
        table = wl.embedding
        self.tok = _unpadded_tokenizer(wl)
        self.base = table.shape[0]  # rows [0, base): tokens; base: zero; above: segments
        # Segments per locked step, and so at most this many new rows per step.
        self.part_keys = part_keys
        self.capacity = max(capacity, part_keys)
        # np.zeros: the OS hands out pages as rows are first written, so unused capacity costs nothing.
        self.rows = np.zeros((self.base + 1 + self.capacity, table.shape[1]), dtype=np.float32)
        self.rows[:self.base] = table
        self.model = self.tok.model  # BPE without the normaliser: segments go in as they are
        self.index: dict[str, int] = {}
        self.seen: set[str] = set()
        self.key_of: list[str | None] = [None] * len(self.rows)
        self.free = list(range(len(self.rows) - 1, self.base, -1))  # pop() hands out low rows first
        self.stamp = np.zeros(len(self.rows), dtype=np.int64)
        self.clock = 0
        self.lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.rows.shape[1]), dtype=np.float32)
        plain = [i for i, t in enumerate(texts) if any(s in t for s in _SPECIALS)]
        if plain:
            out[plain] = embed_texts(load_wordllama(), [texts[i] for i in plain])
        skip = set(plain)
        part: list[tuple[int, list[str]]] = []
        size = 0
        for i, t in enumerate(texts):
            if i in skip or not t:
                continue
            keys = _keys(t)
            if size + len(keys) > self.part_keys and part:
                self._embed_part(part, out)
                part, size = [], 0
            if len(keys) > self.part_keys:  # one huge text of tiny words: the plain way
                out[i] = embed_texts(load_wordllama(), [t])[0]
                continue
            part.append((i, keys))
            size += len(keys)
        if part:
            self._embed_part(part, out)
        return out

    def _embed_part(self, part: list[tuple[int, list[str]]], out: np.ndarray) -> None:
        size = sum(len(keys) for _, keys in part)  # at most this many new rows
        with self.lock:
            self.clock += 1
            if len(self.free) < size:
                self._evict(max(size - len(self.free), self.capacity // 2))
            if len(self.seen) > 4 * self.capacity:
                self.seen.clear()
            get = self.index.get
            rows, stamp, clock = self.rows, self.stamp, self.clock
            for i, keys in part:
                vs = list(map(get, keys))
                if None in vs:
                    vs = self._resolve(keys, vs)
                idx = np.asarray(vs, dtype=np.intp)
                stamp[idx] = clock
                np.sum(rows[idx], axis=0, dtype=np.float32, out=out[i])

    def _resolve(self, keys: list[str], vs: list[int | None]) -> list[int]:
        """Rows for the segments not indexed yet. One token: its row. Several: a row of their sum if
        the segment was seen before (numbers and typos mostly are not), else the token rows themselves."""
        extra: list[int] = []
        j = -1
        while None in vs:
            j = vs.index(None, j + 1)  # scans in C: most segments are known
            key = keys[j]
            v = self.index.get(key)  # an earlier occurrence in this text
            if v is None:
                ids = [t.id for t in self.model.tokenize("\u2581" + key)]
                if len(ids) == 1:
                    v = self.index[key] = ids[0]
                elif key in self.seen and self.free:
                    v = self.free.pop()
                    np.sum(self.rows[np.asarray(ids, dtype=np.intp)], axis=0, dtype=np.float32, out=self.rows[v])
                    self.index[key] = v
                    self.key_of[v] = key
                else:
                    self.seen.add(key)
                    v = ids[0]
                    extra.extend(ids[1:])
            vs[j] = v
        return vs + extra  # type: ignore[operator]

    def _evict(self, n: int) -> None:
        """Give back the `n` least recently used segment rows (before a step looks anything up)."""
        used = np.flatnonzero(np.asarray([k is not None for k in self.key_of[self.base + 1:]])) + self.base + 1
        n = min(n, len(used))
        victims = used[np.argpartition(self.stamp[used], n - 1)[:n]] if n < len(used) else used
        for r in victims.tolist():
            del self.index[self.key_of[r]]
            self.key_of[r] = None
            self.free.append(r)


_segments: SegmentVectors | None = None


def segment_vectors() -> SegmentVectors:
    """The shared segment cache (created on first use)."""
    global _segments
    if _segments is None:
        wl = load_wordllama()
        _unpadded_tokenizer(wl)  # takes `_lock` itself
        with _lock:
            if _segments is None:
                _segments = SegmentVectors(wl)
    return _segments


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
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        try:
            vecs = segment_vectors().embed([t[: self.max_chars] for t in texts])
        except Exception as exc:  # pragma: no cover - the bundled model does not fail on text
            raise EmbeddingError(f"local embedding failed: {exc}", retryable=False) from exc
        return normalise(vecs)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def warm(self) -> None:
        await asyncio.to_thread(load_wordllama)
