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
from itertools import compress, repeat
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
BATCH_TOKENIZE = 64  # unseen segments from which one tokenizer call beats one BPE call each


_DIGITS = re.compile("([0-9]+)")
_DIGIT_KEYS = {d: " " + d for d in "0123456789"}


def _keys(text: str, split_digits: bool = False) -> list[str]:
    """The text's segments, each without its leading "▁" (a non-empty text). With `split_digits` (the
    vocabulary has every ASCII digit as a token of its own and no other token holding one), a digit
    ends every token, so a segment with digits is its tokens before the first digit, each digit, and
    each piece between and after them: those pieces are keys of their own, marked by a leading space
    (which no segment has) as having no "▁". So "#123456." is "#", " 1", …, " 6", " .", all soon cached,
    and numbers (dates, amounts, ids) need no tokenizer and take no rows."""
    if text[0] != " " and "  " not in text and "\u2581" not in text:
        # The common case; splitting a word off a "▁" run would not be exact.
        if not split_digits or not _DIGITS.search(text):
            return text.split(" ")
        runs = _DIGITS.split(text)  # text, digits, text, …, digits, text
        out = runs[0].split(" ")  # the last of these ("" if none) leads the first digits
        for i in range(1, len(runs), 2):
            out += [_DIGIT_KEYS[d] for d in runs[i]]
            words = runs[i + 1].split(" ")
            if words[0]:
                out.append(" " + words[0])  # right after the digits: no "▁"
            out += words[1:]
        return out
    return [seg[1:] for seg in _SEGMENT.findall("\u2581" + text.replace(" ", "\u2581"))]


class SegmentVectors:
    """A text's vector as the sum of its segments' rows in one matrix: the model's token table, a zero
    row, `capacity` rows holding the summed tokens of segments of several tokens, then `part_keys`
    scratch rows. A segment of one token is its token's row; one of several gets a row when seen a
    second time (until then a scratch row for the step holds its sum), and when rows run out the least
    recently used half is given back. A step (a few dozen texts, at most `part_keys` segments) is one
    gather of all its segments' rows and one sum per text, and a sync's many unseen segments go through
    the tokenizer in one call (see `_tokenize`).
    Thread-safe: one lock, taken per step, so a query never waits long."""

    def __init__(self, wl: Any, capacity: int = 65_536, part_keys: int = 4096) -> None:
        table = wl.embedding
        self.tok = _unpadded_tokenizer(wl)
        self.base = table.shape[0]  # rows [0, base): tokens; base: zero; then segments; then scratch
        # Segments per locked step, and so at most this many new rows per step.
        self.part_keys = part_keys
        self.capacity = max(capacity, part_keys)
        self.scratch = self.base + 1 + self.capacity
        # np.zeros: the OS hands out pages as rows are first written, so unused capacity costs nothing.
        self.rows = np.zeros((self.scratch + part_keys, table.shape[1]), dtype=np.float32)
        self.rows[: self.base] = table
        self.model = self.tok.model  # BPE without the normaliser: segments go in as they are
        self.lead = np.zeros(self.base, dtype=bool)  # tokens that begin with "▁"
        vocab = self.tok.get_vocab()
        self.lead[[i for t, i in vocab.items() if t.startswith("\u2581")]] = True
        self.split_digits = all(d in vocab for d in "0123456789") and not any(
            len(t) > 1 and any(c in "0123456789" for c in t) and not (t.startswith("<0x") and t.endswith(">"))
            for t in vocab
        )  # byte tokens ("<0x35>") stand for bytes with no token, never for a digit
        self.index: dict[str, int] = {}
        self.seen: set[str] = set()
        self.key_of: list[str | None] = [None] * self.scratch
        self.free = list(range(self.scratch - 1, self.base, -1))  # pop() hands out low rows first
        self.stamp = np.zeros(len(self.rows), dtype=np.int64)
        self.clock = 0
        self.lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.rows.shape[1]), dtype=np.float32)
        plain = [i for i, t in enumerate(texts) if "<" in t and any(s in t for s in _SPECIALS)]
        if plain:
            out[plain] = embed_texts(load_wordllama(), [texts[i] for i in plain])
        skip = set(plain)
        where: list[int] = []  # the texts of this step, and their segments end to end
        flat: list[str] = []
        for i, t in enumerate(texts):
            if i in skip or not t:
                continue
            keys = _keys(t, self.split_digits)
            if len(flat) + len(keys) > self.part_keys and flat:
                self._embed_part(where, flat, out)
                where, flat = [], []
            if len(keys) > self.part_keys:  # one huge text of tiny words: the plain way
                out[i] = embed_texts(load_wordllama(), [t])[0]
                continue
            where.append(i)
            where.append(len(flat))
            flat += keys
        if flat:
            self._embed_part(where, flat, out)
        return out

    def _embed_part(self, where: list[int], flat: list[str], out: np.ndarray) -> None:
        """`where`: (text index, its first segment's position in `flat`) pairs, flattened."""
        with self.lock:
            self.clock += 1
            if len(self.free) < len(flat):
                self._evict(max(len(flat) - len(self.free), self.capacity // 2))
            if len(self.seen) > 4 * self.capacity:
                self.seen.clear()
            idx = np.fromiter(map(self.index.get, flat, repeat(-1, len(flat))), dtype=np.intp, count=len(flat))
            unseen = np.flatnonzero(idx < 0)
            if len(unseen):
                self._resolve(flat, idx, unseen)
            self.stamp[idx] = self.clock
            got = self.rows[idx]
            add = np.add.reduce
            ends = where[3::2] + [len(flat)]
            for i, a, b in zip(where[0::2], where[1::2], ends):
                add(got[a:b], axis=0, out=out[i])  # (one `reduceat` is ten times slower)

    def _resolve(self, flat: list[str], idx: np.ndarray, unseen: np.ndarray) -> None:
        """Fill in the rows (`idx`, -1 at the positions `unseen`) of segments not indexed yet. One token:
        its row. Several: a row of their sum if the segment was seen before (typos and rare names mostly
        are not), else a scratch row."""
        todo: dict[str, list[int]] = {}  # unseen segment → its positions in `flat`
        for j in unseen.tolist():
            todo.setdefault(flat[j], []).append(j)
        keys = list(todo)
        ids, starts = self._tokenize(keys)
        lengths = np.diff(starts)
        row = ids[starts[:-1]]  # right for segments of one token
        multi = np.flatnonzero(lengths > 1)
        if len(multi):
            scratch = self.scratch
            index, seen, free, key_of = self.index, self.seen, self.free, self.key_of
            for n in multi.tolist():
                key = keys[n]
                if key in seen:
                    v = index[key] = free.pop()
                    key_of[v] = key
                else:
                    seen.add(key)
                    v, scratch = scratch, scratch + 1
                row[n] = v
            for size in np.unique(lengths[multi]).tolist():  # one gather and one sum per token count
                sel = multi[lengths[multi] == size]
                tokens = ids[starts[sel][:, None] + np.arange(size)]
                self.rows[row[sel]] = self.rows[tokens].sum(axis=1)
        one = lengths == 1
        self.index.update(zip(compress(keys, one.tolist()), row[one].tolist()))
        places = todo.values()
        idx[[j for js in places for j in js]] = np.repeat(row, list(map(len, places)))

    def _tokenize(self, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of the segments ("▁" + key; a piece marked " " as it is) end to end, and where each
        segment's tokens start (plus the end). Many keys without a "▁" (a sync's batch) go through the
        tokenizer in one call, laid end to end, with the GIL released: each then starts with the only
        token of its own that begins with "▁", since no token spans the start of a run of "▁". A few (a
        query's), runs of "▁" (odd whitespace) and marked pieces go through the BPE model one by one: no
        call overhead, no wait to get the GIL back."""
        joinable = [bool(k) and k[0] not in " \u2581" and k[-1] != "\u2581" for k in keys]
        plain = [k for k, ok in zip(keys, joinable) if ok] if len(keys) >= BATCH_TOKENIZE else []
        if plain:
            ids = np.array(_encode(self.tok, [" ".join(plain)])[0].ids, dtype=np.intp)
            starts = np.append(np.flatnonzero(self.lead[ids]), len(ids))
            if len(plain) == len(keys):
                return ids, starts
            got = iter(np.split(ids, starts[1:-1]))
        tokenize = self.model.tokenize
        parts = [
            next(got)
            if plain and ok
            else np.array(
                [t.id for t in tokenize(k[1:] if k[:1] == " " else "\u2581" + k)], dtype=np.intp
            )  # " …": no "▁"
            for k, ok in zip(keys, joinable)
        ]
        return np.concatenate(parts), np.cumsum([0] + [len(p) for p in parts])

    def _evict(self, n: int) -> None:
        """Give back the `n` least recently used segment rows (before a step looks anything up)."""
        used = np.flatnonzero(np.asarray([k is not None for k in self.key_of[self.base + 1 :]])) + self.base + 1
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
    # Not cached: a chunk is embedded in ~0.1 ms, and the cache would hold a second copy of every vector
    # (1 KiB a chunk, a fifth of the index) and write it on every sync.
    cached = False
    max_batch = 512
    max_chars = 6000
    portable = True

    def __init__(self, model: str = "") -> None:
        if model and model != DEFAULT_MODEL:
            raise ValueError(f"memory.embeddings.model: the local provider only has {DEFAULT_MODEL!r}")

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        try:
            # "" has no token, so no direction: embedded as " " (as the openai provider sends it).
            vecs = segment_vectors().embed([t[: self.max_chars] or " " for t in texts])
        except Exception as exc:  # pragma: no cover - the bundled model does not fail on text
            raise EmbeddingError(f"local embedding failed: {exc}", retryable=False) from exc
        return normalise(vecs, f"embedding provider local ({self.model})")

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def warm(self) -> None:
        await asyncio.to_thread(segment_vectors)  # the model, its tokenizer and the segment rows
