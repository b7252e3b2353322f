"""The full-text (GIN) index of `memory_chunks` over a first bulk load: dropped before it, built after.

Inserting a chunk into the GIN index of its tsvector (through the pending list and its merges) cost about
a third of the server's work a chunk; building the index once over the loaded rows, with memory to sort
in, costs a fraction of that. Only into a table with no chunks at all (of any agent, through any
gateway): the index serves every agent, and searches without it scan the table. A gateway that dies
during the load leaves the index missing: `ensure_fulltext_index` at every index's open builds it.

A loader holds the bulk-load lock (`LOAD_LOCK`, session-level, on the sync's connection) from the drop of
an index until its build is done, and builds the full-text index under it alone: not under the schema
lock, which a new vector size waits on (the build takes minutes at a million chunks, past the pool's
command timeout). An index's open only tries both locks: when another holds one (a load running, a build,
a schema change), the open goes on without the index (searches scan until the holder builds it) rather
than wait, and never builds an index itself, a plain CREATE INDEX, while a bulk load copies rows in.
"""

from __future__ import annotations

from typing import Any

from ..db import lock_key

FTS_INDEX = "memory_chunks_fts"  # made by migration 0003_memory (db.py)
BUILD_TIMEOUT_S = 6 * 3600.0  # minutes at a million chunks: past the pool's command timeout
BUILD_MEMORY = "1GB"  # maintenance_work_mem for the build (the sort of a million chunks' lexemes)
LOAD_LOCK = "jarvis:memory-bulk-load"
SCHEMA_LOCK = "jarvis:memory-schema"


async def take_load_lock(conn: Any) -> bool:
    """The bulk-load lock for `conn`'s session, if no other gateway's load holds it."""
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(LOAD_LOCK)))


async def release_load_lock(conn: Any) -> None:
    await conn.execute("SELECT pg_advisory_unlock($1)", lock_key(LOAD_LOCK))


async def try_schema_locks(conn: Any) -> bool:
    """In `conn`'s transaction, for an index's open: the load and schema locks if both are free, else
    False (nothing waited for)."""
    for key in (LOAD_LOCK, SCHEMA_LOCK):
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock_key(key)):
            return False
    return True


async def _missing(conn: Any) -> bool:
    return not await conn.fetchval(f"SELECT to_regclass('{FTS_INDEX}') IS NOT NULL")


async def drop_fulltext_index_for_load(conn: Any) -> bool:
    """Before a first bulk load, by the holder of the load lock: drop the index if the table holds no
    chunk; True when dropped."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(SCHEMA_LOCK))
        if await conn.fetchval("SELECT 1 FROM memory_chunks LIMIT 1"):
            return False
        await conn.execute(f"DROP INDEX IF EXISTS {FTS_INDEX}")
    return True


async def build_fulltext_index_after_load(conn: Any) -> None:
    """The index dropped for a load, built over the loaded rows with memory to sort in, by the holder of
    the load lock (which keeps every other gateway from building or dropping it meanwhile)."""
    if await _missing(conn):
        async with conn.transaction():
            await conn.execute(f"SET LOCAL maintenance_work_mem = '{BUILD_MEMORY}'")
            await conn.execute(
                f"CREATE INDEX IF NOT EXISTS {FTS_INDEX} ON memory_chunks USING gin (tsv)", timeout=BUILD_TIMEOUT_S
            )


async def ensure_fulltext_index(conn: Any) -> bool:
    """At an index's open: the index, made if missing (a gateway died during its load) when no one holds
    the load or schema lock; False when it is missing still (another is loading or building)."""
    if not await _missing(conn):
        return True
    async with conn.transaction():
        if not await try_schema_locks(conn):
            return False
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS {FTS_INDEX} ON memory_chunks USING gin (tsv)", timeout=BUILD_TIMEOUT_S
        )
    return True
