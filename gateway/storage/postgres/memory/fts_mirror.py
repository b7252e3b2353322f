"""Full-text search on the PostgreSQL engine done in the gateway (memory/ports.py's FullText), the way the
vectors are (vector_search.py): PostgreSQL's `memory_chunks` stays the store of record, and each gateway
keeps a derived SQLite FTS5 file of the agent's chunks (fts_file.py), searched by the files engine's own
search (storage/fts5.py: the same query building, pruning and BM25), so both engines rank alike on the
same corpus.

Why: at a million chunks PostgreSQL's full text is bound by the statement itself — the counts' lookup,
reading each matching row's block for its tsvector, ranking it — 36 / 211 ms (p50 / p95) in process on
the 2-core VM whatever the budget of rows ranked (docs/scaling.md), where FTS5 reads compact postings.

- Filled from `memory_chunks` by chunk id (ids only grow; one agent's writes take turns on its advisory
  lock; the index `memory_chunks_by_id` reads them) in the background at open; PostgreSQL's tsvector
  search (fulltext.py) answers until the file is caught up. A search at a generation the file has not
  seen first reads the rows above the highest id held, up to IN_BAND of them (more: the rest in the
  background, PostgreSQL answers meanwhile).
- Deleted chunks: this gateway's own deletions (a sync's replaced chunks, removed files, a forgotten
  session) are dropped from the file as they are made (`deleted`). Another gateway's are found two
  ways: a search's candidates are checked against the table (one primary key lookup), those gone dropped
  and the search asked again until it has its `n` live ones or the file has no more (past DEAD_LIMIT
  dead candidates PostgreSQL answers that search); and when the file holds DEAD_MIN rows (and DEAD_SHARE
  of those it holds) more than the index counts, a background sweep walks the file's ids by range
  against the table and drops the gone (total 0, unknown: never).
- Built again from scratch only when the file is missing, unreadable (SQLite says so), of another
  database (a restore: checked at open and at each new generation a search meets), another tokenizer
  or another schema. A failure that is not the file's (the
  database away) keeps the file; the next fill waits a back-off that doubles (BACKOFF_FIRST..MAX).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import asyncpg
import structlog

from ....tasks import log_failure
from ...fts5 import Fts5Search
from .fts_file import SCHEMA, MirrorFile, Stale, chunk_position, mirror_path, sqlite_module
from .fulltext import PgFullText

__all__ = ["PgFtsMirror", "Stale", "mirror_path", "sqlite_module"]

log = structlog.get_logger("gateway.memory")

MIRROR_BATCH = 8_192  # rows read a statement when filling in the background
IN_BAND = 512  # rows read at most while a search waits; more: the rest in the background
DEAD_MIN, DEAD_SHARE = 64, 0.01  # rows held past the index's count (and share of those held) that sweep
SWEEP_BATCH = 8_192  # the file's ids checked against the table a statement, by a sweep
DEAD_LIMIT = 256  # deleted candidates one search drops before PostgreSQL answers it instead
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 300.0  # seconds before a failed fill is tried again, doubling


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
        self.swept = 0  # deleted rows a sweep dropped
        self.answered = {"mirror": 0, "postgresql": 0}
        self.error: str | None = None  # the last fill's failure, until one succeeds
        self._file: MirrorFile | None = None
        self._fts: Fts5Search | None = None
        self._gen: str | None = None  # the index generation the file is caught up to
        self._store: str | None = None  # the database the file is of (fts_file.chunk_position)
        self._forgotten = 0  # rows deleted from the file (moves the word counts' generation)
        self._lock = asyncio.Lock()  # writes to the file: one at a time
        self._task: asyncio.Task | None = None
        self._sweep: asyncio.Task | None = None
        self._damaged = False  # SQLite said no while filling: the next start builds the file again
        self._failures = 0  # fills failed in a row
        self._retry_at = 0.0  # the loop's time before which a failed fill is not started again
        import sqlite3

        self._sqlite_errors: tuple[type[BaseException], ...] = (sqlite3.Error, module.Error)
        self._file_errors: tuple[type[BaseException], ...] = (Stale, *self._sqlite_errors)
        self._forget_errors: tuple[type[BaseException], ...] = (ValueError, *self._sqlite_errors)

    # ---- life ---------------------------------------------------------------------------------------
    def start(self, rebuild: bool = False) -> None:
        """Open (or build) and fill the file in the background; PostgreSQL answers meanwhile."""
        if self._task is not None and not self._task.done():
            return
        self.state = "filling"
        rebuild, self._damaged = rebuild or self._damaged, False
        self._task = asyncio.create_task(self._prepare(rebuild))
        self._task.add_done_callback(log_failure("memory_fts_mirror_failed"))

    def _retry_due(self) -> bool:
        """A failed fill is started again (by a search, a warm-up) once its back-off has passed."""
        done = self._task is None or self._task.done()
        return done and asyncio.get_running_loop().time() >= self._retry_at

    async def close(self) -> None:
        for task in (self._task, self._sweep):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._task = self._sweep = None
        self.state = "closed"
        await self._close_db()  # not behind the lock: a search's catch-up may wait on the database

    async def warm(self) -> None:
        """The file opened (or built) and caught up with every row there is now: what a gateway's warm-up
        waits for (a search meanwhile is PostgreSQL's); gives up quietly when a fill fails (a search
        starts it again, after its back-off)."""
        while self.state != "closed":
            if self.state == "filling":
                if self._task is None or self._task.done():
                    if not self._retry_due():
                        return
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
                if self.state != "ready" or await self._read_more(MIRROR_BATCH) < MIRROR_BATCH:
                    return

    async def _close_db(self) -> None:
        f, self._file, self._fts = self._file, None, None
        if f is not None:
            await f.close()

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "chunks": self.held,
            "rebuilds": self.rebuilds,
            "swept": self.swept,
            "answered": dict(self.answered),
        }
        if self.error is not None:
            out["error"] = self.error
        return out

    async def _prepare(self, rebuild: bool) -> None:
        try:
            await self._fill(rebuild)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self._failures += 1
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (self._failures - 1))
            self._retry_at = asyncio.get_running_loop().time() + delay
            self.error = repr(e)[:300]
            raise
        self._failures, self.error = 0, None

    async def _fill(self, rebuild: bool) -> None:
        async with self._lock:
            await self._close_db()
            if not rebuild:
                try:
                    await self._open()
                except self._file_errors as e:  # damaged, stale, unreadable: built again
                    log.warning("memory_fts_mirror_rebuilt", reason=repr(e)[:200], path=str(self.path))
                    rebuild = True
                # anything else (the database away, the disk): the fill fails, the file is kept
            if rebuild:
                self.rebuilds += 1
                await self._close_db()
                MirrorFile(self.path, self.tokenizer, self.module).remove()
                await self._open()
        try:
            while True:
                async with self._lock:
                    got = await self._read_more(MIRROR_BATCH)
                if got < MIRROR_BATCH:
                    break
        except self._sqlite_errors:
            self._damaged = True
            raise
        self._gen = None
        self.state = "ready"
        log.info("memory_fts_mirror_ready", agent=self.agent_id, chunks=self.held, path=str(self.path))

    async def _open(self) -> None:
        store, ceiling = await chunk_position(self.pool)
        want = {"schema": SCHEMA, "tokenizer": self.tokenizer, "store": store, "agent": self.agent_id}
        self._store = store
        f = MirrorFile(self.path, self.tokenizer, self.module)
        self._file = f
        self.held, self.held_max = await f.open(want, ceiling)
        self._fts = Fts5Search(f, self.tokenizer, self.context_weight)

    async def _read_more(self, limit: int) -> int:
        """The next rows above the highest id held (`limit` at most) added; how many. Lock held. The row
        comparison is what makes PostgreSQL walk `memory_chunks_by_id` (agent_id, id): with `id > $2` it
        takes the primary key and filters, past every later row of the other agents when none is new."""
        rows = await self.pool.fetch(
            "SELECT id, source, session_key, text, coalesce(context, '') FROM memory_chunks "
            "WHERE agent_id = $1 AND (agent_id, id) > ($1, $2) ORDER BY agent_id, id LIMIT $3",
            self.agent_id,
            self.held_max,
            limit,
        )
        if not rows or self._file is None:  # none new, or the file closed meanwhile (a close, a rebuild)
            return 0
        await self._file.add(rows)
        self.held += len(rows)
        self.held_max = int(rows[-1][0])
        return len(rows)

    async def _forget(self, ids: Sequence[int]) -> None:
        """Chunks gone from the database deleted from the file."""
        async with self._lock:
            if self._file is None:  # closed meanwhile (a rebuild): nothing to drop them from
                return
            n = await self._file.drop(ids)
            self.held -= n
            self._forgotten += 1 if n else 0

    async def deleted(self, ids: Sequence[int]) -> None:
        """This gateway deleted these chunks from the database (a sync, a forgotten session): dropped from
        the file now, not left for a search or a sweep to find."""
        if not ids or self._file is None:
            return
        try:
            await self._forget(ids)
        except self._forget_errors as e:  # closed meanwhile, or unreadable: the next fill's
            log.info("memory_fts_mirror_forget_failed", error=repr(e)[:200])

    # ---- deleted rows, found by range ---------------------------------------------------------------
    def _sweep_later(self) -> None:
        if self._sweep is None or self._sweep.done():
            self._sweep = asyncio.create_task(self._sweep_dead())
            self._sweep.add_done_callback(log_failure("memory_fts_mirror_sweep_failed"))

    async def _sweep_dead(self) -> None:
        """The file's ids walked by range against the table; those the table no longer has dropped."""
        after, found = 0, 0
        while self.state == "ready" and (f := self._file) is not None:
            try:
                ids = await f.ids_after(after, SWEEP_BATCH)
            except ValueError:  # "Connection closed": a rebuild or a close took the file meanwhile
                if self._file is f and f.conn is not None:
                    raise
                return
            if not ids:
                break
            live = {
                int(r[0])
                for r in await self.pool.fetch(
                    "SELECT id FROM memory_chunks WHERE agent_id = $1 AND id BETWEEN $2 AND $3",
                    self.agent_id,
                    ids[0],
                    ids[-1],
                )
            }
            gone = [i for i in ids if i not in live]
            if gone:
                await self._forget(gone)
                found += len(gone)
            after = ids[-1]
        self.swept += found
        log.info("memory_fts_mirror_swept", agent=self.agent_id, dropped=found, chunks=self.held)

    # ---- the search ---------------------------------------------------------------------------------
    async def _caught_up(self, generation: str | None, total: int) -> bool:
        """The file holds every row of `generation` (read now if fewer than IN_BAND are new)."""
        if generation is not None and generation == self._gen:
            return True
        async with self._lock:
            if self.state != "ready":
                return False
            if generation is not None and generation == self._gen:
                return True
            store, ceiling = await chunk_position(self.pool)
            if store != self._store or ceiling < self.held_max:  # a restore while the gateway runs
                log.warning("memory_fts_mirror_stale", store=store, ceiling=ceiling, held_max=self.held_max)
                self.state = "filling"
                self.start(rebuild=True)
                return False
            if await self._read_more(IN_BAND) == IN_BAND:  # a big write: caught up in the background
                self.start()
                return False
            if self._file is None or self.state != "ready":  # closed while it read
                return False
            if total > 0 and self.held - total >= max(DEAD_MIN, DEAD_SHARE * self.held):  # another's deletions
                log.info("memory_fts_mirror_dead_rows", held=self.held, chunks=total)
                self._sweep_later()
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
        if self.state == "filling" and self._retry_due():
            self.start()  # the last fill failed (the database away, the file damaged): again, after a wait
        try:
            if self.state == "ready" and await self._caught_up(generation, total):
                hits = await self._search(terms, n, sources, session_key, generation, extra)
                if hits is not None:
                    self.answered["mirror"] += 1
                    return hits
        except ValueError:  # "Connection closed" under the catch-up (a close, a rebuild): PostgreSQL answers
            if self._file is not None and self._file.conn is not None:
                raise
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
        """The file's best `n` live chunks: those deleted from the table meanwhile are dropped from it and
        the search asked again (for `n` and as many more as were dead), until a round finds none dead.
        None: PostgreSQL answers (the file went away meanwhile, or more than DEAD_LIMIT were dead)."""
        dead = 0
        while True:
            f, fts = self._file, self._fts
            if f is None or fts is None or self.state != "ready":
                return None
            gen = None if generation is None else f"{generation}:{self._forgotten}"
            ask = n + dead
            try:
                hits = await fts.search(terms, ask, sources, session_key, generation=gen, total=self.held, extra=extra)
            except ValueError:  # "Connection closed": the file was closed meanwhile (a rebuild, a close)
                if self._file is f and f.conn is not None:
                    raise
                return None
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
                return hits[:n]
            await self._forget(gone)
            dead += len(gone)
            if dead > DEAD_LIMIT:
                log.info("memory_fts_mirror_dead_candidates", dead=dead, n=n)
                self._sweep_later()
                return None
