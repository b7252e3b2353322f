"""SQLite connections for the memory index, through aiosqlite (the event loop never waits on SQLite).

Driver choice, once per process (`pick_driver`), in this order:

1. the stock `sqlite3` module, when it can load extensions and sqlite-vec loads into it;
2. `pysqlite3.dbapi2` (the pysqlite3-binary wheel) with sqlite-vec;
3. no vector extension: vectors are float32 BLOBs in a plain table, searched with numpy.

`aiosqlite.connect()` always uses the stock module, so connections are made with
`aiosqlite.Connection(connector, iter_chunk_size)` and our own connector, which opens the database with
the chosen module, loads sqlite-vec, and sets WAL, a busy timeout and `synchronous=NORMAL`.
The database file is created 0600 inside a 0700 directory; SQLite gives its -wal/-shm files the
database file's mode.
"""

from __future__ import annotations

import contextlib

import functools
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, AsyncIterator, Callable, Iterable, Sequence, TypeVar, cast

import aiosqlite
import orjson

from ....fsutil import create_closed

BUSY_TIMEOUT_MS = 10_000
WAL_CHECKPOINT_PAGES = 8192  # 32 MiB of 4 KiB pages; see connect_sync
WAL_SIZE_LIMIT = 64 << 20


T = TypeVar("T")

# SQLite's own words for a damaged or cut file: SQLITE_CORRUPT "database disk image is malformed", "malformed
# database schema", FTS5's "fts5: corruption ...", SQLITE_NOTADB "file is not a database". A short read of a
# cut file is no error of its own: SQLite reads the missing end as zeroes and says "malformed".
_DAMAGE = ("malformed", "not a database", "corrupt")
# sqlite-vec's on its read path, where a shadow-table page it reads is cut or overwritten; it says SQLITE_ERROR
# with its own text, whatever SQLite told it (vec0.so's strings: "vectors blob read error for N", "could not
# open vectors blob for chunk N", "Could not fetch vector data for N, reading from blob failed", "... blob size
# mismatch ...", "chunks iter error", "Error preparing stmtChunk", "Internal sqlite-vec error: Could not find
# latest chunk", "chunk validity/rowids size doesn't match"). Its input errors ("invalid float32 vector BLOB
# length", "Input must have type BLOB", "... type mismatch") are not.
_VEC_DAMAGE = (  # (not "Internal sqlite-vec error" alone: "… Could not insert a new vector chunk" is a full disk)
    "chunks iter error",
    "stmtchunk",
    "latest chunk",
    "validity size doesn't match",
    "rowids size doesn't match",
)
_VEC_BLOB = ("error", "failed", "could not", "mismatch", "doesn't match")
# Its write path wraps SQLite's own words: "Error inserting rowid into rowids shadow table: %s". Over an
# overwritten page SQLite said "out of memory" there (the property test of tests/system/hostile/
# test_index_damaged_every_door.py): any such failure but the ones that are not the file's is damage.
# sqlite-vec says SQLITE_ERROR (1) whatever SQLite told it, so where its words carry SQLite's (busy, locked,
# full, I/O, read-only, interrupted: _NOT_THE_FILE) they are not damage, whatever vec0's own words around them.
_VEC_INSERT = ("error inserting", "shadow table")
_NOT_THE_FILE = ("locked", "busy", "full", "disk i/o", "readonly", "read-only", "interrupt")
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (the primary code, the low byte of an extended one)
_SHORT_READ = 522  # SQLITE_IOERR_SHORT_READ (extended): a read past a cut file's end, where a VFS says so
# Codes that are never the file's damage, whatever words sqlite-vec wraps them in ("chunks iter error" over an
# interrupt, "Error preparing stmtChunk: database is locked"): BUSY, LOCKED, READONLY, INTERRUPT, IOERR (but a
# short read), FULL, CANTOPEN. NOMEM is left to the words: over an overwritten vector page SQLite said it.
_NOT_THE_FILE_CODES = frozenset((5, 6, 8, 9, 10, 13, 14))


def is_corruption(exc: BaseException) -> bool:
    """True when `exc` is SQLite (or sqlite-vec over it) saying the file is damaged (SQLITE_CORRUPT,
    SQLITE_NOTADB), from either driver (sqlite3 or pysqlite3), as opposed to a busy database, a full disk or a
    bug. Called only on an exception: the happy path never pays for it."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "DatabaseError" not in names:
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        if code & 0xFF in _CORRUPT_CODES or code == _SHORT_READ:
            return True
        if code & 0xFF in _NOT_THE_FILE_CODES:
            return False
    text = str(exc).lower()
    if any(word in text for word in _DAMAGE):
        return True
    if any(word in text for word in _NOT_THE_FILE):
        return False
    if any(word in text for word in _VEC_DAMAGE) or all(w in text for w in _VEC_INSERT):
        return True
    if "blob" in text and any(word in text for word in _VEC_BLOB):
        return True
    # FTS5 that cannot read its config from a damaged file, met by a connection's first full-text query:
    # SQLite gives only "vtable constructor failed", as a DatabaseError (SQLITE_CORRUPT); a disk error
    # there is an OperationalError (SQLITE_IOERR), not damage.
    return type(exc).__name__ == "DatabaseError" and text.startswith("vtable constructor failed")


@dataclass(frozen=True)
class Driver:
    name: str  # "sqlite3" or "pysqlite3"
    module: ModuleType
    vec: bool  # sqlite-vec loads into it
    sqlite_version: str


def _load_vec(conn: Any) -> None:
    import sqlite_vec

    conn.enable_load_extension(True)
    try:
        sqlite_vec.load(conn)
    finally:
        conn.enable_load_extension(False)


def _modules() -> list[tuple[str, ModuleType]]:
    mods: list[tuple[str, ModuleType]] = [("sqlite3", sqlite3)]
    try:
        import pysqlite3.dbapi2 as pysqlite3

        mods.append(("pysqlite3", pysqlite3))
    except ImportError:
        pass
    return mods


def _has_fts5(conn: Any) -> bool:
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.fts5_probe")
        return True
    except Exception:
        return False


@functools.lru_cache(maxsize=None)
def pick_driver(want_vec: bool = True) -> Driver:
    """The best SQLite module available here (see the module docstring)."""
    usable: list[Driver] = []
    for name, mod in _modules():
        try:
            conn = mod.connect(":memory:")
        except Exception:  # pragma: no cover - a broken module
            continue
        try:
            if not _has_fts5(conn):
                continue
            vec = False
            if want_vec:
                try:
                    _load_vec(conn)
                    conn.execute("SELECT vec_version()").fetchone()
                    vec = True
                except Exception:
                    vec = False
            drv = Driver(name, mod, vec, mod.sqlite_version)
            if vec:
                return drv
            usable.append(drv)
        finally:
            conn.close()
    if not usable:
        raise RuntimeError("no SQLite module with FTS5 is available (need sqlite3 or pysqlite3 with FTS5)")
    # Without sqlite-vec prefer the newest SQLite (trigram needs 3.34+).
    return max(usable, key=lambda d: tuple(int(x) for x in d.sqlite_version.split(".")))


def index_driver(vector_backend: str) -> Driver:
    """The driver of the memory index for `memory.search.vectorBackend`: every opener of the index in a
    process (the manager, `jarvis backup`) takes this one, so one SQLite library tracks its locks."""
    return pick_driver(want_vec=vector_backend in ("auto", "sqlite-vec"))


def prepare_path(path: Path) -> None:
    """Create the parent directory (0700) and the database file (0600) before SQLite opens it.

    The file is never opened here, nor anywhere outside SQLite while the process may have it open: closing
    any descriptor of it would drop the POSIX locks of this process's connections (fsutil.create_closed).
    An existing file's mode is set by its path."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    try:
        os.chmod(parent, 0o700)
    except OSError:
        pass
    if not create_closed(path, 0o600):
        try:
            if os.stat(path).st_mode & 0o777 != 0o600:
                os.chmod(path, 0o600)
        except OSError:
            pass


def connect_sync(path: Path | str, driver: Driver, *, load_vec: bool = True, wal: bool = True) -> Any:
    """A plain (blocking) connection configured like the async ones; used by the aiosqlite connector."""
    conn = driver.module.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if load_vec and driver.vec:
        _load_vec(conn)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
        # Copy the WAL into the database every 32 MiB instead of every 4 MiB (SQLite's default): a sync
        # batch writes several MiB, and pages it rewrites batch after batch (index interiors, the vector
        # table's blobs) are then copied once instead of after every commit. The file is cut back to
        # 64 MiB after a bigger transaction.
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -32000")
    return conn


async def batches(cur: aiosqlite.Cursor, size: int) -> AsyncIterator[list[tuple]]:
    """The rows of an open cursor, `size` at a time (plain tuples: no row factory is set)."""
    while rows := await cur.fetchmany(size):
        yield cast("list[tuple]", rows)


class Database:
    """One aiosqlite connection in autocommit mode (transactions are explicit: `BEGIN IMMEDIATE`)."""

    def __init__(self, path: Path, driver: Driver, *, use_vec: bool = True, wal: bool = True):
        self.path = path
        self.driver = driver
        self.use_vec = use_vec and driver.vec
        self.wal = wal
        self.conn: aiosqlite.Connection | None = None

    async def open(self) -> "Database":
        prepare_path(self.path)
        path, driver, use_vec, wal = self.path, self.driver, self.use_vec, self.wal
        self.conn = await aiosqlite.Connection(lambda: connect_sync(path, driver, load_vec=use_vec, wal=wal), 256)
        return self

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.close()

    @property
    def c(self) -> aiosqlite.Connection:
        if self.conn is None:
            raise RuntimeError("memory database is closed")
        return self.conn

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` on the connection's thread: several statements for one trip there (each trip
        is a hand-off between threads, which costs most while other threads want the GIL — issue 46)."""
        c = self.c
        return cast(T, await c._execute(lambda: fn(c._conn)))

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; returns the cursor's rowcount. One trip to the connection's thread (aiosqlite's
        own `execute` then `close` of its cursor are two)."""

        def run(conn: sqlite3.Connection) -> int:
            cur = conn.execute(sql, params)
            try:
                return int(cur.rowcount)
            finally:
                cur.close()

        return await self.call(run)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        cur = await self.c.executemany(sql, rows)
        await cur.close()

    async def insert_rows(self, head: str, rows: Sequence[Sequence[Any]], vectors: Any = None) -> None:
        """`head` ("INSERT INTO t(a, b, v)") for all `rows`, a few thousand rows per statement: the rows
        go in as one JSON array read with json_each. With `vectors` (a 2-d float32 array, one row per
        row), the last column is that row's vector as a BLOB, cut out of one concatenated BLOB.

        Why not executemany: it binds each row in Python and so takes the GIL back once per row; while
        other threads run Python (chunking, embedding), each of those waits up to the switch interval,
        and a bulk insert crawls (measured: 16 µs/row alone, 7 ms/row beside one busy thread; this way
        30 and 37 µs). Values are str, int or None. Rows holding a NUL character go through executemany:
        json_extract of older SQLite versions cuts a string there."""
        if not len(rows):
            return
        width = len(rows[0])
        cols = [f"json_extract(j.value, '$[{i}]')" for i in range(width)]
        size = 0
        if vectors is not None:
            size = int(vectors.shape[1]) * 4
            cols.append(f"substr(?2, j.key * {size} + 1, {size})")
        sql = f"{head} SELECT {', '.join(cols)} FROM json_each(?1) j"
        step = max(1, min(4096, (32 << 20) // max(size, 1)))  # bound each bound value (~32 MB of vectors)
        for i in range(0, len(rows), step):
            part = rows[i : i + step]
            payload = orjson.dumps(part).decode()
            if "\\u0000" in payload:  # a NUL (or, rarely, a text holding a backslash and "u0000")
                marks = ", ".join("?" * (width + (vectors is not None)))
                await self.executemany(
                    f"{head} VALUES ({marks})",
                    part
                    if vectors is None
                    else [(*row, vectors[i + n].astype("<f4", copy=False).tobytes()) for n, row in enumerate(part)],
                )
                continue
            params: tuple[Any, ...] = (payload,)
            if vectors is not None:
                params += (vectors[i : i + step].astype("<f4", copy=False).tobytes(),)
            await self.execute(sql, params)

    async def executescript(self, sql: str) -> None:
        cur = await self.c.executescript(sql)
        await cur.close()

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        # Plain tuples: no row factory is set (aiosqlite types them as sqlite3.Row).
        return cast("list[tuple]", list(await self.c.execute_fetchall(sql, params)))

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def scalar(self, sql: str, params: Sequence[Any] = (), default: Any = None) -> Any:
        row = await self.fetchone(sql, params)
        return default if row is None or row[0] is None else row[0]

    async def begin(self) -> None:
        await self.execute("BEGIN IMMEDIATE")

    async def commit(self) -> None:
        if self.c.in_transaction:
            await self.execute("COMMIT")

    async def rollback(self) -> None:
        if self.c.in_transaction:
            await self.execute("ROLLBACK")

    @contextlib.asynccontextmanager
    async def transaction(self):
        """`async with db.transaction():` — BEGIN IMMEDIATE; COMMIT on leaving, ROLLBACK on any exception
        (a cancellation included), which is then re-raised."""
        await self.begin()
        try:
            yield self
        except BaseException:
            await self.rollback()
            raise
        await self.commit()
