"""The FTS5 mirror's file (fts_mirror.py): `<stateDir>/memory/<agent>.pg.fts`, owner-only (0600 in a 0700
folder, as the rest of the state dir), opened by this gateway alone through one aiosqlite connection.

It holds `chunks(id, source, session_key)` for the filters and a contentless FTS5 table
(`contentless_delete`, SQLite ≥ 3.43: the stock module's or pysqlite3's) of the text and context, no
copy of the text, and `meta`: the schema, tokenizer, database identity and agent it was built for.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence, TypeVar, cast

import aiosqlite
import asyncpg

from ....fsutil import ensure_private_dir
from ...fts5 import TOKENIZERS

T = TypeVar("T")
SCHEMA = "1"
HASHSIZE = 32 * 1024 * 1024  # as the files engine's (files/memory/migrations.py's m009)
IDS_A_STATEMENT = 500  # ids in one `IN (…)` of a delete


def mirror_path(state_dir: Path, agent_id: str) -> Path:
    return state_dir / "memory" / f"{agent_id}.pg.fts"


def sqlite_module() -> ModuleType | None:
    """An SQLite with FTS5's `contentless_delete` (3.43): the stock module's, else pysqlite3's."""
    import sqlite3

    mods: list[ModuleType] = [sqlite3]
    with contextlib.suppress(ImportError):
        import pysqlite3.dbapi2 as p  # type: ignore[import-not-found,unused-ignore]

        mods.append(p)
    for m in mods:
        if tuple(m.sqlite_version_info) >= (3, 43, 0):
            return m
    return None


class Stale(Exception):
    """The file is not this database's agent's mirror, in this form: built again."""


async def chunk_position(pool: asyncpg.Pool) -> tuple[str, int]:
    """The database's identity (and the chunk table's oid, new after a restore) and how far the chunk ids'
    sequence went: a file holding ids past it, or of another identity, is built again. `jarvis_identity`
    is made by the core migrations (db.py's 0018), whether vectors are stored or not."""
    row = await pool.fetchrow(
        "SELECT (SELECT id FROM jarvis_identity LIMIT 1) || ':' || 'memory_chunks'::regclass::oid::text, "
        "(SELECT last_value FROM memory_chunks_id_seq)"
    )
    return str(row[0]), int(row[1])


def _private_file(path: Path) -> None:
    """The file made owner-only before SQLite opens it (its -wal and -shm take the file's mode)."""
    ensure_private_dir(path.parent)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        with contextlib.suppress(FileNotFoundError):
            if p.stat().st_mode & 0o077:
                os.chmod(p, 0o600)


def _in_transaction_rollback(c: Any) -> None:
    """ROLLBACK where a transaction is open: where SQLite already rolled it back (a full disk), a second
    one would raise and hide the first error."""
    if c.in_transaction:
        c.execute("ROLLBACK")


class MirrorFile:
    """One aiosqlite connection (autocommit; explicit transactions), what storage/fts5.py needs of one."""

    def __init__(self, path: Path, tokenizer: str, module: ModuleType):
        self.path, self.tokenizer, self.module = path, tokenizer, module
        self.conn: aiosqlite.Connection | None = None

    async def call(self, fn: Callable[[Any], T]) -> T:
        c = self.conn
        if c is None:
            raise ValueError("Connection closed")
        return cast(T, await c._execute(lambda: fn(c._conn)))

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return await self.call(lambda conn: conn.execute(sql, params).fetchall())

    def _connect(self) -> Any:
        conn = self.module.connect(str(self.path), isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -32000")
        return conn

    def remove(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)

    async def open(self, want: dict[str, str], ceiling: int) -> tuple[int, int]:
        """Opened (made if missing) → (rows held, highest id held); Stale if it is another's."""
        _private_file(self.path)
        self.conn = await aiosqlite.Connection(self._connect, 256)
        tok = TOKENIZERS[self.tokenizer]

        def setup(c: Any) -> tuple[dict[str, str], int, int]:
            c.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                c.execute("BEGIN IMMEDIATE")
                try:
                    c.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, source TEXT NOT NULL, session_key TEXT)")
                    c.execute(
                        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, content='', "
                        f"contentless_delete=1, tokenize='{tok}')"
                    )
                    c.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('hashsize', {HASHSIZE})")
                    c.execute("CREATE VIRTUAL TABLE chunks_fts_rows USING fts5vocab(chunks_fts, 'row')")
                    c.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", list(want.items()))
                    c.execute("COMMIT")
                except BaseException:
                    _in_transaction_rollback(c)
                    raise
                meta = dict(want)
            held, top = c.execute("SELECT count(*), coalesce(max(id), 0) FROM chunks").fetchone()
            return meta, int(held), int(top)

        meta, held, top = await self.call(setup)
        if meta != want:
            raise Stale(f"the file is {meta}, not {want}")
        if top > ceiling:
            raise Stale(f"the file holds chunk {top}, past the database's sequence ({ceiling}): a restore")
        return held, top

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def add(self, rows: Sequence[Any]) -> None:
        """Rows of (id, source, session_key, text, context), in one transaction."""
        keys = [(int(r[0]), r[1], r[2]) for r in rows]
        texts = [(int(r[0]), r[3], r[4]) for r in rows]

        def add(c: Any) -> None:
            c.execute("BEGIN IMMEDIATE")
            try:
                c.executemany("INSERT OR IGNORE INTO chunks(id, source, session_key) VALUES (?, ?, ?)", keys)
                c.executemany("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, ?)", texts)
                c.execute("COMMIT")
            except BaseException:
                _in_transaction_rollback(c)
                raise

        await self.call(add)

    async def drop(self, ids: Sequence[int]) -> int:
        """These chunks deleted (those the file holds: contentless_delete, by rowid); how many it held."""

        def drop(c: Any) -> int:
            n = 0
            c.execute("BEGIN IMMEDIATE")
            try:
                for i in range(0, len(ids), IDS_A_STATEMENT):
                    part = list(ids[i : i + IDS_A_STATEMENT])
                    marks = ",".join("?" * len(part))
                    held = [r[0] for r in c.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", part)]
                    if held:
                        marks = ",".join("?" * len(held))
                        c.execute(f"DELETE FROM chunks WHERE id IN ({marks})", held)
                        c.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", held)
                        n += len(held)
                c.execute("COMMIT")
            except BaseException:
                _in_transaction_rollback(c)
                raise
            return n

        return await self.call(drop) if ids else 0

    async def ids_after(self, after: int, limit: int) -> list[int]:
        return [
            int(r[0])
            for r in await self.fetchall("SELECT id FROM chunks WHERE id > ? ORDER BY id LIMIT ?", (after, limit))
        ]
