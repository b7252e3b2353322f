"""The max-score top n over FTS5 (storage/fts5_topk.py): where it says its answer is exact, it is the
whole OR query's bm25 top n, hits and scores to the last bit (ties by rowid), on random small corpora
of both table kinds the engines use (the files engine's external-content table, the PostgreSQL mirror's
contentless one)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.storage import fts5_topk as tk
from gateway.storage.postgres.memory.fts_file import sqlite_module

# A skewed vocabulary: the first words in most chunks, the last in few (as Zipf's).
VOCAB = ["alpha", "bravo", "canoe", "delta", "eagle", "fjord", "gecko", "harbor", "igloo", "jetty", "kayak", "lemur"]
HEAD = "SELECT rowid, bm25(chunks_fts, 1.0, ?) FROM chunks_fts"
JOINED = "SELECT f.rowid, bm25(chunks_fts, 1.0, ?) FROM chunks_fts f JOIN chunks c ON c.id = f.rowid"


def words(draw_list: list[int]) -> str:
    return " ".join(VOCAB[min(i, len(VOCAB) - 1)] for i in draw_list)


skewed = st.integers(0, 40).map(lambda x: int(math.sqrt(x * 3.6)))  # 0..12, the small ones likelier
chunk = st.tuples(st.lists(skewed, min_size=1, max_size=14), st.lists(skewed, max_size=6), st.booleans())
corpus = st.lists(chunk, min_size=1, max_size=60)
query = st.lists(st.sampled_from(VOCAB), min_size=2, max_size=6, unique=True)


def _db(kind: str, chunks: list) -> object:
    mod = sqlite_module() if kind == "contentless" else __import__("sqlite3")
    if mod is None:
        pytest.skip("no SQLite with contentless_delete")
    conn = mod.connect(":memory:")
    conn.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, source TEXT NOT NULL, session_key TEXT, text TEXT)")
    opts = "content='', contentless_delete=1" if kind == "contentless" else "content='chunks', content_rowid='id'"
    conn.execute(f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, {opts}, tokenize='porter unicode61')")
    for i, (text, ctx, memory) in enumerate(chunks, start=1):
        conn.execute(
            "INSERT INTO chunks VALUES (?, ?, NULL, ?)", (i * 3, "memory" if memory else "sessions", words(text))
        )
        conn.execute("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, ?)", (i * 3, words(text), words(ctx)))
    conn.commit()  # (FTS5 writes its averages record, which row_count reads, as a transaction commits)
    return conn


def _exact(conn, order, n, head, where, params):
    """The whole OR query, every row scored, sorted by (bm25, rowid)."""
    rows = conn.execute(f"{head} WHERE chunks_fts MATCH ?{where}", (0.5, " OR ".join(order), *params)).fetchall()
    return sorted(((int(r), float(s)) for r, s in rows), key=lambda x: (x[1], x[0]))[:n]


@pytest.mark.parametrize("kind", ["content", "contentless"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=corpus,
    q=query,
    n=st.integers(1, 12),
    first=st.integers(1, 30),
    cap=st.sampled_from([math.inf, 10.0, 40.0]),
    filtered=st.booleans(),
)
def test_proven_answers_are_the_whole_querys_top_n(kind, chunks, q, n, first, cap, filtered, monkeypatch):
    monkeypatch.setattr(tk, "FIRST_ROWS", first)  # small budgets: several rounds, common words bounded
    conn = _db(kind, chunks)
    phrases = [f'"{w}"' for w in q]
    hits = tk.phrase_hits(conn, phrases)
    order = tk.ordered(phrases, hits)
    if not order:
        return
    rows = tk.row_count(conn)
    assert rows == len(chunks)
    head, where, params = (JOINED, " AND c.source = ?", ("memory",)) if filtered else (HEAD, "", ())
    got = tk.top_k(conn, order, hits, rows, n, head, (0.5,), where, params, cap=cap)
    if cap == math.inf:
        assert got.exact  # with no cap every round may grow R to every phrase
    if got.exact:
        assert got.hits == _exact(conn, order, n, head, where, params)
    else:  # not proven: still the best of the rows scored, each with its whole score
        full = dict(_exact(conn, order, 10**6, head, where, params))
        assert all(full[r] == s for r, s in got.hits)


def test_the_count_of_rows_is_bm25s():
    """row_count reads the averages record, the N of bm25()'s idf: after deletions too (the mirror's
    contentless_delete keeps counting deleted rows there; so does bm25)."""
    mod = sqlite_module()
    if mod is None:
        pytest.skip("no SQLite with contentless_delete")
    conn = mod.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, content='', contentless_delete=1)")
    rows = [(i, "x z" if i % 30 == 0 else "x y") for i in range(1, 301)]  # 10 rows hold z, all of two words
    conn.executemany("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, '')", rows)
    conn.commit()
    conn.execute("DELETE FROM chunks_fts WHERE rowid <= 7")
    conn.commit()
    # Every row as long as the average: bm25 = -idf = -log((N - 10 + 0.5) / 10.5); N from it.
    score = conn.execute("SELECT bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH 'z' LIMIT 1").fetchone()[0]
    assert round(math.exp(-score) * 10.5 + 9.5) == tk.row_count(conn)
    assert tk.idf(tk.row_count(conn), 10) == pytest.approx(-score, rel=1e-12)
    assert tk.varint(bytes([0x81, 0x00]), 0) == (128, 2)
