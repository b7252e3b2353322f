"""The notes' part of `jarvis migrate` (storage/migrate.py), and the statuses every part reports.

Each note (MEMORY.md, LEARNINGS.md, memory/**/*.md) goes whole, with its versions, through NoteStore
(`copies`, `import_copies`); one whose text differs at the destination is left there as it is (a
conflict); each copied one is read back.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import ADDED, IDENTICAL_NOTE, PRESENT, NoteStore

COPIED, WOULD_COPY, IDENTICAL, CONFLICT, FAILED = "copied", "would copy", "identical", "conflict", "failed"


@dataclass
class NoteEntry:
    """One note's outcome."""

    agent: str
    path: str
    versions: int = 0
    status: str = ""
    detail: str = ""
    verified: bool | None = None

    @property
    def name(self) -> str:
        return f"{self.agent}/{self.path}"


async def copy_notes(src: NoteStore, dst: NoteStore, agent: str, dry_run: bool) -> list[NoteEntry]:
    """The agent's notes from `src` to `dst`: each note's outcome."""
    copies = await src.copies()
    entries = [NoteEntry(agent, c.path, len(c.versions)) for c in copies]
    done = await dst.import_copies(copies, dry_run) if copies else []
    for e, outcome in zip(entries, done):
        if outcome.status == ADDED:
            e.status = WOULD_COPY if dry_run else COPIED
        elif outcome.status == PRESENT and outcome.detail == IDENTICAL_NOTE:
            e.status = IDENTICAL
        elif outcome.status == PRESENT:
            e.status, e.detail = CONFLICT, f"{outcome.detail}; left unchanged"
        else:
            e.status, e.detail = FAILED, f"{outcome.detail}; not copied"
    copied = [(e, c) for e, c in zip(entries, copies) if e.status == COPIED]
    if copied:
        back = {b.path: b for b in await dst.copies()}
        for e, c in copied:
            there = back.get(c.path)
            e.verified = (
                there is not None and bool(there.versions) and there.versions[-1].content == c.versions[-1].content
            )
            if not e.verified:
                e.status, e.detail = FAILED, "the copy differs from its source (its text read back)"
    return entries
