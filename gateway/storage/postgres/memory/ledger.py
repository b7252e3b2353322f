"""The ledger of statements about the person in PostgreSQL (memory/ports.py's LedgerStore): the
`memory_ledger` table (migration 0011), keyed by agent like the rest of the index."""

from __future__ import annotations

from typing import Any, Sequence

from ....memory.ports import Statement
from .agent import SyncSession, pg_text

_COLUMNS = "subject, value, said, path, start_line, end_line, text, source, ending"


class PgLedger:
    def __init__(self, session: SyncSession):
        self._session = session

    async def replace(self, paths: list[str], statements: list[Statement]) -> None:
        agent = self._session.agent_id
        async with self._session.connection() as conn:
            async with conn.transaction():
                # A join, not `path = ANY($2)`: once the statement's plan is the generic one (asyncpg
                # prepares it, the sixth call on) the array is a parameter, and a scan of the table
                # tests each row against every path in turn (22 ms a batch of 512 files at 8,000 rows,
                # growing with both: 2 s of a 118k-chunk first sync). Same rows deleted.
                await conn.execute(
                    "DELETE FROM memory_ledger l USING unnest($2::text[]) AS u(path) "
                    "WHERE l.agent_id = $1 AND l.path = u.path",
                    agent,
                    paths,
                )
                if statements:
                    await conn.executemany(
                        f"INSERT INTO memory_ledger(agent_id, {_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                        [
                            (agent, *(pg_text(x) if isinstance(x, str) else x for x in s[:8]), bool(s.ending))
                            for s in statements
                        ],
                    )

    async def statements(self, subjects: Sequence[str] | None = None) -> list[Statement]:
        return await read_statements(self._session.db, self._session.agent_id, subjects)


async def read_statements(db: Any, agent_id: str, subjects: Sequence[str] | None) -> list[Statement]:
    """The statements of files the index holds (of these subjects or their families), oldest first."""
    if subjects is not None and not subjects:
        return []
    cond = (
        ""
        if subjects is None
        else " AND (l.subject = ANY($2::text[]) OR split_part(l.subject, ':', 1) = ANY($2::text[]))"
    )
    args: list[Any] = [agent_id] + ([] if subjects is None else [list(subjects)])
    rows = await db.fetch(
        f"SELECT {', '.join('l.' + c.strip() for c in _COLUMNS.split(','))} FROM memory_ledger l "
        "WHERE l.agent_id = $1 AND EXISTS (SELECT 1 FROM memory_files f WHERE f.agent_id = l.agent_id "
        f"AND f.path = l.path){cond} ORDER BY l.said, l.path, l.start_line",
        *args,
    )
    return [Statement(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), r[6], r[7], bool(r[8])) for r in rows]
