"""Whole sessions of one agent in and out of PostgreSQL (`jarvis migrate`, storage/migrate.py, through
the SessionStore's `export` and `import_sessions`): a session's row and its lines as of one moment, live
or in the trash; and copies written each in its own transaction, a key taken meanwhile left as it is.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Sequence

import asyncpg

from ..base import ADDED, PRESENT, REFUSED, Imported, SessionCopy
from .session_rows import COLUMNS, row_meta, text_problem

if TYPE_CHECKING:  # pragma: no cover
    from .instance import Postgres


class PgSessionCopies:
    def __init__(self, pg: "Postgres", agent_id: str):
        self.pg = pg
        self.agent_id = agent_id

    async def export(self, key: str) -> SessionCopy | None:
        """The row and its lines as of one moment (one statement: gateways may be appending meanwhile);
        else the same of the trash."""
        row = await self.pg.pool.fetchrow(
            f"SELECT {COLUMNS}, line_count, NULL AS deleted_at, ARRAY(SELECT seq FROM transcript_lines t WHERE "
            f"t.agent_id = $1 AND t.session_key = $2 ORDER BY seq) AS seqs, ARRAY(SELECT line FROM transcript_lines t "
            f"WHERE t.agent_id = $1 AND t.session_key = $2 ORDER BY seq) AS lines FROM sessions WHERE agent_id = $1 "
            f"AND session_key = $2",
            self.agent_id,
            key,
        )
        if row is None:
            with contextlib.suppress(asyncpg.UndefinedTableError):  # a schema from before the trash: none
                row = await self.pg.pool.fetchrow(
                    f"SELECT {COLUMNS}, line_count, deleted_at, ARRAY(SELECT seq FROM transcript_trash t WHERE "
                    f"t.agent_id = $1 AND t.session_key = $2 ORDER BY seq) AS seqs, ARRAY(SELECT line FROM "
                    f"transcript_trash t WHERE t.agent_id = $1 AND t.session_key = $2 ORDER BY seq) AS lines FROM "
                    f"sessions_trash WHERE agent_id = $1 AND session_key = $2",
                    self.agent_id,
                    key,
                )
        if row is None:
            return None
        lines = tuple(line.encode() for line in row["lines"])
        problem = ""
        if list(row["seqs"]) != list(range(1, len(lines) + 1)):
            problem = "its transcript rows have gaps in seq"
        elif len(lines) != int(row["line_count"]):
            problem = f"line_count is {row['line_count']} but it has {len(lines)} transcript rows"
        elif any(b"\n" in line for line in lines):
            problem = "a transcript row holds a newline, so it is not one JSONL line"
        return SessionCopy(row_meta(row), lines, 0, problem, row["deleted_at"])

    async def import_sessions(self, copies: Sequence[SessionCopy], dry_run: bool = False) -> list[Imported]:
        """Each session and its lines in one transaction; a key taken meanwhile is left as it is."""
        out = []
        async with self.pg.pool.acquire() as conn:  # one for the batch: a pool's reset per session costs
            for copy in copies:
                meta = copy.meta
                problem = text_problem(copy.lines)
                if problem:
                    out.append(Imported(REFUSED, problem))
                elif dry_run:
                    out.append(Imported(PRESENT if await self._exists_yet(conn, meta["sessionKey"]) else ADDED))
                else:
                    out.append(
                        Imported(ADDED)
                        if await self._insert(conn, copy)
                        else Imported(PRESENT, "created in the database meanwhile")
                    )
        return out

    async def _exists_yet(self, conn: asyncpg.Connection, key: str) -> bool:
        """Whether the session exists, live or in the trash, in a database whose schema may not be made
        yet (a dry run's)."""
        try:
            return bool(
                await conn.fetchval(
                    "SELECT 1 FROM sessions WHERE agent_id = $1 AND session_key = $2 UNION ALL "
                    "SELECT 1 FROM sessions_trash WHERE agent_id = $1 AND session_key = $2",
                    self.agent_id,
                    key,
                )
            )
        except asyncpg.UndefinedTableError:
            return False

    async def _insert(self, conn: asyncpg.Connection, copy: SessionCopy) -> bool:
        meta, key = copy.meta, copy.meta["sessionKey"]
        table, lines = ("sessions_trash", "transcript_trash") if copy.deleted else ("sessions", "transcript_lines")
        async with conn.transaction():
            if await self._taken(conn, key):
                return False
            made = await conn.fetchval(
                f"INSERT INTO {table}(agent_id, session_key, label, created_at, updated_at, message_count, "
                f"line_count, model, system_prompt{', deleted_at' if copy.deleted else ''}) VALUES ($1, $2, $3, $4, "
                f"$5, $6, $7, $8, $9{', $10' if copy.deleted else ''}) ON CONFLICT DO NOTHING RETURNING 1",
                self.agent_id,
                key,
                meta["label"],
                meta["createdAt"],
                meta["updatedAt"],
                meta["messageCount"],
                len(copy.lines),
                meta.get("model"),
                meta.get("systemPrompt"),
                *((copy.deleted,) if copy.deleted else ()),
            )
            if not made:
                return False
            if copy.lines:
                await conn.copy_records_to_table(
                    lines,
                    columns=["agent_id", "session_key", "seq", "line"],
                    records=((self.agent_id, key, n, line.decode()) for n, line in enumerate(copy.lines, 1)),
                )
        return True

    async def _taken(self, conn: asyncpg.Connection, key: str) -> bool:
        """The key is someone's, live or in the trash (to be called in the transaction that would take it)."""
        return bool(
            await conn.fetchval(
                "SELECT 1 FROM sessions WHERE agent_id = $1 AND session_key = $2 UNION ALL "
                "SELECT 1 FROM sessions_trash WHERE agent_id = $1 AND session_key = $2",
                self.agent_id,
                key,
            )
        )
