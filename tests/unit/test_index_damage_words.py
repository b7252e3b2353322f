"""db.is_corruption by class: every SQLite / sqlite-vec error that means a damaged or cut index file is damage
(the file is set aside and rebuilt, a client told -32050), and the errors that are not the file's (a busy
database, a full disk, a bad input, a bug) are not. The texts are SQLite's and vec0's own; the code, where
the driver gives one, decides first."""

from __future__ import annotations

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
        (9, "chunks iter error"),  # a vec0 KNN interrupted after a few steps, on a healthy file
        (9, "could not open vectors blob for chunk 4"),
        (5, "Error preparing stmtChunk: database is locked"),
        (5, "could not open validity blob on main.chunks_vec_chunks.validity"),
        (13, "vec0 deletion error: Error commiting validity blob transaction on main.chunks_vec_chunks.validity"),
        (10 | (3 << 8), "vectors blob read error for 3"),  # SQLITE_IOERR_WRITE-like: the disk, not the file
        (6, "Internal sqlite-vec error: Could not find latest chunk"),
    ],
)
def test_a_code_that_is_not_the_file_s_outweighs_vec0_s_words(code, text):
    """sqlite-vec puts its own words on whatever SQLite returned: a busy, locked, interrupted, full or I/O
    failure under them is not damage (no healthy index thrown away for a passing error)."""
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
