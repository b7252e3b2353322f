"""The files engine's KeyedStore (storage/base.py): the markdown files of memory/notes/keyed.py are the
record. Their work blocks (flock, fsync), so each call runs in a thread."""

from __future__ import annotations

import asyncio
import builtins
from pathlib import Path
from typing import Any, Sequence

from ...errors import Invalid
from ...fsutil import atomic_write, locked
from ...memory.notes.keyed import Entry, KeyedFiles, check_entry, render
from ..base import ADDED, PRESENT, REFUSED, Imported


class FileKeyedStore:
    def __init__(self, workspace: Path):
        self.files = KeyedFiles(workspace)

    async def find(self, key: str) -> Entry | None:
        return await asyncio.to_thread(self.files.find, key)

    async def get(self, key: str) -> Entry:
        return await asyncio.to_thread(self.files.get, key)

    async def set(self, key: str, value: str, category: str | None) -> tuple[Entry, bool, str | None]:
        return await asyncio.to_thread(self.files.set, key, value, category)

    async def delete(self, key: str) -> Entry:
        return await asyncio.to_thread(self.files.delete, key)

    async def list(self, category: str | None, limit: int, offset: int) -> dict[str, Any]:
        return await asyncio.to_thread(self.files.list, category, limit, offset)

    async def reconcile(self, key: str | None = None) -> int:
        """Nothing to do: the files are the record."""
        return 0

    async def entries(self) -> builtins.list[Entry]:
        return await asyncio.to_thread(self.files.all)

    async def import_entries(self, entries: Sequence[Entry], dry_run: bool = False) -> builtins.list[Imported]:
        return await asyncio.to_thread(self._import, entries, dry_run)

    def _import(self, entries: Sequence[Entry], dry_run: bool) -> builtins.list[Imported]:
        out = []
        with locked(self.files.root):
            for e in entries:
                try:
                    check_entry(e.key, e.value, e.category)
                except Invalid as exc:
                    out.append(Imported(REFUSED, exc.message))
                    continue
                if self.files._found(e.key):
                    out.append(Imported(PRESENT, "a keyed memory of this key is there"))
                    continue
                if not dry_run:
                    atomic_write(
                        self.files._file(e.category, e.key), render(e.key, e.category, e.value, e.created, e.updated)
                    )
                out.append(Imported(ADDED))
        return out
