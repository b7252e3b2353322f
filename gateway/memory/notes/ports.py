"""What the notes feature asks of a storage engine: its keyed memories (`KeyedMemories`) and its notes
(`NoteRecord`), each with its versions and, for keyed memories, a trash. Typed as Protocols, as the memory
index's ports are (memory/ports.py); storage/base.py's KeyedStore and NoteStore are these and whole copies
in and out, and tests/contract/test_keyed.py and test_notes.py hold their contracts once, on both engines.
"""

from __future__ import annotations

import builtins  # `list` inside KeyedMemories is its method: the type is builtins.list
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from .files import MAX_NOTE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from .history import NoteVersion
    from .keyed import Entry, KeyedCopy, Version


class KeyedMemories(Protocol):
    """One agent's keyed memories (memory.set/get/delete/list): small named facts, one per key across
    the categories (memory/notes/keyed.py has the rules and the file layout), with their versions and a
    trash. storage/base.py's KeyedStore is this and whole entries (and copies) in and out.

    Every write of a value is a version (memory/notes/keyed.Version: value, category, when, the door it
    came through), numbered from 1 per key; a key keeps its last `memory.versions` of them. A delete moves
    the memory, versions and all, to the trash, from which `untrash` brings it back whole; only `purge`
    removes it (the gateway purges what was deleted `memory.trashDays` ago). Setting a key that is in
    the trash takes it out: its trashed value stays a version. `by`: the door a write came through.

    Errors: Invalid for a bad key, category or value, NotFound for a key that has no memory (and, for
    the trash, none there), Conflict for `untrash` of a key that is live."""

    async def find(self, key: str) -> Entry | None: ...
    async def get(self, key: str) -> Entry: ...
    async def set(
        self, key: str, value: str, category: str | None, by: str = "", principal: str | None = None
    ) -> tuple[Entry, bool, str | None]:
        """Create or replace: (the entry, whether it replaced one, the category it moved from if it did).
        The new version records `by` (the door) and `principal` (who)."""

    async def delete(self, key: str, by: str = "") -> Entry:
        """Move the memory to the trash; the entry as it was."""

    async def list(self, category: str | None, limit: int, offset: int) -> dict[str, Any]:
        """{"memories": [brief, …] newest first, "total": n}."""

    async def history(self, key: str) -> builtins.list[Version]:
        """The key's kept versions, newest first (the first is its value now, or when it was deleted),
        live or in the trash (what memory.history and an export read)."""

    async def trash(self) -> builtins.list[KeyedCopy]:
        """What is in the trash (each whole: entry, versions, when deleted and by which door), the most
        recently deleted first."""

    async def untrash(self, key: str) -> Entry:
        """Bring a trashed memory back whole: value, category, created and updated as they were."""

    async def purge(self, keys: Sequence[str] | None = None, before: str | None = None) -> builtins.list[str]:
        """Remove from the trash for good: `keys` (each must be there), or all; with `before`, only what
        was deleted before that time. The keys purged."""

    async def reconcile(self, key: str | None = None) -> int:
        """Bring the workspace files in line with the record before they are indexed (`key`: the one
        another gateway changed; None: all). The number of files changed (0 where the files are the record)."""


class NoteRecord(Protocol):
    """One agent's notes — MEMORY.md, memory.md, LEARNINGS.md and memory/**/*.md (day files included; not
    memory/keyed/ nor memory/images/, which keyed memories and images own) — as the engine keeps them,
    with their versions (memory/notes/history.py's NoteVersion: text, when, the door, who).

    The files engine keeps the plain workspace folder (and the versions memory.write made in the state
    dir). PostgreSQL keeps each note and its versions in rows, every gateway's folder a working mirror:
    `reconcile` takes a file changed on disk (an editor, memory.learn, a day file's flush) into the
    record as a new version and writes the record's newer notes to disk; two edits of one note at once
    both stay, the later current and the earlier a version.

    Errors: Invalid for a path memory.write may not write or a text it may not hold, NotFound where a
    note has no versions."""

    async def write(
        self, rel: str, text: str, by: str = "", principal: str | None = None, limit: int = MAX_NOTE_BYTES
    ) -> dict[str, Any]:
        """Replace (or create) note `rel` (already checked: writable, or — a restore — in the record) with
        `text` of at most `limit` bytes (memory.write's MAX_NOTE_BYTES; a restore's memory.maxFileBytes),
        a new version by the door `by` and `principal`; → {path, size, created}. What the file held, if
        edited by hand and not yet recorded, is kept as a version first."""

    async def versions(self, rel: str) -> builtins.list[NoteVersion]:
        """The note's versions, oldest first; the newest is what it holds now, if it is not deleted. [] for
        a note never written."""

    async def current(self, rel: str) -> int | None:
        """Which version is the note's text now; None for a note deleted (or never written): its versions
        are all past ones (memory.history's `current`)."""

    async def reconcile(self, rel: str | None = None) -> int:
        """Bring the folder and the record in line (`rel`: the one note another gateway changed; None:
        all); the number of notes taken in or written out (0 where the folder is the record). A file
        missing here is left alone: a folder may blink (`forget_gone` takes a deletion in)."""

    async def forget_gone(self) -> int:
        """After a sync confirmed the files missing from the folder gone (it looks twice before it
        removes much): their notes leave the record, their versions stay. How many."""

    # A forget_gone that could not read the folder (a scan error is no answer: it removed nothing): the
    # next sync runs it again, whether or not that sync removes files.
    forget_owed: bool
    # The folder's notes go by name (sources.Scan `by_name`: each name of a hard link, no symlinked file,
    # nothing through a linked folder): where each gateway's folder is a mirror of one record.
    by_name: bool
