"""Query handling, full-text and vector candidates, fusion, and snippets.

Full text: the query is cut into words (Unicode `\\w+`), lowercased, stopwords dropped, and each word is
quoted as an FTS5 string (`"word"`), so no query can be FTS5 syntax: quotes, `*`, `NEAR(`, `-`, `:` and
parentheses only ever separate words. Words are OR-ed and ranked by BM25. With the default unicode61
tokenizer, words of 5+ letters also match their light stem as a prefix (`"painting"` → `"paint"*`), so
inflections meet. With the `trigram` tokenizer (CJK) a run of CJK characters becomes its overlapping
3-character pieces.

Vector: the query's embedding against `chunks_vec` (cosine), with the same source / session filter.

Fusion: reciprocal rank fusion, Σ weight / (rrfK + rank), normalised by its largest possible value so
that a chunk ranked first by every list scores 1; or a weighted blend of the BM25 score relative to the
best one and the cosine similarity. fts-only scores are BM25 relative to the best hit; vector-only scores
are the cosine similarity (clipped to [0, 1]).

Snippets (≤ `snippetChars`): a chunk that fits is shown whole; otherwise the segment (a transcript
message, or a markdown line) that matches the query best — query words weighted by their rarity among
the candidates — plus its best neighbours, whole, until the budget is used; 60 or more characters left
show how the next segment begins, then the one before. A single segment longer than the budget is cut
around its first match.
"""

from __future__ import annotations

import asyncio
import math
import re
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TypeVar

import numpy as np
import orjson

from ..index.db import Database
from ..embeddings import EmbeddingError, EmbeddingProvider
from ..index.migrations import TOKENIZERS
from .stopwords import DATE_STOPWORDS, STOPWORDS
from ..index.vectors import VectorStore

if TYPE_CHECKING:  # pragma: no cover
    from ...config import SearchConfig

POSTINGS_BUDGET = 0.05  # of all chunks; see Searcher.prune_common
PRUNE_MIN_CHUNKS = 20_000
_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]")
MAX_TERMS = 48


def _is_cjk(word: str) -> bool:
    return bool(_CJK.search(word))


def light_stem(word: str) -> str:
    """A conservative English suffix strip used only to widen matching by prefix."""
    for suf in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suf) and len(word) - len(suf) >= 4:
            stem = word[: -len(suf)]
            if suf in ("ing", "ed") and len(stem) > 4 and stem[-1] == stem[-2] and stem[-1] not in "aeiouls":
                stem = stem[:-1]  # planned → plan(n), running → run(n)
            return stem
    return word


def _is_date_word(words: Sequence[str], i: int) -> bool:
    """A stopword that is a month name here ("May" beside a number, or capitalised mid-sentence)."""
    w = words[i]
    if w.lower() not in DATE_STOPWORDS:
        return False
    near = words[max(0, i - 1):i] + words[i + 1:i + 2]
    return any(x.isdigit() for x in near) or (i > 0 and w[:1].isupper() and not w.isupper())


def query_terms(text: str) -> list[str]:
    """Distinct lowercased words of a query, stopwords and single Latin letters removed, in order.
    A stopword that is a month name in a date ("in May 2023") is kept."""
    seen: dict[str, None] = {}
    words = [w.strip("_") for w in _WORD.findall(text)]
    for i, orig in enumerate(words):
        w = orig.lower()
        if not w or (len(w) == 1 and not _is_cjk(w) and not w.isdigit()):
            continue
        if w in STOPWORDS and not _is_date_word(words, i):
            continue
        seen.setdefault(w, None)
        if len(seen) >= MAX_TERMS:
            break
    return list(seen)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fts_query(terms: Sequence[str], tokenizer: str) -> str | None:
    """An FTS5 MATCH expression that ORs the quoted terms; None when nothing is searchable."""
    parts: list[str] = []
    for t in terms:
        if tokenizer == "trigram":
            if _is_cjk(t):
                if len(t) < 3:
                    continue  # trigram cannot match shorter strings
                grams = {t[i:i + 3] for i in range(len(t) - 2)}
                parts.extend(_quote(g) for g in sorted(grams))
            elif len(t) >= 3:
                parts.append(_quote(t))
        elif tokenizer == "porter":
            parts.append(_quote(t))
        else:
            parts.append(_quote(t))
            stem = light_stem(t)
            if stem != t and not _is_cjk(t):
                parts.append(_quote(stem) + "*")
    if not parts:
        return None
    return " OR ".join(dict.fromkeys(parts))


# ---- fusion ----------------------------------------------------------------------------------------

@dataclass
class Candidate:
    id: int
    score: float = 0.0
    fts_rank: int | None = None
    vec_rank: int | None = None
    bm25: float | None = None
    cosine: float | None = None


def fuse(fts: Sequence[tuple[int, float]], vec: Sequence[tuple[int, float]], *, method: str,
         rrf_k: int, text_weight: float, vector_weight: float) -> list[Candidate]:
    """fts: (id, bm25) best first (bm25 negative, lower is better); vec: (id, cosine) best first."""
    cands: dict[int, Candidate] = {}
    for r, (cid, s) in enumerate(fts, start=1):
        c = cands.setdefault(cid, Candidate(cid))
        c.fts_rank, c.bm25 = r, s
    for r, (cid, s) in enumerate(vec, start=1):
        c = cands.setdefault(cid, Candidate(cid))
        c.vec_rank, c.cosine = r, s
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
            c.score = s / ((wt + wv) / (rrf_k + 1))
        else:
            ft = (c.bm25 / best_bm25) if (c.bm25 is not None and best_bm25 < 0) else 0.0
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


# ---- snippets --------------------------------------------------------------------------------------

def term_weights(terms: Sequence[str], texts: Iterable[str]) -> dict[str, float]:
    """IDF-like weight of each query term among the candidate texts (rarer → heavier)."""
    texts = [t.lower() for t in texts]
    n = max(1, len(texts))
    out = {}
    for t in terms:
        df = sum(1 for x in texts if t in x)
        out[t] = math.log(1.0 + (n + 1) / (df + 0.5))
    return out


def _term_needles(terms: Sequence[str]) -> list[tuple[str, str, bool]]:
    """(term, lowercase needle, must start a word): light stems match inflections as a prefix."""
    return [(t, t, False) if _is_cjk(t) else (t, light_stem(t), True) for t in terms]


def _find(hay: str, needle: str, word_start: bool) -> int:
    i = hay.find(needle)
    while i > 0 and word_start and (hay[i - 1].isalnum() or hay[i - 1] == "_"):
        i = hay.find(needle, i + 1)
    return i


@dataclass
class Segment:
    text: str
    score: float = 0.0
    first_hit: int = -1


@dataclass
class SnippetContext:
    terms: list[str]
    weights: dict[str, float] = field(default_factory=dict)
    needles: list[tuple[str, str, bool]] = field(default_factory=list)

    @classmethod
    def build(cls, terms: Sequence[str], texts: Iterable[str]) -> "SnippetContext":
        terms = list(terms)
        return cls(terms, term_weights(terms, texts), _term_needles(terms))


def _segments(text: str, spans: Sequence[Sequence[int]] | None, context: str) -> list[tuple[str, bool]]:
    """(segment, is core) in reading order: transcript messages (core and neighbours), or markdown lines."""
    if spans:
        return [((text if where == 0 else context)[a:b], where == 0) for _line, where, a, b in spans]
    return [(line, True) for line in text.split("\n")]


def _score(seg: str, ctx: SnippetContext) -> Segment:
    s = Segment(seg)
    low = seg.lower()
    for term, needle, word_start in ctx.needles:
        i = _find(low, needle, word_start)
        if i >= 0:
            s.score += ctx.weights.get(term, 1.0)
            if s.first_hit < 0 or i < s.first_hit:
                s.first_hit = i
    return s


# "User: ", "Assistant: ", "Caroline: ": who spoke, at the start of a transcript message (see chunking).
_LABEL = re.compile(r"^[^\W\d_][\w.'’-]*(?: [^\W\d_][\w.'’-]*){0,2}: ")


def _body(seg: str) -> str:
    """A segment without its speaker label."""
    m = _LABEL.match(seg)
    return seg[m.end():] if m else seg


class EchoTest:
    """Tells a message (or line) that asks rather than tells: a question, or one whose words are all
    the query's own (it adds nothing to what is asked). Such a segment is a poor answer to the query
    even when it matches it best — typically the same question asked earlier."""

    def __init__(self, query_terms_: Sequence[str]):
        self.stems = frozenset(light_stem(t) for t in query_terms_)
        # A message made of the query's words and stopwords is about as long as a query: a longer
        # one surely adds words (checked by length, not by finding every word: this runs per message).
        self.max_len = 24 * len(self.stems) + 40

    def __call__(self, seg: str) -> bool:
        body = _body(seg).strip()
        if not body:
            return False
        if body.endswith("?"):
            return True
        if len(body) > self.max_len:
            return False
        seen = False
        for w in _WORD.findall(body.lower()):  # stops at the first word the query does not have
            if w in STOPWORDS or (len(w) == 1 and not _is_cjk(w)):
                continue
            if light_stem(w.strip("_")) not in self.stems:
                return False
            seen = True
        return seen


def _only_asks(core: Sequence[tuple[float, str]], others: Sequence[str], ctx: "SnippetContext",
               is_echo: EchoTest) -> bool:
    """A chunk whose core matches the query only in questions / echoes of it, with no statement in its
    whole window (core or neighbours) that matches the query: it asks what the query asks and holds no
    answer. (A question followed by its answer is not penalised: the answer is in the window.)
    `core`: (match score, text) of the core's segments; `others`: the neighbours' texts."""
    matched = [seg for sc, seg in sorted(core, key=lambda x: -x[0]) if sc > 0]  # a statement is usually best
    if not matched or not all(is_echo(seg) for seg in matched):
        return False  # the common case, decided without looking at the neighbours
    return not any(not is_echo(seg) and _score(seg, ctx).score > 0 for seg in others)


@dataclass(frozen=True)
class Exclude:
    """Leave out the chunks of transcript `path` whose core holds a message with this text (the
    message a chat turn answers: it must not be recalled as its own answer)."""
    path: str
    text: str

    def hits(self, path: str, text: str, spans: Sequence[Sequence[int]] | None, context: str) -> bool:
        if path != self.path or not spans:
            return False
        want = " ".join(self.text.split())
        # The message as indexed: with a speaker label ("User: …"), or as written when the transcript
        # names its speakers itself ("Caroline: …").
        # A message longer than a chunk is indexed in pieces: each is part of it.
        for seg, core in _segments(text, spans, context):
            if not core:
                continue
            body, whole = " ".join(_body(seg).split()), " ".join(seg.split())
            if want in (body, whole) or (len(body) >= 200 and body in want):
                return True
        return False


def _cut_around(text: str, pos: int, limit: int) -> str:
    if len(text) <= limit:
        return text
    pos = max(0, pos)
    start = max(0, min(pos - limit // 4, len(text) - limit))
    if start > 0:
        sp = text.find(" ", start, start + 40)
        if sp != -1:
            start = sp + 1
    piece = text[start:start + limit - (1 if start > 0 else 0) - 1]
    if start + len(piece) < len(text):
        sp = piece.rfind(" ", len(piece) - 40)
        if sp > 0:
            piece = piece[:sp]
        piece += "…"
    if start > 0:
        piece = "…" + piece
    return piece[:limit]


MIN_HEAD = 60  # characters of a neighbouring message worth showing (a name and the first words)


def snippet(text: str, spans: Sequence[Sequence[int]] | None, ctx: SnippetContext, limit: int = 700,
            context: str = "") -> str:
    """The best ≤ `limit` characters of a chunk: around its best-matching core segment, whole segments."""
    raw = _segments(text, spans, context)
    if sum(len(seg) + 1 for seg, _ in raw) - 1 <= limit:
        return "\n".join(seg for seg, _ in raw)
    segs = [_score(seg, ctx) for seg, _ in raw]
    core = [i for i, (_, is_core) in enumerate(raw) if is_core and segs[i].text.strip()]
    # Lead with the core's best match (neighbours then fill the room around it).
    scored = [i for i in core if segs[i].score > 0]
    if scored:
        best = max(scored, key=lambda i: (segs[i].score, -i))
    else:
        best = core[0] if core else 0
    if len(segs[best].text) >= limit:
        return _cut_around(segs[best].text, segs[best].first_hit, limit)
    chosen = {best}
    used = len(segs[best].text)
    lo, hi = best - 1, best + 1
    while True:
        options = []
        if lo >= 0 and used + 1 + len(segs[lo].text) <= limit:
            options.append((raw[lo][1], segs[lo].score, 0, lo))
        if hi < len(segs) and used + 1 + len(segs[hi].text) <= limit:
            options.append((raw[hi][1], segs[hi].score, 1, hi))
        if not options:
            break
        # Core before neighbours; then the better-matching side; on a tie, the following one.
        pick = max(options)[3]
        chosen.add(pick)
        used += 1 + len(segs[pick].text)
        if pick == lo:
            lo -= 1
        else:
            hi += 1
    out = "\n".join(segs[i].text for i in sorted(chosen))
    # The room left shows how the next message begins (cut at a word, marked "…"), then the one before.
    for side in (hi, lo):
        room = limit - len(out) - 1
        if 0 <= side < len(segs) and room >= MIN_HEAD and segs[side].text.strip():
            head = _head(segs[side].text, room - 1)
            out = out + "\n" + head if side == hi else head + "\n" + out
    return out[:limit]


def _head(text: str, n: int) -> str:
    """The first ≤ n characters of `text` and "…", cut at a word when one ends in the second half."""
    head = text[:n]
    sp = head.rfind(" ")
    return (head[:sp] if sp > n // 2 else head).rstrip() + "…"


# ---- the search itself -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SearchOptions:
    """The search settings, built from the config (`memory.search.*`) by `from_config`: no defaults of
    their own, so the config is the one place a default lives."""
    mode: str
    fusion: str
    rrf_k: int
    text_weight: float
    vector_weight: float
    candidate_multiplier: int
    snippet_chars: int
    tokenizer: str  # the live index's FTS tokenizer (normally `ftsTokenizer`; see MemoryManager)
    context_weight: float
    segment_weight: float
    # Re-rank: weight of the rarity-weighted share of the query's words found anywhere in the window
    # (core and neighbours), beside segment_weight's best single message.
    coverage_weight: float
    # Each result already picked from the same file scales a candidate's score by this (1 = off).
    file_diversity: float
    # Re-rank: a question (or a message made only of the query's words) counts this much as a match,
    # and a chunk whose core is only such messages scores this much (1 = off).
    question_weight: float
    # A candidate found only by its embedding needs at least this cosine similarity to the query.
    min_similarity: float
    # fusion "rrf": weight of the third ranked list, the re-rank's match (best message + coverage).
    rerank_weight: float

    @classmethod
    def from_config(cls, s: "SearchConfig", tokenizer: str | None = None) -> "SearchOptions":
        return cls(mode=s.mode, fusion=s.fusion, rrf_k=s.rrf_k, text_weight=s.text_weight,
                   vector_weight=s.vector_weight, candidate_multiplier=s.candidate_multiplier,
                   snippet_chars=s.snippet_chars, tokenizer=tokenizer or s.fts_tokenizer,
                   context_weight=s.context_weight, segment_weight=s.segment_weight,
                   coverage_weight=s.coverage_weight, file_diversity=s.file_diversity,
                   question_weight=s.question_weight, min_similarity=s.min_similarity,
                   rerank_weight=s.rerank_weight)


T = TypeVar("T")


def _shared_ranks(values: Sequence[float]) -> list[int]:
    """1-based rank of each value, highest first; equal values share the best rank of their group."""
    vals = [round(v, 9) for v in values]
    first: dict[float, int] = {}
    for r, v in enumerate(sorted(vals, reverse=True), start=1):
        first.setdefault(v, r)
    return [first[v] for v in vals]


def spread_over_files(ranked: list[T], k: int, factor: float,
                      score: Callable[[T], float] = lambda cr: cr[0].score,
                      path: Callable[[T], str] = lambda cr: cr[1][1]) -> list[T]:
    """The best `k` of `ranked` (best first), picked one at a time with each item's score scaled by
    `factor` ** (items picked from its file so far): a gentle push toward other conversations and notes,
    for questions whose answer is spread over several. Items keep their own scores. The defaults read
    (Candidate, chunk row) pairs; result dicts pass `score`/`path`."""
    if factor >= 1.0 or len(ranked) <= 1:
        return ranked[:k]
    left = list(ranked)
    picked: list[T] = []
    per_file: dict[str, int] = {}
    while left and len(picked) < k:
        best = max(range(len(left)), key=lambda i: (score(left[i]) * factor ** per_file.get(path(left[i]), 0), -i))
        item = left.pop(best)
        picked.append(item)
        per_file[path(item)] = per_file.get(path(item), 0) + 1
    return picked


@dataclass
class _Scratch:
    """A connection's scratch FTS5 table for tokenising query words. It belongs to the connection, and
    a new Searcher may start on it while an old one still answers, so they share its lock."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: bool = False


_SCRATCH: weakref.WeakKeyDictionary[Database, _Scratch] = weakref.WeakKeyDictionary()


class Searcher:
    """Answers searches from one (read) connection. `vectors` is None when vectors cannot be used, and
    `vector_problem` then says why (reported as `degraded`). Chunks of `hidden_sessions` (deleted
    sessions a sync has yet to drop; the set is the caller's and may change) are left out."""

    def __init__(self, db: Database, provider: EmbeddingProvider, opts: SearchOptions,
                 vectors: VectorStore | None, vector_problem: str | None,
                 hidden_sessions: set[str] | None = None):
        self.db, self.provider, self.opts = db, provider, opts
        self.vectors, self.vector_problem = vectors, vector_problem
        self.hidden_sessions = hidden_sessions if hidden_sessions is not None else set()
        self._qcache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._scratch = _SCRATCH.setdefault(db, _Scratch())
        self.total_chunks = 0  # kept current by the manager; enables common-term pruning on big indexes

    async def embed_query(self, text: str) -> np.ndarray:
        v = self._qcache.get(text)
        if v is not None:
            self._qcache.move_to_end(text)
            return v
        v = (await self.provider.embed([text]))[0]
        self._qcache[text] = v
        if len(self._qcache) > 256:
            self._qcache.popitem(last=False)
        return v

    async def _token_counts(self, terms: Sequence[str]) -> tuple[list[list[str]], dict[str, int]]:
        """How the FTS tokenizer indexes each term (porter: its stem), and in how many chunks each of
        those tokens is: the terms go through a scratch FTS5 table. Two statements (each is a trip to
        the SQLite thread, which a concurrent vector search makes slower)."""
        scratch = self._scratch
        async with scratch.lock:
            if not scratch.ready:
                tok = TOKENIZERS[self.opts.tokenizer]
                await self.db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.q_fts USING fts5(x, tokenize='{tok}')")
                await self.db.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.q_vocab USING fts5vocab(temp, q_fts, 'instance')")
                scratch.ready = True
            # Rows 1..n are this search's terms (rows past n are an earlier, longer search's: ignored).
            await self.db.execute(
                "INSERT OR REPLACE INTO temp.q_fts(rowid, x) SELECT key + 1, value FROM json_each(?)",
                (orjson.dumps(list(terms)).decode(),))
            rows = await self.db.fetchall(
                "SELECT v.doc, v.term, (SELECT r.doc FROM chunks_fts_rows r WHERE r.term = v.term) "
                "FROM temp.q_vocab v WHERE v.doc <= ?", (len(terms),))
        toks: list[list[str]] = [[] for _ in terms]
        df: dict[str, int] = {}
        for doc, term, count in rows:
            toks[int(doc) - 1].append(term)
            df[term] = int(count or 0)
        return toks, df

    async def prune_common(self, terms: Sequence[str]) -> list[str]:
        """On a big index, search the rarest words and skip common ones beyond a postings budget.

        FTS5 scores every chunk that matches any OR-ed word, so a search costs about the sum of its
        words' document counts. Words are taken rarest first while that sum stays within
        POSTINGS_BUDGET of all chunks (the rarest always). Skipped words have the lowest IDF, so
        they would have moved the ranking least; they still count in the re-ranking of the candidates
        and in the vector search."""
        total = self.total_chunks
        if self.opts.tokenizer == "trigram" or len(terms) < 2 or total < PRUNE_MIN_CHUNKS:
            return list(terms)
        toks, df = await self._token_counts(terms)
        if not df:
            return list(terms)
        tdf = [sum(df[t] for t in ts) for ts in toks]
        budget = POSTINGS_BUDGET * total
        keep: set[int] = set()
        used = 0
        for i in sorted(range(len(terms)), key=lambda i: tdf[i]):
            if keep and used + tdf[i] > budget:
                break
            keep.add(i)
            used += tdf[i]
        return [terms[i] for i in sorted(keep)]

    async def fts(self, terms: Sequence[str], n: int, sources: tuple[str, ...],
                  session_key: str | None) -> list[tuple[int, float]]:
        terms = await self.prune_common(terms)
        expr = fts_query(terms, self.opts.tokenizer)
        if expr is None:
            return []
        where, params = ["chunks_fts MATCH ?"], [expr]
        if len(sources) == 1:
            where.append("c.source = ?")
            params.append(sources[0])
        if session_key is not None:
            where.append("(c.source = 'memory' OR c.session_key = ?)")
            params.append(session_key)
        if len(where) == 1:  # no filter: no join (joining looks up every match, ~4x slower on big indexes)
            sql = "SELECT rowid, bm25(chunks_fts, 1.0, ?) AS r FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY r LIMIT ?"
        else:
            sql = ("SELECT f.rowid, bm25(chunks_fts, 1.0, ?) AS r FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
                   f"WHERE {' AND '.join(where)} ORDER BY r LIMIT ?")
        rows = await self.db.fetchall(sql, (float(self.opts.context_weight), *params, int(n)))
        hits = [(int(r[0]), float(r[1])) for r in rows]
        if self.opts.tokenizer == "trigram" and len(hits) < n:
            hits += await self._cjk_bigrams(terms, n - len(hits), {h[0] for h in hits}, where[1:], params[1:],
                                            hits[-1][1] if hits else -1.0)
        return hits

    async def _cjk_bigrams(self, terms: Sequence[str], n: int, seen: set[int], where: list[str],
                           params: list[Any], floor: float) -> list[tuple[int, float]]:
        """Trigrams cannot match two-character CJK words; find those with LIKE (a scan), ranked below
        every trigram hit by how many of the query's bigrams they contain."""
        grams = sorted({t[i:i + 2] for t in terms if _is_cjk(t) for i in range(len(t) - 1)})[:16]
        if not grams:
            return []
        likes = " OR ".join("c.text LIKE ?" for _ in grams)
        rows = await self.db.fetchall(
            f"SELECT c.id, c.text FROM chunks c WHERE ({likes})"
            + "".join(f" AND {w}" for w in where) + " LIMIT ?",
            (*[f"%{g}%" for g in grams], *params, 500))
        scored = []
        for cid, text in rows:
            if cid in seen:
                continue
            matched = sum(1 for g in grams if g in text)
            scored.append((int(cid), floor * matched / (len(grams) + 1)))
        scored.sort(key=lambda r: r[1])
        return scored[:n]

    async def search(self, query: str, *, k: int, min_score: float, sources: tuple[str, ...],
                     session_key: str | None, mode: str, generation: str, vector_count: int,
                     missing_vectors: int, exclude: Exclude | None = None) -> dict[str, Any]:
        o = self.opts
        emb = {"provider": self.provider.name, "model": self.provider.model}
        terms = query_terms(query)
        if not terms:
            return {"results": [], "mode": mode, "embeddings": emb}
        n = max(k * o.candidate_multiplier, k)
        degraded: list[str] = []
        fts_hits: list[tuple[int, float]] = []
        vec_hits: list[tuple[int, float]] = []
        used = mode
        fts_task = None
        if mode == "hybrid":  # full text on the SQLite thread while numpy does the vectors
            fts_task = asyncio.create_task(self.fts(terms, n, sources, session_key))
        if mode in ("hybrid", "vector"):
            vec_ok = False
            if self.vectors is None:
                degraded.append(self.vector_problem or "no vector index")
            else:
                try:
                    q = await self.embed_query(query)
                    vec_hits = await self.vectors.knn(q, n, sources, session_key, generation, vector_count)
                    vec_ok = True
                except EmbeddingError as exc:
                    degraded.append(f"embedding provider unavailable: {exc}")
                except BaseException:
                    if fts_task is not None:
                        fts_task.cancel()
                    raise
                if vec_ok and missing_vectors:
                    degraded.append(f"{missing_vectors} chunks have no vector yet (the embedding provider "
                                    "failed); they are found by full-text search only")
            if not vec_ok:
                used = "fts"  # fall back to full text, and say why
        if fts_task is not None:
            fts_hits = await fts_task
        elif used in ("hybrid", "fts"):
            fts_hits = await self.fts(terms, n, sources, session_key)
        if used == "hybrid":
            cands = fuse(fts_hits, vec_hits, method=o.fusion, rrf_k=o.rrf_k,
                         text_weight=o.text_weight, vector_weight=o.vector_weight)
        elif used == "fts":
            cands = single_list_scores(fts_hits, "fts")
        else:
            cands = single_list_scores(vec_hits, "vector")
        if o.min_similarity > 0:
            # Not a hit: a chunk that shares no word with the query (not in the full-text list) and
            # whose embedding is not close to the query's either.
            cands = [c for c in cands if c.fts_rank is not None or (c.cosine or 0.0) >= o.min_similarity]
        results = await self._materialise(cands, k, terms, min_score, rerank=used != "vector",
                                          fused=used == "hybrid", exclude=exclude)
        out: dict[str, Any] = {"results": results, "mode": used, "embeddings": emb}
        if degraded:
            out["degraded"] = "; ".join(degraded)
        return out

    async def _materialise(self, cands: list[Candidate], k: int, terms: Sequence[str], min_score: float,
                           rerank: bool, fused: bool = False, exclude: Exclude | None = None) -> list[dict[str, Any]]:
        rows: dict[int, tuple] = {}
        # The pool to re-rank (and a few spare in case rows vanished since the candidates were listed).
        pool = cands[: max(k * 3, 20)] if rerank and self.opts.segment_weight > 0 else cands[: k * 2]
        if pool:
            ids = [c.id for c in pool]
            for r in await self.db.fetchall(
                    "SELECT id, path, source, session_key, start_line, end_line, text, spans, context FROM chunks "
                    f"WHERE id IN ({','.join('?' * len(ids))})", ids):
                rows[int(r[0])] = r
        hidden = self.hidden_sessions
        live = [(c, rows[c.id]) for c in pool if c.id in rows and not (hidden and rows[c.id][3] in hidden)]
        if exclude is not None:
            live = [(c, r) for c, r in live
                    if not exclude.hits(r[1], r[6], orjson.loads(r[7]) if r[7] else None, r[8])]
        ctx = SnippetContext.build(terms, [r[6] for _, r in live])
        if rerank and self.opts.segment_weight > 0 and live:
            # Reward chunks where the query's words meet in one message (or line): the best single
            # segment's weighted match, relative to the pool's best, blended into the fused score; and
            # chunks whose window (core and neighbours) covers more of the query's words.
            best, asking = [], []
            qw = self.opts.question_weight
            echo = EchoTest(terms)
            for c, r in live:
                spans = orjson.loads(r[7]) if r[7] else None
                raw = _segments(r[6], spans, r[8])
                core = [(_score(seg, ctx).score, seg) for seg, is_core in raw if is_core]
                best.append(max((sc for sc, _seg in core), default=0.0))
                asking.append(qw < 1.0 and _only_asks(core, [seg for seg, is_core in raw if not is_core], ctx, echo))
            top = max(best) or 1.0
            w = self.opts.segment_weight
            cw = self.opts.coverage_weight
            total = sum(ctx.weights.get(t, 1.0) for t in ctx.terms) or 1.0
            match = [w * b / top + (cw * _score(r[6] + "\n" + (r[8] or ""), ctx).score / total if cw > 0 else 0.0)
                     for (c, r), b in zip(live, best)]
            if fused and self.opts.fusion == "rrf":
                # The match is a third ranked list beside full text and vectors (ties share a rank).
                o = self.opts
                rank = _shared_ranks(match)
                kk = o.rrf_k
                norm = (o.text_weight + o.vector_weight + o.rerank_weight) / (kk + 1) or 1.0
                for (c, r), m in zip(live, rank):
                    sc = o.rerank_weight / (kk + m)
                    if c.fts_rank is not None:
                        sc += o.text_weight / (kk + c.fts_rank)
                    if c.vec_rank is not None:
                        sc += o.vector_weight / (kk + c.vec_rank)
                    c.score = min(1.0, sc / norm)
            else:
                for (c, r), m in zip(live, match):
                    c.score = (c.score + m) / (1.0 + w + cw)
            for (c, r), e in zip(live, asking):
                if e:
                    c.score *= qw
            live.sort(key=lambda cr: -cr[0].score)
        picked = spread_over_files([(c, r) for c, r in live if c.score >= min_score], k,
                                   self.opts.file_diversity)
        out = []
        for c, r in picked:
            spans = orjson.loads(r[7]) if r[7] else None
            item: dict[str, Any] = {
                "path": r[1], "source": r[2], "startLine": int(r[4]), "endLine": int(r[5]),
                "score": round(float(c.score), 6),
                "snippet": snippet(r[6], spans, ctx, self.opts.snippet_chars, r[8]),
            }
            if r[3]:
                item["sessionKey"] = r[3]
            out.append(item)
        return out
