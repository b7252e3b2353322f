"""The files engine's NoteRecord (memory/ports.py): the notes are the workspace folder itself, as they
always were; memory.write keeps the versions it replaces in the state dir (memory/notes/history.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Sequence

from ...memory.index.sources import ScanError, scan_memory
from ...memory.notes import files
from ...memory.notes.history import NoteHistory, NoteVersion
from ...memory.notes.keyed import VersionLimits
from ..base import ADDED, IDENTICAL_NOTE, PRESENT, REFUSED, Imported, NoteCopy


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

    async def forget_gone(self) -> int:
        """A file deleted is a note deleted: nothing more to do."""
        return 0

    forget_owed = False
    by_name = False  # the folder is the record: a file reached by two names is one note, as indexed

    # ---- whole notes (`jarvis migrate`) --------------------------------------------------------------
    async def copies(self) -> list[NoteCopy]:
        def run() -> list[NoteCopy]:
            try:
                found = scan_memory(self.workspace)
            except ScanError:
                return []
            out = []
            for f in sorted(found, key=lambda f: f.path):
                if not files.in_record(f.path):
                    continue
                try:
                    text = (self.workspace / f.path).read_bytes().decode("utf-8")
                except UnicodeDecodeError:
                    out.append(NoteCopy(f.path, (), "not UTF-8 text"))
                    continue
                except OSError as exc:
                    out.append(NoteCopy(f.path, (), f"unreadable: {exc.strerror or exc}"))
                    continue
                current_at = files.read_note(self.workspace, f.path)[1]
                out.append(NoteCopy(f.path, tuple(self.history.versions(f.path, text, current_at))))
            return out

        return await asyncio.to_thread(run)

    async def import_copies(self, copies: Sequence[NoteCopy], dry_run: bool = False) -> list[Imported]:
        def run() -> list[Imported]:
            out = []
            for c in copies:
                if c.problem or not c.versions or not files.in_record(c.path):
                    out.append(Imported(REFUSED, c.problem or "no text to copy"))
                    continue
                current = c.versions[-1].content
                there, _ = files.read_note(self.workspace, c.path)
                if there is not None and there != current:
                    out.append(Imported(PRESENT, "another text is there"))
                    continue
                if there is not None and len(self.history.recorded(c.path)) >= len(c.versions):
                    out.append(Imported(PRESENT, IDENTICAL_NOTE))
                    continue
                if not dry_run:  # the text (where it is not there yet) and its versions
                    if there is None:
                        files.put_file(self.workspace, c.path, current.encode("utf-8"))
                    self.history.put(c.path, list(c.versions))
                out.append(Imported(ADDED))
            return out

        return await asyncio.to_thread(run)
