"""Full-text search in PostgreSQL (memory/ports.py's FullText): each chunk's tsvector (the text at weight
A, the context at weight D; a GIN index), ranked BM25-like so that fusion reads it as it reads FTS5's."""

from __future__ import annotations

import math
from typing import Any, Sequence

import asyncpg

from ....memory.search import pruning
from .agent import search_filter

FTS_CONFIG = "english"
IDF_COUNT_CAP = 10_000


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

    async def search(
        self,
        terms: Sequence[str],
        n: int,
        sources: tuple[str, ...],
        session_key: str | None,
        *,
        generation: str | None,
        total: int,
    ) -> list[tuple[int, float]]:
        """(id, -score) best first, negated so that fusion reads it as it reads BM25 (lower is better).
        The score is BM25-like: Σ over the query's words of idf(word) × ts_rank_cd(word), the rank with
        the text at weight 1 and the context at `contextWeight`, normalised by the chunk's length and
        saturating (flags 1|32), so a rare word counts for more than a common one, as in BM25."""
        lexemes = tsquery_lexemes(terms)
        if not lexemes:
            return []
        counts = await self._doc_counts(lexemes, total)
        # Ranking reads every matching chunk's tsvector (~4 µs a row, per word), so on a big index the
        # rarest words are searched and common ones skipped past a postings budget, as FTS5's search does
        # (pruning.py): they would move the ranking least, and still count in the re-ranking.
        if pruning.prunes(len(lexemes), total):
            keep = pruning.rarest_within_budget(counts, total)
            lexemes, counts = [lexemes[i] for i in keep], [counts[i] for i in keep]
        idf = self._idf(counts, total)
        w = float(self.context_weight)
        m = len(lexemes)
        params: list[Any] = [self.agent_id, " | ".join(lexemes), [w, 0.0, 0.0, 1.0], *lexemes, *idf]
        # One tsquery parameter per word, not an array unnested per row: each is a constant of the
        # statement, so the GIN index serves the match and the statement is the same for every query
        # of as many words (prepared once).
        score = " + ".join(
            f"${4 + m + k}::float8 * ts_rank_cd($3::float4[], c.tsv, to_tsquery('{FTS_CONFIG}', ${4 + k}), 33)"
            for k in range(m)
        )
        where = ["c.agent_id = $1", f"c.tsv @@ to_tsquery('{FTS_CONFIG}', $2)"]
        search_filter(where, params, sources, session_key, "c.")
        params.append(int(n))
        sql = (
            f"SELECT c.id, -(1e-6 + {score}) AS r FROM memory_chunks c "
            f"WHERE {' AND '.join(where)} ORDER BY r, c.id LIMIT ${len(params)}"
        )
        rows = await self.pool.fetch(sql, *params)
        return [(int(r[0]), float(r[1])) for r in rows]

    async def _doc_counts(self, lexemes: list[str], total: int) -> list[int]:
        """How many of the agent's chunks hold each word, counted up to IDF_COUNT_CAP (past it a word is
        common, and counting further would cost a scan)."""
        # Counted far enough for pruning to tell a word over the postings budget on any index size.
        cap = max(IDF_COUNT_CAP, int(pruning.POSTINGS_BUDGET * total) + 1)
        counts = ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM memory_chunks c WHERE c.agent_id = $1 AND "
            f"c.tsv @@ to_tsquery('{FTS_CONFIG}', ${k + 2}) LIMIT {cap}) s{k})"
            for k in range(len(lexemes))
        )
        row = await self.pool.fetchrow(f"SELECT {counts}", self.agent_id, *lexemes)
        return [int(row[k]) for k in range(len(lexemes))]

    @staticmethod
    def _idf(counts: list[int], total: int) -> list[float]:
        """BM25's idf of each word from its document count among the agent's chunks."""
        total = max(total, 1)
        return [math.log(1.0 + (max(total, df) - df + 0.5) / (df + 0.5)) for df in counts]
