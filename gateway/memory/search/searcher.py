"""The search itself: full-text and vector candidates from one read connection, fused and re-ranked.

Full text goes through query.py's terms; vector search is the query's embedding against `chunks_vec`
(cosine), with the same source / session filter; fusion.py merges both lists; snippets.py scores the
segments of the best candidates (the re-rank) and cuts their snippets.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import orjson

from ...timeutil import to_iso
from ..embeddings import EmbeddingError, EmbeddingProvider
from ..embeddings.base import check_vectors, provider_name
from ..index.db import Database
from ..index.vectors import VectorStore
from ...storage.files.migrations import TOKENIZERS
from .fusion import Candidate, fuse, shared_ranks, single_list_scores, spread_over_files
from .query import answer_type_terms, fts_query, is_cjk, query_terms
from .related import RELATED_LIST_WEIGHT, RELATED_WEIGHT, related_terms
from .snippets import EchoTest, Exclude, SnippetContext, only_asks, score_segment, segments, snippet

if TYPE_CHECKING:  # pragma: no cover
    from ...config import SearchConfig

POSTINGS_BUDGET = 0.05  # of all chunks; see Searcher.prune_common
PRUNE_MIN_CHUNKS = 20_000
COUNTS_CACHED = 8192  # words whose document counts a Searcher keeps (per index generation)


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
    tokenizer: str  # the live index's FTS tokenizer (normally `ftsTokenizer`; see MemoryService)
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
        return cls(
            mode=s.mode,
            fusion=s.fusion,
            rrf_k=s.rrf_k,
            text_weight=s.text_weight,
            vector_weight=s.vector_weight,
            candidate_multiplier=s.candidate_multiplier,
            snippet_chars=s.snippet_chars,
            tokenizer=tokenizer or s.fts_tokenizer,
            context_weight=s.context_weight,
            segment_weight=s.segment_weight,
            coverage_weight=s.coverage_weight,
            file_diversity=s.file_diversity,
            question_weight=s.question_weight,
            min_similarity=s.min_similarity,
            rerank_weight=s.rerank_weight,
        )


@dataclass
class _Scratch:
    """A connection's scratch FTS5 table for tokenising query words. It belongs to the connection, and
    a new Searcher may start on it while an old one still answers, so they share its lock."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: bool = False


_SCRATCH: weakref.WeakKeyDictionary[Database, _Scratch] = weakref.WeakKeyDictionary()


def chunk_date(date: str | None, mtime_ns: int | None) -> str | None:
    """A hit's date: when its chunk was said, else its file's modification time."""
    if date:
        return date
    if mtime_ns:
        return to_iso(datetime.fromtimestamp(int(mtime_ns) / 1e9, timezone.utc))
    return None


def rarest_within_budget(doc_counts: Sequence[int], total: int) -> list[int]:
    """The words to search (indexes into `doc_counts`, in order): rarest first while the sum of their
    document counts stays within POSTINGS_BUDGET of all `total` chunks; the rarest word that occurs at
    all always (a word in no chunk costs nothing and finds nothing, so it never uses up the choice)."""
    budget = POSTINGS_BUDGET * total
    keep: set[int] = set()
    used = 0
    for i in sorted(range(len(doc_counts)), key=lambda i: doc_counts[i]):
        if used and used + doc_counts[i] > budget:
            break
        keep.add(i)
        used += doc_counts[i]
    return sorted(keep)


class Searcher:
    """Answers searches from one (read) connection. `vectors` is None when vectors cannot be used, and
    `vector_problem` then says why (reported as `degraded`). Chunks of `hidden_sessions` (deleted
    sessions a sync has yet to drop; the set is the caller's and may change) are left out."""

    def __init__(
        self,
        db: Database,
        provider: EmbeddingProvider,
        opts: SearchOptions,
        vectors: VectorStore | None,
        vector_problem: str | None,
        hidden_sessions: set[str] | None = None,
    ):
        self.db, self.provider, self.opts = db, provider, opts
        self.vectors, self.vector_problem = vectors, vector_problem
        self.hidden_sessions = hidden_sessions if hidden_sessions is not None else set()
        self._qcache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._scratch = _SCRATCH.setdefault(db, _Scratch())
        self.total_chunks = 0  # kept current by the manager; enables common-term pruning on big indexes
        # Query word → (how many tokens the FTS tokenizer makes of it, their summed document counts), for
        # the index generation `_counts_generation` (prune_common).
        self._counts: dict[str, tuple[int, int]] = {}
        self._counts_generation: str | None = None
        self.generation: str | None = None  # the index generation the latest search was given

    async def embed_query(self, text: str) -> np.ndarray:
        v = self._qcache.get(text)
        if v is not None:
            self._qcache.move_to_end(text)
            return v
        v = check_vectors(await self.provider.embed([text]), provider_name(self.provider), 1)[0]
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
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.q_vocab USING fts5vocab(temp, q_fts, 'instance')"
                )
                scratch.ready = True
            # Rows 1..n are this search's terms (rows past n are an earlier, longer search's: ignored).
            await self.db.execute(
                "INSERT OR REPLACE INTO temp.q_fts(rowid, x) SELECT key + 1, value FROM json_each(?)",
                (orjson.dumps(list(terms)).decode(),),
            )
            rows = await self.db.fetchall(
                "SELECT v.doc, v.term, (SELECT r.doc FROM chunks_fts_rows r WHERE r.term = v.term) "
                "FROM temp.q_vocab v WHERE v.doc <= ?",
                (len(terms),),
            )
        toks: list[list[str]] = [[] for _ in terms]
        df: dict[str, int] = {}
        for doc, term, count in rows:
            toks[int(doc) - 1].append(term)
            df[term] = int(count or 0)
        return toks, df

    async def prune_common(self, terms: Sequence[str], generation: str | None = None) -> list[str]:
        """On a big index, search the rarest words and skip common ones beyond a postings budget.

        FTS5 scores every chunk that matches any OR-ed word, so a search costs about the sum of its
        words' document counts. Words are taken rarest first while that sum stays within
        POSTINGS_BUDGET of all chunks (the rarest always). Skipped words have the lowest IDF, so
        they would have moved the ranking least; they still count in the re-ranking of the candidates
        and in the vector search.

        Counting a word's documents walks its whole postings list (fts5vocab), so the common words cost
        the most to count: with the index's `generation`, the counts are kept until it changes (at 354k
        chunks a search's words took ~2–3 ms to count, most of it for the words then skipped)."""
        total = self.total_chunks
        if self.opts.tokenizer == "trigram" or len(terms) < 2 or total < PRUNE_MIN_CHUNKS:
            return list(terms)
        if generation is None or generation != self._counts_generation or len(self._counts) > COUNTS_CACHED:
            self._counts.clear()
            self._counts_generation = generation
        have = {t: self._counts[t] for t in terms if t in self._counts}
        todo = [t for t in terms if t not in have]
        if todo:
            toks, df = await self._token_counts(todo)
            fresh = {t: (len(ts), sum(df[x] for x in ts)) for t, ts in zip(todo, toks)}
            have.update(fresh)
            if generation is not None and self._counts_generation == generation:  # (not if it changed meanwhile)
                self._counts.update(fresh)
        counts = [have[t] for t in terms]
        if not any(n for n, _ in counts):
            return list(terms)  # no word the tokenizer keeps: nothing to choose between
        return [terms[i] for i in rarest_within_budget([c for _, c in counts], total)]

    async def fts(
        self, terms: Sequence[str], n: int, sources: tuple[str, ...], session_key: str | None
    ) -> list[tuple[int, float]]:
        terms = await self.prune_common(terms, self.generation)
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
            sql = (
                "SELECT f.rowid, bm25(chunks_fts, 1.0, ?) AS r FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
                f"WHERE {' AND '.join(where)} ORDER BY r LIMIT ?"
            )
        rows = await self.db.fetchall(sql, (float(self.opts.context_weight), *params, int(n)))
        hits = [(int(r[0]), float(r[1])) for r in rows]
        if self.opts.tokenizer == "trigram" and len(hits) < n:
            hits += await self._cjk_bigrams(
                terms, n - len(hits), {h[0] for h in hits}, where[1:], params[1:], hits[-1][1] if hits else -1.0
            )
        return hits

    async def _cjk_bigrams(
        self, terms: Sequence[str], n: int, seen: set[int], where: list[str], params: list[Any], floor: float
    ) -> list[tuple[int, float]]:
        """Trigrams cannot match two-character CJK words; find those with LIKE (a scan), ranked below
        every trigram hit by how many of the query's bigrams they contain."""
        grams = sorted({t[i : i + 2] for t in terms if is_cjk(t) for i in range(len(t) - 1)})[:16]
        if not grams:
            return []
        likes = " OR ".join("c.text LIKE ?" for _ in grams)
        rows = await self.db.fetchall(
            f"SELECT c.id, c.text FROM chunks c WHERE ({likes})" + "".join(f" AND {w}" for w in where) + " LIMIT ?",
            (*[f"%{g}%" for g in grams], *params, 500),
        )
        scored = []
        for cid, text in rows:
            if cid in seen:
                continue
            matched = sum(1 for g in grams if g in text)
            scored.append((int(cid), floor * matched / (len(grams) + 1)))
        scored.sort(key=lambda r: r[1])
        return scored[:n]

    async def search(
        self,
        query: str,
        *,
        k: int,
        min_score: float,
        sources: tuple[str, ...],
        session_key: str | None,
        mode: str,
        generation: str,
        vector_count: int,
        missing_vectors: int,
        exclude: Exclude | None = None,
        spare: int = 0,
    ) -> dict[str, Any]:
        """The best `k` results, then up to `spare` more: candidates and re-rank are those of `k`."""
        o = self.opts
        emb = {"provider": self.provider.name, "model": self.provider.model}
        self.generation = generation
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
                bad = len(self.vectors.unusable) if vec_ok else 0
                if bad:
                    degraded.append(
                        f"{bad} stored vectors are unusable (NaN or all zeros) and were passed over; "
                        "`memory.sync --force` embeds them again"
                    )
                if vec_ok and missing_vectors:
                    degraded.append(
                        f"{missing_vectors} chunks have no vector yet (the embedding provider "
                        "failed); they are found by full-text search only"
                    )
            if not vec_ok:
                used = "fts"  # fall back to full text, and say why
        if fts_task is not None:
            fts_hits = await fts_task
        elif used in ("hybrid", "fts"):
            fts_hits = await self.fts(terms, n, sources, session_key)
        related = related_terms(terms) if used in ("hybrid", "fts") else []
        # What the query's related words find (search/related.py): a lighter list of its own.
        related_hits = await self.fts(related, n, sources, session_key) if related else []
        if used == "hybrid":
            cands = fuse(
                fts_hits,
                vec_hits,
                method=o.fusion,
                rrf_k=o.rrf_k,
                text_weight=o.text_weight,
                vector_weight=o.vector_weight,
                related=related_hits,
                related_weight=o.text_weight * RELATED_LIST_WEIGHT,
            )
        elif used == "fts":
            # One list: what the related words find ranks after what the query's own words find.
            seen = {cid for cid, _ in fts_hits}
            more = [(cid, s * RELATED_WEIGHT) for cid, s in related_hits if cid not in seen]
            cands = single_list_scores(fts_hits + more[: max(0, n - len(fts_hits))], "fts")
        else:
            cands = single_list_scores(vec_hits, "vector")
        if o.min_similarity > 0:
            # Not a hit: a chunk that shares no word with the query (not in the full-text list) and
            # whose embedding is not close to the query's either.
            cands = [
                c
                for c in cands
                if c.fts_rank is not None or c.related_rank is not None or (c.cosine or 0.0) >= o.min_similarity
            ]
        results = await self._materialise(
            cands,
            k,
            terms,
            related,
            min_score,
            rerank=used != "vector",
            fused=used == "hybrid",
            exclude=exclude,
            answer_types=answer_type_terms(query),
            spare=spare,
        )
        out: dict[str, Any] = {"results": results, "mode": used, "embeddings": emb}
        if degraded:
            out["degraded"] = "; ".join(degraded)
        return out

    async def _chunk_rows(self, ids: list[int]) -> list[tuple]:
        """The chunk rows of these ids (those still present): (id, path, source, session_key, start_line,
        end_line, text, spans, context, date, the file's mtime_ns)."""
        return await self.db.fetchall(
            "SELECT c.id, c.path, c.source, c.session_key, c.start_line, c.end_line, c.text, c.spans, c.context, "
            "c.date, f.mtime_ns FROM chunks c LEFT JOIN files f ON f.path = c.path "
            f"WHERE c.id IN ({','.join('?' * len(ids))})",
            ids,
        )

    async def _materialise(
        self,
        cands: list[Candidate],
        k: int,
        terms: Sequence[str],
        related: Sequence[str],
        min_score: float,
        rerank: bool,
        fused: bool = False,
        exclude: Exclude | None = None,
        answer_types: frozenset[str] = frozenset(),
        spare: int = 0,
    ) -> list[dict[str, Any]]:
        rows: dict[int, tuple] = {}
        # The pool to re-rank (and a few spare in case rows vanished since the candidates were listed).
        pool = cands[: max(k * 3, 20)] if rerank and self.opts.segment_weight > 0 else cands[: k * 2]
        if pool:
            for r in await self._chunk_rows([c.id for c in pool]):
                rows[int(r[0])] = r
        hidden = self.hidden_sessions
        live = [(c, rows[c.id]) for c in pool if c.id in rows and not (hidden and rows[c.id][3] in hidden)]
        if exclude is not None:
            live = [(c, r) for c, r in live if not exclude.hits(r[1], r[6], orjson.loads(r[7]) if r[7] else None, r[8])]
        ctx = SnippetContext.build(terms, [r[6] for _, r in live], answer_types, related)
        if rerank and self.opts.segment_weight > 0 and live:
            # Reward chunks where the query's words meet in one message (or line): the best single
            # segment's weighted match, relative to the pool's best, blended into the fused score; and
            # chunks whose window (core and neighbours) covers more of the query's words.
            best, asking = [], []
            qw = self.opts.question_weight
            echo = EchoTest(terms)
            for _c, r in live:
                spans = orjson.loads(r[7]) if r[7] else None
                raw = segments(r[6], spans, r[8])
                core = [(score_segment(seg, ctx).score, seg) for seg, is_core in raw if is_core]
                best.append(max((sc for sc, _seg in core), default=0.0))
                asking.append(qw < 1.0 and only_asks(core, [seg for seg, is_core in raw if not is_core], ctx, echo))
            top = max(best) or 1.0
            w = self.opts.segment_weight
            cw = self.opts.coverage_weight
            total = sum(ctx.weights.get(t, 1.0) for t in ctx.terms) or 1.0
            match = [
                w * b / top + (cw * score_segment(r[6] + "\n" + (r[8] or ""), ctx).score / total if cw > 0 else 0.0)
                for (_c, r), b in zip(live, best)
            ]
            if fused and self.opts.fusion == "rrf":
                # The match is a third ranked list beside full text and vectors (ties share a rank).
                o = self.opts
                rank = shared_ranks(match)
                kk = o.rrf_k
                norm = (o.text_weight + o.vector_weight + o.rerank_weight) / (kk + 1) or 1.0
                for (c, _r), m in zip(live, rank):
                    sc = o.rerank_weight / (kk + m)
                    if c.fts_rank is not None:
                        sc += o.text_weight / (kk + c.fts_rank)
                    if c.vec_rank is not None:
                        sc += o.vector_weight / (kk + c.vec_rank)
                    if c.related_rank is not None:
                        sc += o.text_weight * RELATED_LIST_WEIGHT / (kk + c.related_rank)
                    c.score = min(1.0, sc / norm)
            else:
                for (c, _r), m in zip(live, match):
                    c.score = (c.score + m) / (1.0 + w + cw)
            for (c, _r), e in zip(live, asking):
                if e:
                    c.score *= qw
            live.sort(key=lambda cr: -cr[0].score)
        picked = spread_over_files(
            [(c, r) for c, r in live if c.score >= min_score], k + spare, self.opts.file_diversity
        )
        out = []
        shown: dict[str, set[int]] = {}  # a transcript's lines the results so far show
        for c, r in picked:
            spans = orjson.loads(r[7]) if r[7] else None
            item: dict[str, Any] = {
                "path": r[1],
                "source": r[2],
                "startLine": int(r[4]),
                "endLine": int(r[5]),
                "score": round(float(c.score), 6),
                "snippet": snippet(r[6], spans, ctx, self.opts.snippet_chars, r[8], shown.setdefault(r[1], set())),
            }
            if r[3]:
                item["sessionKey"] = r[3]
            when = chunk_date(r[9], r[10])
            if when:
                item["date"] = when
            out.append(item)
        return out
