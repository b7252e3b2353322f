"""Whole notes of one agent in and out of PostgreSQL (`jarvis migrate`, storage/copynotes.py, through the
NoteRecord's `copies` and `import_copies`): rows only, every version kept; each gateway writes its folder
on its next sync. A note whose path is taken is left as it is (PRESENT), its text the same or not. A
note deleted from the record is not copied (its versions stay there, for memory.history, but a copy
would bring it back as a note). Copied over a note deleted here, a note's versions go on after the ones
kept here; each note is one transaction, read back before it commits (all of it or nothing).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import asyncpg

from ...memory.notes import files
from ...memory.notes.history import NoteVersion
from ..base import ADDED, IDENTICAL_NOTE, PRESENT, REFUSED, Imported, NoteCopy
from .instance import Postgres
from .sqlutil import lock_key


def note_hash(text: str) -> str:
    """A note's text as the `hash` column of `notes` holds it (SHA-256 of its UTF-8, in hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def lock_notes(conn: asyncpg.Connection, agent_id: str, rel: str | None) -> None:
    """One lock order for every writer of an agent's notes (a transaction's): the agent's lock — shared by
    a writer of one note, which then takes that note's lock; held alone by a writer of many new notes at
    once (a folder's first sync), which then needs no other. So no two writers wait on each other in a
    circle, whichever tables they write first."""
    agent = lock_key(f"notes:{agent_id}")
    if rel is None:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", agent)
    else:
        await conn.execute("SELECT pg_advisory_xact_lock_shared($1)", agent)
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(f"note:{agent_id}:{rel}"))


class PgNoteCopies:
    def __init__(self, pg: Postgres, agent_id: str):
        self.pg = pg
        self.agent_id = agent_id

    async def copies(self) -> list[NoteCopy]:
        """Each note with its versions, the note's text its newest: a row whose text is in no version (a
        database an older `jarvis migrate` left so) gets it as one more, so a copy never loses it."""
        try:
            async with self.pg.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
                rows = await conn.fetch(
                    "SELECT v.path, v.version, v.at, v.by_door, v.principal, v.content FROM note_versions v "
                    "JOIN notes n ON n.agent_id = v.agent_id AND n.path = v.path WHERE v.agent_id = $1 "
                    "ORDER BY v.path, v.version",
                    self.agent_id,
                )
                notes = await conn.fetch(
                    "SELECT path, content, at, by_door, principal FROM notes WHERE agent_id = $1 ORDER BY path",
                    self.agent_id,
                )
        except asyncpg.UndefinedTableError:  # a database whose schema is not made yet holds none
            return []
        out: dict[str, list[NoteVersion]] = {n["path"]: [] for n in notes}
        for r in rows:
            out[r["path"]].append(NoteVersion(r["version"], r["at"], r["by_door"], r["content"], r["principal"]))
        for n in notes:
            versions = out[n["path"]]
            if not versions or versions[-1].content != n["content"]:
                last = versions[-1].version if versions else 0
                versions.append(NoteVersion(last + 1, n["at"], n["by_door"], n["content"], n["principal"]))
        return [NoteCopy(path, tuple(versions)) for path, versions in out.items()]

    async def import_copies(self, copies: Sequence[NoteCopy], dry_run: bool = False) -> list[Imported]:
        out = []
        for c in copies:
            if c.problem or not c.versions or not files.in_record(c.path):
                out.append(Imported(REFUSED, c.problem or "no text to copy"))
                continue
            if any("\x00" in v.content for v in c.versions):
                out.append(Imported(REFUSED, "a version holds NUL, which PostgreSQL text cannot"))
                continue
            current = c.versions[-1]
            digest = note_hash(current.content)
            try:
                there = await self.pg.pool.fetchval(
                    "SELECT hash FROM notes WHERE agent_id = $1 AND path = $2", self.agent_id, c.path
                )
            except asyncpg.UndefinedTableError:  # a dry run before the schema is made: nothing there
                there = None
            if there is not None:
                out.append(Imported(PRESENT, IDENTICAL_NOTE if there == digest else "another text is there"))
                continue
            if dry_run:
                out.append(Imported(ADDED))
                continue
            try:
                made = await self._insert(c)
            except _Undone as exc:
                out.append(Imported(REFUSED, str(exc)))
                continue
            out.append(Imported(ADDED) if made else Imported(PRESENT, "another text is there"))
        return out

    async def _insert(self, c: NoteCopy) -> bool:
        """The note and its versions in one transaction; False where its path was taken meanwhile. A note
        deleted here kept its versions: the copy's go on after them (renumbered), so no version is lost
        and the note's text is its newest. Read back before the commit: a note whose text is not its
        current version's raises _Undone, and nothing of it stays."""
        async with self.pg.pool.acquire() as conn:
            try:
                async with conn.transaction():
                    await lock_notes(conn, self.agent_id, c.path)
                    last = await conn.fetchval(
                        "SELECT max(version) FROM note_versions WHERE agent_id = $1 AND path = $2",
                        self.agent_id,
                        c.path,
                    )
                    first = c.versions[0].version
                    shift = (last or 0) + 1 - first if last is not None and last >= first else 0
                    current = c.versions[-1]
                    made = await conn.fetchval(
                        "INSERT INTO notes (agent_id, path, content, hash, version, at, by_door, principal) "
                        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (agent_id, path) DO NOTHING RETURNING 1",
                        self.agent_id,
                        c.path,
                        current.content,
                        note_hash(current.content),
                        current.version + shift,
                        current.at,
                        current.by,
                        current.principal,
                    )
                    if made is None:
                        return False
                    await conn.executemany(
                        "INSERT INTO note_versions (agent_id, path, version, at, by_door, principal, content) "
                        "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        [
                            (self.agent_id, c.path, v.version + shift, v.at, v.by, v.principal, v.content)
                            for v in c.versions
                        ],
                    )
                    back = await conn.fetchval(
                        "SELECT v.content = n.content FROM notes n JOIN note_versions v ON v.agent_id = n.agent_id "
                        "AND v.path = n.path AND v.version = n.version WHERE n.agent_id = $1 AND n.path = $2",
                        self.agent_id,
                        c.path,
                    )
                    if back is not True:
                        raise _Undone("its text read back is not its current version's; nothing of it written")
                    await self.pg.notify("note", conn, agent=self.agent_id, key=c.path)
            except asyncpg.UniqueViolationError:  # its versions' numbers taken meanwhile
                raise _Undone("its versions' numbers were taken meanwhile; nothing of it written") from None
        return True


class _Undone(Exception):
    """A note's import rolled back (the reason)."""
