"""Full-text search over FTS5 (memory/ports.py's FullText): BM25 over `chunks_fts`, the chunk's text at
weight 1 and its context at `contextWeight`. Both engines use it: the files engine over its index's own
file, the PostgreSQL engine over the gateway's derived mirror of the agent's chunks
(storage/postgres/memory/fts_mirror.py) — so both rank alike. What it needs of a database is `FtsDb`:
a `chunks_fts` table (text, context), its `chunks_fts_rows` vocabulary, and `chunks(id, source,
session_key, text)` for the filters (and for CJK bigrams, `text`).

User text reaches `MATCH` only through query.py's `fts_query` (quoted words). On a big index a query's
own words are ranked by max-score (fts5_topk.py): the rarest phrases' postings read, the common ones'
scored only for those rows and bounded for the others — the whole query's exact top n where the bound
proves it (each phrase's row count kept per index generation), the best of the rows read past
fts5_topk.CAP_SHARE. On a small index (below pruning.PRUNE_MIN_CHUNKS) a query's words are the whole OR
in the query's own order, one statement as main had it (no count; in a read transaction of its own,
which costs less CPU than autocommit); its doubles may differ from max-score's in the last bits, a float
sum depending on its order. A query's related words (`extra`) are still chosen within their budget
(memory/search/pruning.py): a word's document count comes from the FTS5 vocabulary table, after the
tokenizer has made its tokens of it (a scratch FTS5 table on the reading connection), kept per generation.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, TypeVar

import orjson

from ..memory.search import pruning
from ..memory.search.query import fts_phrases, fts_query, is_cjk
from . import fts5_topk

T = TypeVar("T")

TOKENIZERS = {
    "unicode61": "unicode61 remove_diacritics 2",
    "porter": "porter unicode61 remove_diacritics 2",
    "trigram": "trigram",
}


class FtsDb(Protocol):
    """What the search needs of an SQLite connection (aiosqlite, on its own thread)."""

    async def call(self, fn: Callable[[Any], T]) -> T: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]: ...


COUNTS_CACHED = 8192  # words whose document counts a search keeps (per index generation)


@dataclass
class _Scratch:
    """A connection's scratch FTS5 table for tokenising query words. It belongs to the connection, and
    a new search may start on it while an old one still answers, so they share its lock."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: bool = False


_SCRATCH: weakref.WeakKeyDictionary[Any, _Scratch] = weakref.WeakKeyDictionary()


class Fts5Search:
    """FTS5 full text through one reading connection."""

    def __init__(self, db: FtsDb, tokenizer: str, context_weight: float):
        self.db, self.tokenizer, self.context_weight = db, tokenizer, context_weight
        self._scratch = _SCRATCH.setdefault(db, _Scratch())
        # Query word → (how many tokens the FTS tokenizer makes of it, their summed document counts), for
        # the index generation `_counts_generation` (prune_common).
        self._counts: dict[str, tuple[int, int]] = {}
        self._counts_generation: str | None = None
        # FTS5 phrase → rows it matches (bm25's count for its idf), for `_hits_generation`: the index
        # generation and FTS5's own version of the table as the counting search's snapshot showed them
        # (_top_k); how many answers were proven the exact top n, and not; max-score's rounds, summed, and
        # its searches that reached the cap.
        self._hits: dict[str, int] = {}
        self._hits_generation: str | None = None
        self.proven = self.unproven = self.rounds = self.capped = 0

    def _token_counts_sync(self, conn: Any, terms: Sequence[str]) -> tuple[list[list[str]], dict[str, int]]:
        """How the FTS tokenizer indexes each term (porter: its stem), and in how many chunks each of
        those tokens is: the terms go through a scratch FTS5 table. On the connection's thread, with the
        scratch table's lock held."""
        if not self._scratch.ready:
            tok = TOKENIZERS[self.tokenizer]
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.q_fts USING fts5(x, tokenize='{tok}')")
            conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.q_vocab USING fts5vocab(temp, q_fts, 'instance')")
            self._scratch.ready = True
        # Rows 1..n are this search's terms (rows past n are an earlier, longer search's: ignored).
        conn.execute(
            "INSERT OR REPLACE INTO temp.q_fts(rowid, x) SELECT key + 1, value FROM json_each(?)",
            (orjson.dumps(list(terms)).decode(),),
        ).close()
        rows = conn.execute(
            "SELECT v.doc, v.term, (SELECT r.doc FROM chunks_fts_rows r WHERE r.term = v.term) "
            "FROM temp.q_vocab v WHERE v.doc <= ?",
            (len(terms),),
        ).fetchall()
        toks: list[list[str]] = [[] for _ in terms]
        df: dict[str, int] = {}
        for doc, term, count in rows:
            toks[int(doc) - 1].append(term)
            df[term] = int(count or 0)
        return toks, df

    def _cached_counts(self, terms: Sequence[str], generation: str | None) -> dict[str, tuple[int, int]]:
        """The kept (token count, document count) of those of `terms` counted before in this generation."""
        if generation is None or generation != self._counts_generation or len(self._counts) > COUNTS_CACHED:
            self._counts.clear()
            self._counts_generation = generation
        return {t: self._counts[t] for t in terms if t in self._counts}

    def _counted(self, conn: Any, todo: Sequence[str], have: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        """`todo`'s counts, read on the connection's thread, added to `have`; the fresh ones returned."""
        toks, df = self._token_counts_sync(conn, todo)
        fresh = {t: (len(ts), sum(df[x] for x in ts)) for t, ts in zip(todo, toks)}
        have.update(fresh)
        return fresh

    def _keep(self, fresh: dict[str, tuple[int, int]], generation: str | None) -> None:
        if generation is not None and self._counts_generation == generation:  # (not if it changed meanwhile)
            self._counts.update(fresh)

    @staticmethod
    def _chosen(terms: Sequence[str], have: dict[str, tuple[int, int]], total: int, extra: bool = False) -> list[str]:
        counts = [have[t] for t in terms]
        if extra:  # the related words: those in no chunk are left out too (nothing to find: no MATCH at all)
            return [terms[i] for i in pruning.extra_within_budget([c for _, c in counts], total) if counts[i][1]]
        if not any(n for n, _ in counts):
            return list(terms)  # no word the tokenizer keeps: nothing to choose between
        return [terms[i] for i in pruning.rarest_within_budget([c for _, c in counts], total)]

    def _prunes(self, terms: Sequence[str], total: int, extra: bool = False) -> bool:
        return self.tokenizer != "trigram" and pruning.prunes(len(terms), total, extra)

    async def prune_common(
        self, terms: Sequence[str], total: int, generation: str | None = None, extra: bool = False
    ) -> list[str]:
        """On a big index, the rarest words within the postings budget (pruning.py; `extra`: a query's
        related words, within theirs, none guaranteed): the words `search` matches.

        Counting a word's documents walks its whole postings list (fts5vocab), so the common words cost
        the most to count: with the index's `generation`, the counts are kept until it changes (at 354k
        chunks a search's words took ~2–3 ms to count, most of it for the words then skipped)."""
        if not self._prunes(terms, total, extra):
            return list(terms)
        have = self._cached_counts(terms, generation)
        todo = [t for t in terms if t not in have]
        if todo:
            async with self._scratch.lock:
                fresh = await self.db.call(lambda conn: self._counted(conn, todo, have))
            self._keep(fresh, generation)
        return self._chosen(terms, have, total, extra)

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
        where, params = ["chunks_fts MATCH ?"], []
        if len(sources) == 1:
            where.append("c.source = ?")
            params.append(sources[0])
        if session_key is not None:
            where.append("(c.source = 'memory' OR c.session_key = ?)")
            params.append(session_key)
        if len(where) == 1:  # no filter: no join (joining looks up every match, ~4x slower on big indexes)
            sql = "SELECT rowid, bm25(chunks_fts, 1.0, ?) AS r FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY r, 1 LIMIT ?"
        else:
            sql = (
                "SELECT f.rowid, bm25(chunks_fts, 1.0, ?) AS r FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
                f"WHERE {' AND '.join(where)} ORDER BY r, 1 LIMIT ?"
            )

        def match(conn: Any, chosen: Sequence[str]) -> tuple[list[str], list[tuple[int, float]] | None]:
            """The chosen words and what they match (None: no word to search)."""
            expr = fts_query(chosen, self.tokenizer) if chosen else None
            if expr is None:
                return list(chosen), None
            rows = conn.execute(sql, (float(self.context_weight), expr, *params, int(n))).fetchall()
            return list(chosen), [(int(r[0]), float(r[1])) for r in rows]

        def in_snapshot(conn: Any, chosen: Sequence[str]) -> tuple[list[str], list[tuple[int, float]] | None]:
            """`match` in a read transaction of its own (fts5_topk.snapshot): the same statement, the same
            answer, ~8% less CPU on common words than autocommit (docs/scaling.md, ### small47)."""
            with fts5_topk.snapshot(conn):
                return match(conn, chosen)

        # One trip to the SQLite thread: the words' counts (those not kept yet), the choice and the MATCH
        # (issue 46: they were three trips, five with the cursors' closing).
        found: list[tuple[int, float]] | None
        if not self._prunes(terms, total, extra):  # a small index: the whole OR in the query's order, one trip
            terms, found = await self.db.call(lambda conn: in_snapshot(conn, terms))
        elif not extra:  # the query's own words: max-score's exact top n (fts5_topk.py)
            head = sql.split(" WHERE ")[0]
            found = await self._top_k(
                terms, n, head, "".join(f" AND {w}" for w in where[1:]), params, generation, total
            )
        else:
            have = self._cached_counts(terms, generation)
            todo = [t for t in terms if t not in have]
            if not todo:
                chosen = self._chosen(terms, have, total, extra)
                if not chosen:  # (the related words, each over their budget: no trip at all)
                    return []
                terms, found = await self.db.call(lambda conn: match(conn, chosen))
            else:
                fresh: dict[str, tuple[int, int]] = {}

                def counted_match(conn: Any) -> tuple[list[str], list[tuple[int, float]] | None]:
                    fresh.update(self._counted(conn, todo, have))
                    return match(conn, self._chosen(terms, have, total, extra))

                async with self._scratch.lock:
                    terms, found = await self.db.call(counted_match)
                self._keep(fresh, generation)
        if found is None:
            return []
        hits = found
        if self.tokenizer == "trigram" and len(hits) < n:
            hits += await self._cjk_bigrams(
                terms, n - len(hits), {h[0] for h in hits}, where[1:], params, hits[-1][1] if hits else -1.0
            )
        return hits

    async def _top_k(
        self,
        terms: Sequence[str],
        n: int,
        head: str,
        where_sql: str,
        params: list[Any],
        generation: str | None,
        total: int,
    ) -> list[tuple[int, float]] | None:
        """The whole OR query's best `n` (fts5_topk.top_k), reading the postings of the rarest phrases and
        bounding the common ones' (not proven past the postings budget: the best of what was read)."""
        phrases = fts_phrases(terms, self.tokenizer)
        if not phrases:
            return None
        weight = float(self.context_weight)

        def run(conn: Any) -> tuple[str, dict[str, int], fts5_topk.TopK | None]:
            with fts5_topk.snapshot(conn):
                key, fresh, counts = self._phrase_counts(conn, phrases, generation)
                order = fts5_topk.ordered(phrases, counts)
                if not order:
                    return key, fresh, None
                rows = fts5_topk.row_count(conn)
                cap = fts5_topk.CAP_SHARE * total
                return (
                    key,
                    fresh,
                    fts5_topk.top_k(conn, order, counts, rows, n, head, (weight,), where_sql, params, cap),
                )

        key, fresh, res = await self.db.call(run)
        self._keep_hits(key, fresh, generation)
        if res is None:
            return []
        self.proven, self.unproven = self.proven + res.exact, self.unproven + (not res.exact)
        self.rounds, self.capped = self.rounds + res.rounds, self.capped + res.capped
        return res.hits

    def _phrase_counts(
        self, conn: Any, phrases: Sequence[str], generation: str | None
    ) -> tuple[str, dict[str, int], dict[str, int]]:
        """On the connection's thread, inside the search's snapshot (fts5_topk.snapshot): the key of what
        it shows (the generation and FTS5's own version of the table: a sync may have committed since the
        caller read the generation, a mirror's drop run before this search though queued after its key),
        the phrases' counts not kept for that key, and all of them."""
        key = f"{generation}|{fts5_topk.index_version(conn)}"
        kept = self._hits if key == self._hits_generation else {}
        have = {p: kept[p] for p in phrases if p in kept}
        fresh = fts5_topk.phrase_hits(conn, [p for p in phrases if p not in have])
        return key, fresh, {**have, **fresh}

    def _keep_hits(self, key: str, fresh: dict[str, int], generation: str | None) -> None:
        if generation is None:  # (no generation known: nothing kept)
            return
        if key != self._hits_generation or len(self._hits) > COUNTS_CACHED:
            self._hits, self._hits_generation = {}, key
        self._hits.update(fresh)

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
