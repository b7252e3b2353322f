"""Full-text search on the PostgreSQL engine done in the gateway (memory/ports.py's FullText), the way the
vectors are (vector_search.py): PostgreSQL's `memory_chunks` stays the store of record, and each gateway
keeps a derived SQLite FTS5 file of the agent's chunks, `<stateDir>/memory/<agent>.pg.fts`, searched by
the files engine's own search (storage/fts5.py: the same query building, pruning and BM25), so both
engines rank alike on the same corpus.

Why: at a million chunks PostgreSQL's full text is bound by the statement itself — the counts' lookup,
reading each matching row's block for its tsvector, ranking it — 36 / 211 ms (p50 / p95) in process on
the 2-core VM whatever the budget of rows ranked (docs/scaling.md), where FTS5 reads compact postings.

- The file holds `chunks(id, source, session_key)` for the filters and a contentless FTS5 table
  (`contentless_delete`, SQLite ≥ 3.43: the stock module's or pysqlite3's) of the text and context: no
  copy of the text. Opened only by this gateway (aiosqlite); a tool's process never opens it.
- Filled from `memory_chunks` by chunk id (ids only grow; one agent's writes take turns on its advisory
  lock) in the background at open; PostgreSQL's tsvector search (fulltext.py) answers until the file is
  caught up. A search at a generation the file has not seen first reads the rows above the highest id
  held, up to MIRROR_BATCH of them (more: the rest in the background, PostgreSQL answers meanwhile).
- Deleted chunks: the candidates are checked against the table before they are returned (one primary
  key lookup); those gone are deleted from the file and the search asked again. When the file holds a
  quarter more rows than the index has, it is built again from scratch, as it is when it is missing,
  unreadable, of another database (a restore), another tokenizer or another schema.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence, TypeVar, cast

import aiosqlite
import asyncpg
import structlog

from ....tasks import log_failure
from ...fts5 import TOKENIZERS, Fts5Search
from .fulltext import PgFullText

log = structlog.get_logger("gateway.memory")

T = TypeVar("T")
MIRROR_BATCH = 8_192  # rows read a statement when filling, and at most before a search answers
DEAD_SHARE = 0.25  # rows held past the index's count, as a share of those held, that rebuild the file
SCHEMA = "1"
HASHSIZE = 32 * 1024 * 1024  # as the files engine's (files/memory/migrations.py's m009)


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


class _Db:
    """One aiosqlite connection (autocommit; explicit transactions), what storage/fts5.py needs of one."""

    def __init__(self, conn: aiosqlite.Connection):
        self.conn = conn

    async def call(self, fn: Callable[[Any], T]) -> T:
        c = self.conn
        return cast(T, await c._execute(lambda: fn(c._conn)))

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return await self.call(lambda conn: conn.execute(sql, params).fetchall())


async def chunk_position(pool: asyncpg.Pool) -> tuple[str, int]:
    """The database's identity (and the chunk table's oid, new after a restore) and how far the chunk ids'
    sequence went: a file holding ids past it, or of another identity, is built again."""
    row = await pool.fetchrow(
        "SELECT (SELECT id FROM jarvis_identity LIMIT 1) || ':' || 'memory_chunks'::regclass::oid::text, "
        "(SELECT last_value FROM memory_chunks_id_seq)"
    )
    return str(row[0]), int(row[1])


class PgFtsMirror:
    def __init__(
        self,
        pool: asyncpg.Pool,
        agent_id: str,
        path: Path,
        tokenizer: str,
        context_weight: float,
        module: ModuleType,
    ):
        self.pool, self.agent_id, self.path = pool, agent_id, path
        self.tokenizer, self.context_weight, self.module = tokenizer, context_weight, module
        self.fallback = PgFullText(pool, agent_id, context_weight)
        self.state = "closed"  # "filling" (PostgreSQL answers), "ready", "closed"
        self.held = 0  # chunk rows in the file
        self.held_max = 0  # the highest chunk id in it
        self.rebuilds = 0
        self.answered = {"mirror": 0, "postgresql": 0}
        self._db: _Db | None = None
        self._fts: Fts5Search | None = None
        self._gen: str | None = None  # the index generation the file is caught up to
        self._forgotten = 0  # rows deleted from the file (moves the word counts' generation)
        self._lock = asyncio.Lock()  # writes to the file: one at a time
        self._task: asyncio.Task | None = None
        self._damaged = False  # SQLite said no while filling: the next start builds the file again
        import sqlite3

        self._sqlite_errors: tuple[type[BaseException], ...] = (sqlite3.Error, module.Error)

    # ---- life ---------------------------------------------------------------------------------------
    def start(self, rebuild: bool = False) -> None:
        """Open (or build) and fill the file in the background; PostgreSQL answers meanwhile."""
        if self._task is not None and not self._task.done():
            return
        self.state = "filling"
        rebuild, self._damaged = rebuild or self._damaged, False
        self._task = asyncio.create_task(self._prepare(rebuild))
        self._task.add_done_callback(log_failure("memory_fts_mirror_failed"))

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self.state = "closed"
        await self._close_db()

    async def warm(self) -> None:
        """The file opened (or built) and caught up with every row there is now: what a gateway's warm-up
        waits for (a search meanwhile is PostgreSQL's); gives up quietly when a fill fails (a search
        starts it again)."""
        while self.state != "closed":
            if self.state == "filling":
                if self._task is None or self._task.done():
                    self.start()
                task = self._task
                assert task is not None
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    if task.cancelled():  # the fill was stopped (a close, a rebuild), not this warm-up
                        return
                    raise
                except Exception:
                    return
                continue
            async with self._lock:
                if self.state != "ready" or await self._read_more() < MIRROR_BATCH:
                    return

    async def _close_db(self) -> None:
        db, self._db, self._fts = self._db, None, None
        if db is not None:
            with contextlib.suppress(Exception):
                await db.conn.close()

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "chunks": self.held,
            "rebuilds": self.rebuilds,
            "answered": dict(self.answered),
        }

    async def _prepare(self, rebuild: bool) -> None:
        async with self._lock:
            await self._close_db()
            if not rebuild:
                try:
                    await self._open()
                except Exception as e:  # missing is not this: _open creates it. Damaged, stale, unreadable.
                    log.warning("memory_fts_mirror_rebuilt", reason=repr(e)[:200], path=str(self.path))
                    rebuild = True
            if rebuild:
                self.rebuilds += 1
                await self._close_db()
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(str(self.path) + suffix).unlink(missing_ok=True)
                await self._open()
        try:
            while True:
                async with self._lock:
                    got = await self._read_more()
                if got < MIRROR_BATCH:
                    break
        except self._sqlite_errors:
            self._damaged = True
            raise
        self._gen = None
        self.state = "ready"
        log.info("memory_fts_mirror_ready", agent=self.agent_id, chunks=self.held, path=str(self.path))

    def _connect(self) -> Any:
        conn = self.module.connect(str(self.path), isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -32000")
        return conn

    async def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        store, ceiling = await chunk_position(self.pool)
        want = {"schema": SCHEMA, "tokenizer": self.tokenizer, "store": store, "agent": self.agent_id}
        conn = await aiosqlite.Connection(self._connect, 256)
        db = _Db(conn)
        self._db = db
        tok = TOKENIZERS[self.tokenizer]

        def setup(c: Any) -> tuple[dict[str, str], int, int]:
            c.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                c.execute("BEGIN IMMEDIATE")
                c.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, source TEXT NOT NULL, session_key TEXT)")
                c.execute(
                    "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, content='', "
                    f"contentless_delete=1, tokenize='{tok}')"
                )
                c.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('hashsize', {HASHSIZE})")
                c.execute("CREATE VIRTUAL TABLE chunks_fts_rows USING fts5vocab(chunks_fts, 'row')")
                c.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", list(want.items()))
                c.execute("COMMIT")
                meta = dict(want)
            held, top = c.execute("SELECT count(*), coalesce(max(id), 0) FROM chunks").fetchone()
            return meta, int(held), int(top)

        meta, held, top = await db.call(setup)
        if meta != want:
            raise Stale(f"the file is {meta}, not {want}")
        if top > ceiling:
            raise Stale(f"the file holds chunk {top}, past the database's sequence ({ceiling}): a restore")
        self.held, self.held_max = held, top
        self._fts = Fts5Search(db, self.tokenizer, self.context_weight)

    async def _read_more(self) -> int:
        """The next rows above the highest id held (MIRROR_BATCH at most) added; how many. Lock held."""
        rows = await self.pool.fetch(
            "SELECT id, source, session_key, text, coalesce(context, '') FROM memory_chunks "
            "WHERE agent_id = $1 AND id > $2 ORDER BY id LIMIT $3",
            self.agent_id,
            self.held_max,
            MIRROR_BATCH,
        )
        if not rows:
            return 0
        assert self._db is not None
        keys = [(int(r[0]), r[1], r[2]) for r in rows]
        texts = [(int(r[0]), r[3], r[4]) for r in rows]

        def add(c: Any) -> None:
            c.execute("BEGIN IMMEDIATE")
            try:
                c.executemany("INSERT OR IGNORE INTO chunks(id, source, session_key) VALUES (?, ?, ?)", keys)
                c.executemany("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, ?)", texts)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

        await self._db.call(add)
        self.held += len(rows)
        self.held_max = keys[-1][0]
        return len(rows)

    async def _forget(self, ids: list[int]) -> None:
        """Chunks gone from the database deleted from the file (contentless_delete: by rowid)."""
        marks = ",".join("?" * len(ids))

        def drop(c: Any) -> int:
            c.execute("BEGIN IMMEDIATE")
            n = int(c.execute(f"DELETE FROM chunks WHERE id IN ({marks})", ids).rowcount)
            c.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", ids)
            c.execute("COMMIT")
            return n

        async with self._lock:
            if self._db is None:  # closed meanwhile (a rebuild): nothing to drop them from
                return
            self.held -= await self._db.call(drop)
            self._forgotten += 1

    # ---- the search ---------------------------------------------------------------------------------
    async def _caught_up(self, generation: str | None, total: int) -> bool:
        """The file holds every row of `generation` (read now if fewer than MIRROR_BATCH are new)."""
        if generation is not None and generation == self._gen:
            return True
        async with self._lock:
            if self.state != "ready":
                return False
            if generation is not None and generation == self._gen:
                return True
            if await self._read_more() == MIRROR_BATCH:  # a big write: caught up in the background
                self.start()
                return False
            if self.held > 1_000 and self.held - total > DEAD_SHARE * self.held:
                log.info("memory_fts_mirror_dead_rows", held=self.held, chunks=total)
                self.start(rebuild=True)
                return False
            self._gen = generation
            return True

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
        """FTS5's BM25 over the file once it is caught up (storage/fts5.py), else PostgreSQL's."""
        if self.state == "filling" and (self._task is None or self._task.done()):
            self.start()  # the last fill failed (the database away, the file damaged): again
        try:
            if self.state == "ready" and await self._caught_up(generation, total):
                hits = await self._search(terms, n, sources, session_key, generation, extra)
                if hits is not None:
                    self.answered["mirror"] += 1
                    return hits
        except self._sqlite_errors as e:  # derived data never stops a search: built again, PostgreSQL answers
            if self.state == "ready":
                log.warning("memory_fts_mirror_unreadable", error=repr(e)[:200], path=str(self.path))
                self.state = "filling"
                await self._restart()
        self.answered["postgresql"] += 1
        return await self.fallback.search(
            terms, n, sources, session_key, generation=generation, total=total, extra=extra
        )

    async def _restart(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self.start(rebuild=True)

    async def _search(
        self,
        terms: Sequence[str],
        n: int,
        sources: tuple[str, ...],
        session_key: str | None,
        generation: str | None,
        extra: bool,
    ) -> list[tuple[int, float]] | None:
        """The file's best `n`, those deleted from the table meanwhile dropped from it and the search asked
        again (twice at most: then what is left). None: the file went away meanwhile."""
        hits: list[tuple[int, float]] = []
        for _ in range(3):
            fts = self._fts
            if fts is None or self.state != "ready":
                return None
            gen = None if generation is None else f"{generation}:{self._forgotten}"
            hits = await fts.search(terms, n, sources, session_key, generation=gen, total=self.held, extra=extra)
            if not hits:
                return hits
            ids = [h[0] for h in hits]
            live = {
                int(r[0])
                for r in await self.pool.fetch(
                    "SELECT id FROM memory_chunks WHERE agent_id = $1 AND id = ANY($2::bigint[])", self.agent_id, ids
                )
            }
            gone = [i for i in ids if i not in live]
            if not gone:
                return hits
            await self._forget(gone)
            hits = [h for h in hits if h[0] in live]
        return hits
