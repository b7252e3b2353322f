"""This gateway's workspace files of one agent's keyed memories, a mirror of the `keyed_memories` rows
(storage/postgres/keyed.py): written after each write of a row, removed after a delete, and brought into
step with the rows by `reconcile` before each sync of the memory files (keyed.py's docstring says who
wins). A file edited by hand becomes a row here, over the row as it was read.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

import structlog

from ...errors import Invalid
from ...fsutil import atomic_write, locked, remove
from ...memory.index.sources import folder_empty
from ...memory.notes.frontmatter import parse_front_matter
from ...memory.notes.keyed import (
    _KEY,
    CATEGORIES,
    MAX_VALUE_CHARS,
    Entry,
    KeyedFiles,
    _mtime_iso,
    check_entry,
    check_key,
    render,
)
from ...timeutil import now_iso

if TYPE_CHECKING:  # pragma: no cover
    from .instance import Postgres

log = structlog.get_logger("gateway.memory")

COLUMNS = "key, category, value, created, updated, deleted, version, trashed_at, trashed_by"


class WriteVersion(Protocol):
    """The store's record of a write over the row as it was (keyed.py: `_write_version`)."""

    async def __call__(
        self, conn: Any, key: str, seen: Any, value: str, category: str, at: str, by: str, principal: str | None = None
    ) -> None: ...


class KeyedMirror:
    def __init__(
        self,
        pg: "Postgres",
        agent_id: str,
        workspace: Path,
        write_version: WriteVersion,
        tell_others: Callable[[str], Awaitable[None]],
    ):
        self.pg = pg
        self.agent_id = agent_id
        self.workspace = workspace
        self.files = KeyedFiles(workspace)
        self.write_version = write_version
        self.tell_others = tell_others

    def entry(self, row: Any) -> Entry:
        """A row as the Entry of its file here (its path, whether or not the file is there)."""
        rel = self.files._rel(row["category"], row["key"])
        return Entry(
            row["key"],
            row["category"],
            row["value"],
            row["created"],
            row["updated"],
            rel,
            self.files._file(row["category"], row["key"]),
        )

    def write(self, e: Entry, version: int) -> None:
        """This gateway's file of `e`, row version `version` (and none in another category). Blocking."""
        with locked(self.files.root):
            target = self.files._file(e.category, e.key)
            data = render(e.key, e.category, e.value, e.created, e.updated, version)
            try:
                same = target.read_bytes() == data
            except OSError:
                same = False
            if not same:
                atomic_write(target, data)
            for cat in CATEGORIES:
                if cat != e.category:
                    remove(self.files._file(cat, e.key))

    def remove(self, key: str) -> None:
        """This gateway's files of `key`, in every category, removed. Blocking."""
        with locked(self.files.root):
            for cat in CATEGORIES:
                remove(self.files._file(cat, key))

    async def _unmounted(self) -> str | None:
        return await unmounted(self.pg, self.agent_id, self.workspace)

    async def reconcile(self, key: str | None) -> int:
        """Bring rows and this gateway's files into step (all keys, or one); returns how many rows it
        wrote. The store's lock is held (its writes and this take turns). See keyed.py's docstring for
        who wins."""
        why = await self._unmounted()
        if why:
            # Mirrors alone in a fresh folder, or in a share's empty mount point, would read to the next
            # sync as every other note deleted. The sync fails instead, naming the workspace.
            log.warning("memory_keyed_reconcile_skipped", workspace=str(self.workspace), reason=why)
            return 0
        sql = f"SELECT {COLUMNS} FROM keyed_memories WHERE agent_id = $1"
        rows = await self.pg.pool.fetch(
            sql + (" AND key = $2" if key else ""), self.agent_id, *((check_key(key),) if key else ())
        )
        # A row no gateway could have written (edited in the database) must not name a path.
        by_key = {r["key"]: r for r in rows if _KEY.fullmatch(r["key"]) and r["category"] in CATEGORIES}
        files = await asyncio.to_thread(self._found, key)
        imports: list[tuple[Entry, str, str, Any]] = []  # (file, created, updated, the row it replaces)
        to_mirror: list[Any] = []  # rows
        to_remove: list[str] = []
        for k in sorted(set(by_key) | set(files)):
            row, found = by_key.get(k), files.get(k)
            if found is None:
                if row is not None and not row["deleted"]:
                    to_mirror.append(row)
                continue
            f, stamped = found
            if row is None:
                imports.append((f, f.created, f.updated, None))
            elif row["deleted"]:
                if stamped is None and _mtime_iso(f.abs) > row["updated"]:
                    imports.append((f, now_iso(), now_iso(), row))  # made again by hand
                else:
                    to_remove.append(k)
            elif (f.category, f.value) == (row["category"], row["value"]):
                if stamped != row["version"] or self._stray(k, f.category):
                    to_mirror.append(row)  # the same memory: stamp it with this version
            elif stamped == row["version"]:
                imports.append((f, row["created"], now_iso(), row))  # this version, edited by hand
            else:
                to_mirror.append(row)  # a mirror of an older version (or made by hand)
        taken: list[str] = []
        if imports:
            async with self.pg.pool.acquire() as conn:
                for f, created, updated, seen in imports:
                    if not importable(f):
                        continue
                    # Only over the row as it was read: a write in between (any gateway) wins.
                    async with conn.transaction():
                        row = await conn.fetchrow(
                            "INSERT INTO keyed_memories(agent_id, key, category, value, created, updated, deleted) "
                            "VALUES ($1, $2, $3, $4, $5, $6, false) ON CONFLICT (agent_id, key) DO UPDATE SET "
                            "category = $3, value = $4, updated = $6, deleted = false, "
                            "version = keyed_memories.version + 1, trashed_at = NULL, trashed_by = '' "
                            "WHERE keyed_memories.version = $7 AND keyed_memories.deleted = $8 "
                            f"RETURNING {COLUMNS}",
                            self.agent_id,
                            f.key,
                            f.category,
                            f.value.strip("\n"),
                            created,
                            updated,
                            seen["version"] if seen else None,
                            seen["deleted"] if seen else None,
                        )
                        if row is not None:  # an edit by hand is a version too
                            await self.write_version(conn, f.key, seen, row["value"], row["category"], updated, "file")
                    if row is not None:
                        to_mirror.append(row)  # its front matter now names this version
                        taken.append(f.key)
        if to_mirror or to_remove:

            def apply() -> None:
                for row in to_mirror:
                    self.write(self.entry(row), row["version"])
                for k in to_remove:
                    self.remove(k)

            await asyncio.to_thread(apply)
        for k in taken:
            await self.tell_others(k)
        return len(taken)

    def _found(self, key: str | None) -> dict[str, tuple[Entry, int | None]]:
        """The newest mirror file of each key (or of one), with the row version its front matter names
        (None when it names none: a file made by hand, or by the files engine). Blocking."""
        entries = self.files._found(key) if key else self.files.all()
        out: dict[str, tuple[Entry, int | None]] = {}
        for e in entries:  # newest first
            if e.key in out:
                continue
            try:
                meta, _ = parse_front_matter(e.abs.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            stamped = meta.get("version")
            out[e.key] = (e, int(stamped) if isinstance(stamped, str) and stamped.isdigit() else None)
        return out

    def _stray(self, key: str, category: str) -> bool:
        """Whether a file of `key` lies in another category than `category` (a move another gateway made)."""
        return any(self.files._file(cat, key).exists() for cat in CATEGORIES if cat != category)


def importable(f: Entry) -> bool:
    """Whether a file may become a row: what memory.set would accept, and text PostgreSQL can hold."""
    try:
        check_entry(f.key, f.value, f.category)
    except Invalid as exc:
        log.warning("memory_keyed_file_skipped", path=f.path, error=exc.message)
        return False
    if len(f.value) > MAX_VALUE_CHARS or "\x00" in f.value:
        log.warning(
            "memory_keyed_file_skipped",
            path=f.path,
            error=f"longer than {MAX_VALUE_CHARS} characters or holding a NUL character",
        )
        return False
    return True


async def unmounted(pg: "Postgres", agent_id: str, workspace: Path, fresh: bool = False) -> str | None:
    """Why the workspace looks like a share that is not mounted (missing; or empty while notes of it
    are indexed), else None: mirrors (keyed memories', notes') are not written into it then. `fresh`:
    a missing workspace counts only while notes of it are indexed (else it is a new one, to make)."""
    missing = not await asyncio.to_thread(workspace.is_dir)
    if missing and not fresh:
        return "workspace missing"
    if (missing or await asyncio.to_thread(folder_empty, workspace)) and await pg.pool.fetchval(
        "SELECT EXISTS (SELECT 1 FROM memory_files WHERE agent_id = $1 AND source = 'memory')", agent_id
    ):
        return f"workspace {'missing' if missing else 'empty'} while notes of it are indexed"
    return None
