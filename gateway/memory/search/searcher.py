"""The search itself: full-text and vector candidates from the engine's index, fused and re-ranked.

Full text goes through query.py's terms to the engine's FullText (FTS5's BM25, or PostgreSQL's
ts_rank_cd weighted alike); vector search is the query's embedding against its VectorSearch (cosine),
with the same source / session filter; fusion.py merges both lists; snippets.py scores the segments of
the best candidates (the re-rank) and cuts their snippets from the rows the ChunkReader gives.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Sequence

import numpy as np
import orjson

from ...timeutil import to_iso
from ..embeddings import EmbeddingError, EmbeddingProvider
from ..embeddings.base import check_vectors, provider_name
from ..hit import Embeddings, Found, Hit
from ..ports import ChunkReader, ChunkRow, FullText, VectorSearch
from .floor import FALLBACK_SCALE, above_floor
from .fusion import Candidate, fuse, shared_ranks, single_list_scores, spread_over_files
from .query import answer_type_terms, query_terms
from .request import SearchRequest
from .related import RELATED_LIST_WEIGHT, RELATED_WEIGHT, related_terms
from .snippets import EchoTest, Exclude, SnippetContext, only_asks, score_segment, segments, snippet, window_needles

if TYPE_CHECKING:  # pragma: no cover
    from ...config import SearchConfig
    from ..hit import Vectors


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


def chunk_date(date: str | None, mtime_ns: int | None) -> str | None:
    """A hit's date: when its chunk was said, else its file's modification time."""
    if date:
        return date
    if mtime_ns:
        return _mtime_iso(int(mtime_ns))
    return None


@lru_cache(maxsize=4096)
def _mtime_iso(mtime_ns: int) -> str:
    """A file's modification time as a hit's date (kept: a search shows the same notes again and again)."""
    return to_iso(datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc))


class Searcher:
    """Answers searches over one engine's index: its full text (FullText), its vectors (VectorSearch, None
    when vectors cannot be used, and `vector_problem` then says why, reported as `degraded`) and its
    chunk rows (ChunkReader). Chunks of `hidden_sessions` (deleted sessions a sync has yet to drop; the
    set is the caller's and may change) are left out. The same class on every engine: never subclassed."""

    def __init__(
        self,
        text: FullText,
        rows: ChunkReader,
        provider: EmbeddingProvider,
        opts: SearchOptions,
        vectors: VectorSearch | None,
        vector_problem: str | None,
        hidden_sessions: set[str] | None = None,
    ):
        self.text, self.rows, self.provider, self.opts = text, rows, provider, opts
        self.vectors, self.vector_problem = vectors, vector_problem
        self.hidden_sessions = hidden_sessions if hidden_sessions is not None else set()
        self._qcache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.total_chunks = 0  # kept current by the index; enables common-term pruning on big indexes
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

    async def fts(
        self, terms: Sequence[str], n: int, sources: tuple[str, ...], session_key: str | None, extra: bool = False
    ) -> list[tuple[int, float]]:
        """`extra`: the query's related words (a big index searches them within their own budget)."""
        return await self.text.search(
            terms, n, sources, session_key, generation=self.generation, total=self.total_chunks, extra=extra
        )

    async def search(self, req: SearchRequest, *, generation: str, vector_count: int, missing_vectors: int) -> Found:
        """The best `k` results, then up to `spare` more: candidates and re-rank are those of `k`. The
        index as it stands: its `generation`, its stored vectors and the chunks still without one. The
        answer holds the stored vectors of its hits it read (the memory service's timeline compares them)."""
        query, k, sources, session_key, mode = req.query, req.k, req.sources, req.session_key, req.mode
        min_score, exclude, spare = req.min_score, req.exclude, req.spare
        o = self.opts
        emb: Embeddings = {"provider": self.provider.name, "model": self.provider.model}
        self.generation = generation
        terms = query_terms(query)
        if not terms:
            return Found([], mode, emb)
        n = max(k * o.candidate_multiplier, k)
        degraded: list[str] = []
        fts_hits: list[tuple[int, float]] = []
        vec_hits: list[tuple[int, float]] = []
        used = mode
        fts_task = related_task = None
        if mode == "hybrid":  # full text on the SQLite thread while numpy does the vectors
            fts_task = asyncio.create_task(self.fts(terms, n, sources, session_key))
            if related := related_terms(terms):  # and what its related words find, queued behind it
                related_task = asyncio.create_task(self.fts(related, n, sources, session_key, extra=True))
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
                    for task in (fts_task, related_task):
                        if task is not None:
                            task.cancel()
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
        try:
            if fts_task is not None:
                fts_hits = await fts_task
            elif used in ("hybrid", "fts"):
                fts_hits = await self.fts(terms, n, sources, session_key)
        except BaseException:
            if related_task is not None:
                related_task.cancel()
            raise
        related = related_terms(terms) if used in ("hybrid", "fts") else []
        # What the query's related words find (search/related.py): a lighter list of its own. Full text
        # alone uses it only to fill a first pass of fewer than n hits (below), so a full one skips its
        # MATCH (issue 46: a second full-text search, most of the fts tail at 100k chunks).
        if related_task is not None:
            related_hits = await related_task
        elif related and (used == "hybrid" or len(fts_hits) < n):
            related_hits = await self.fts(related, n, sources, session_key, extra=True)
        else:
            related_hits = []
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
        # Not a hit: a chunk that shares no word with the query and whose embedding is not close to the
        # query's either — unless nothing is and the query asks about the person's own life (floor.py).
        cands, fallback = above_floor(cands, query, o.min_similarity)
        results, vectors, ids = await self._materialise(
            cands,
            k,
            terms,
            related,
            min(1.0, min_score / FALLBACK_SCALE) if fallback else min_score,
            rerank=used != "vector",
            fused=used == "hybrid",
            exclude=exclude,
            answer_types=answer_type_terms(query),
            spare=spare,
        )
        if fallback:  # the closest of what is not close: low scores (floor.py)
            results = [r._replace(score=round(float(r.score) * FALLBACK_SCALE, 6)) for r in results]
        return Found(results, used, emb, "; ".join(degraded) or None, vectors or None, ids)

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
    ) -> tuple[list[Hit], Vectors, dict[tuple[str, int, int], int]]:
        """The results; the stored vectors of those the rows came with, by (path, start line, end line);
        and each result's chunk id by the same key."""
        rows: dict[int, ChunkRow] = {}
        # The pool to re-rank (and a few spare in case rows vanished since the candidates were listed).
        pool = cands[: max(k * 3, 20)] if rerank and self.opts.segment_weight > 0 else cands[: k * 2]
        if pool:
            for r in await self.rows.chunk_rows([c.id for c in pool]):
                rows[int(r[0])] = r
        hidden = self.hidden_sessions
        live = [(c, rows[c.id]) for c in pool if c.id in rows and not (hidden and rows[c.id][3] in hidden)]
        if exclude is not None:
            live = [(c, r) for c, r in live if not exclude.hits(r[1], r[6], orjson.loads(r[7]) if r[7] else None, r[8])]
        out, ids = self._rank_and_show(live, k, terms, related, min_score, rerank, fused, answer_types, spare)
        # The results' stored vectors that came with the rows (the vector search read them): the timeline
        # compares at most five, and reads those it lacks by id (issue 46: the whole pool's were read).
        vectors: Vectors = {}
        if self.vectors is not None and len(out) > 1:
            found = await self.rows.vectors_of(ids, read=False)
            for item, cid in zip(out, ids):
                if cid in found:
                    vectors[item.key] = found[cid]
        return out, vectors, {item.key: cid for item, cid in zip(out, ids)}

    def _rank_and_show(
        self,
        live: list[tuple[Candidate, ChunkRow]],
        k: int,
        terms: Sequence[str],
        related: Sequence[str],
        min_score: float,
        rerank: bool,
        fused: bool,
        answer_types: frozenset[str],
        spare: int,
    ) -> tuple[list[Hit], list[int]]:
        """The pool re-ranked (rows in hand: no waiting), cut to k + spare, each shown with its snippet;
        and the chunk id of each."""
        ctx = SnippetContext.build(terms, [r[6] for _, r in live], answer_types, related)
        if rerank and self.opts.segment_weight > 0 and live:
            # Reward chunks where the query's words meet in one message (or line): the best single
            # segment's weighted match, relative to the pool's best, blended into the fused score; and
            # chunks whose window (core and neighbours) covers more of the query's words.
            best, asking = [], []
            qw = self.opts.question_weight
            echo = EchoTest(terms)
            cw = self.opts.coverage_weight
            covers = []  # each chunk's window (core and neighbours): the weighted match of the query's words
            for _c, r in live:
                there, cover = window_needles(r[6] + "\n" + (r[8] or ""), ctx, cw > 0)
                covers.append(cover)
                spans = orjson.loads(r[7]) if r[7] else None
                raw = segments(r[6], spans, r[8])
                core = [(score_segment(seg, ctx, there).score, seg) for seg, is_core in raw if is_core]
                best.append(max((sc for sc, _seg in core), default=0.0))
                asking.append(qw < 1.0 and only_asks(core, [seg for seg, is_core in raw if not is_core], ctx, echo))
            top = max(best) or 1.0
            w = self.opts.segment_weight
            total = sum(ctx.weights.get(t, 1.0) for t in ctx.terms) or 1.0
            match = [w * b / top + (cw * cover / total if cw > 0 else 0.0) for cover, b in zip(covers, best)]
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
                for (c, _r), mt in zip(live, match):
                    c.score = (c.score + mt) / (1.0 + w + cw)
            for (c, _r), e in zip(live, asking):
                if e:
                    c.score *= qw
            live.sort(key=lambda cr: -cr[0].score)
        picked = spread_over_files(
            [(c, r) for c, r in live if c.score >= min_score], k + spare, self.opts.file_diversity
        )
        out: list[Hit] = []
        ids: list[int] = []
        shown: dict[str, set[int]] = {}  # a transcript's lines the results so far show
        for c, r in picked:
            spans = orjson.loads(r[7]) if r[7] else None
            out.append(
                Hit(
                    r[1],
                    r[2],
                    int(r[4]),
                    int(r[5]),
                    round(float(c.score), 6),
                    snippet(r[6], spans, ctx, self.opts.snippet_chars, r[8], shown.setdefault(r[1], set())),
                    r[3] or None,
                    chunk_date(r[9], r[10]) or None,
                )
            )
            ids.append(c.id)
        return out, ids
