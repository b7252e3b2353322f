"""Full-text search in PostgreSQL (memory/ports.py's FullText): each chunk's tsvector (the text at weight
A, the context at weight D; a GIN index), ranked BM25-like so that fusion reads it as it reads FTS5's.

What a search costs on a big index is rows read from the table: the GIN index finds the matching chunks
at once (15,000 in ~6 ms), but counting them or ranking them reads each one's row (~8 µs a row, ~10 µs a
row ranked, on the 2-core development VM), where FTS5 reads a compact postings list. So past
`pruning.PRUNE_MIN_CHUNKS` chunks:

- a word's document count (for its idf, and for choosing the words) comes from the planner's statistics
  of the tsvector column when ANALYZE found it common (`pg_stats.most_common_elems`, the share of rows
  holding it, times the agent's chunks; ~1% off), and is counted only for the rarer words, which hold
  few rows (`_doc_counts`): counting `movie` in 13,600 of 118,000 chunks took 110 ms, its estimate none;
- the chunks ranked are those holding the rarest words within ROW_BUDGET rows (fewer than the 5% of
  all chunks that `pruning.POSTINGS_BUDGET` lets FTS5 read: 50,000 rows at a million would take half a
  second here), scored on every word of the query; a query whose rarest word alone holds more ranks
  its first CANDIDATE_CAP matches (in table order).
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

import asyncpg

from ....memory.search import pruning
from .agent import search_filter

FTS_CONFIG = "english"
IDF_COUNT_CAP = 10_000
ROW_BUDGET = 4_000  # rows ranked by a search of a big index (its words chosen rarest first within it)
CANDIDATE_CAP = 20_000  # rows ranked at most, when a query's rarest word alone holds more than ROW_BUDGET
STATS_TTL_S = 60.0  # how long the column's statistics (most common lexemes) are kept between reads


def tsquery_lexemes(terms: Sequence[str]) -> list[str]:
    """Each term as a quoted to_tsquery lexeme (`'word'`), to be OR-ed: the terms are `\\w+` words
    (query.py), and quotes and backslashes are dropped anyway, so user text never becomes tsquery
    syntax (`&`, `|`, `!`, `:*`, `<->`, parentheses)."""
    parts = []
    for t in terms:
        t = t.replace("\\", "").replace("'", "")
        if t:
            parts.append("'" + t + "'")
    return list(dict.fromkeys(parts))


class PgFullText:
    def __init__(self, pool: asyncpg.Pool, agent_id: str, context_weight: float):
        self.pool, self.agent_id, self.context_weight = pool, agent_id, context_weight
        self._stats: tuple[dict[str, float], float] | None = None
        self._stats_at: float | None = None

    async def search(
        self,
        terms: Sequence[str],
        n: int,
        sources: tuple[str, ...],
        session_key: str | None,
        *,
        generation: str | None,
        total: int,
        extra: bool = False,
    ) -> list[tuple[int, float]]:
        """(id, -score) best first, negated so that fusion reads it as it reads BM25 (lower is better).
        The score is BM25-like: Σ over the query's words of idf(word) × ts_rank_cd(word), the rank with
        the text at weight 1 and the context at `contextWeight`, normalised by the chunk's length and
        saturating (flags 1|32), so a rare word counts for more than a common one, as in BM25."""
        lexemes = tsquery_lexemes(terms)
        if not lexemes:
            return []
        big = total >= pruning.PRUNE_MIN_CHUNKS
        counts = await (self._estimated_counts(lexemes, total) if big else self._doc_counts(lexemes, total))
        # Ranking reads every matching chunk's row (~10 µs a row), so on a big index the chunks ranked are
        # those holding the rarest words, within a budget of rows, as FTS5's search does with its postings
        # (pruning.py); a common word skipped there still counts in the score of the chunks ranked (their
        # rows are read anyway), so a chunk holding it beside a rare word ranks above one holding only that.
        match = lexemes
        if big and extra:  # a query's related words: within their own budget, none guaranteed (pruning.py)
            rows = min(ROW_BUDGET, pruning.POSTINGS_BUDGET * total) * pruning.EXTRA_BUDGET / pruning.POSTINGS_BUDGET
            match = [lexemes[i] for i in pruning.extra_within(counts, rows)]
            if not match:
                return []
        elif big and len(lexemes) >= 2:
            match = [
                lexemes[i] for i in pruning.rarest_within(counts, min(ROW_BUDGET, pruning.POSTINGS_BUDGET * total))
            ]
        cap: int | None = None
        if big and sum(counts[lexemes.index(x)] for x in match) > ROW_BUDGET:
            cap = CANDIDATE_CAP
        idf = self._idf(counts, total)
        w = float(self.context_weight)
        m = len(lexemes)
        params: list[Any] = [self.agent_id, " | ".join(match), [w, 0.0, 0.0, 1.0], *lexemes, *idf]
        # One tsquery parameter per word, not an array unnested per row: each is a constant of the
        # statement, so the GIN index serves the match and the statement is the same for every query
        # of as many words (prepared once).
        score = " + ".join(
            f"${4 + m + k}::float8 * ts_rank_cd($3::float4[], c.tsv, to_tsquery('{FTS_CONFIG}', ${4 + k}), 33)"
            for k in range(m)
        )
        where = ["c.agent_id = $1", f"c.tsv @@ to_tsquery('{FTS_CONFIG}', $2)"]
        search_filter(where, params, sources, session_key, "c.")
        source = "memory_chunks c"
        if cap is not None:  # the matches' first rows only: ranked after the limit, not before
            source = f"(SELECT * FROM memory_chunks c WHERE {' AND '.join(where)} LIMIT {cap}) c"
        params.append(int(n))
        sql = (
            f"SELECT c.id, -(1e-6 + {score}) AS r FROM {source} "
            f"WHERE {' AND '.join(where)} ORDER BY r, c.id LIMIT ${len(params)}"
        )
        rows = await self.pool.fetch(sql, *params)
        return [(int(r[0]), float(r[1])) for r in rows]

    async def _estimated_counts(self, lexemes: list[str], total: int) -> list[int]:
        """Each word's document count on a big index: the column statistics' estimate for a common word
        (no rows read), a count (up to a little past the least common of those) for the others."""
        stats = await self._common()
        if stats is None:
            return await self._doc_counts(lexemes, total)
        freqs, least = stats
        normal = await self.pool.fetchval(
            f"SELECT array(SELECT to_tsquery('{FTS_CONFIG}', t)::text FROM unnest($1::text[]) WITH ORDINALITY "
            "u(t, i) ORDER BY i)",
            lexemes,
        )
        counts: list[int | None] = []
        for form in normal:  # "'movi'" (one lexeme), '' (a stop word), or a compound query
            lexeme = form[1:-1] if form.count("'") == 2 and form.startswith("'") and form.endswith("'") else None
            f = freqs.get(lexeme) if lexeme is not None else None
            counts.append(max(1, int(round(f * total))) if f is not None else (0 if form == "" else None))
        rare = [k for k, c in enumerate(counts) if c is None]
        if rare:
            cap = max(1_000, int(2 * least * total) + 1)
            got = await self._doc_counts([lexemes[k] for k in rare], total, cap)
            for k, c in zip(rare, got):
                counts[k] = c
        return [int(c or 0) for c in counts]

    async def _common(self) -> tuple[dict[str, float], float] | None:
        """The tsvector column's most common lexemes → the share of all rows holding each, and the least
        such share (from the last ANALYZE; read again after STATS_TTL_S); None before any ANALYZE."""
        now = time.monotonic()
        if self._stats_at is not None and now - self._stats_at < STATS_TTL_S:
            return self._stats
        row = await self.pool.fetchrow(
            "SELECT most_common_elems::text::text[] AS e, most_common_elem_freqs AS f FROM pg_stats "
            "WHERE schemaname = current_schema() AND tablename = 'memory_chunks' AND attname = 'tsv'"
        )
        self._stats_at = now
        self._stats = None
        if row is not None and row["e"] and row["f"] and len(row["f"]) > len(row["e"]):
            elems, freqs = list(row["e"]), list(row["f"])
            # most_common_elem_freqs: one share per lexeme, then the least and the most of them, and nulls.
            self._stats = dict(zip(elems, (float(f) for f in freqs))), float(freqs[len(elems)])
        return self._stats

    async def _doc_counts(self, lexemes: list[str], total: int, cap: int | None = None) -> list[int]:
        """How many of the agent's chunks hold each word, counted up to IDF_COUNT_CAP (past it a word is
        common, and counting further would cost a scan) or `cap`."""
        # Counted far enough for pruning to tell a word over the postings budget on any index size.
        if cap is None:
            cap = max(IDF_COUNT_CAP, int(pruning.POSTINGS_BUDGET * total) + 1)
        counts = ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM memory_chunks c WHERE c.agent_id = $1 AND "
            f"c.tsv @@ to_tsquery('{FTS_CONFIG}', ${k + 2}) LIMIT {int(cap)}) s{k})"
            for k in range(len(lexemes))
        )
        row = await self.pool.fetchrow(f"SELECT {counts}", self.agent_id, *lexemes)
        return [int(row[k]) for k in range(len(lexemes))]

    @staticmethod
    def _idf(counts: list[int], total: int) -> list[float]:
        """BM25's idf of each word from its document count among the agent's chunks."""
        total = max(total, 1)
        return [math.log(1.0 + (max(total, df) - df + 0.5) / (df + 0.5)) for df in counts]
