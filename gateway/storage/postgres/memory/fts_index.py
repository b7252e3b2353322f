"""The full-text (GIN) index of `memory_chunks` over a first bulk load: dropped before it, built after.

Inserting a chunk into the GIN index of its tsvector (through the pending list and its merges) cost about
a third of the server's work a chunk; building the index once over the loaded rows, with memory to sort
in, costs a fraction of that. Only into a table with no chunks at all (of any agent, through any
gateway): the index serves every agent, and searches without it scan the table. A gateway that dies
during the load leaves the index missing: `ensure_fulltext_index` at every index's open builds it.
"""

from __future__ import annotations

from typing import Any

from ..db import lock_key

FTS_INDEX = "memory_chunks_fts"  # made by migration 0003_memory (db.py)
BUILD_TIMEOUT_S = 6 * 3600.0  # minutes at a million chunks: past the pool's command timeout
BUILD_MEMORY = "1GB"  # maintenance_work_mem for the build (the sort of a million chunks' lexemes)


async def drop_fulltext_index_for_load(conn: Any) -> bool:
    """Before a first bulk load: drop the index if the table holds no chunk; True when dropped."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
        if await conn.fetchval("SELECT 1 FROM memory_chunks LIMIT 1"):
            return False
        await conn.execute(f"DROP INDEX IF EXISTS {FTS_INDEX}")
    return True


async def ensure_fulltext_index(conn: Any, bulk: bool = False) -> None:
    """The index, made if missing (`bulk`: with more memory for the build)."""
    if await conn.fetchval(f"SELECT to_regclass('{FTS_INDEX}') IS NOT NULL"):
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
        if bulk:
            await conn.execute(f"SET LOCAL maintenance_work_mem = '{BUILD_MEMORY}'")
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS {FTS_INDEX} ON memory_chunks USING gin (tsv)", timeout=BUILD_TIMEOUT_S
        )
