"""The workspace's notes as files, for a notes browser and editor (`memory.files`, `memory.write`).

    list_files(workspace)            every memory file the index holds: [{path, size, modified, writable}]
    write_file(workspace, path, text)   replace (or create) one note, atomically

Writable are `MEMORY.md` and `memory/**/*.md` — the same paths `memory.get` reads, less LEARNINGS.md
(memory.learn keeps its sections) and `memory/keyed/` and `memory/images/` (memory.set and
memory.setImage own those files, and with PostgreSQL they are mirrors of rows). A write is atomic
(temp + fsync + rename) under the file's flock, never follows a symlink, never leaves the workspace,
and holds at most MAX_NOTE_BYTES. Blocking: call in a thread; then re-index (the methods do).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ...errors import Invalid
from ...fsutil import atomic_write, ensure_dir, locked
from ..index.sources import Scan, clean_relative
from ...timeutil import to_iso
from ..layout import IMAGES_DIR, KEYED_DIR, NOTES_DIR, is_note
from .history import NoteHistory

MAX_NOTE_BYTES = 256 * 1024  # what memory.get returns of a file at most, so a note read is a note whole
_OWNED = (KEYED_DIR + "/", IMAGES_DIR + "/")


def writable(rel: str) -> bool:
    return (rel == "MEMORY.md" or (rel.startswith(NOTES_DIR + "/") and rel.endswith(".md"))) and not rel.startswith(
        _OWNED
    )


def in_record(rel: str) -> bool:
    """A note the engine's NoteRecord holds (memory/ports.py): a memory file that keyed memories and
    images do not own — MEMORY.md, memory.md, LEARNINGS.md, memory/**/*.md."""
    return is_note(rel) and not rel.startswith(_OWNED)


def list_files(workspace: Path, by_name: bool = False) -> list[dict]:
    out = []
    for f in Scan(workspace, by_name=by_name).memory().files():
        modified = datetime.fromtimestamp(f.mtime_ns / 1e9, timezone.utc).isoformat(timespec="milliseconds")
        out.append(
            {"path": f.path, "size": f.size, "modified": modified.replace("+00:00", "Z"), "writable": writable(f.path)}
        )
    return out


def writable_path(path: str) -> str:
    """`path` made workspace-relative, if memory.write may write it; else Invalid saying who owns it."""
    rel = clean_relative(path)
    if not writable(rel):
        owner = (
            "memory.set"
            if rel.startswith(KEYED_DIR + "/")
            else "memory.setImage"
            if rel.startswith(IMAGES_DIR + "/")
            else None
        )
        raise Invalid(
            f"{rel} is written by {owner}; change it there"
            if owner
            else "only MEMORY.md and memory/**/*.md notes can be written",
            field="path",
        )
    return rel


def recorded_path(path: str) -> str:
    """`path` made workspace-relative, if it is a note the record keeps versions of (`in_record`: what
    memory.history reads and memory.restore writes again); else Invalid."""
    rel = clean_relative(path)
    if not in_record(rel):
        raise Invalid(
            f"{rel} is written by memory.set: a keyed memory's versions are memory.history {{key}}'s"
            if rel.startswith(KEYED_DIR + "/")
            else f"{rel} is written by memory.setImage, which keeps no versions"
            if rel.startswith(IMAGES_DIR + "/")
            else "only MEMORY.md, memory.md, LEARNINGS.md and memory/**/*.md notes have versions",
            field="path",
        )
    return rel


def read_note(workspace: Path, rel: str) -> tuple[str | None, str]:
    """The note's text (None: no such regular file) and when it was last modified."""
    target = workspace / rel
    try:
        if target.is_symlink() or not target.is_file():
            return None, ""
        modified = datetime.fromtimestamp(target.stat().st_mtime, timezone.utc)
        return target.read_bytes().decode("utf-8", errors="replace"), to_iso(modified)
    except OSError:
        return None, ""


def check_content(text: str, limit: int = MAX_NOTE_BYTES) -> bytes:
    """A note's text as it is stored (UTF-8), or Invalid naming the rule it breaks. `limit`: memory.write's
    MAX_NOTE_BYTES; a restore's is memory.maxFileBytes, what the record takes a note up to."""
    data = text.encode("utf-8")
    if len(data) > limit:
        raise Invalid(f"must be at most {limit} bytes of UTF-8, got {len(data)}", field="content")
    if "\x00" in text:
        raise Invalid("must not contain NUL characters", field="content")
    return data


def _target(workspace: Path, rel: str) -> Path:
    """Where note `rel` goes, its folders made; refused where a folder resolves outside the workspace, or
    is reached through a symlink inside it: a note is its folder's by name, and a linked folder (this
    machine's own arrangement) is never written through — the scan never enters one either."""
    root = workspace.resolve()
    target = workspace / rel
    existing = target.parent
    while not existing.exists() and existing != workspace:
        existing = existing.parent
    for folder in (existing, target.parent):  # before creating folders, and after (a swap meanwhile)
        real_dir = Path(os.path.realpath(folder))
        if real_dir != root and root not in real_dir.parents:
            raise Invalid("its folder resolves outside the workspace (symlink); refused", field="path")
        if real_dir != root / folder.relative_to(workspace):
            raise Invalid("a folder on its way is a symlink; a note is never written through one", field="path")
        ensure_dir(target.parent)
    return target


def put_file(workspace: Path, rel: str, data: bytes) -> bool:
    """Write note `rel` (a mirror of a record: any note path, checked by the caller) atomically under its
    lock, never through a symlink; whether it was created."""
    target = _target(workspace, rel)
    with locked(target):
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise Invalid("is a symlink or not a regular file; refused", field="path")
        created = not target.exists()
        atomic_write(target, data)
    return created


def write_file(
    workspace: Path,
    path: str,
    text: str,
    history: NoteHistory | None = None,
    by: str = "",
    principal: str | None = None,
    *,
    check: Callable[[str], str] = writable_path,
    limit: int = MAX_NOTE_BYTES,
) -> dict:
    """Replace (or create) the note at `path` with `text`; → {path, size, created}. `history`: where the
    text it replaces and the new one are kept as versions (`by`: the door the write came through).
    `check`, `limit`: the path's and the text's rules (memory.write's; a restore's are `recorded_path`
    and memory.maxFileBytes)."""
    rel = check(path)
    data = check_content(text, limit)
    target = _target(workspace, rel)
    with locked(target):
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise Invalid("is a symlink or not a regular file; refused", field="path")
        created = not target.exists()
        before, before_at = read_note(workspace, rel) if history is not None else (None, "")
        atomic_write(target, data)
        if history is not None:
            history.record(rel, before, before_at, text, by, principal)
    return {"path": rel, "size": len(data), "created": created}
