"""An agent's PostgreSQL index as the memory pipeline writes it (memory/ports.py's IndexStore).

Tables (migrations 0003 and on, and VECTOR_MIGRATIONS, in gateway/storage/postgres/db.py; all keyed by
`agent_id`):

    memory_files            (agent_id, path) → source, session_key, size, mtime_ns, hash, chunks
    memory_chunks           id → agent_id, path, lines, hash, text, spans, context, embedded, date,
                            tsv (generated: the text at weight A, the context at weight D; GIN index)
    memory_meta             (agent_id, key) → value: index_signature, generation, last_sync_at
    memory_embedding_cache  (provider, model, hash) → dims, float32 bytes
    memory_vectors          chunk_id → agent_id, source, session_key, dims, embedding (pgvector `vector`,
                            with an HNSW cosine index per dimension count)

A sync holds a session-level advisory lock on the agent's key for its whole run (`syncing`), so two
gateways syncing one agent take turns and the second finds the work done (hashes unchanged); its reads
and writes go through that connection, while the next batch's lookups go through the pool. Every write
that changes rows moves the agent's `generation` in the same transaction: each gateway follows it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Callable

import asyncpg
import orjson
import structlog

from ....memory.embeddings import EmbeddingProvider
from ....memory.index.settings import IndexSettings, SyncStats
from ....memory.index.sources import MEMORY, SESSIONS, SIGNATURE_SQL, SourceFile, session_key_of, session_path
from ....memory.ports import ChunkKey, FileStat, Indexed, Scope, Unembedded, VectorRow, WriteBatch
from ....timeutil import now_iso
from ..db import HNSW_MAX_DIMS, drop_dims_index_for_load, ensure_dims_index
from .agent import agent_lock, bump_generation, pg_text, set_meta
from .cache import PgEmbeddingCache
from .vectors import vector_text

log = structlog.get_logger("gateway.memory")

MAINTAIN_AFTER_FILES = 200  # a sync that changed this many files cleans up after itself (maintain)
BULK_LOAD_FILES = 1024  # a first sync of this many files builds the HNSW index after loading (loading)


class _Session:
    """The connection a sync holds the agent's lock on; between syncs, the pool answers."""

    def __init__(self, pool: asyncpg.Pool, agent_id: str):
        self.pool, self.agent_id = pool, agent_id
        self.conn: Any = None

    @property
    def db(self) -> Any:
        return self.conn if self.conn is not None else self.pool

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """The sync's connection, or one of the pool's for as long as it is needed."""
        if self.conn is not None:
            yield self.conn
        else:
            async with self.pool.acquire() as conn:
                yield conn


async def _remove(conn: Any, agent_id: str, paths: list[str]) -> int:
    """Drop these files' chunks (their vectors by cascade) and rows; how many files were indexed."""
    await conn.execute("DELETE FROM memory_chunks WHERE agent_id = $1 AND path = ANY($2::text[])", agent_id, paths)
    r = await conn.execute("DELETE FROM memory_files WHERE agent_id = $1 AND path = ANY($2::text[])", agent_id, paths)
    n = int(r.split()[-1])
    if n:
        await bump_generation(conn, agent_id)
    return n


def _stale_mirrors(items: list[tuple[SourceFile, int | None]]) -> set[str]:
    """Blocking: the paths whose file has fewer lines than `lines` (or whose session is gone: None)."""
    out = set()
    for sf, lines in items:
        if lines is None:
            out.add(sf.path)
            continue
        try:
            with open(sf.abs, "rb") as f:
                have = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except OSError:
            out.add(sf.path)
            continue
        if have < lines:
            out.add(sf.path)
    return out


class PgFileRows:
    """`memory_files`: one row per indexed file of the agent (memory/ports.py's FileRows)."""

    transcripts_are_sessions = False  # the sessions table decides which transcripts are gone

    def __init__(self, session: _Session):
        self.s = session

    def _where(self, memory: bool, sessions: Scope) -> tuple[str, list[Any]]:
        """The rows of memory_files a sync covers: a condition after `agent_id = $1`, and its arguments."""
        if sessions is not True and sessions:
            paths = [session_path(k) for k in sorted(sessions)]
            return ("(source = 'memory' OR path = ANY($2::text[]))" if memory else "path = ANY($2::text[])"), [paths]
        sources = [src for src, on in ((MEMORY, memory), (SESSIONS, sessions)) if on]
        return "source = ANY($2::text[])", [sources]

    async def indexed(self, memory: bool, sessions: Scope, max_file_bytes: int) -> Indexed:
        where, args = self._where(memory, sessions)
        signatures: set[str] = set()
        sources: set[str] = set()
        count = 0
        for source, n, sigs in await self.s.db.fetch(
            f"SELECT source, count(*), array_agg({SIGNATURE_SQL}) FILTER (WHERE source <> 'memory' OR size <= $3) "
            f"FROM memory_files WHERE agent_id = $1 AND {where} GROUP BY source",
            self.s.agent_id,
            *args,
            max_file_bytes,
        ):
            signatures.update(sigs or ())
            sources.add(source)
            count += n
        total = None
        if not (memory and sessions is True):
            total = int(
                await self.s.db.fetchval(
                    "SELECT count(*) FROM (SELECT 1 FROM memory_files WHERE agent_id = $1 LIMIT $2) AS t",
                    self.s.agent_id,
                    2 * count + 1,
                )
            )
        return Indexed(signatures, sources, count, total)

    async def rows_of(self, paths: list[str]) -> dict[str, FileStat]:
        rows = await self.s.db.fetch(
            "SELECT path, size, mtime_ns, hash FROM memory_files WHERE agent_id = $1 AND path = ANY($2::text[])",
            self.s.agent_id,
            paths,
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    async def paths_in_scope(self, memory: bool, sessions: Scope) -> set[str]:
        where, args = self._where(memory, sessions)
        paths = await self.s.db.fetchval(
            f"SELECT array_agg(path) FROM memory_files WHERE agent_id = $1 AND {where}", self.s.agent_id, *args
        )
        return set(paths or ())

    async def confirm_gone(self, paths: list[str]) -> list[str]:
        """A transcript is gone when its session is, not when this gateway's mirror is missing (it may
        not have caught up with a session made through another gateway yet)."""
        keys = [k for k in map(session_key_of, paths) if k]
        if not keys:
            return paths
        alive = {
            r[0]
            for r in await self.s.db.fetch(
                "SELECT session_key FROM sessions WHERE agent_id = $1 AND session_key = ANY($2::text[])",
                self.s.agent_id,
                keys,
            )
        }
        return [p for p in paths if session_key_of(p) not in alive]

    async def ready(self, files: list[SourceFile]) -> list[SourceFile]:
        """Leave out transcripts whose local mirror has fewer lines than the session (another gateway
        appended and this one has not mirrored it yet: indexing it would replace newer chunks with
        older ones) or whose session is gone. The mirror's update schedules the session's sync again."""
        keys = [sf.session_key for sf in files if sf.source == SESSIONS and sf.session_key]
        if not keys:
            return files
        counts = {
            r[0]: int(r[1])
            for r in await self.s.db.fetch(
                "SELECT session_key, line_count FROM sessions WHERE agent_id = $1 AND session_key = ANY($2::text[])",
                self.s.agent_id,
                keys,
            )
        }
        want = {sf.path: counts.get(sf.session_key or "") for sf in files if sf.source == SESSIONS}
        stale = await asyncio.to_thread(_stale_mirrors, [(sf, want[sf.path]) for sf in files if sf.path in want])
        if stale:
            log.debug("memory_mirror_behind", files=len(stale))
        return [sf for sf in files if sf.path not in stale]

    async def remove(self, paths: list[str]) -> int:
        async with self.s.connection() as conn:
            async with conn.transaction():
                return await _remove(conn, self.s.agent_id, paths)


class PgChunks:
    """`memory_chunks` and `memory_vectors` of the agent (memory/ports.py's ChunkStore)."""

    def __init__(self, session: _Session, cache: PgEmbeddingCache):
        self.s, self.cache = session, cache
        self.dims_indexed: set[int] = set()  # dims whose HNSW index this store has seen to

    async def stored(self, paths: list[str]) -> dict[str, set[ChunkKey]]:
        """Through the pool: the sync's own connection is writing the previous batch meanwhile (other
        files; the agent's lock keeps other gateways' syncs out)."""
        stored: dict[str, set[ChunkKey]] = {}
        if paths:
            for path, a, b, h in await self.s.pool.fetch(
                "SELECT path, start_line, end_line, hash FROM memory_chunks WHERE agent_id = $1 "
                "AND path = ANY($2::text[])",
                self.s.agent_id,
                paths,
            ):
                stored.setdefault(path, set()).add((a, b, h))
        return stored

    async def write(self, paths: list[str], plan: Callable[[dict[str, dict[ChunkKey, int]]], WriteBatch]) -> None:
        agent = self.s.agent_id
        async with self.s.connection() as conn:
            async with conn.transaction():
                current: dict[str, dict[ChunkKey, int]] = {}
                if paths:
                    for path, cid, a, b, h in await conn.fetch(
                        "SELECT path, id, start_line, end_line, hash FROM memory_chunks WHERE agent_id = $1 "
                        "AND path = ANY($2::text[])",
                        agent,
                        paths,
                    ):
                        current.setdefault(path, {})[(a, b, h)] = cid
                batch = plan(current)
                n_new = len(batch.chunks)
                ids = [
                    r[0]
                    for r in (
                        await conn.fetch("SELECT nextval('memory_chunks_id_seq') FROM generate_series(1, $1)", n_new)
                        if n_new
                        else []
                    )
                ]
                inserts, vec_rows = [], []
                for cid, (sf, c, v) in zip(ids, batch.chunks):
                    inserts.append(
                        (
                            cid,
                            agent,
                            sf.path,
                            sf.source,
                            sf.session_key,
                            c.start_line,
                            c.end_line,
                            c.hash,
                            pg_text(c.text),
                            orjson.dumps(c.spans).decode() if c.spans else None,
                            pg_text(c.context),
                            v is not None,
                            c.date,
                        )
                    )
                    if v is not None:
                        vec_rows.append(VectorRow(cid, sf.source, sf.session_key, v))
                if batch.touched:
                    await conn.executemany(
                        "UPDATE memory_files SET size = $3, mtime_ns = $4 WHERE agent_id = $1 AND path = $2",
                        [(agent, sf.path, sf.size, sf.mtime_ns) for sf in batch.touched],
                    )
                if batch.stale:
                    await conn.execute("DELETE FROM memory_chunks WHERE id = ANY($1::bigint[])", batch.stale)
                if inserts:
                    await conn.executemany(
                        "INSERT INTO memory_chunks(id, agent_id, path, source, session_key, start_line, end_line, "
                        "hash, text, spans, context, embedded, date) "
                        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                        inserts,
                    )
                await self._insert_vectors(conn, vec_rows)
                if batch.files:
                    await conn.executemany(
                        "INSERT INTO memory_files(agent_id, path, source, session_key, size, mtime_ns, hash, chunks, "
                        "indexed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (agent_id, path) DO "
                        "UPDATE SET source = excluded.source, session_key = excluded.session_key, "
                        "size = excluded.size, mtime_ns = excluded.mtime_ns, hash = excluded.hash, "
                        "chunks = excluded.chunks, indexed_at = excluded.indexed_at",
                        [
                            (agent, sf.path, sf.source, sf.session_key, sf.size, sf.mtime_ns, h, n, batch.now)
                            for sf, h, n in batch.files
                        ],
                    )
                if batch.fresh:
                    await self.cache.put_many(batch.fresh, conn)
                if batch.stale or inserts or batch.files:
                    await bump_generation(conn, agent)

    async def ready_vectors(self, dims: int) -> None:
        """The HNSW index of `dims`-d vectors (the vector column holds any size: nothing to refuse)."""
        if dims not in self.dims_indexed:
            async with self.s.connection() as conn:
                await ensure_dims_index(conn, dims)
            self.dims_indexed.add(dims)

    async def _insert_vectors(self, conn: Any, rows: list[VectorRow]) -> None:
        if rows:
            await conn.executemany(
                "INSERT INTO memory_vectors(chunk_id, agent_id, source, session_key, dims, embedding) "
                "VALUES ($1, $2, $3, $4, $5, $6::text::vector) ON CONFLICT (chunk_id) DO NOTHING",
                [
                    (r.id, self.s.agent_id, r.source, r.session_key, int(r.vector.shape[0]), vector_text(r.vector))
                    for r in rows
                ],
            )

    async def unembedded(self, after: int, limit: int) -> list[Unembedded]:
        return [
            Unembedded(*r)
            for r in await self.s.db.fetch(
                "SELECT id, source, session_key, text FROM memory_chunks WHERE agent_id = $1 AND NOT embedded "
                "AND id > $2 ORDER BY id LIMIT $3",
                self.s.agent_id,
                after,
                limit,
            )
        ]

    async def add_vectors(self, rows: list[VectorRow]) -> int:
        async with self.s.connection() as conn:
            async with conn.transaction():
                await self._insert_vectors(conn, rows)
                await conn.execute(
                    "UPDATE memory_chunks SET embedded = true WHERE id = ANY($1::bigint[])", [r.id for r in rows]
                )
                if rows:
                    await bump_generation(conn, self.s.agent_id)
        return len(rows)

    async def count_unembedded(self) -> int:
        return int(
            await self.s.db.fetchval(
                "SELECT count(*) FROM memory_chunks WHERE agent_id = $1 AND NOT embedded", self.s.agent_id
            )
        )

    async def drop_unusable(self) -> int:
        """pgvector refuses NaN, so only zero vectors can be stored."""
        async with self.s.connection() as conn:
            await self.cache.purge_unusable(conn)
            async with conn.transaction():
                ids = [
                    r[0]
                    for r in await conn.fetch(
                        "DELETE FROM memory_vectors WHERE agent_id = $1 AND vector_norm(embedding) = 0 "
                        "RETURNING chunk_id",
                        self.s.agent_id,
                    )
                ]
                if ids:
                    await conn.execute("UPDATE memory_chunks SET embedded = false WHERE id = ANY($1::bigint[])", ids)
                    await bump_generation(conn, self.s.agent_id)
        return len(ids)


class PgIndexStore:
    """One agent's index in PostgreSQL as the pipeline writes it: FileRows, ChunkStore and the cache, and
    the sync's session (the agent's lock), the bulk load's deferred HNSW index, the upkeep after."""

    def __init__(self, pool: asyncpg.Pool, agent_id: str, provider: EmbeddingProvider, settings: IndexSettings):
        self.pool, self.agent_id = pool, agent_id
        self.dims = int(provider.dims or 0)
        self.embeds = provider.enabled and settings.vector_backend != "none"
        self.cache = PgEmbeddingCache(pool, provider.name, provider.model, settings.cache_max_entries, provider.cached)
        self._session = _Session(pool, agent_id)
        self.files = PgFileRows(self._session)
        self.chunks = PgChunks(self._session, self.cache)

    async def _locked(self) -> Any:
        """A pool connection holding the agent's sync lock (session-level; the pool's reset on release
        drops it should the holder be cancelled before unlocking)."""
        conn = await self.pool.acquire()
        try:
            await conn.execute("SELECT pg_advisory_lock($1)", agent_lock(self.agent_id))
        except BaseException:
            await self.pool.release(conn)
            raise
        return conn

    async def _unlock(self, conn: Any) -> None:
        try:
            await conn.execute("SELECT pg_advisory_unlock($1)", agent_lock(self.agent_id))
        finally:
            await self.pool.release(conn)

    @contextlib.asynccontextmanager
    async def syncing(self) -> AsyncIterator[None]:
        conn = await self._locked()
        self._session.conn = conn
        try:
            yield
        finally:
            self._session.conn = None
            await self._unlock(conn)

    @contextlib.asynccontextmanager
    async def loading(self, files: int) -> AsyncIterator[None]:
        """On a first large load (no vectors of the provider's dims stored yet, by any agent), their HNSW
        index is dropped and built after the load. Inserting into HNSW one vector at a time costs ~1.5 ms a
        vector on one core; building the index over the loaded rows costs a fraction of that and can use
        parallel workers. Searches in between are exact."""
        dims = self.dims
        deferred = False
        if files >= BULK_LOAD_FILES and self.embeds and 0 < dims <= HNSW_MAX_DIMS:
            async with self._session.connection() as conn:
                deferred = await drop_dims_index_for_load(conn, dims)
            if deferred:
                self.chunks.dims_indexed.add(dims)
        try:
            yield
        finally:
            if deferred:
                await self._build_deferred_index(dims)

    async def _build_deferred_index(self, dims: int) -> None:
        """The HNSW index dropped for a bulk load, built now: with more memory first, then (a server whose
        shared memory cannot take a parallel build of that size, as in a container's small /dev/shm)
        plainly. If that fails too, the next insert of such vectors, or the next open, tries again."""
        async with self._session.connection() as conn:
            for bulk in (True, False):
                try:
                    await ensure_dims_index(conn, dims, bulk=bulk)
                    return
                except Exception as exc:  # best effort, from a `finally`: never hide the sync's own outcome
                    log.warning("memory_vector_index_build_failed", dims=dims, bulk=bulk, error=str(exc))
        self.chunks.dims_indexed.discard(dims)

    async def finish(self, stats: SyncStats) -> None:
        async with self._session.connection() as conn:
            async with conn.transaction():
                await set_meta(conn, self.agent_id, "last_sync_at", now_iso())
                await self.cache.prune(conn)
            if stats.indexed + stats.removed >= MAINTAIN_AFTER_FILES:
                await self.maintain(conn)

    async def maintain(self, conn: Any) -> None:
        """After a large sync: fold the GIN index's pending list into the index and refresh the planner's
        statistics. Until autovacuum gets there, freshly inserted rows sit in the pending list, which the
        planner prices so high that it scans every chunk of the agent instead of using the index."""
        try:
            await conn.execute("SELECT gin_clean_pending_list('memory_chunks_fts'::regclass)")
            await conn.execute("ANALYZE memory_chunks")
            if self.embeds:
                await conn.execute("ANALYZE memory_vectors")
        except asyncpg.PostgresError as exc:  # not the tables' owner: autovacuum will do it
            log.info("memory_index_maintenance_skipped", error=str(exc))

    async def reset(self, signature: str) -> None:
        """Drop every row of the agent's index (a change of settings) and record the new signature."""
        conn = await self._locked()
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM memory_chunks WHERE agent_id = $1", self.agent_id)
                await conn.execute("DELETE FROM memory_files WHERE agent_id = $1", self.agent_id)
                await set_meta(conn, self.agent_id, "index_signature", signature)
                await bump_generation(conn, self.agent_id)
        finally:
            await self._unlock(conn)

    async def forget(self, paths: list[str], wait: bool = True) -> int | None:
        """Remove these files' chunks and rows now (for every gateway); returns how many files were known,
        or None (with `wait` False) when a sync of the agent holds its lock, on any gateway."""
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                if wait:
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", agent_lock(self.agent_id))
                elif not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", agent_lock(self.agent_id)):
                    return None
                return await _remove(conn, self.agent_id, paths)
