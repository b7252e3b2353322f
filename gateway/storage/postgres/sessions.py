"""Sessions in PostgreSQL (`storage.url`), shared by every gateway on the database.

The PostgreSQL engine's SessionStore (storage/base.py; the files engine's: storage/files/sessions.py). Metadata is a row of `sessions`; the transcript is
its JSONL lines as rows of `transcript_lines`, appended in one transaction with the counters, so a
line is acknowledged only once the database has it. Several gateways may append to one session: the
`sessions` row lock orders their lines.

Readers that take a file (the memory index, time recall, `memory.get sessions/…`, history pages,
compaction) read a local mirror, `<sessionsDir>/<key>.jsonl`, with exactly the lines of the rows: derived
data, brought up to date from the rows before it is read (`local_transcript`), when another gateway
says a session grew (a `lines` notification), and for every session when the store opens. A mirror
that disagrees with the rows is rewritten from them.
"""

from __future__ import annotations

import builtins

import asyncio
import contextlib
import os
import uuid
from pathlib import Path
from typing import Any, Sequence

import orjson
import structlog

from ...errors import Conflict, NotFound, SessionLimit
from ...fsutil import atomic_write, ensure_private_dir
from ...sessions import transcript as tx
from ...sessions.history import check_session_key, history_page, in_trash
from ...tasks import KeyedLocks
from ...timeutil import now_iso
from ..base import Imported, SessionCopy
from .sqlutil import lock_key, trash_filter
from .session_copies import PgSessionCopies
from .session_rows import COLUMNS, SETTING_COLUMNS, row_meta
from .instance import Postgres

log = structlog.get_logger("gateway.sessions")

# A session's row as it moves to the trash and back.
_MOVED = "agent_id, session_key, label, created_at, updated_at, message_count, line_count, model, system_prompt"


def _line(record: dict[str, Any]) -> str:
    return orjson.dumps(record).decode()


class PgSessionStore:
    """The PostgreSQL engine's SessionStore (storage/base.py)."""

    def __init__(self, pg: Postgres, sessions_dir: Path, agent_id: str = "main", max_sessions: int = 10_000):
        self.pg = pg
        self.dir = sessions_dir
        self.agent_id = agent_id
        self.max = max_sessions
        self._mirrored: dict[str, int] = {}  # key → lines in the local mirror
        self._mirror_locks = KeyedLocks()
        self._closed = False
        self.copies = PgSessionCopies(pg, agent_id)

    # ---- lifecycle -----------------------------------------------------------------------------
    async def open(self) -> None:
        await asyncio.to_thread(ensure_private_dir, self.dir)
        await self.refresh_mirrors()

    async def refresh_mirrors(self) -> None:
        """Bring every mirror up to date, and remove mirrors of sessions that no longer exist."""
        rows = await self.pg.pool.fetch(
            "SELECT session_key, line_count FROM sessions WHERE agent_id = $1", self.agent_id
        )
        live = {r["session_key"]: int(r["line_count"]) for r in rows}
        local = await asyncio.to_thread(lambda: [p.stem for p in self.dir.glob("*.jsonl")])
        for key in local:
            if key not in live:
                await self._drop_mirror(key)
        for key, total in live.items():
            await self._mirror(key, total)

    async def flush(self) -> None:
        """Nothing is pending: every change is written when it is made."""

    async def close(self) -> None:
        self._closed = True

    # ---- the local mirror ------------------------------------------------------------------------
    def transcript_path(self, key: str) -> Path:
        return self.dir / f"{check_session_key(key)}.jsonl"

    async def local_transcript(self, key: str) -> Path:
        await self._mirror(key)
        return self.transcript_path(key)

    async def _mirror(self, key: str, total: int | None = None) -> None:
        """Append to the mirror the rows it lacks (`total`: the session's line count, when known)."""
        async with self._mirror_locks.hold(key):
            path = self.transcript_path(key)
            have = self._mirrored.get(key)
            if have is None:
                have = await asyncio.to_thread(_count_lines, path)
            if total is None:
                total = await self.pg.pool.fetchval(
                    "SELECT line_count FROM sessions WHERE agent_id = $1 AND session_key = $2", self.agent_id, key
                )
            if total is None:
                return
            if have > total:  # not these rows' mirror (a session deleted and made again): rewrite it
                have = 0
            if have == total:
                self._mirrored[key] = have
                return
            rows = await self.pg.pool.fetch(
                "SELECT seq, line FROM transcript_lines WHERE agent_id = $1 AND session_key = $2 AND seq > $3 "
                "ORDER BY seq",
                self.agent_id,
                key,
                have,
            )
            lines = [r["line"] for r in rows]
            if [int(r["seq"]) for r in rows] != list(range(have + 1, have + 1 + len(lines))):
                log.warning("transcript rows have gaps", session=key)
            data = "".join(line + "\n" for line in lines).encode()
            await asyncio.to_thread(_write_mirror, path, data, append=have > 0)
            self._mirrored[key] = have + len(lines)

    async def _drop_mirror(self, key: str) -> None:
        async with self._mirror_locks.hold(key):
            self._mirrored.pop(key, None)
            with contextlib.suppress(FileNotFoundError):
                await asyncio.to_thread(os.unlink, self.transcript_path(key))

    async def grown(self, key: str) -> None:
        """Another gateway appended to `key` (a `lines` notification): update its mirror."""
        if not self._closed:
            await self._mirror(key)

    async def gone(self, key: str) -> None:
        """Another gateway deleted `key`."""
        await self._drop_mirror(key)

    # ---- whole sessions in and out (jarvis migrate): session_copies.py ------------------------------
    async def export(self, key: str) -> SessionCopy | None:
        return await self.copies.export(key)

    async def import_sessions(self, copies: Sequence[SessionCopy], dry_run: bool = False) -> list[Imported]:
        return await self.copies.import_sessions(copies, dry_run)

    # ---- the trash -------------------------------------------------------------------------------
    async def trash(self) -> builtins.list[dict[str, Any]]:
        rows = await self.pg.pool.fetch(
            f"SELECT {COLUMNS}, deleted_at FROM sessions_trash WHERE agent_id = $1 "
            "ORDER BY deleted_at DESC, session_key DESC",
            self.agent_id,
        )
        return [row_meta(r) | {"deletedAt": r["deleted_at"]} for r in rows]

    async def restore(self, key: str) -> dict[str, Any]:
        """The row and lines back from the trash in one transaction; other gateways mirror it (`lines`)."""
        async with self.pg.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(f"jarvis:sessions:{self.agent_id}"))
            if await conn.fetchval(
                "SELECT 1 FROM sessions WHERE agent_id = $1 AND session_key = $2", self.agent_id, key
            ):
                raise Conflict(f"session {key} is not in the trash: it exists", {"sessionKey": key})
            end = await conn.fetchval(
                "SELECT line_count FROM sessions_trash WHERE agent_id = $1 AND session_key = $2 FOR UPDATE",
                self.agent_id,
                key,
            )
            if end is None:
                raise NotFound(f"no session {key} in the trash", {"sessionKey": key})
            if await conn.fetchval("SELECT count(*) FROM sessions WHERE agent_id = $1", self.agent_id) >= self.max:
                raise SessionLimit(self.agent_id, self.max)
            row = await conn.fetchrow(
                f"INSERT INTO sessions({_MOVED}) SELECT {_MOVED} FROM sessions_trash WHERE agent_id = $1 AND "
                f"session_key = $2 RETURNING {COLUMNS}",
                self.agent_id,
                key,
            )
            await conn.execute(
                "INSERT INTO transcript_lines(agent_id, session_key, seq, line) SELECT agent_id, session_key, seq, "
                "line FROM transcript_trash WHERE agent_id = $1 AND session_key = $2",
                self.agent_id,
                key,
            )
            await conn.execute(
                "DELETE FROM sessions_trash WHERE agent_id = $1 AND session_key = $2", self.agent_id, key
            )
            await self.pg.notify("lines", conn, agent=self.agent_id, key=key, seq=int(end))
        await self._drop_mirror(key)  # whatever a file of that name held, the rows are the session
        await self._mirror(key)
        return row_meta(row)

    async def purge(self, keys: Sequence[str] | None = None, before: str | None = None) -> builtins.list[str]:
        async with self.pg.pool.acquire() as conn, conn.transaction():
            where, args = await trash_filter(
                conn,
                ("sessions_trash", "session_key", "deleted_at"),
                "agent_id = $1",
                self.agent_id,
                keys,
                before,
                lambda k: NotFound(f"no session {k} in the trash", {"sessionKey": k}),
            )
            gone = await conn.fetch(f"DELETE FROM sessions_trash WHERE {where} RETURNING session_key", *args)
        return sorted(r["session_key"] for r in gone)

    async def strays(self) -> list[str]:
        """None: the files here are mirrors of rows, rewritten from them."""
        return []

    # ---- queries -------------------------------------------------------------------------------
    async def all(self) -> dict[str, dict[str, Any]]:
        rows = await self.pg.pool.fetch(f"SELECT {COLUMNS} FROM sessions WHERE agent_id = $1", self.agent_id)
        return {r["session_key"]: row_meta(r) for r in rows}

    async def get(self, key: str) -> dict[str, Any]:
        row = await self.pg.pool.fetchrow(
            f"SELECT {COLUMNS} FROM sessions WHERE agent_id = $1 AND session_key = $2", self.agent_id, key
        )
        if row is None:
            raise NotFound(f"session not found: {key}", {"sessionKey": key})
        return row_meta(row)

    async def exists(self, key: str) -> bool:
        return bool(
            await self.pg.pool.fetchval(
                "SELECT 1 FROM sessions WHERE agent_id = $1 AND session_key = $2", self.agent_id, key
            )
        )

    async def list(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        async with self.pg.pool.acquire() as conn:
            rows = await conn.fetch(
                f"SELECT {COLUMNS} FROM sessions WHERE agent_id = $1 "
                f"ORDER BY updated_at DESC, session_key DESC LIMIT $2 OFFSET $3",
                self.agent_id,
                limit,
                offset,
            )
            total = await conn.fetchval("SELECT count(*) FROM sessions WHERE agent_id = $1", self.agent_id)
        return [row_meta(r) for r in rows], int(total)

    # ---- mutations -----------------------------------------------------------------------------
    async def create(
        self, label: str | None = None, key: str | None = None, settings: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        key = check_session_key(key) if key else str(uuid.uuid4())
        now = now_iso()
        header = _line(tx.header(key, self.agent_id, now))
        settings = settings or {}
        async with self.pg.pool.acquire() as conn, conn.transaction():
            # One creator of this agent's sessions at a time, on every gateway: the count is exact.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(f"jarvis:sessions:{self.agent_id}"))
            if await conn.fetchval("SELECT count(*) FROM sessions WHERE agent_id = $1", self.agent_id) >= self.max:
                if await conn.fetchval(
                    "SELECT 1 FROM sessions WHERE agent_id = $1 AND session_key = $2", self.agent_id, key
                ):
                    raise Conflict(f"session already exists: {key}", {"sessionKey": key})
                raise SessionLimit(self.agent_id, self.max)
            if await conn.fetchval(
                "SELECT 1 FROM sessions_trash WHERE agent_id = $1 AND session_key = $2", self.agent_id, key
            ):
                raise in_trash(key)
            row = await conn.fetchrow(
                f"INSERT INTO sessions(agent_id, session_key, label, created_at, updated_at, line_count, model, "
                f"system_prompt) VALUES ($1, $2, $3, $4, $4, 1, $5, $6) ON CONFLICT DO NOTHING RETURNING {COLUMNS}",
                self.agent_id,
                key,
                label,
                now,
                settings.get("model") or None,
                settings.get("systemPrompt") or None,
            )
            if row is None:
                raise Conflict(f"session already exists: {key}", {"sessionKey": key})
            await conn.execute(
                "INSERT INTO transcript_lines(agent_id, session_key, seq, line) VALUES ($1, $2, 1, $3)",
                self.agent_id,
                key,
                header,
            )
        await self._drop_mirror(key)  # a mirror left by an older session of that name
        await self._mirror(key)
        return row_meta(row)

    async def update(self, key: str, **changes: Any) -> dict[str, Any]:
        """Set the fields given (label, model, systemPrompt); a setting given as "" or None is reset."""
        columns = {"label": "label", **SETTING_COLUMNS}
        sets = [f"{columns[name]} = ${i}" for i, name in enumerate(changes, start=4)]
        values = [v if name == "label" else (v or None) for name, v in changes.items()]
        row = await self.pg.pool.fetchrow(
            f"UPDATE sessions SET {', '.join(['updated_at = $3', *sets])} WHERE agent_id = $1 AND session_key = $2 "
            f"RETURNING {COLUMNS}",
            self.agent_id,
            key,
            now_iso(),
            *values,
        )
        if row is None:
            raise NotFound(f"session not found: {key}", {"sessionKey": key})
        return row_meta(row)

    async def append_messages(self, key: str, *records: dict[str, Any]) -> None:
        """Append message records: acknowledged once the database has committed them."""
        updated = max((r["timestamp"] for r in records if isinstance(r.get("timestamp"), str)), default=now_iso())
        await self._append(key, records, messages=len(records), updated=updated)

    async def append_records(self, key: str, *records: dict[str, Any]) -> None:
        await self._append(key, records, messages=0, updated=None)

    async def _append(
        self, key: str, records: tuple[dict[str, Any], ...], *, messages: int, updated: str | None
    ) -> None:
        lines = [_line(r) for r in records]
        async with self.pg.pool.acquire() as conn, conn.transaction():
            end = await conn.fetchval(
                "UPDATE sessions SET line_count = line_count + $3, message_count = message_count + $4, "
                "updated_at = CASE WHEN $5::text IS NULL THEN updated_at ELSE greatest(updated_at, $5::text) END "
                "WHERE agent_id = $1 AND session_key = $2 RETURNING line_count",
                self.agent_id,
                key,
                len(lines),
                messages,
                updated,
            )
            if end is None:
                raise NotFound(f"session not found: {key}", {"sessionKey": key})
            start = int(end) - len(lines) + 1
            await conn.executemany(
                "INSERT INTO transcript_lines(agent_id, session_key, seq, line) VALUES ($1, $2, $3, $4)",
                [(self.agent_id, key, start + i, line) for i, line in enumerate(lines)],
            )
            await self.pg.notify("lines", conn, agent=self.agent_id, key=key, seq=int(end))
        await self._mirror(key)

    async def delete(self, key: str, trash: bool = True) -> None:
        async with self.pg.pool.acquire() as conn, conn.transaction():
            if trash:  # the row and its lines into the trash, in this transaction
                moved = await conn.fetchval(
                    f"INSERT INTO sessions_trash({_MOVED}, deleted_at) SELECT {_MOVED}, $3 FROM sessions WHERE "
                    "agent_id = $1 AND session_key = $2 RETURNING 1",
                    self.agent_id,
                    key,
                    now_iso(),
                )
                if moved:
                    await conn.execute(
                        "INSERT INTO transcript_trash(agent_id, session_key, seq, line) SELECT agent_id, session_key, "
                        "seq, line FROM transcript_lines WHERE agent_id = $1 AND session_key = $2",
                        self.agent_id,
                        key,
                    )
            gone = await conn.fetchval(
                "DELETE FROM sessions WHERE agent_id = $1 AND session_key = $2 RETURNING 1", self.agent_id, key
            )
            if gone is None:
                raise NotFound(f"session not found: {key}", {"sessionKey": key})
            await conn.execute("DELETE FROM idempotency WHERE agent_id = $1 AND session_key = $2", self.agent_id, key)
            await self.pg.notify("deleted", conn, agent=self.agent_id, key=key)
        await self._drop_mirror(key)

    async def history(self, key: str, limit: int, before: str | None, max_bytes: int = 2 << 20) -> dict[str, Any]:
        if not await self.exists(key):
            raise NotFound(f"session not found: {key}", {"sessionKey": key})
        path = await self.local_transcript(key)
        return await asyncio.to_thread(history_page, key, path, limit, before, max_bytes)


def _count_lines(path: Path) -> int:
    """Complete lines in a mirror (a torn last line is not counted: it is rewritten)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    if data and not data.endswith(b"\n"):
        return 0  # damaged: rewrite it whole
    return data.count(b"\n")


def _write_mirror(path: Path, data: bytes, append: bool) -> None:
    if append:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as fh:
            fh.write(data)
    else:
        atomic_write(path, data)
