"""Keyed memories in PostgreSQL (`storage.url`): rows are the record, shared by every gateway; each
gateway keeps the workspace files of keyed.py as a mirror, so the memory index, `memory.get` of a path
and a person with an editor see them as before.

    keyed_memories  (agent_id, key) → category, value, created, updated, deleted (a tombstone: a gateway
                    that was down during a delete must remove its mirror, not bring the file back),
                    version (counted up by every write), trashed_at and trashed_by (a tombstone in the
                    trash keeps its value; a purge empties it and leaves the tombstone)
    keyed_versions  (agent_id, key, version) → what each write made it (memory.history): value,
                    category, at, by_door; the newest is the row's value (a row from before versions
                    were kept has none: its value counts as version 1 until the next write stores it)

The mirror files and their reconciling are mirror.py's (KeyedMirror); this module keeps the rows.

Writes go to the row first (the answer waits for it), then to this gateway's mirror, then a `keyed`
notification makes the other gateways bring their mirrors up to date (cluster.py). Every sync of the
memory files first reconciles rows and mirrors (`reconcile`), by the front matter's `version`: the
version of the row a mirror was written from — not by clocks, which differ between machines:

    file, no row                 → the file becomes a row (a new file, or a state dir moved to PostgreSQL)
    row, no file                 → the file is written
    both, same category and text → nothing (the file is re-stamped if it names another version)
    file edited by hand          → (its `version` is the row's, its text is not) the row takes the file's text
    any other file that differs  → (an older version's mirror, or a file made by hand for a key that has
                                   a row) the file is rewritten from the row
    tombstone and a file         → removed, unless the file was made by hand after the delete (no front
                                   matter, and its mtime later than the delete: the one clock comparison)

A file becomes a row only over the row as it was read (a write in between, through any gateway, wins)
and only if memory.set would take its text; one that would not is skipped and logged. A gateway's own
writes and reconciles take turns.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import asyncpg
import structlog

from ...errors import Conflict, NotFound
from ...timeutil import now_iso
from ..base import ADDED, PRESENT, REFUSED, Imported
from ...memory.notes.keyed import (
    _KEY,
    CATEGORIES,
    DEFAULT_CATEGORY,
    Entry,
    KeyedCopy,
    Version,
    VersionLimits,
    check_category,
    check_entry,
    check_key,
    kept,
    next_version,
)

from .sqlutil import trash_filter
from .mirror import COLUMNS, KeyedMirror, importable

if TYPE_CHECKING:  # pragma: no cover
    from .instance import Postgres

log = structlog.get_logger("gateway.memory")

_VERSION_COLUMNS = "key, version, value, category, at, by_door, principal"


class PgKeyedStore:
    """The PostgreSQL engine's KeyedStore (storage/base.py): the `keyed_memories` rows of one agent."""

    def __init__(self, pg: "Postgres", agent_id: str, workspace: Path, limits: VersionLimits | None = None):
        self.pg = pg
        self.agent_id = agent_id
        self.workspace = workspace
        self.mirror = KeyedMirror(pg, agent_id, workspace, self._write_version, self._tell_others)
        self.files = self.mirror.files
        self.limits = limits or VersionLimits()
        # This gateway's writes and reconciles of the agent's keyed memories take turns, so a reconcile
        # never mirrors a row that a delete of this gateway has just removed, nor the other way round.
        self._lock = asyncio.Lock()

    async def find(self, key: str) -> Entry | None:
        row = await self.pg.pool.fetchrow(
            f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1 AND key = $2 AND NOT deleted",
            self.agent_id,
            check_key(key),
        )
        return self.mirror.entry(row) if row is not None else None

    async def get(self, key: str) -> Entry:
        e = await self.find(key)
        if e is None:
            raise NotFound(f"no memory with key {key!r}", {"key": key})
        return e

    async def set(
        self, key: str, value: str, category: str | None, by: str = "", principal: str | None = None
    ) -> tuple[Entry, bool, str | None]:
        """Create or replace. Returns (entry, replaced, previous category when it moved)."""
        value = check_entry(key, value, category)
        async with self._lock:
            return await self._set(key, value, category, by, principal)

    async def _set(
        self, key: str, value: str, category: str | None, by: str, principal: str | None
    ) -> tuple[Entry, bool, str | None]:
        now = now_iso()
        async with self.pg.pool.acquire() as conn, conn.transaction():
            seen = await conn.fetchrow(
                f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1 AND key = $2 FOR UPDATE",
                self.agent_id,
                key,
            )
            old = seen if seen is not None and not seen["deleted"] else None
            cat = category or (old["category"] if old and old["category"] in CATEGORIES else DEFAULT_CATEGORY)
            created = old["created"] if old else now
            row = await conn.fetchrow(
                "INSERT INTO keyed_memories(agent_id, key, category, value, created, updated, deleted) "
                "VALUES ($1, $2, $3, $4, $5, $6, false) ON CONFLICT (agent_id, key) DO UPDATE SET "
                "category = $3, value = $4, created = $5, updated = $6, deleted = false, "
                "version = keyed_memories.version + 1, trashed_at = NULL, trashed_by = '' "
                f"RETURNING {COLUMNS}",
                self.agent_id,
                key,
                cat,
                value,
                created,
                now,
            )
            await self._write_version(conn, key, seen, value, cat, now, by, principal)
        entry = self.mirror.entry(row)
        await asyncio.to_thread(self.mirror.write, entry, row["version"])
        await self._tell_others(key)
        moved = old["category"] if old is not None and old["category"] != cat else None
        return entry, old is not None, moved

    async def delete(self, key: str, by: str = "") -> Entry:
        check_key(key)
        async with self._lock:
            return await self._delete(key, by)

    async def _delete(self, key: str, by: str) -> Entry:
        async with self.pg.pool.acquire() as conn, conn.transaction():
            seen = await conn.fetchrow(
                f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1 AND key = $2 AND NOT deleted FOR UPDATE",
                self.agent_id,
                key,
            )
            if seen is None:
                raise NotFound(f"no memory with key {key!r}", {"key": key})
            # Its value a version (a row from before versions has none stored yet): the trash keeps it.
            await self._write_version(conn, key, seen, seen["value"], seen["category"], seen["updated"], "")
            now = now_iso()
            await conn.execute(
                "UPDATE keyed_memories SET deleted = true, updated = $3, version = version + 1, trashed_at = $3, "
                "trashed_by = $4 WHERE agent_id = $1 AND key = $2",
                self.agent_id,
                key,
                now,
                by,
            )
        await asyncio.to_thread(self.mirror.remove, key)
        await self._tell_others(key)
        return self.mirror.entry(seen)

    # ---- versions and the trash ----------------------------------------------------------------------
    async def _versions(self, conn: Any, keys: Sequence[str]) -> dict[str, builtins.list[Version]]:
        """The stored versions of `keys`, oldest first."""
        rows = await conn.fetch(
            f"SELECT {_VERSION_COLUMNS} FROM keyed_versions WHERE agent_id = $1 AND key = ANY($2::text[]) "
            "ORDER BY key, version",
            self.agent_id,
            list(keys),
        )
        out: dict[str, list[Version]] = {}
        for r in rows:
            out.setdefault(r["key"], []).append(
                Version(int(r["version"]), r["value"], r["category"], r["at"], r["by_door"], r["principal"])
            )
        return out

    @staticmethod
    def _settled(row: Any, versions: builtins.list[Version]) -> builtins.list[Version]:
        """The versions with the row's value the newest (taken as one, by "", for a row from before
        versions were kept); a purged tombstone (no trash, no value) adds none."""
        if row is None or (row["deleted"] and row["trashed_at"] is None):
            return versions
        updated = versions[-1].at if row["deleted"] and versions else row["updated"]
        return next_version(versions, row["value"], row["category"], updated, "")

    async def _write_version(
        self,
        conn: Any,
        key: str,
        seen: Any,
        value: str,
        category: str,
        at: str,
        by: str,
        principal: str | None = None,
    ) -> None:
        """Store the write of `value` over the row as it was (`seen`), within the limits: what the
        versions table lacks is added, what falls out of the limits is dropped."""
        stored = (await self._versions(conn, [key])).get(key, [])
        target = kept(
            next_version(self._settled(seen, stored), value, category, at, by, principal),
            self.limits,
            lambda v: v.value,
        )
        have = {v.version for v in stored}
        keep = {v.version for v in target}
        new = [v for v in target if v.version not in have]
        if new:
            await conn.executemany(
                "INSERT INTO keyed_versions(agent_id, key, version, category, value, at, by_door, principal) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                [(self.agent_id, key, v.version, v.category, v.value, v.at, v.by, v.principal) for v in new],
            )
        gone = sorted(have - keep)
        if gone:
            await conn.execute(
                "DELETE FROM keyed_versions WHERE agent_id = $1 AND key = $2 AND version = ANY($3::bigint[])",
                self.agent_id,
                key,
                gone,
            )

    def _copy(self, row: Any, versions: builtins.list[Version]) -> KeyedCopy:
        """A row whole: live, or in the trash (its entry as it was when deleted)."""
        settled = self._settled(row, versions)
        if not row["deleted"]:
            return KeyedCopy(self.mirror.entry(row), tuple(settled))
        newest = settled[-1]
        entry = Entry(
            row["key"],
            newest.category,
            newest.value,
            row["created"],
            newest.at,
            self.files._rel(newest.category, row["key"]),
            self.files._file(newest.category, row["key"]),
        )
        return KeyedCopy(entry, tuple(settled), row["trashed_at"], row["trashed_by"])

    async def history(self, key: str) -> builtins.list[Version]:
        check_key(key)
        async with self.pg.pool.acquire() as conn:
            row = await conn.fetchrow(
                f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1 AND key = $2", self.agent_id, key
            )
            versions = self._settled(row, (await self._versions(conn, [key])).get(key, []))
        if not versions:
            raise NotFound(f"no memory with key {key!r}, and none in the trash", {"key": key})
        return list(reversed(versions))

    async def _copies(self, where: str, order: str) -> builtins.list[KeyedCopy]:
        """The rows `where` (after `agent_id = $1 AND`) whole, with their versions (a row no gateway could
        have written, edited in the database, names no file: it is left out)."""
        async with self.pg.pool.acquire() as conn:
            rows = await conn.fetch(
                f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1 AND {where} ORDER BY {order}",
                self.agent_id,
            )
            rows = [r for r in rows if _KEY.fullmatch(r["key"]) and r["category"] in CATEGORIES]
            versions = await self._versions(conn, [r["key"] for r in rows])
        return [self._copy(r, versions.get(r["key"], [])) for r in rows]

    async def trash(self) -> builtins.list[KeyedCopy]:
        return await self._copies("deleted AND trashed_at IS NOT NULL", "trashed_at DESC, key DESC")

    async def untrash(self, key: str) -> Entry:
        check_key(key)
        async with self._lock:
            async with self.pg.pool.acquire() as conn, conn.transaction():
                seen = await conn.fetchrow(
                    f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1 AND key = $2 FOR UPDATE",
                    self.agent_id,
                    key,
                )
                if seen is not None and not seen["deleted"]:
                    raise Conflict(f"memory {key!r} is not in the trash: it exists", {"key": key})
                if seen is None or seen["trashed_at"] is None:
                    raise NotFound(f"no memory with key {key!r} in the trash", {"key": key})
                was = self._copy(seen, (await self._versions(conn, [key])).get(key, [])).entry
                row = await conn.fetchrow(
                    "UPDATE keyed_memories SET deleted = false, trashed_at = NULL, trashed_by = '', category = $3, "
                    "value = $4, updated = $5, version = version + 1 WHERE agent_id = $1 AND key = $2 "
                    f"RETURNING {COLUMNS}",
                    self.agent_id,
                    key,
                    was.category,
                    was.value,
                    was.updated,
                )
            entry = self.mirror.entry(row)
            await asyncio.to_thread(self.mirror.write, entry, row["version"])
        await self._tell_others(key)
        return entry

    async def purge(self, keys: Sequence[str] | None = None, before: str | None = None) -> builtins.list[str]:
        async with self._lock, self.pg.pool.acquire() as conn, conn.transaction():
            where, args = await trash_filter(
                conn,
                ("keyed_memories", "key", "trashed_at"),
                "agent_id = $1 AND deleted AND trashed_at IS NOT NULL",
                self.agent_id,
                keys,
                before,
                lambda k: NotFound(f"no memory with key {k!r} in the trash", {"key": k}),
            )
            # The tombstone stays (other gateways' mirrors must still go); its value and versions do not.
            gone = [
                r["key"]
                for r in await conn.fetch(
                    f"UPDATE keyed_memories SET value = '', trashed_at = NULL, trashed_by = '' WHERE {where} "
                    "RETURNING key",
                    *args,
                )
            ]
            if gone:
                await conn.execute(
                    "DELETE FROM keyed_versions WHERE agent_id = $1 AND key = ANY($2::text[])", self.agent_id, gone
                )
        return sorted(gone)

    async def list(self, category: str | None, limit: int, offset: int) -> dict:
        where, args = "agent_id = $1 AND NOT deleted", [self.agent_id]
        if category:
            where += " AND category = $2"
            args.append(check_category(category))
        async with self.pg.pool.acquire() as conn:
            total = await conn.fetchval(f"SELECT count(*) FROM keyed_memories WHERE {where}", *args)
            rows = await conn.fetch(
                f"SELECT {COLUMNS} FROM keyed_memories WHERE {where} "
                f"ORDER BY updated DESC, key DESC LIMIT {int(limit)} OFFSET {int(offset)}",
                *args,
            )
        return {"memories": [self.mirror.entry(r).brief() for r in rows], "total": int(total)}

    async def entries(self) -> builtins.list[Entry]:
        """(A database whose schema is not made yet, as a dry run finds it, holds none.)"""
        try:
            rows = await self.pg.pool.fetch(
                f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1 AND NOT "
                f"deleted ORDER BY updated DESC, key DESC",
                self.agent_id,
            )
        except asyncpg.UndefinedTableError:
            return []
        # A row no gateway could have written (edited in the database) names no file: it is not one.
        return [self.mirror.entry(r) for r in rows if _KEY.fullmatch(r["key"]) and r["category"] in CATEGORIES]

    async def copies(self) -> builtins.list[KeyedCopy]:
        try:
            return await self._copies("(NOT deleted OR trashed_at IS NOT NULL)", "key")
        except asyncpg.UndefinedTableError:  # a database whose schema is not made yet holds none
            return []

    async def import_entries(self, entries: Sequence[Entry], dry_run: bool = False) -> builtins.list[Imported]:
        return await self.import_copies([KeyedCopy(e, ()) for e in entries], dry_run)

    async def import_copies(self, copies: Sequence[KeyedCopy], dry_run: bool = False) -> builtins.list[Imported]:
        """Rows only: this tool's workspace is no gateway's mirror (the gateways write theirs on their
        next sync, told by a `keyed` notification). Each memory with its versions in one transaction."""
        out = []
        for c in copies:
            e = c.entry
            if not importable(e) or not all(importable(replace(e, value=v.value)) for v in c.versions):
                out.append(Imported(REFUSED, "what memory.set would not take, or text PostgreSQL cannot hold"))
                continue
            if dry_run:
                try:
                    there = await self.pg.pool.fetchval(
                        "SELECT deleted FROM keyed_memories WHERE agent_id = $1 AND key = $2", self.agent_id, e.key
                    )
                except asyncpg.UndefinedTableError:  # no schema yet: nothing there
                    there = None
                out.append(Imported(ADDED) if there is None else Imported(PRESENT, _TAKEN[there]))
                continue
            async with self.pg.pool.acquire() as conn, conn.transaction():
                there = await conn.fetchval(
                    "INSERT INTO keyed_memories(agent_id, key, category, value, created, updated, deleted, trashed_at, "
                    "trashed_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (agent_id, key) DO NOTHING "
                    "RETURNING 1",
                    self.agent_id,
                    e.key,
                    e.category,
                    e.value.strip("\n"),
                    e.created,
                    c.deleted or e.updated,
                    c.deleted is not None,
                    c.deleted,
                    c.deleted_by,
                )
                if there is not None:
                    versions = list(c.versions) or next_version([], e.value.strip("\n"), e.category, e.updated, "")
                    await conn.executemany(
                        "INSERT INTO keyed_versions(agent_id, key, version, category, value, at, by_door, principal) "
                        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                        [
                            (self.agent_id, e.key, v.version, v.category, v.value, v.at, v.by, v.principal)
                            for v in versions
                        ],
                    )
            if there is None:
                deleted = await self.pg.pool.fetchval(
                    "SELECT deleted FROM keyed_memories WHERE agent_id = $1 AND key = $2", self.agent_id, e.key
                )
                out.append(Imported(PRESENT, _TAKEN[bool(deleted)]))
            else:
                out.append(Imported(ADDED))
                if c.deleted is None:
                    await self._tell_others(e.key)
        return out

    async def _tell_others(self, key: str) -> None:
        with contextlib.suppress(Exception):  # they reconcile on their next sync of the memory files anyway
            await self.pg.notify("keyed", agent=self.agent_id, key=key)

    async def reconcile(self, key: str | None = None) -> int:
        """Bring rows and this gateway's mirror files into step (all keys, or one); returns how many
        rows it wrote. See the module docstring for who wins."""
        async with self._lock:
            return await self.mirror.reconcile(key)


_TAKEN = {
    False: "a keyed memory of this key is there",
    True: "this key was deleted there (its tombstone keeps other gateways from bringing it back)",
}
