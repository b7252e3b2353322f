"""An agent's PostgreSQL index as the memory pipeline writes it (memory/ports.py's IndexStore).

Tables (migrations 0003 and on, and VECTOR_MIGRATIONS, in gateway/storage/postgres/db.py; all keyed by
`agent_id`):

    memory_files            (agent_id, path) → source, session_key, size, mtime_ns, hash, chunks
    memory_chunks           id → agent_id, path, lines, hash, text, spans, context, embedded, date,
                            tsv (generated: the text at weight A, the context at weight D; GIN index)
    memory_meta             (agent_id, key) → value: index_signature, generation, last_sync_at
    memory_embedding_cache  (provider, model, hash) → dims, float32 bytes
    memory_vectors          chunk_id → agent_id, source, session_key, dims, embedding (pgvector `vector`;
                            no vector index: the gateway searches them in memory, vector_search.py)

A sync holds a session-level advisory lock on the agent's key for its whole run (`syncing`), so two
gateways syncing one agent take turns and the second finds the work done (hashes unchanged); its reads
and writes go through that connection, while the next batch's lookups go through the pool. Every write
that changes rows moves the agent's `generation` in the same transaction: each gateway follows it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, AsyncIterator

import asyncpg
import structlog

from ....memory.embeddings import EmbeddingProvider
from ....memory.index.settings import IndexSettings, SyncStats
from ....timeutil import now_iso
from .agent import SyncSession, agent_lock, bump_generation, remove_files, set_meta
from .cache import PgEmbeddingCache
from .chunks import PgChunks
from .files import PgFileRows
from .fts_index import (
    build_fulltext_index_after_load,
    drop_fulltext_index_for_load,
    release_load_lock,
    take_load_lock,
)
from .ledger import PgLedger

log = structlog.get_logger("gateway.memory")

MAINTAIN_AFTER_FILES = 200  # a sync that changed this many files cleans up after itself (maintain)
BULK_LOAD_FILES = 1024  # a first sync of this many files builds the full-text index after loading (loading)


class PgIndexStore:
    """One agent's index in PostgreSQL as the pipeline writes it: FileRows, ChunkStore and the cache, and
    the sync's session (the agent's lock), the bulk load's deferred full-text index, the upkeep after."""

    def __init__(self, pool: asyncpg.Pool, agent_id: str, provider: EmbeddingProvider, settings: IndexSettings):
        self.pool, self.agent_id = pool, agent_id
        self.dims = int(provider.dims or 0)
        self.embeds = provider.enabled and settings.vector_backend != "none"
        self.cache = PgEmbeddingCache(pool, provider.name, provider.model, settings.cache_max_entries, provider.cached)
        self._session = SyncSession(pool, agent_id)
        self.files = PgFileRows(self._session)
        self.chunks = PgChunks(self._session, self.cache)
        self.ledger = PgLedger(self._session)

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
        """On a first large load into an empty chunk table, its full-text index is dropped and built after
        the load (fts_index.py); searches in between scan. (The vectors have no index to defer.)"""
        fts_deferred = False
        async with self._session.connection() as conn:  # the sync's: it holds the load lock (fts_index.py)
            loading = files >= BULK_LOAD_FILES and await take_load_lock(conn)  # else another gateway's load
            try:
                if loading:
                    fts_deferred = await drop_fulltext_index_for_load(conn)
                try:
                    yield
                finally:
                    if fts_deferred:
                        await self._build_deferred_fulltext(conn)
            finally:
                if loading:
                    try:
                        await release_load_lock(conn)
                    except Exception as exc:  # the pool's reset on release drops it; the sync's outcome stands
                        log.warning("memory_load_lock_release_failed", error=str(exc))

    async def _build_deferred_fulltext(self, conn: Any) -> None:
        """The GIN index dropped for a bulk load, built now (best effort, from a `finally`: if it fails,
        the next open of an agent's index builds it)."""
        try:
            t = time.perf_counter()
            await build_fulltext_index_after_load(conn)
            log.info("memory_bulk_index_built", index="fulltext", seconds=round(time.perf_counter() - t, 2))
        except Exception as exc:
            log.warning("memory_fulltext_index_build_failed", error=str(exc))

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
                await conn.execute("DELETE FROM memory_ledger WHERE agent_id = $1", self.agent_id)
                await set_meta(conn, self.agent_id, "index_signature", signature)
                await bump_generation(conn, self.agent_id)
        finally:
            await self._unlock(conn)

    async def forget(self, paths: list[str], wait: bool = True) -> int | None:
        """Remove these files' chunks and rows now (for every gateway); returns how many files were known,
        or None (with `wait` False) when a sync of the agent holds its lock, on any gateway."""
        gone: list[int] = []
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                if wait:
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", agent_lock(self.agent_id))
                elif not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", agent_lock(self.agent_id)):
                    return None
                n = await remove_files(conn, self.agent_id, paths, gone)
        self._session.deleted.extend(gone)  # committed
        return n

    def deleted(self) -> list[int]:
        """The chunk ids this gateway deleted since the last call (committed): its FTS5 mirror drops them."""
        ids, self._session.deleted = self._session.deleted, []
        return ids
