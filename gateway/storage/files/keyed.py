"""The files engine's KeyedStore (storage/base.py): the markdown files of memory/notes/keyed.py are the
record. Their work blocks (flock, fsync), so each call runs in a thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ...memory.notes.keyed import Entry, KeyedFiles


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
