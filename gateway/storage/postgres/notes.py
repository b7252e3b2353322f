"""The PostgreSQL engine's NoteRecord (memory/ports.py): notes as rows every gateway on the database
shares, each gateway's workspace folder a working mirror.

    notes          (agent, path) → the text now, its SHA-256, version, when, the door (`by_door`), who
    note_versions  (agent, path, version) → the text of each version kept (memory.versions' limits)

A write through any door (memory.write, memory.restore) is a new version, committed with a `note`
notification; every gateway then writes the note into its folder (cluster.py → `reconcile(path)`).
A file changed in the folder — a person's editor, memory.learn, a day file's flush — is taken into
the record as a new version (by "file") before the next sync indexes it (the watcher starts that sync),
and reaches the other gateways the same way. What this gateway last mirrored of each note is in its own
state dir (`<agentDir>/notes-mirror.json`: version, SHA-256, mtime and size), so an edit on disk is
told from a mirror that fell behind: a file that differs from what was mirrored is an edit, taken in
on top of whatever the record holds by then, so two edits at once both survive — the later current,
the earlier a version. A file that is not UTF-8 text, holds NUL or is over `memory.maxFileBytes` stays
out of the record (said once in the log). A file deleted from a folder leaves the record once a sync
has confirmed it gone (`forget_gone`: the sync looks twice before it removes much, so a folder that
blinked deletes nothing; a scan that failed is no answer, and deletes nothing either); its versions
stay, the deletion is kept (`note_tombstones`: the version deleted), and the other gateways remove their
mirror (unless edited there since: an edit wins). A file is never removed because the record lacks its
note unless the record says it deleted that note at or after the version this gateway mirrored: the
marks are of one database (its name and the notes migration's time), and a database that lacks a note
without a deletion of it — a new one, another one, one restored from a backup — takes the file in. Each
writer takes the notes' locks in one order (note_copies.lock_notes). A mirror is written only over the
file as it was last seen: an editor's save in between is taken in as a version instead, and a note that
cannot be written here (a name the file system refuses) is said in the log and left out, the others
mirrored.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Sequence

import orjson
import structlog

from ...fsutil import atomic_write, ensure_private_dir
from ...memory.notes import files
from ...memory.notes.history import NoteVersion
from ...memory.notes.keyed import VersionLimits
from ...timeutil import now_iso
from ..base import Imported, NoteCopy
from .db import NOTES_MIGRATION
from .instance import Postgres
from .mirror import unmounted
from .note_folder import CHANGED, REFUSED, WRITTEN, NoteFolder, Stat
from .note_copies import PgNoteCopies, lock_notes, note_hash

log = structlog.get_logger("gateway.memory")

mirrored = files.in_record  # the notes the record holds
TAKE_BATCH = 1000  # notes new to the record taken in by one statement


def _oldest_kept(sizes: list[Any], limits: VersionLimits) -> int | None:
    """The oldest version to keep of (version, size) rows, oldest first, when older ones must go (as
    memory/notes/keyed.kept counts them: the newest always stays); None when all stay."""
    count = used = 0
    for row in reversed(sizes):
        if count and (count >= limits.keep or used + row["size"] > limits.max_bytes):
            return int(sizes[len(sizes) - count]["version"])
        count += 1
        used += row["size"]
    return None


class PgNotes:
    def __init__(
        self, pg: Postgres, agent_id: str, workspace: Path, marks_file: Path, limits: VersionLimits, max_bytes: int
    ):
        self.pg = pg
        self.agent_id = agent_id
        self.workspace = workspace
        self.marks_file = marks_file
        self.limits = limits
        self.max_bytes = max_bytes
        self._lock = asyncio.Lock()  # one write or reconcile of this agent's notes at a time, here
        self._marks: dict[str, dict[str, Any]] | None = None
        self._origin: str | None = None  # which database the marks are of
        self.folder = NoteFolder(agent_id, workspace, max_bytes)
        self.forget_owed = False  # a forget_gone whose folder scan failed: the next sync runs it again
        self.by_name = True  # a note is its folder's by name (note_folder.py)
        self._copies = PgNoteCopies(pg, agent_id)

    # ---- the port --------------------------------------------------------------------------------------
    async def write(
        self, rel: str, text: str, by: str = "", principal: str | None = None, limit: int = files.MAX_NOTE_BYTES
    ) -> dict[str, Any]:
        data = files.check_content(text, limit)
        async with self._lock:
            await self._reconcile(rel)  # an edit by hand not yet recorded becomes a version first
            seen = await asyncio.to_thread(self.folder.stat, rel)
            created = not await self.pg.pool.fetchval(
                "SELECT EXISTS (SELECT 1 FROM notes WHERE agent_id = $1 AND path = $2)", self.agent_id, rel
            )
            version, digest = await self._take(rel, text, by, principal)
            if not await self._held_back():  # else mirrored when the folder is back
                if await self._mirror(rel, data, version, digest, seen) == CHANGED:
                    await self._take_file(rel)  # an editor's save meanwhile: the later, current
        return {"path": rel, "size": len(data), "created": created}

    async def versions(self, rel: str) -> list[NoteVersion]:
        async with self._lock:
            await self._reconcile(rel)
        rows = await self.pg.pool.fetch(
            "SELECT version, at, by_door, principal, content FROM note_versions WHERE agent_id = $1 AND path = $2 "
            "ORDER BY version",
            self.agent_id,
            rel,
        )
        return [NoteVersion(r["version"], r["at"], r["by_door"], r["content"], r["principal"]) for r in rows]

    async def current(self, rel: str) -> int | None:
        """The note's row's version, where that version's text is the row's (a deleted note has no row)."""
        async with self._lock:
            await self._reconcile(rel)  # an edit by hand not yet recorded is the text now
        return await self.pg.pool.fetchval(
            "SELECT n.version FROM notes n JOIN note_versions v ON v.agent_id = n.agent_id AND v.path = n.path "
            "AND v.version = n.version WHERE n.agent_id = $1 AND n.path = $2 AND v.content = n.content",
            self.agent_id,
            rel,
        )

    async def reconcile(self, rel: str | None = None) -> int:
        async with self._lock:
            return await self._reconcile(rel)

    async def forget_gone(self) -> int:
        async with self._lock:
            return await self._reconcile(None, gone=True)

    # ---- the record --------------------------------------------------------------------------------------
    async def _take(self, rel: str, text: str, by: str, principal: str | None) -> tuple[int, str]:
        """`text` as the note's new version (none when it is what the note holds); (version, SHA-256)."""
        digest = note_hash(text)
        async with self.pg.pool.acquire() as conn, conn.transaction():
            await lock_notes(conn, self.agent_id, rel)
            now = await conn.fetchrow(
                "SELECT version, hash FROM notes WHERE agent_id = $1 AND path = $2", self.agent_id, rel
            )
            if now is not None and now["hash"] == digest:
                return now["version"], digest
            last = await conn.fetchval(  # a note deleted and written again goes on from its versions
                "SELECT max(version) FROM note_versions WHERE agent_id = $1 AND path = $2", self.agent_id, rel
            )
            version = max(now["version"] if now is not None else 0, last or 0) + 1
            at = now_iso()
            await conn.execute(
                "INSERT INTO note_versions (agent_id, path, version, at, by_door, principal, content) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                self.agent_id,
                rel,
                version,
                at,
                by,
                principal,
                text,
            )
            await conn.execute(
                "INSERT INTO notes (agent_id, path, content, hash, version, at, by_door, principal) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (agent_id, path) DO UPDATE SET "
                "content = excluded.content, hash = excluded.hash, version = excluded.version, at = excluded.at, "
                "by_door = excluded.by_door, principal = excluded.principal",
                self.agent_id,
                rel,
                text,
                digest,
                version,
                at,
                by,
                principal,
            )
            sizes = await conn.fetch(
                "SELECT version, octet_length(content) AS size FROM note_versions WHERE agent_id = $1 AND path = $2 "
                "ORDER BY version",
                self.agent_id,
                rel,
            )
            oldest = _oldest_kept(sizes, self.limits)
            if oldest is not None:
                await conn.execute(
                    "DELETE FROM note_versions WHERE agent_id = $1 AND path = $2 AND version < $3",
                    self.agent_id,
                    rel,
                    oldest,
                )
            await self.pg.notify("note", conn, agent=self.agent_id, key=rel)
        return version, digest

    # ---- the mirror --------------------------------------------------------------------------------------
    async def _reconcile(self, only: str | None, gone: bool = False) -> int:
        """`gone`: a sync has just confirmed that the files missing here are gone (it looks twice before
        it removes much): their notes leave the record too (their versions stay)."""
        if await self._held_back():
            return 0
        marks = await self._loaded_marks()
        if only is None:
            rows = await self.pg.pool.fetch("SELECT path, version, hash FROM notes WHERE agent_id = $1", self.agent_id)
        else:
            rows = await self.pg.pool.fetch(
                "SELECT path, version, hash FROM notes WHERE agent_id = $1 AND path = $2", self.agent_id, only
            )
        record = {r["path"]: r for r in rows}
        disk = await asyncio.to_thread(self.folder.stats, only)
        if disk is None:  # the folder could not be read: what is on disk is unknown, so nothing changes
            self.forget_owed |= gone
            return 0
        if gone:
            self.forget_owed = False
        changed = 0
        fresh: list[tuple[str, str, str, Stat]] = []  # (path, text, SHA-256, stat) not in the record
        orphans: list[tuple[str, Stat, dict[str, Any]]] = []  # as mirrored here, not in the record
        # A no-op sync goes through every note (400,000 in the million-chunk run): a shallow copy of the
        # marks to compare (each change puts a new dict in), not two sorted JSON dumps, and the paths
        # unsorted (the new ones are taken in sorted). For 400,000 notes, on the loaded 2-core VM: 2.3 s
        # sorting the paths and 1.1 s dumping, against 0.05 s copying and comparing.
        before = dict(marks)
        for rel in record.keys() | disk.keys():
            if not mirrored(rel):
                continue
            row, stat, mark = record.get(rel), disk.get(rel), marks.get(rel)
            if stat is not None and (mark is None or (mark["m"], mark["s"]) != stat):
                text = await asyncio.to_thread(self.folder.read, rel)
                if text is None:
                    continue
                digest = note_hash(text)
                if row is not None and digest == row["hash"]:
                    marks[rel] = {"v": row["version"], "h": digest, "m": stat[0], "s": stat[1]}
                    continue
                if mark is not None and digest == mark["h"]:  # touched, not changed: as mirrored
                    mark = marks[rel] = {**mark, "m": stat[0], "s": stat[1]}
                elif row is None and mark is None:  # new to the record: taken in with the others, at once
                    fresh.append((rel, text, digest, stat))
                    continue
                else:  # an edit here: a new version, on top of whatever the record holds by now
                    version, digest = await self._take(rel, text, "file", None)
                    marks[rel] = {"v": version, "h": digest, "m": stat[0], "s": stat[1]}
                    changed += 1
                    continue
            # Here the file is as this gateway mirrored it, or gone.
            if row is None:  # not in the record: deleted through another gateway, or never in this database
                if mark is not None:
                    if stat is not None:
                        orphans.append((rel, stat, mark))
                    else:
                        marks.pop(rel, None)
                continue
            if stat is None and mark is not None and mark["h"] == row["hash"]:  # gone here, unchanged there
                if (
                    gone
                    and not await asyncio.to_thread(self.folder.linked, rel)
                    and await self._delete(rel, row["hash"])
                ):
                    marks.pop(rel, None)
                    changed += 1
                continue  # else a folder that blinked, or a deletion the next sync confirms
            if stat is not None and mark is not None and mark["h"] == row["hash"]:
                if mark["v"] != row["version"]:
                    marks[rel] = {**mark, "v": row["version"]}
                continue
            content = await self.pg.pool.fetchval(
                "SELECT content FROM notes WHERE agent_id = $1 AND path = $2", self.agent_id, rel
            )
            if content is None:
                continue
            done = await self._mirror(rel, content.encode("utf-8"), row["version"], row["hash"], stat, save=False)
            if done == CHANGED:  # an editor saved it meanwhile: taken in, on top
                await self._take_file(rel, save=False)
            changed += done != REFUSED
        if orphans:
            changed += await self._orphans(orphans, marks, fresh)
        fresh.sort(key=lambda f: f[0])
        for i in range(0, len(fresh), TAKE_BATCH):
            changed += await self._take_new(fresh[i : i + TAKE_BATCH], marks)
        if marks != before:
            await asyncio.to_thread(self._save_marks)
        return changed

    async def _orphans(
        self, orphans: list[tuple[str, Stat, dict[str, Any]]], marks: dict[str, Any], fresh: list[Any]
    ) -> int:
        """Files as this gateway mirrored them whose notes the record lacks: removed where the record
        deleted the note at or after the version mirrored here (another gateway's deletion); else (a new
        database, one restored from a backup) put in `fresh`, to be taken into the record."""
        rows = await self.pg.pool.fetch(
            "SELECT path, version FROM note_tombstones WHERE agent_id = $1 AND path = ANY($2::text[])",
            self.agent_id,
            [o[0] for o in orphans],
        )
        deleted = {r["path"]: r["version"] for r in rows}
        removed = 0
        for rel, stat, mark in orphans:
            marks.pop(rel, None)
            if rel in deleted and deleted[rel] >= mark["v"]:
                removed += await asyncio.to_thread(self.folder.remove, rel, stat)
                continue
            text = await asyncio.to_thread(self.folder.read, rel)
            if text is not None:
                log.info("note_taken_back_into_the_record", agent=self.agent_id, path=rel)
                fresh.append((rel, text, note_hash(text), stat))
        return removed

    async def _take_file(self, rel: str, save: bool = True) -> int:
        """The file of `rel` as it is now, taken into the record as an edit (a new version on top)."""
        stat = await asyncio.to_thread(self.folder.stat, rel)
        text = None if stat is None else await asyncio.to_thread(self.folder.read, rel)
        if stat is None or text is None:
            return 0
        version, digest = await self._take(rel, text, "file", None)
        marks = await self._loaded_marks()
        marks[rel] = {"v": version, "h": digest, "m": stat[0], "s": stat[1]}
        if save:
            await asyncio.to_thread(self._save_marks)
        return 1

    async def _take_new(self, batch: list[tuple[str, str, str, Stat]], marks: dict[str, Any]) -> int:
        """Notes new to the record (a folder's first sync: thousands at once), each its first version, in
        one transaction and one notification (the other gateways reconcile all); one that another
        gateway recorded meanwhile is taken in alone, on top of it."""
        at = now_iso()
        paths, texts, digests = [b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch]
        async with self.pg.pool.acquire() as conn, conn.transaction():
            await lock_notes(conn, self.agent_id, None)  # the agent's, alone: no door write meanwhile
            made = await conn.fetch(
                "INSERT INTO notes (agent_id, path, content, hash, version, at, by_door, principal) "
                "SELECT $1, t.p, t.c, t.h, coalesce((SELECT max(v.version) FROM note_versions v "
                "WHERE v.agent_id = $1 AND v.path = t.p), 0) + 1, $2, 'file', NULL "
                "FROM unnest($3::text[], $4::text[], $5::text[]) AS t(p, c, h) "
                "ON CONFLICT (agent_id, path) DO NOTHING RETURNING path, version",
                self.agent_id,
                at,
                paths,
                texts,
                digests,
            )
            if made:
                await conn.execute(
                    "INSERT INTO note_versions (agent_id, path, version, at, by_door, principal, content) "
                    "SELECT agent_id, path, version, at, by_door, principal, content FROM notes "
                    "WHERE agent_id = $1 AND path = ANY($2::text[])",
                    self.agent_id,
                    [r["path"] for r in made],
                )
                await self.pg.notify("note", conn, agent=self.agent_id, key=None)
        versions = {r["path"]: r["version"] for r in made}
        for rel, text, digest, stat in batch:
            if rel not in versions:
                versions[rel], digest = await self._take(rel, text, "file", None)
            marks[rel] = {"v": versions[rel], "h": digest, "m": stat[0], "s": stat[1]}
        return len(batch)

    async def _held_back(self) -> str | None:
        """Why nothing is written into the folder now: it looks like a share that is not mounted (gone,
        or empty while notes of it are indexed) though this gateway mirrored notes into it before. (A
        folder this gateway never mirrored into is a new one: it gets every note.)"""
        why = await unmounted(self.pg, self.agent_id, self.workspace, fresh=True)
        if why and await self._loaded_marks():
            log.warning("memory_notes_reconcile_skipped", workspace=str(self.workspace), reason=why)
            return why
        return None

    async def _delete(self, rel: str, digest: str) -> bool:
        """The note leaves the record if it still holds `digest` (its versions stay: memory.history and
        memory.restore {path, version} still reach them); the other gateways remove their mirrors."""
        async with self.pg.pool.acquire() as conn, conn.transaction():
            await lock_notes(conn, self.agent_id, rel)
            version = await conn.fetchval(
                "DELETE FROM notes WHERE agent_id = $1 AND path = $2 AND hash = $3 RETURNING version",
                self.agent_id,
                rel,
                digest,
            )
            if version is not None:
                await conn.execute(
                    "INSERT INTO note_tombstones (agent_id, path, version, at) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT (agent_id, path) DO UPDATE SET version = greatest(note_tombstones.version, "
                    "excluded.version), at = excluded.at",
                    self.agent_id,
                    rel,
                    version,
                    now_iso(),
                )
                await self.pg.notify("note", conn, agent=self.agent_id, key=rel)
        return version is not None

    async def _mirror(
        self, rel: str, data: bytes, version: int, digest: str, seen: Stat | None, save: bool = True
    ) -> str:
        """Write the record's note into the folder over the file as it was `seen` (None: none there), and
        remember what was written: WRITTEN, CHANGED or REFUSED (NoteFolder.put)."""
        marks = await self._loaded_marks()
        stat = await asyncio.to_thread(self.folder.put, rel, data, seen)
        if isinstance(stat, str):
            return stat
        marks[rel] = {"v": version, "h": digest, "m": stat[0], "s": stat[1]}
        if save:
            await asyncio.to_thread(self._save_marks)
        return WRITTEN

    async def _loaded_marks(self) -> dict[str, dict[str, Any]]:
        """What this gateway mirrored of each note — of this database: marks of another (the state dir
        moved onto a new database) count for nothing, so its files are compared by their text."""
        if self._marks is None:
            self._origin = await self.pg.pool.fetchval(
                "SELECT current_database() || ':' || applied_at::text FROM jarvis_migrations WHERE name = $1",
                NOTES_MIGRATION,
            )

            def load() -> dict[str, dict[str, Any]]:
                if self._origin is None:  # a database of no known identity: no marks are of it
                    return {}
                try:
                    data = orjson.loads(self.marks_file.read_bytes())
                except (OSError, orjson.JSONDecodeError):
                    return {}  # none yet, or damaged: every file is compared with the record by its text
                if (
                    not isinstance(data, dict)
                    or data.get("db") != self._origin
                    or not isinstance(data.get("notes"), dict)
                ):
                    return {}
                return {
                    k: v for k, v in data["notes"].items() if isinstance(v, dict) and {"v", "h", "m", "s"} <= v.keys()
                }

            self._marks = await asyncio.to_thread(load)
        return self._marks

    def _save_marks(self) -> None:
        ensure_private_dir(self.marks_file.parent)
        atomic_write(self.marks_file, orjson.dumps({"db": self._origin, "notes": self._marks or {}}))

    # ---- whole notes (`jarvis migrate`): note_copies.py ------------------------------------------------
    async def copies(self) -> list[NoteCopy]:
        return await self._copies.copies()

    async def import_copies(self, copies: Sequence[NoteCopy], dry_run: bool = False) -> list[Imported]:
        return await self._copies.import_copies(copies, dry_run)
