"""The files engine's ResponseStore (storage/base.py): the /v1/responses responses kept, in one SQLite file
of the state dir (`<stateDir>/responses.sqlite`, 0600), so that they outlive a restart.

    responses(seq INTEGER PRIMARY KEY, id UNIQUE, agent, principal, at (Unix seconds), size, body (JSON))

Work runs in a thread, one statement batch at a time under a lock (the loop never blocks). A put evicts
the principal's oldest past the count and the bytes, and purges every expired row.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from ...fsutil import FILE_MODE, ensure_private_dir
from ..base import ResponseLimits

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL,
    principal TEXT NOT NULL,
    at REAL NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_by_principal ON responses (principal, seq);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (at);
"""

# The rows past the principal's limits, newest first: the n-th and the bytes of it and all newer.
EVICT = (
    "DELETE FROM responses WHERE seq IN (SELECT seq FROM (SELECT seq, row_number() OVER w AS n, "
    "sum(size) OVER w AS total FROM responses WHERE principal = ? WINDOW w AS (ORDER BY seq DESC)) "
    "WHERE n > ? OR total > ?)"
)


class FileResponseStore:
    def __init__(self, path: Path, limits: ResponseLimits):
        self.path = path
        self.limits = limits
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            ensure_private_dir(self.path.parent)
            if not self.path.exists():
                self.path.touch(mode=FILE_MODE)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    async def _run(self, fn: Any, *args: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return fn(self._conn(), *args)

        return await asyncio.to_thread(locked)

    async def put(self, agent_id: str, principal: str, response_id: str, record: dict[str, Any]) -> bool:
        body = orjson.dumps(record, default=str)
        limits = self.limits
        if limits.count <= 0 or len(body) > limits.bytes:
            return False

        def run(db: sqlite3.Connection) -> None:
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
                db.execute(
                    "INSERT INTO responses (id, agent, principal, at, size, body) VALUES (?, ?, ?, ?, ?, ?)",
                    (response_id, agent_id, principal, now, len(body), body),
                )
                db.execute(EVICT, (principal, limits.count, limits.bytes))
                db.execute("DELETE FROM responses WHERE at < ?", (now - limits.keep_s,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

        await self._run(run)
        return True

    async def get(self, agent_id: str, principal: str, response_id: str) -> dict[str, Any] | None:
        def run(db: sqlite3.Connection) -> Any:
            return db.execute(
                "SELECT body FROM responses WHERE id = ? AND agent = ? AND principal = ? AND at >= ?",
                (response_id, agent_id, principal, time.time() - self.limits.keep_s),
            ).fetchone()

        row = await self._run(run)
        return orjson.loads(row[0]) if row is not None else None

    async def purge(self) -> int:
        def run(db: sqlite3.Connection) -> int:
            return db.execute("DELETE FROM responses WHERE at < ?", (time.time() - self.limits.keep_s,)).rowcount

        return int(await self._run(run))

    async def count_by_principal(self) -> dict[str, int]:
        def run(db: sqlite3.Connection) -> list[Any]:
            return db.execute(
                "SELECT principal, count(*) FROM responses WHERE at >= ? GROUP BY principal",
                (time.time() - self.limits.keep_s,),
            ).fetchall()

        return {str(p): int(n) for p, n in await self._run(run)}

    async def close(self) -> None:
        def run() -> None:
            with self._lock:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        await asyncio.to_thread(run)
