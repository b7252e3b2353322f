"""The ledger of statements about the person in the SQLite index (memory/ports.py's LedgerStore): the
`ledger` table, a file's statements written anew whenever a sync indexes it, read back by subject."""

from __future__ import annotations

from typing import Any, Sequence

from ....memory.ports import Statement
from .db import Database

_COLUMNS = "subject, value, said, path, start_line, end_line, text, source, ending"
# The subject's family: "code" for "code:shed" (what a lookup by subject matches).
_FAMILY = "CASE instr(l.subject, ':') WHEN 0 THEN l.subject ELSE substr(l.subject, 1, instr(l.subject, ':') - 1) END"


class SqliteLedger:
    def __init__(self, db: Database):
        self.db = db

    async def replace(self, paths: list[str], statements: list[Statement]) -> None:
        async with self.db.transaction():
            for i in range(0, len(paths), 500):
                part = paths[i : i + 500]
                await self.db.execute(f"DELETE FROM ledger WHERE path IN ({','.join('?' * len(part))})", part)
            if statements:  # as one JSON array, not executemany (db.insert_rows: a GIL trip per row, issue 46)
                await self.db.insert_rows(
                    f"INSERT INTO ledger({_COLUMNS})", [(*s[:8], 1 if s.ending else 0) for s in statements]
                )

    async def statements(self, subjects: Sequence[str] | None = None) -> list[Statement]:
        return await read_statements(self.db, subjects)


async def read_statements(db: Database, subjects: Sequence[str] | None) -> list[Statement]:
    """The statements of files the index holds (of these subjects or their families), oldest first."""
    where = "EXISTS (SELECT 1 FROM files f WHERE f.path = l.path)"
    args: list[Any] = []
    if subjects is not None:
        if not subjects:
            return []
        marks = ",".join("?" * len(subjects))
        where += f" AND (l.subject IN ({marks}) OR {_FAMILY} IN ({marks}))"
        args = [*subjects, *subjects]
    rows = await db.fetchall(
        f"SELECT {', '.join('l.' + c.strip() for c in _COLUMNS.split(','))} FROM ledger l WHERE {where} "
        "ORDER BY l.said, l.path, l.start_line",
        args,
    )
    return [Statement(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), r[6], r[7], bool(r[8])) for r in rows]
