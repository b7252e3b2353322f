"""What every part of an agent's PostgreSQL index shares: the agent's lock and the sync's connection that
holds it, its meta rows (the index signature, its generation, the last sync), the removal of files,
PostgreSQL's rule for text, the search filter."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

import asyncpg

from ..db import lock_key


def agent_lock(agent_id: str) -> int:
    """The advisory lock a sync of the agent holds for its whole run, on any gateway."""
    return lock_key(f"jarvis:memory:{agent_id}")


async def get_meta(db: Any, agent_id: str, key: str, default: str | None = None) -> str | None:
    v = await db.fetchval("SELECT value FROM memory_meta WHERE agent_id = $1 AND key = $2", agent_id, key)
    return default if v is None else v


async def set_meta(db: Any, agent_id: str, key: str, value: str) -> None:
    await db.execute(
        "INSERT INTO memory_meta(agent_id, key, value) VALUES ($1, $2, $3) "
        "ON CONFLICT (agent_id, key) DO UPDATE SET value = excluded.value",
        agent_id,
        key,
        value,
    )


async def bump_generation(db: Any, agent_id: str) -> None:
    """A new generation of the agent's index (with the rows it counts: a reader that sees the new rows
    sees the new generation), which every gateway's counts and searches follow."""
    await db.execute(
        "INSERT INTO memory_meta(agent_id, key, value) VALUES ($1, 'generation', '1') "
        "ON CONFLICT (agent_id, key) DO UPDATE SET value = (memory_meta.value::bigint + 1)::text",
        agent_id,
    )


def pg_text(text: str) -> str:
    """`text` as PostgreSQL's `text` can hold it: a NUL character (a file or message may hold one) becomes
    U+FFFD, one character for one, so the spans that index into the text stay right."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def search_filter(
    where: list[str], params: list[Any], sources: tuple[str, ...], session_key: str | None, table: str
) -> None:
    """Add the source and session conditions of a search (`table`: the column prefix, e.g. "c.")."""
    if len(sources) == 1:
        params.append(sources[0])
        where.append(f"{table}source = ${len(params)}")
    if session_key is not None:
        params.append(session_key)
        where.append(f"({table}source = 'memory' OR {table}session_key = ${len(params)})")


class SyncSession:
    """The connection a sync holds the agent's lock on; between syncs, the pool answers."""

    def __init__(self, pool: asyncpg.Pool, agent_id: str):
        self.pool, self.agent_id = pool, agent_id
        self.conn: Any = None
        self.deleted: list[int] = []  # chunk ids this gateway deleted (committed), for its FTS5 mirror to drop

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


async def remove_files(conn: Any, agent_id: str, paths: list[str], gone: list[int] | None = None) -> int:
    """Drop these files' chunks (their vectors by cascade; their ids added to `gone`) and rows; how many
    files were indexed."""
    ids = await conn.fetch(
        "DELETE FROM memory_chunks WHERE agent_id = $1 AND path = ANY($2::text[]) RETURNING id", agent_id, paths
    )
    if gone is not None:
        gone.extend(int(r[0]) for r in ids)
    await conn.execute("DELETE FROM memory_ledger WHERE agent_id = $1 AND path = ANY($2::text[])", agent_id, paths)
    r = await conn.execute("DELETE FROM memory_files WHERE agent_id = $1 AND path = ANY($2::text[])", agent_id, paths)
    n = int(r.split()[-1])
    if n:
        await bump_generation(conn, agent_id)
    return n
