"""The SQLite index as the memory pipeline writes it (memory/ports.py's IndexStore): the files rows and
their signatures, the chunk rows with their full-text rows, the vectors, the embedding cache.

Only SQL lives here; what to write is the pipeline's (memory/index/pipeline.py). Writes go through the
one writer connection, each batch in one `BEGIN IMMEDIATE` transaction; a sync of several batches reads
the chunks stored and the cache through a second connection while the writer is busy (`loading`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Awaitable, Callable

import numpy as np
import orjson
import structlog

from ....memory.embeddings import EmbeddingError, EmbeddingProvider
from ....memory.embeddings.base import usable
from ....memory.index.pipeline import BATCH_CHUNKS, BATCH_FILES
from ....memory.index.settings import IndexSettings, SyncStats
from ....memory.index.sources import MEMORY, SESSIONS, SIGNATURE_SQL, SourceFile, session_path
from ....memory.ports import ChunkKey, FileStat, Indexed, Scope, Unembedded, VectorRow, WriteBatch
from ....timeutil import now_iso
from ...vectors.ann import AnnIndex
from .cache import EmbeddingCache
from .db import Database, batches
from .ledger import SqliteLedger
from .migrations import CHUNK_ID_HIGH, delete_chunks, ensure_vector_table, get_meta, set_meta, vector_table
from .vectors import VectorStore

log = structlog.get_logger("gateway.memory")

# The files table is read for a sync's comparison this many rowids at a time (`SqliteFileRows._in_scope`).
WINDOW = 1 << 17


class SqliteFileRows:
    """The `files` table: one row per indexed file (memory/ports.py's FileRows)."""

    transcripts_are_sessions = True  # a transcript file that is gone means its session is gone
    notes_by_name = False  # one folder, one index: a file reached by two names is indexed once

    def __init__(self, db: Database, bump: Callable[[], Awaitable[None]]):
        self.db, self._bump = db, bump

    async def _in_scope(self, memory: bool, sessions: Scope, columns: str, args: list[Any]) -> list[tuple]:
        """`SELECT columns` (aggregates; `args` their parameters) over the files a sync covers: whole
        sources a window of rowids at a time (a range of the table's own order: no sort, and one joined
        string stays far below SQLite's 1 GB length limit however many files there are), a set of
        sessions at once."""
        out: list[tuple] = []
        sources = [src for src, on in ((MEMORY, memory), (SESSIONS, sessions is True)) if on]
        if sources:
            lo, hi = await self.db.fetchone("SELECT min(rowid), max(rowid) FROM files") or (None, None)
            one = [] if len(sources) == 2 else sources
            for start in range(lo, hi + 1, WINDOW) if lo is not None else ():
                out += await self.db.fetchall(
                    f"SELECT {columns} FROM files WHERE rowid >= ? AND rowid < ?{' AND source = ?' if one else ''}",
                    [*args, start, start + WINDOW, *one],
                )
        if sessions is not True and sessions:
            keys = orjson.dumps([session_path(k) for k in sorted(sessions)]).decode()
            out += await self.db.fetchall(
                f"SELECT {columns} FROM (SELECT f.* FROM json_each(?) AS j CROSS JOIN files AS f ON f.path = j.value)",
                [*args, keys],
            )
        return out

    async def indexed(self, memory: bool, sessions: Scope, max_file_bytes: int) -> Indexed:
        """The signatures joined by SQLite: a no-op sync of 460k files read 460k rows (0.38 s), now 4
        strings (0.13 s)."""
        sig = f"group_concat(CASE WHEN source != '{MEMORY}' OR size <= ? THEN {SIGNATURE_SQL} END, char(0))"
        signatures: set[str] = set()
        count = notes = 0
        for n, m, blob in await self._in_scope(
            memory, sessions, f"count(*), sum(source = '{MEMORY}'), {sig}", [max_file_bytes]
        ):
            signatures.update(blob.split("\0") if blob else ())
            count, notes = count + n, notes + (m or 0)
        sources = {src for src, n in ((MEMORY, notes), (SESSIONS, count - notes)) if n}
        total = None
        if not (memory and sessions is True):
            # The guard (more than half of the index removed) compares 2 × the files gone in scope with
            # the index's file count: counting up to 2 × the files in scope + 1 decides it as the full
            # count would.
            total = int(
                await self.db.scalar("SELECT count(*) FROM (SELECT 1 FROM files LIMIT ?)", (2 * count + 1,), default=0)
            )
        return Indexed(signatures, sources, count, total)

    async def rows_of(self, paths: list[str]) -> dict[str, FileStat]:
        out: dict[str, FileStat] = {}
        for i in range(0, len(paths), 50_000):
            for path, size, mtime, h in await self.db.fetchall(
                "SELECT f.path, f.size, f.mtime_ns, f.hash FROM json_each(?) AS j "
                "CROSS JOIN files AS f ON f.path = j.value",
                [orjson.dumps(paths[i : i + 50_000]).decode()],
            ):
                out[path] = (size, mtime, h)
        return out

    async def paths_in_scope(self, memory: bool, sessions: Scope) -> set[str]:
        out: set[str] = set()
        for (blob,) in await self._in_scope(memory, sessions, "group_concat(path, char(0))", []):
            out.update(blob.split("\0") if blob else ())
        return out

    async def confirm_gone(self, paths: list[str]) -> list[str]:
        return paths  # the files are the record

    async def ready(self, files: list[SourceFile]) -> list[SourceFile]:
        return files

    async def remove(self, paths: list[str]) -> int:
        async with self.db.transaction():
            await delete_chunks(self.db, "path", paths)
            n = 0
            for path in paths:
                n += await self.db.execute("DELETE FROM files WHERE path = ?", (path,))
            if n:
                await self._bump()
            return n


class SqliteChunks:
    """The `chunks` table with its full-text rows (`chunks_fts`) and vectors (`chunks_vec`)."""

    def __init__(self, db: Database, vector_backend: str, cache: EmbeddingCache):
        self.db, self.backend, self.cache = db, vector_backend, cache
        self.reader: Database | None = None  # beside the writer while a sync loads (IndexStore.loading)
        self.vectors: VectorStore | None = None
        self.ann: AnnIndex | None = None  # the search side's graph, which the writes keep up to date

    async def stored(self, paths: list[str]) -> dict[str, set[ChunkKey]]:
        stored: dict[str, set[ChunkKey]] = {}
        for i in range(0, len(paths), 500):
            part = paths[i : i + 500]
            rows = await (self.reader or self.db).fetchall(
                f"SELECT path, start_line, end_line, hash FROM chunks WHERE path IN ({','.join('?' * len(part))})", part
            )
            for path, a, b, h in rows:
                stored.setdefault(path, set()).add((a, b, h))
        return stored

    async def _current(self, paths: list[str]) -> dict[str, dict[ChunkKey, int]]:
        """path → {(start line, end line, hash): chunk id} of the chunks stored for these files, in one
        statement (the ids through json_each, each looked up in the identity index)."""
        out: dict[str, dict[ChunkKey, int]] = {}
        if paths:
            for path, cid, a, b, h in await self.db.fetchall(
                "SELECT c.path, c.id, c.start_line, c.end_line, c.hash FROM json_each(?) AS j "
                "CROSS JOIN chunks AS c ON c.path = j.value",
                [orjson.dumps(paths).decode()],
            ):
                out.setdefault(path, {})[(a, b, h)] = cid
        return out

    async def write(self, paths: list[str], plan: Callable[[dict[str, dict[ChunkKey, int]]], WriteBatch]) -> None:
        async with self.db.transaction():
            # Ids are never given again (issue 46's review: a search between two batches of one sync, in
            # one generation, took the vector kept for a deleted chunk's id as the new chunk's): past the
            # highest ever given (meta, kept in this transaction) as well as the highest stored.
            high = int(await get_meta(self.db, CHUNK_ID_HIGH, "0") or 0)
            top = max(high, int(await self.db.scalar("SELECT max(id) FROM chunks", default=0) or 0))
            next_id = top + 1
            batch = plan(await self._current(paths))
            inserts, vec_rows = [], []
            for new in batch.chunks:
                v = new.vector
                inserts.append((next_id, *new.columns(), 0 if v is None else 1))
                if v is not None:
                    vec_rows.append((next_id, new.file.source, new.file.session_key, v))
                next_id += 1
            if batch.touched:
                await self.db.executemany(
                    "UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?",
                    [(sf.size, sf.mtime_ns, sf.path) for sf in batch.touched],
                )
            if batch.stale:
                await delete_chunks(self.db, "id", batch.stale)
            if inserts:
                await self.db.insert_rows(
                    "INSERT INTO chunks(id, path, source, session_key, start_line, end_line, hash, text, "
                    "spans, context, date, embedded)",
                    inserts,
                )
                await self.db.execute(
                    "INSERT INTO chunks_fts(rowid, text, context) SELECT id, text, context FROM chunks "
                    "WHERE id >= ? AND id <= ?",
                    (inserts[0][0], inserts[-1][0]),
                )
            if vec_rows and self.vectors is not None:
                await self.vectors.insert(vec_rows)
            if batch.files:
                await self.db.insert_rows(
                    "INSERT OR REPLACE INTO files(path, source, session_key, size, mtime_ns, hash, chunks, indexed_at)",
                    [
                        (sf.path, sf.source, sf.session_key, sf.size, sf.mtime_ns, h, n, batch.now)
                        for sf, h, n in batch.files
                    ],
                )
            if batch.fresh:
                await self.cache.put_many(batch.fresh)
            if next_id - 1 != high:
                await set_meta(self.db, CHUNK_ID_HIGH, str(next_id - 1))

    async def ready_vectors(self, dims: int) -> None:
        if self.vectors is None or self.vectors.dims != dims:
            existing = await vector_table(self.db)
            if existing is None:
                await ensure_vector_table(self.db, self.backend, dims)
            elif existing != (self.backend, dims):
                raise EmbeddingError(
                    f"the index holds {existing[1]}-d vectors but the provider gives {dims}-d; "
                    "the index must be rebuilt",
                    retryable=False,
                )
            self.vectors = VectorStore(self.db, self.backend, dims, ann=self.ann)

    async def unembedded(self, after: int, limit: int) -> list[Unembedded]:
        return [
            Unembedded(*r)
            for r in await self.db.fetchall(
                "SELECT id, source, session_key, text FROM chunks WHERE embedded = 0 AND id > ? ORDER BY id LIMIT ?",
                (after, limit),
            )
        ]

    async def add_vectors(self, rows: list[VectorRow]) -> int:
        if not rows or self.vectors is None:
            return 0
        async with self.db.transaction():
            # Only rows still present and still without a vector (a concurrent writer may have acted).
            ids = [r.id for r in rows]
            live = {
                r[0]
                for r in await self.db.fetchall(
                    f"SELECT id FROM chunks WHERE embedded = 0 AND id IN ({','.join('?' * len(ids))})", ids
                )
            }
            todo = [r for r in rows if r.id in live]
            await self.vectors.insert(todo)
            await self.db.executemany("UPDATE chunks SET embedded = 1 WHERE id = ?", [(r.id,) for r in todo])
        return len(todo)

    async def count_unembedded(self) -> int:
        return int(await self.db.scalar("SELECT count(*) FROM chunks WHERE embedded = 0", default=0))

    async def drop_unusable(self) -> int:
        async with self.db.transaction():
            await self.cache.purge_unusable()
        if await vector_table(self.db) is None:
            return 0
        bad: list[int] = []
        async with self.db.c.execute("SELECT chunk_id, embedding FROM chunks_vec") as cur:
            async for rows in batches(cur, BATCH_CHUNKS):
                v = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                ok = await asyncio.to_thread(usable, v)
                bad.extend(int(r[0]) for r, good in zip(rows, ok) if not good)
        if bad:
            async with self.db.transaction():
                await self.db.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", [(i,) for i in bad])
                await self.db.executemany("UPDATE chunks SET embedded = 0 WHERE id = ?", [(i,) for i in bad])
        return len(bad)


class SqliteIndexStore:
    """One SQLite index file as the pipeline writes it: its FileRows, ChunkStore and cache, through the
    writer connection `db`."""

    def __init__(self, db: Database, provider: EmbeddingProvider, settings: IndexSettings):
        self.db = db
        self.cache = EmbeddingCache(db, provider.name, provider.model, settings.cache_max_entries, provider.cached)
        self.files = SqliteFileRows(db, self._bump)
        self.chunks = SqliteChunks(db, settings.vector_backend, self.cache)
        self.ledger = SqliteLedger(db)
        self.bumps = 0  # new generations begun through this store (committed or not): see FilesMemoryIndex

    @property
    def ann(self) -> AnnIndex | None:
        return self.chunks.ann

    @ann.setter
    def ann(self, ann: AnnIndex | None) -> None:
        """The search side's graph: each vector written is added to it, each generation told."""
        self.chunks.ann = ann
        if self.chunks.vectors is not None:
            self.chunks.vectors.ann = ann

    async def _bump(self) -> None:
        """A new generation of the index (inside the writer's transaction): searches reload what they keep."""
        self.bumps += 1
        gen = int(await get_meta(self.db, "generation", "0") or 0) + 1
        await set_meta(self.db, "generation", str(gen))
        if self.chunks.ann is not None:
            self.chunks.ann.written(str(gen - 1), str(gen))

    @contextlib.asynccontextmanager
    async def syncing(self) -> AsyncIterator[None]:
        yield  # the writer is this process's alone (FilesMemoryIndex's write lock and users lock)

    @contextlib.asynccontextmanager
    async def loading(self, files: int) -> AsyncIterator[None]:
        """Preparing reads through its own connection: the writer's thread is busy with the previous batch."""
        rdb = await Database(self.db.path, self.db.driver, use_vec=False).open() if files > BATCH_FILES else None
        self.chunks.reader = self.cache.reader = rdb
        try:
            yield
        finally:
            self.chunks.reader = self.cache.reader = None
            if rdb is not None:
                await rdb.close()

    async def finish(self, stats: SyncStats) -> None:
        async with self.db.transaction():
            if stats.changed:
                await self._bump()
            await set_meta(self.db, "last_sync_at", now_iso())
            await self.cache.prune()
