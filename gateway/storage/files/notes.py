"""The files engine's NoteRecord (memory/ports.py): the notes are the workspace folder itself, as they
always were; memory.write keeps the versions it replaces in the state dir (memory/notes/history.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ...memory.notes import files
from ...memory.notes.history import NoteHistory, NoteVersion
from ...memory.notes.keyed import VersionLimits


class FileNotes:
    def __init__(self, workspace: Path, history_dir: Path, limits: VersionLimits):
        self.workspace = workspace
        self.history = NoteHistory(history_dir, limits)

    async def write(self, rel: str, text: str, by: str = "", principal: str | None = None) -> dict[str, Any]:
        return await asyncio.to_thread(files.write_file, self.workspace, rel, text, self.history, by, principal)

    async def versions(self, rel: str) -> list[NoteVersion]:
        def load() -> list[NoteVersion]:
            current, at = files.read_note(self.workspace, rel)
            return self.history.versions(rel, current, at)

        return await asyncio.to_thread(load)

    async def reconcile(self, rel: str | None = None) -> int:
        """The folder is the record: nothing to bring in line."""
        return 0
