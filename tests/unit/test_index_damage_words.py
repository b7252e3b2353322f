"""db.is_corruption by class: every SQLite / sqlite-vec error that means a damaged or cut index file is damage
(the file is set aside and rebuilt, a client told -32050), and the errors that are not the file's (a busy
database, a full disk, a bad input, a bug) are not. The texts are SQLite's and vec0's own; the code, where
the driver gives one, decides first."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest

from gateway.storage.files.memory.db import is_corruption

DAMAGE = [
    (sqlite3.DatabaseError, "database disk image is malformed"),
    (sqlite3.DatabaseError, "malformed database schema (chunks) - invalid rootpage"),
    (sqlite3.DatabaseError, "file is not a database"),
    (sqlite3.DatabaseError, 'fts5: corruption found reading blob 137438953473 from table "chunks_fts"'),
    (sqlite3.DatabaseError, "vtable constructor failed: chunks_fts"),
    (sqlite3.OperationalError, "vectors blob read error for 3"),
    (sqlite3.OperationalError, "could not open vectors blob for chunk 1"),
    (sqlite3.OperationalError, "Could not fetch vector data for 12, reading from blob failed"),
    (sqlite3.OperationalError, "vector blob size mismatch on 4. Expected 256, actual 0"),
    (sqlite3.OperationalError, "chunks iter error"),
    (sqlite3.OperationalError, "Error preparing stmtChunk: database disk image is malformed"),
    (sqlite3.OperationalError, "Internal sqlite-vec error: Could not find latest chunk"),
    (sqlite3.OperationalError, "chunk validity size doesn't match - expected 128, found 0"),
    (sqlite3.OperationalError, "chunk rowids size doesn't match - expected 1024, found 12"),
    (sqlite3.OperationalError, "Error inserting rowid into rowids shadow table: out of memory"),
    (sqlite3.OperationalError, "Error inserting id into rowids shadow table: database disk image is malformed"),
]
NOT_DAMAGE = [
    (sqlite3.OperationalError, "database is locked"),
    (sqlite3.OperationalError, "database or disk is full"),
    (sqlite3.OperationalError, "disk I/O error"),
    (sqlite3.OperationalError, "vtable constructor failed: chunks_fts"),  # an I/O error there, not damage
    (sqlite3.OperationalError, 'Dimension mismatch for query vector for the "embedding" column'),
    (sqlite3.OperationalError, "invalid float32 vector BLOB length. Must be divisible by 4, found 3"),
    (sqlite3.OperationalError, "no such table: chunks_vec"),
    (sqlite3.OperationalError, "Error inserting rowid into rowids shadow table: database is locked"),
    (sqlite3.OperationalError, "Error inserting rowid into rowids shadow table: database or disk is full"),
    (sqlite3.OperationalError, "Internal sqlite-vec error: Could not insert a new vector chunk"),  # a full disk
    (sqlite3.OperationalError, "Error preparing stmtChunk: database is locked"),  # vec0's words on a lock
    (sqlite3.IntegrityError, "UNIQUE constraint failed: chunks.id"),
    (ValueError, "Connection closed"),
    (RuntimeError, "database disk image is malformed"),  # not SQLite's: a bug's text is no damage
]


@pytest.mark.parametrize(("kind", "text"), DAMAGE)
def test_a_damaged_or_cut_file_is_damage(kind, text):
    assert is_corruption(kind(text))


@pytest.mark.parametrize(("kind", "text"), NOT_DAMAGE)
def test_what_is_not_the_file_s_damage_is_not(kind, text):
    assert not is_corruption(kind(text))


@pytest.mark.parametrize(
    ("code", "damage"),
    [(11, True), (26, True), (11 | (1 << 8), True), (522, True), (10, False), (5, False), (13, False)],
)
def test_the_code_decides_where_the_driver_gives_one(code, damage):
    exc = sqlite3.OperationalError("some words of no meaning")
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    assert is_corruption(exc) is damage


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (9, "chunks iter error"),
        (9, "could not open vectors blob for chunk 4"),
        (5, "Error preparing stmtChunk: database is locked"),
        (5, "could not open validity blob on main.chunks_vec_chunks.validity"),
        (13, "vec0 deletion error: Error commiting validity blob transaction on main.chunks_vec_chunks.validity"),
        (10 | (3 << 8), "vectors blob read error for 3"),  # SQLITE_IOERR_WRITE-like: the disk, not the file
        (6, "Internal sqlite-vec error: Could not find latest chunk"),
    ],
)
def test_a_code_that_is_not_the_file_s_outweighs_vec0_s_words(code, text):
    """Where the driver gives a code that is never the file's (busy, locked, interrupted, full, I/O), it outweighs
    any words. These pairings are constructed: sqlite-vec itself reports SQLITE_ERROR (1) whatever SQLite told it
    (its words then decide: the passing-words cases above, and a real interrupt after vec0's first steps, "chunks
    iter error" with code 1, still reads as damage — the gateway never interrupts a query); the rule holds for an
    error whose code comes through, from SQLite or an extension that passes SQLite's code on."""
    exc = sqlite3.OperationalError(text)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    assert not is_corruption(exc)


def test_a_cut_file_read_for_real_is_damage(tmp_path):
    db = tmp_path / "cut.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t(x)")
    conn.executemany("INSERT INTO t VALUES (?)", [("y" * 500,) for _ in range(2000)])
    conn.commit()
    conn.close()
    with open(db, "r+b") as fh:
        fh.truncate(db.stat().st_size // 2)
    conn = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.DatabaseError) as caught:
            conn.execute("SELECT count(*), sum(length(x)) FROM t").fetchone()
    finally:
        conn.close()
    assert is_corruption(caught.value)


async def test_a_full_disk_met_inside_sqlite_vec_keeps_the_healthy_index(tmp_path):
    """A sync that runs out of room (PRAGMA max_page_count just above the file, a few pages of headroom: the
    error then comes from inside sqlite-vec, "Internal sqlite-vec error: Could not insert a new vector chunk",
    SQLITE_ERROR) fails that sync and keeps the index: nothing set aside, the synced notes still found."""
    from gateway.compose import memory_service
    from gateway.memory.search.request import SearchRequest
    from gateway.storage.files.engine import FilesStorage
    from tests.unit.test_memory import make_cfg, write

    for headroom in range(0, 20, 2):
        cfg = make_cfg(tmp_path / f"h{headroom}")
        m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
        await m.open()
        try:
            root = tmp_path / f"h{headroom}" / "state" / "workspace" / "memory"
            for i in range(60):
                write(root / f"a{i}.md", f"# A{i}\n\nnote {i} about kayaks k{i}\n")
            await m.sync()
            (pages,) = await m.index.writer.fetchone("PRAGMA page_count")
            await m.index.writer.execute(f"PRAGMA max_page_count = {pages + headroom}")
            for i in range(12):
                write(root / f"n{i}.md", f"# N{i}\n\nshort n{i}\n")
            with contextlib.suppress(Exception):  # full: that sync fails, as it should
                await m.sync()
            assert m.index.corrupt_events == [], (headroom, m.index.corrupt_events)
            found = await m.search(SearchRequest(query="kayaks", mode="fts"))
            assert found["results"], headroom
        finally:
            await m.close()


async def test_a_session_forgotten_over_a_damaged_index_is_hidden_at_once(tmp_path):
    """sessions.delete whose removal from the index meets damage (SQLite's own words from the store's write,
    injected where the file would say them): the file is marked for its rebuild, and until that runs the
    deleted session is left out of search — never served from the damaged file meanwhile."""
    from gateway.compose import memory_service
    from gateway.memory.search.request import SearchRequest
    from gateway.storage.files.engine import FilesStorage
    from tests.unit.test_memory import make_cfg, paths, transcript

    cfg = make_cfg(tmp_path)
    alpha = transcript(cfg, "alpha", [("user", "My sister Ana adopted a greyhound in Berlin.")])
    transcript(cfg, "beta", [("user", "The boiler makes a clicking noise.")])
    m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await m.open()
    try:
        await m.sync()
        assert paths(await m.search(SearchRequest(query="greyhound", mode="fts"))) == ["sessions/alpha.jsonl"]
        alpha.unlink()  # sessions.delete moved the transcript away

        async def damaged(paths_):
            raise sqlite3.DatabaseError("database disk image is malformed")

        m.index.store.files.remove = damaged
        await m.forget_session("alpha")
        assert paths(await m.search(SearchRequest(query="greyhound", mode="fts"))) == []
    finally:
        await m.close()
