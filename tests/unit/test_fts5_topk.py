"""The max-score top n over FTS5 (storage/fts5_topk.py): where it says its answer is exact, it is the
whole OR query's bm25 top n with its phrases summed rarest first, hits and scores to the last bit (ties
by rowid) — against the query's own order (the small-index path) the same up to a double's last bits —
on random small corpora
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


def _small(conn, q, n, sources):
    import asyncio

    from gateway.storage.fts5 import Fts5Search

    s = Fts5Search(_Db(conn), "porter", 0.5)
    return asyncio.run(s.search(q, n, sources, None, generation="1", total=len(q)))


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
    full = _exact(conn, order, 10**6, head, where, params)  # the whole OR, summed rarest first (built here)
    small = _small(conn, q, n, ("memory",) if filtered else ())
    # the product's small-index path is main's: the whole OR in the query's own order, ties by rowid
    assert small == _exact(conn, phrases, n, head, where, params)
    if got.exact:  # the rarest-first OR query's top n, to the last bit
        assert got.hits == full[:n]
        # against the query's own order: the k-th best scores differ at most in a double's last bits (so
        # the set and order are the same but where two chunks' scores differ only there)
        assert len(small) == len(got.hits)
        assert all(math.isclose(a[1], b[1], rel_tol=1e-12) for a, b in zip(small, got.hits))
    else:  # not proven: still the best of the rows scored, each with its whole score, and never fewer
        assert all(dict(full)[r] == s for r, s in got.hits)
        assert len(got.hits) == min(n, len(full))


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


def test_a_count_past_the_rows_costs_speed_not_a_crash():
    """A count from another snapshot than N (more rows than the table holds) gives the least idf."""
    assert tk.idf(100, 250) == 1e-6 and tk.idf(0, 3) == 1e-6
    assert tk.bound(100, 250) > 0.0


def _plain(path: str, rows: list[tuple[int, str, str]]):
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, source TEXT NOT NULL, session_key TEXT, text TEXT)")
    conn.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, tokenize='porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE chunks_fts_rows USING fts5vocab(chunks_fts, 'row')")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO chunks VALUES (?, ?, NULL, ?)", rows)
    conn.executemany("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, '')", [(i, t) for i, _, t in rows])
    conn.execute("COMMIT")
    return conn


class _Db:
    """The search's connection, on the test's thread (`wrap`: what the search's statements go through)."""

    def __init__(self, conn, wrap=None):
        self.conn, self.wrap = conn, wrap

    async def call(self, fn):
        return fn(self.wrap or self.conn)

    async def fetchall(self, sql, p=()):
        return self.conn.execute(sql, p).fetchall()


def _whole(conn, phrases, n, head=HEAD, where="", params=()):
    """Every row of the whole OR scored, its phrases rarest first (the order max-score sums them in)."""
    return _exact(conn, tk.ordered(phrases, tk.phrase_hits(conn, phrases)), n, head, where, params)


async def test_a_sync_committing_mid_search_leaves_it_one_snapshot(tmp_path):
    """A sync commits on the writer between the search's phrase counts and its rounds: the search reads
    the snapshot it began with (its answer that snapshot's top n), keeps the counts under that snapshot's
    key, and the next search counts again and answers the new snapshot's top n."""
    from gateway.memory.search import pruning
    from gateway.storage.fts5 import Fts5Search

    path = str(tmp_path / "i.sqlite")
    rows = [(i, "memory", "zebra " + "filler " * 30 if i <= 10 else "common common other") for i in range(1, 9011)]
    rows += [(i, "memory", "other words here") for i in range(9011, 12001)]
    writer = _plain(path, rows)
    import sqlite3

    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    class Syncing:  # the reading connection; the writer commits after the search's first count
        counted = 0

        @property
        def in_transaction(self):
            return reader.in_transaction

        def execute(self, sql, p=()):
            cur = reader.execute(sql, p)
            if sql.startswith("SELECT count(*) FROM chunks_fts WHERE"):
                Syncing.counted += 1
                if Syncing.counted == 1:
                    writer.execute("BEGIN")
                    writer.execute("DELETE FROM chunks_fts WHERE rowid BETWEEN 41 AND 9010")
                    writer.execute("DELETE FROM chunks WHERE id BETWEEN 41 AND 9010")
                    writer.execute("COMMIT")
            return cur

    phrases = ['"zebra"', '"common"']
    before = _whole(reader, phrases, 5)
    s = Fts5Search(_Db(reader, Syncing()), "porter", 0.5)
    got = await s.search(["zebra", "common"], 5, (), None, generation="7", total=pruning.PRUNE_MIN_CHUNKS)
    assert Syncing.counted == 2 and s.proven == 1
    assert got == before  # the snapshot it began with, though the rows changed meanwhile
    after = _whole(reader, phrases, 5)
    assert after != before
    s.db = _Db(reader)
    assert await s.search(["zebra", "common"], 5, (), None, generation="7", total=pruning.PRUNE_MIN_CHUNKS) == after
    assert s._hits == {'"zebra"': 10, '"common"': 30}  # counted again: the table's version changed
    assert not reader.in_transaction


async def test_counts_are_keyed_by_what_the_connection_shows_not_the_callers_generation():
    """The PostgreSQL mirror's shape (contentless_delete, its drops on the search's own connection): rows
    dropped under an unchanged generation (a search queued behind a drop) are counted again."""
    from gateway.storage.fts5 import Fts5Search

    mod = sqlite_module()
    if mod is None:
        pytest.skip("no SQLite with contentless_delete")
    c = mod.connect(":memory:", isolation_level=None, check_same_thread=False)
    c.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, source TEXT, session_key TEXT, text TEXT)")
    c.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, content='', contentless_delete=1, "
        "tokenize='porter unicode61')"
    )
    c.execute("CREATE VIRTUAL TABLE chunks_fts_rows USING fts5vocab(chunks_fts, 'row')")
    rows = [
        (i, "zebra " + "filler " * 30 if i <= 10 else "common common other" if i <= 9010 else "other")
        for i in range(1, 20001)
    ]
    c.execute("BEGIN")
    c.executemany("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, '')", rows)
    c.execute("COMMIT")
    s = Fts5Search(_Db(c), "porter", 0.5)
    await s.search(["zebra", "common"], 5, (), None, generation="G:0", total=20000)
    c.execute("DELETE FROM chunks_fts WHERE rowid BETWEEN 41 AND 9010")  # the drop, the key not bumped yet
    got = await s.search(["zebra", "common"], 5, (), None, generation="G:0", total=20000)
    assert got == _whole(c, ['"zebra"', '"common"'], 5)
    assert s._hits['"common"'] == 30


@pytest.mark.parametrize("sources", [(), ("sessions",)])
async def test_an_answer_past_the_cap_is_never_shorter_than_matching_every_word(sources):
    """A rare word in fewer chunks than n, a common one past the cap: the search reads the common one
    too, as the whole query (every word matched) does — with a source filter that the rare word's
    chunks fail as well."""
    from gateway.storage.fts5 import Fts5Search

    rows = [(i, "memory", "zebra notes") for i in range(1, 11)]
    rows += [(i, "sessions", "harbor trip talk") for i in range(11, 4511)]
    rows += [(i, "sessions" if i % 2 else "memory", "plain words only") for i in range(4511, 100001)]
    conn = _plain(":memory:", rows)
    s = Fts5Search(_Db(conn), "porter", 0.5)
    matches: list[str] = []
    conn.set_trace_callback(lambda sql: matches.append(sql) if "bm25(" in sql else None)
    got = await s.search(["zebra", "harbor"], 24, sources, None, generation="1", total=len(rows))
    conn.set_trace_callback(None)
    head, where, params = (JOINED, " AND c.source = ?", sources) if sources else (HEAD, "", ())
    assert got == _whole(conn, ['"zebra"', '"harbor"'], 24, head, where, params)
    assert len(got) == 24 and s.capped == 1
    # short past the cap: the whole OR once, not round after round re-reading the earlier phrases (each
    # round was that statement's cost again: 2.5-5x it at 1M chunks with a filter few rows pass)
    assert len(matches) <= 3 and "NOT" not in matches[-1], matches  # round 1 (two), then the whole OR
    # main's way: the rarest words within the postings budget, the others skipped
    from gateway.memory.search.query import fts_query

    chosen = await s.prune_common(["zebra", "harbor"], len(rows), "1")
    mains = conn.execute(
        f"{head} WHERE chunks_fts MATCH ?{where} LIMIT 24", (0.5, fts_query(chosen, "porter"), *params)
    )
    assert len(got) >= len(mains.fetchall())


async def test_a_truncated_averages_record_is_damage_the_gateway_recognises():
    """FTS5's averages record (%_data block 1) cut short: the search raises the driver's DatabaseError
    worded as damage (db.is_corruption: the index is rebuilt from the sources), not an IndexError."""
    import sqlite3

    from gateway.storage.files.memory.db import is_corruption
    from gateway.storage.fts5 import Fts5Search

    conn = _plain(":memory:", [(i, "memory", "zebra notes" if i < 10 else "common words") for i in range(1, 30001)])
    conn.execute("UPDATE chunks_fts_data SET block = x'ff' WHERE id = 1")
    s = Fts5Search(_Db(conn), "porter", 0.5)
    with pytest.raises(sqlite3.DatabaseError) as caught:
        await s.search(["zebra", "common"], 5, (), None, generation="1", total=30000)
    assert is_corruption(caught.value)
