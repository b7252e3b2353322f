"""Markdown into an agent's workspace: an Obsidian or Logseq vault (`jarvis import markdown DIR`), and the
notes of a Jarvis export (archive.py) back where they were.

A vault is copied under `memory/<folder>/` (default: the vault's folder name, made a safe name), keeping
its layout, its front matter and its `[[wiki links]]` byte for byte, so the memory index holds it like any
note. What is left out, counted by why: hidden folders and files (`.obsidian/`, `.trash/`, `.git/`),
Logseq's backups (`logseq/bak/`, `logseq/version-files/`), files that are not markdown (`.md`), files
that are not UTF-8 text, and files over `memory.maxFileBytes` (the index would not hold them).

Copied, not linked: the memory index follows no symlink that leaves the workspace (memory/index/sources.py),
on purpose, so a link to a vault elsewhere would never be indexed.

Importing again is safe: `memory/<folder>/.jarvis-import.json` remembers the SHA-256 of every file as it
was copied. A file the vault changed since is updated — unless it was edited here too, which is a
conflict: left as it is, and reported. A file deleted here since it was imported is not copied back. A
file identical on both sides is unchanged. Every write is atomic (temp file, fsync, rename), owner-only.
Everything here blocks: run it in a thread.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

import orjson

from ..fsutil import atomic_write, ensure_private_dir
from ..memory.layout import KEYED_DIR, NOTES_DIR, ROOT_FILES
from .conversation import BadExport

STATE_FILE = ".jarvis-import.json"
SHOWN = 50
FOLDER = r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}(/[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}){0,3}"
_FOLDER = re.compile(FOLDER)
_SKIP_DIRS = {("logseq", "bak"), ("logseq", "version-files")}


@dataclass
class NotesTally:
    found: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    conflicts: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    named: list[dict[str, str]] = field(default_factory=list)  # conflicts and skipped files, some of them
    bytes: int = 0

    def note(self, path: str, reason: str) -> None:
        if len(self.named) < SHOWN:
            self.named.append({"path": path, "reason": reason})

    def as_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "conflicts": self.conflicts,
            "skipped": sum(self.skipped.values()),
            "skippedWhy": dict(self.skipped.most_common()),
            "files": self.named,
            "bytes": self.bytes,
        }


def default_folder(source: Path) -> str:
    """`memory/<this>/`: the vault folder's name as a safe name ("My Vault" → "My Vault", "…/.x" → "vault")."""
    name = re.sub(r"[^A-Za-z0-9 ._-]+", "-", source.stem if source.is_file() else source.name).strip(" .-_")
    return name[:100] or "vault"


def check_folder(folder: str, at: str = "folder") -> str:
    from ..errors import Invalid

    if not _FOLDER.fullmatch(folder) or any(p in (".", "..") or p.endswith(" ") for p in folder.split("/")):
        raise Invalid("must be a relative folder of 1-4 names of letters, digits, space, '.', '_' or '-'", at)
    if f"{NOTES_DIR}/{folder}".startswith(KEYED_DIR) or folder.split("/")[0] in ("keyed", "images"):
        raise Invalid("keyed/ and images/ hold the gateway's own files; choose another folder", at)
    return folder


# ---- what a vault holds ----------------------------------------------------------------------------


def vault_files(source: Path) -> Iterator[tuple[str, Callable[[], bytes], int]]:
    """(relative path, read its bytes, size) of every file of a vault folder or a vault zip, in path order;
    hidden entries and Logseq's backups are left out here."""
    if source.is_dir():
        for root, dirs, files in os.walk(source):  # never into symlinked folders (followlinks False)
            rel_root = PurePosixPath(Path(root).relative_to(source).as_posix())
            dirs[:] = sorted(
                d
                for d in dirs
                if not d.startswith(".") and (rel_root.parts[-1:] + (d,)) not in _SKIP_DIRS and d != "__MACOSX"
            )
            for name in sorted(files):
                if name.startswith("."):
                    continue
                full = Path(root) / name
                if full.is_symlink() or not full.is_file():
                    continue
                rel = (rel_root / name).as_posix()
                yield rel, full.read_bytes, full.stat().st_size
        return
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadExport(f"not a folder or a readable zip file ({exc})", where=source.name) from None
    with zf:
        infos = sorted((i for i in zf.infolist() if not i.is_dir()), key=lambda i: i.filename)
        prefix = _common_root([i.filename for i in infos])
        for info in infos:
            rel = info.filename[len(prefix) :]
            parts = PurePosixPath(rel).parts
            if not rel or any(p.startswith(".") or p in ("..", "__MACOSX") for p in parts) or rel.startswith("/"):
                continue
            if any(parts[i : i + 2] in _SKIP_DIRS for i in range(len(parts) - 1)):
                continue
            yield rel, functools.partial(zf.read, info), info.file_size


def _common_root(names: list[str]) -> str:
    """A zip of a vault folder holds `Vault/…`: that folder is the vault's root."""
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) == 1 and all("/" in n for n in names):
        return tops.pop() + "/"
    return ""


# ---- copying ----------------------------------------------------------------------------------------


def import_vault(
    source: Path,
    workspace: Path,
    folder: str,
    *,
    max_file_bytes: int,
    dry_run: bool,
    tick: Callable[[NotesTally], None] = lambda t: None,
) -> dict[str, Any]:
    """Copy a vault's markdown under `<workspace>/memory/<folder>/` (see the module docstring)."""

    def why_not(rel: str, size: int) -> str | None:
        if not rel.lower().endswith(".md"):
            return f"not markdown ({PurePosixPath(rel).suffix.lower() or 'no extension'})"
        if size > max_file_bytes:
            return "over memory.maxFileBytes"
        return None

    target = workspace / NOTES_DIR / folder
    tally = copy_files(vault_files(source), target, target / STATE_FILE, why_not, dry_run=dry_run, tick=tick)
    return {"folder": f"{NOTES_DIR}/{folder}", **tally.as_dict()}


def copy_files(
    items: Iterator[tuple[str, Callable[[], bytes], int]],
    base: Path,
    state_file: Path,
    why_not: Callable[[str, int], str | None],
    *,
    dry_run: bool,
    text_only: bool = True,
    tick: Callable[[NotesTally], None] = lambda t: None,
) -> NotesTally:
    """Copy each (relative path, read, size) to `base/<path>` unless `why_not` gives a reason, keeping the
    SHA-256 of what was copied in `state_file` (see `place` for what is never overwritten). `text_only`:
    a file that is not UTF-8 is left out."""
    tally = NotesTally()
    state = _read_state(state_file)
    seen: dict[str, str] = {}
    for rel, read, size in items:
        tally.found += 1
        reason = why_not(rel, size)
        if reason is not None:
            tally.skipped[reason] += 1
            if not reason.startswith("not markdown"):
                tally.note(rel, reason)
            continue
        data = read()
        if text_only:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                tally.skipped["not UTF-8 text"] += 1
                tally.note(rel, "not UTF-8 text")
                continue
        outcome = place(base / rel, data, state.get(rel), dry_run)
        _count(tally, rel, outcome, len(data))
        if outcome in ("added", "updated", "unchanged"):
            seen[rel] = _sha(data)
        tick(tally)
    if not dry_run and seen and seen.items() - state.items():
        ensure_private_dir(state_file.parent)
        atomic_write(state_file, orjson.dumps({**state, **seen}, option=orjson.OPT_SORT_KEYS))
    return tally


def place(dest: Path, data: bytes, imported_sha: str | None, dry_run: bool) -> str:
    """Put `data` at `dest` unless that would lose something: → "added", "updated", "unchanged",
    "conflict" (`dest` was changed here since it was imported, or holds other text and was never
    imported) or "deleted" (it was imported once and deleted here since)."""
    try:
        have = dest.read_bytes()
    except FileNotFoundError:
        have = None
    except IsADirectoryError:
        return "conflict"
    if have is None:
        if imported_sha is not None:
            return "deleted"
        if not dry_run:
            _write(dest, data)
        return "added"
    if have == data:
        return "unchanged"
    if imported_sha is None or _sha(have) != imported_sha:
        return "conflict"
    if not dry_run:
        _write(dest, data)
    return "updated"


def _write(dest: Path, data: bytes) -> None:
    for parent in reversed(dest.parents):
        if not parent.exists():
            ensure_private_dir(parent)
    atomic_write(dest, data)


def _count(tally: NotesTally, rel: str, outcome: str, size: int) -> None:
    if outcome == "added":
        tally.added += 1
        tally.bytes += size
    elif outcome == "updated":
        tally.updated += 1
        tally.bytes += size
    elif outcome == "unchanged":
        tally.unchanged += 1
    elif outcome == "conflict":
        tally.conflicts += 1
        tally.note(rel, "changed here and in the source: left as it is here")
    else:
        tally.skipped["deleted here since the last import"] += 1


def _read_state(path: Path) -> dict[str, str]:
    try:
        state = orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    return (
        {k: v for k, v in state.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(state, dict) else {}
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_exported_note(rel: str) -> bool:
    """Whether an archive's `notes/<rel>` may go back into a workspace: a root memory file, or a file under
    memory/ other than a keyed memory's (those come back through the keyed store), no `..`."""
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return False
    if rel in ROOT_FILES:
        return True
    return parts[0] == NOTES_DIR and len(parts) > 1 and not rel.startswith(KEYED_DIR + "/")
