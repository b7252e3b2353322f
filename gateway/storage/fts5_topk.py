"""The exact BM25 top n of a many-word FTS5 query without scoring every chunk that holds a common word
(issue 47: at 1.18M chunks the postings budget was the median, and a smaller one moved the answers).

FTS5's bm25() of an OR of phrases p1..pm is a sum over the phrases, each term
idf(p) · f·(k1+1) / (f + k1·(1 − b + b·D/avgdl)) with f the phrase's column-weighted count in the chunk,
so a phrase a chunk lacks adds exactly 0.0 and a phrase's term is below idf(p)·(k1+1) whatever the chunk
(`bound`). Max-score, in rounds of two statements, each returning n rows (ORDER BY … LIMIT in SQLite):

- the phrases are put rarest first (their row counts, kept per index generation); the first few, `R`,
  whose counts fit a small row budget, find the candidates: every chunk holding one of them;
- the candidates' best n by whole score: `(R) AND (C)` (C the other, common, phrases) scores those that
  hold a common phrase too — the same phrases in the same order as the whole OR, so the same double —,
  and `R` alone scores a part (the whole for a chunk with no common phrase: C adds 0.0 to it);
- a chunk that holds no phrase of R scores at most Σ bound(C). When the n-th best candidate scores
  more, no such chunk can enter: the answer is exactly the whole query's top n (ties by rowid). Else R
  takes more phrases (a budget four times larger) and only the chunks they add are ranked (`NOT` the
  phrases taken before); past `cap` rows the candidates' best n, each by its whole score, is answered,
  not proven (`TopK.exact` false; Fts5Search counts `proven` / `unproven`) — unless fewer than n were
  found: then the whole OR, one statement (exact; never fewer rows than matching every phrase gives).

A float sum depends on its order: a proven answer is the exact BM25 top n of the OR query with its
phrases summed rarest first (the order it scores in, ties by rowid) — the same set and order as the
query's own order except where two chunks' scores differ only in the last bits of a double (the review
of pgrank47 found 62 order swaps in 5,040 proven answers, all such rounding-level ties). A small index
sends the query's own order (Fts5Search.search: no counts, one statement); answers are not rescored
(rescoring in the query's order cost ~23 ms). All statements of one search read one snapshot (`snapshot`),
and the counts are kept under the key that snapshot shows (`index_version`): a count from another
snapshot would make the bound wrong (a too-high one is clamped in `idf`, never raised on).

Proven answers equal a rarest-first OR query's top n, hits and scores: tests/unit/test_fts5_topk.py
(hypothesis, random small corpora, both table kinds, with and without a filter).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..memory.search import pruning

K1, B = 1.2, 0.75  # FTS5's bm25() (fts5_aux.c)
# Rows (the phrases' chunk counts, summed) read at most before an answer is given unproven, as a share of
# the index's chunks (the rarest phrase is read whatever its count). A quarter of pruning's postings
# budget, past which the common words were skipped before: at 1.18M chunks (docs/scaling.md, pgrank47)
# 4.80 of the top 5 are the exact ranking's (the budget's: 3.10) at 0.67x its median CPU; at the whole
# budget 5.00 of 5 (199 of 200 answers the exact top 24) at 1.65x.
CAP_SHARE = pruning.POSTINGS_BUDGET / 4
FIRST_ROWS = 4_000  # the first round's row budget for R (chunk counts summed); each next round's ×4


@dataclass
class TopK:
    hits: list[tuple[int, float]]  # (rowid, bm25: lower is better), best first
    exact: bool  # proven the whole query's top n
    rounds: int
    rows: int  # the chunk counts of R, summed, in the last round
    capped: bool = False  # R reached the cap (answered unproven, or read on past it: fewer than n found)


def varint(blob: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint (FTS5's too) at `blob[i]` → (value, next index)."""
    v = 0
    for k in range(8):
        c = blob[i + k]
        v = (v << 7) | (c & 0x7F)
        if not c & 0x80:
            return v, i + k + 1
    return (v << 8) | blob[i + 8], i + 9


def row_count(conn: Any, table: str = "chunks_fts") -> int:
    """The rows FTS5's bm25() counts (its averages record, %_data block 1)."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    if not row or not row[0]:
        return 0
    try:
        return varint(bytes(row[0]), 0)[0]
    except IndexError:  # a truncated record: the file is damaged, said as SQLite says it (db.is_corruption)
        raise _malformed(conn) from None


def _malformed(conn: Any) -> Exception:
    """The driver's own DatabaseError (sqlite3's or pysqlite3's), worded as SQLite words damage."""
    error = getattr(sys.modules.get(type(conn).__module__), "DatabaseError", None)
    if not (isinstance(error, type) and issubclass(error, Exception)):
        error = sqlite3.DatabaseError
    return error("database disk image is malformed (FTS5's averages record is truncated)")


@contextlib.contextmanager
def snapshot(conn: Any) -> Iterator[None]:
    """One read transaction around a search's statements (the connections are autocommit: each statement
    would read the file as of its own start); within a caller's transaction, that one."""
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN")
    try:
        yield
    finally:
        if began:
            conn.execute("COMMIT")


def index_version(conn: Any, table: str = "chunks_fts") -> str:
    """FTS5's own version of the table as this snapshot shows it: its structure record (every commit
    that writes the table writes a segment or a tombstone there, and bumps its write counter) and its
    averages record (N), hashed."""
    got = conn.execute(f"SELECT id, block FROM {table}_data WHERE id IN (1, 10) ORDER BY id").fetchall()
    return hashlib.blake2b(b"".join(bytes(b or b"") for _, b in got), digest_size=16).hexdigest()


def phrase_hits(conn: Any, phrases: Sequence[str], table: str = "chunks_fts") -> dict[str, int]:
    """How many rows match each phrase: bm25()'s own count for its idf (walks the phrase's postings)."""
    sql = f"SELECT count(*) FROM {table} WHERE {table} MATCH ?"
    return {p: int(conn.execute(sql, (p,)).fetchone()[0]) for p in phrases}


def idf(rows: int, hits: int) -> float:
    """bm25()'s idf; never raises: a count past the rows (not one snapshot's) is taken as all of them."""
    hits = min(max(hits, 0), max(rows, 0))
    v = math.log((rows - hits + 0.5) / (hits + 0.5))
    return v if v > 0.0 else 1e-6


def bound(rows: int, hits: int) -> float:
    """What one phrase can add to a chunk's score (as -bm25), at most."""
    return idf(rows, hits) * (K1 + 1.0)


def ordered(phrases: Sequence[str], hits: dict[str, int]) -> list[str]:
    """The phrases that match something, rarest first (ties in the query's order): the order the whole
    query is scored in, so the proven answer is that query's to the last bit."""
    return sorted((p for p in phrases if hits.get(p)), key=lambda p: (hits[p], phrases.index(p)))


def top_k(
    conn: Any,
    phrases: Sequence[str],
    hits: dict[str, int],
    rows: int,
    n: int,
    score: str,
    score_params: Sequence[Any],
    where_sql: str = "",
    where_params: Sequence[Any] = (),
    cap: float = math.inf,
) -> TopK:
    """The best `n` rows of `phrases` OR-ed (`ordered` already), on the SQLite connection's thread.
    `score`: the SELECT's head, `rowid, bm25(...)` over `... WHERE chunks_fts MATCH ?` — given as
    `score` ending in the FROM clause; `where_sql` / `where_params`: the filters that follow the MATCH.
    Past `cap` rows, an answer with fewer than n
    rows is the whole OR, one statement (exact, and never fewer rows than matching every phrase gives):
    reading on round by round re-read the earlier phrases each round, 2.5–5× the one statement at 1M
    chunks with a filter few rows pass (review of the merged tree)."""
    suffix = [0.0] * (len(phrases) + 1)  # suffix[j]: Σ bound of phrases[j:]
    for j in range(len(phrases) - 1, -1, -1):
        suffix[j] = suffix[j + 1] + bound(rows, hits[phrases[j]])
    j, budget, rounds = 0, float(FIRST_ROWS), 0
    best: list[tuple[int, float]] = []
    sql = f"{score} WHERE chunks_fts MATCH ?{where_sql} ORDER BY 2, 1 LIMIT ?"
    while True:
        before, used = j, sum(hits[p] for p in phrases[:j])
        short = len(best) < n  # (then the cap does not stop the reading)
        if short and rounds and j < len(phrases) and (budget >= cap or used + hits[phrases[j]] > cap):
            whole = _rows(conn, sql, (*score_params, _or(phrases), *where_params, n))
            return _answer(whole, n, True, rounds + 1, sum(hits[p] for p in phrases), True)
        while j < len(phrases):
            more = used + hits[phrases[j]]  # (a round's first phrase: within the cap, or any while short)
            if not (j == 0 or (j == before and (short or more <= cap)) or (j > before and more <= budget)):
                break
            used, j = more, j + 1
        if j == before:  # the next phrase alone is past the cap: what the last round found is answered
            return _answer(best, n, False, rounds, used, True)
        rounds += 1
        args = (conn, sql, phrases[:before], phrases[before:j], phrases[j:], n, score_params, where_params)
        best = _top([*best, *_best(*args)], n)
        theta = -best[n - 1][1] if len(best) >= n else 0.0
        exact = j == len(phrases) or suffix[j] < theta
        if exact or (budget >= cap and len(best) >= n):
            return _answer(best, n, exact, rounds, used, used > cap or budget >= cap)
        budget = budget * 4 if budget >= cap else min(budget * 4, cap)


def _answer(best: list[tuple[int, float]], n: int, exact: bool, rounds: int, used: int, capped: bool) -> TopK:
    return TopK(best[:n], exact, rounds, used, capped)


def _or(phrases: Sequence[str]) -> str:
    return " OR ".join(phrases)


def _best(
    conn: Any,
    sql: str,
    done: Sequence[str],
    rare: Sequence[str],
    common: Sequence[str],
    n: int,
    score_params: Sequence[Any],
    where_params: Sequence[Any],
) -> list[tuple[int, float]]:
    """The best `n` by the whole query's bm25 (ties by rowid) of the rows that hold a phrase of `rare`
    and none of `done` (an earlier round's, whose rows that round ranked).

    Two statements of n rows each: `(rare) AND (common)` gives whole scores — a phrase a row lacks adds
    0.0 wherever it stands, so the phrases a row holds are summed in the whole query's order: the same
    double —, and `rare` alone a part of it: the whole score of a row without a common phrase, a lower
    one for a row with one, which then is among the first statement's n or ranks below all n of them."""
    unless = f" NOT ({_or(done)})" if done else ""
    part = _rows(conn, sql, (*score_params, f"({_or(rare)}){unless}", *where_params, n))
    if not common or not part:
        return part
    full = dict(_rows(conn, sql, (*score_params, f"(({_or(rare)}) AND ({_or(common)})){unless}", *where_params, n)))
    return _top([(r, full.get(r, s)) for r, s in part] + list(full.items()), n)


def _rows(conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[int, float]]:
    return [(int(r), float(s)) for r, s in conn.execute(sql, params)]


def _top(rows: list[tuple[int, float]], n: int) -> list[tuple[int, float]]:
    """The best n, ties by rowid, each row once (its best score: a whole one over a part)."""
    seen: dict[int, float] = {}
    for r, s in rows:
        seen[r] = min(s, seen.get(r, s))
    return sorted(seen.items(), key=lambda kv: (kv[1], kv[0]))[:n]
