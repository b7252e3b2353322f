"""The files engine's NoteRecord (memory/ports.py): the notes are the workspace folder itself, as they
always were; memory.write keeps the versions it replaces in the state dir (memory/notes/history.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from ...errors import Invalid
from ...memory.index.sources import ScanError, scan_memory
from ...memory.notes import files
from ...memory.notes.history import NoteHistory, NoteVersion
from ...memory.notes.keyed import VersionLimits
from ..base import ADDED, IDENTICAL_NOTE, PRESENT, REFUSED, Imported, NoteCopy


class FileNotes:
    def __init__(self, workspace: Path, history_dir: Path, limits: VersionLimits):
        self.workspace = workspace
        self.history = NoteHistory(history_dir, limits)

    async def write(
        self, rel: str, text: str, by: str = "", principal: str | None = None, limit: int = files.MAX_NOTE_BYTES
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:  # `rel` checked by the caller (writable, or in the record: a restore)
            return files.write_file(
                self.workspace, rel, text, self.history, by, principal, check=files.recorded_path, limit=limit
            )

        return await asyncio.to_thread(run)

    def _versions(self, rel: str) -> tuple[list[NoteVersion], bool]:
        current, at = files.read_note(self.workspace, rel)
        return self.history.versions(rel, current, at), current is not None

    async def versions(self, rel: str) -> list[NoteVersion]:
        return (await asyncio.to_thread(self._versions, rel))[0]

    async def current(self, rel: str) -> int | None:
        """The newest version while the file is there (versions() makes its text the newest)."""
        versions, there = await asyncio.to_thread(self._versions, rel)
        return versions[-1].version if there and versions else None

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
                problem = None if dry_run else self._put(c, there is None)
                out.append(Imported(REFUSED, problem) if problem else Imported(ADDED))
            return out

        return await asyncio.to_thread(run)

    def _put(self, c: NoteCopy, new: bool) -> str | None:
        """The copy's versions, then its text (where it is not there yet), read back; None where they
        hold it, else why not. A note deleted here kept its versions: the copy's go on after them
        (renumbered). Undone (the versions as they were, no file made) where a write or the read back fails."""
        rel, current = c.path, c.versions[-1].content
        before = self.history.recorded(rel)
        versions = list(c.versions)
        if new and before:
            shift = max(0, before[-1].version + 1 - versions[0].version)
            versions = [*before, *(replace(v, version=v.version + shift) for v in versions)]
        made = False
        try:
            self.history.put(rel, versions)
            if new:
                made = files.put_file(self.workspace, rel, current.encode("utf-8"))
            kept = self.history.recorded(rel)
            if files.read_note(self.workspace, rel)[0] == current and kept and kept[-1].content == current:
                return None
            problem = "its text read back is not its current version's; not copied"
        except (Invalid, OSError) as exc:
            problem = f"not written ({exc}); not copied"
        except BaseException:
            self._undo(rel, before, made)
            raise
        self._undo(rel, before, made)
        return problem

    def _undo(self, rel: str, before: list[NoteVersion], made: bool) -> None:
        self.history.put(rel, before)
        if made:
            (self.workspace / rel).unlink(missing_ok=True)
