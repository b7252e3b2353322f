"""`jarvis backup DEST`: a consistent copy of the state dir, safe while the gateway runs.

What is copied, into the same layout under DEST (a new directory; dirs 0700, files 0600):

    config.toml, gateway.token
    agents/<agentId>/sessions/sessions.json      read once (the gateway replaces it atomically)
    agents/<agentId>/sessions/*.jsonl            up to the last complete line (appends are never torn)
    agents/<agentId>/memory.sqlite               SQLite online backup API: a transaction-consistent
                                                 snapshot, taken page by page without the vec extension
    agents/<agentId>/trash/sessions.json, trash/sessions/*.jsonl
                                                 the trash: read together with sessions.json as one
                                                 moment, transcripts wherever a delete or restore moved them
    agents/<agentId>/history/**/*.json           keyed memories' and notes' versions, the keyed trash
    workspace/MEMORY.md, memory.md, LEARNINGS.md, memory/**/*.md, memory/images/*.png|jpg,
              agents/<id>/… (the same)      the notes the memory index is built from

Session metadata is copied before the transcripts, so every session it lists has its transcript in the
copy (a session deleted or restored meanwhile is where the copied metadata says once the gateway opens
it: storage/files/sessions.py finishes such moves). The copy is assembled in DEST.partial-… and renamed to DEST at the end: an interrupted backup
never leaves a half-filled DEST. Restore = stop the gateway, put the directory in place of the state
dir, start it (docs/operations.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config
from ..storage.files.memory.db import index_driver

DIR_MODE, FILE_MODE = 0o700, 0o600
COPY_CHUNK = 1 << 20


class BackupError(Exception):
    """The backup could not be made; the message says why and nothing was left at DEST."""


@dataclass
class BackupReport:
    dest: Path
    files: list[Path] = field(default_factory=list)  # relative to dest
    transcripts: int = 0
    indexes: int = 0
    bytes: int = 0

    def summary(self) -> str:
        return (
            f"backed up {len(self.files)} files ({self.bytes / 1e6:.1f} MB) to {self.dest}: "
            f"{self.transcripts} transcripts, {self.indexes} memory index(es)"
        )


def _private_dir(path: Path) -> None:
    """Create `path` and every missing parent 0700 (mkdir's parents=True would apply the umask)."""
    if path.is_dir():
        return
    _private_dir(path.parent)
    path.mkdir(mode=DIR_MODE)
    os.chmod(path, DIR_MODE)


def _open_private(path: Path):
    _private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)  # whatever the umask
    return os.fdopen(fd, "wb")


class _Copier:
    def __init__(self, source_root: Path, dest_root: Path, report: BackupReport, sqlite: Any):
        self.source_root = source_root
        self.dest_root = dest_root
        self.report = report
        # The SQLite module the gateway uses for the index: two SQLite libraries in one process do not
        # see each other's POSIX locks, and one's close drops the other's (backup_state may run inside a
        # process that has the index open).
        self.sqlite_module = sqlite

    def _done(self, target: Path, src: Path) -> None:
        shutil.copystat(src, target, follow_symlinks=False)  # mtimes: an unchanged file is not re-indexed
        os.chmod(target, FILE_MODE)
        self.report.files.append(target.relative_to(self.dest_root))
        self.report.bytes += target.stat().st_size

    def whole_file(self, src: Path, rel: Path) -> None:
        """A small file the gateway replaces atomically (or never changes): one read is consistent."""
        try:
            data = src.read_bytes()
        except FileNotFoundError:
            return  # optional file, or deleted since the listing
        target = self.dest_root / rel
        with _open_private(target) as out:
            out.write(data)
        self._done(target, src)

    def session_lists(self, sessions: Path, trash: Path, rel: Path) -> None:
        """sessions.json and the trash's list as of one moment: each write of sessions.json (the
        gateway's, under its lock) gives it a new generation, so the same bytes before and after the
        trash's list was read mean nothing moved in between."""
        for _ in range(100):
            before = _read_or_none(sessions)
            listed = _read_or_none(trash)
            if _read_or_none(sessions) == before:
                break
        else:
            raise BackupError(f"{sessions} changed during 100 reads in a row; try again")
        for src, data, name in ((sessions, before, "sessions"), (trash, listed, "trash")):
            if data is not None:
                target = self.dest_root / rel / name / "sessions.json"
                with _open_private(target) as out:
                    out.write(data)
                self._done(target, src)

    def complete_lines(self, src: Path, rel: Path) -> None:
        """An append-only JSONL file, up to its last '\\n': a line being written right now is left out."""
        try:
            fh = open(src, "rb")
        except FileNotFoundError:
            return  # the session was deleted since the listing
        target = self.dest_root / rel
        with fh, _open_private(target) as out:
            size = os.fstat(fh.fileno()).st_size
            pending = b""
            remaining = size
            while remaining > 0:
                chunk = fh.read(min(COPY_CHUNK, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                data = pending + chunk
                cut = data.rfind(b"\n") + 1
                out.write(data[:cut])
                pending = data[cut:]
        self._done(target, src)
        self.report.transcripts += 1

    def sqlite(self, src: Path, rel: Path) -> None:
        """The memory index through SQLite's online backup API (consistent even mid-write)."""
        if not src.is_file():
            return
        target = self.dest_root / rel
        _private_dir(target.parent)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        os.close(fd)
        try:
            sqlite3 = self.sqlite_module
            source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=30)
            try:
                copy = sqlite3.connect(target)
                try:
                    source.backup(copy, pages=1024)  # in steps: the gateway's writers are not held off long
                    check = copy.execute("PRAGMA quick_check").fetchone()[0]
                finally:
                    copy.close()
            finally:
                source.close()
        except self.sqlite_module.Error as exc:
            raise BackupError(f"{src}: SQLite backup failed: {exc}") from exc
        if check != "ok":
            raise BackupError(f"{src}: the copy of the memory index failed its integrity check: {check}")
        os.chmod(target, FILE_MODE)
        self.report.files.append(rel)
        self.report.bytes += target.stat().st_size
        self.report.indexes += 1


def _memory_files(workspace: Path, _agents: bool = True) -> list[Path]:
    """The workspace's memory sources, relative: MEMORY.md, memory.md, LEARNINGS.md, memory/**/*.md,
    the images of memory/images/, and the same of every agent workspace agents/<id>/ (no symlinks)."""
    found = [Path(name) for name in ("MEMORY.md", "memory.md", "LEARNINGS.md") if (workspace / name).is_file()]
    notes = workspace / "memory"
    if notes.is_dir() and not notes.is_symlink():
        for path in sorted(notes.rglob("*")):
            if (
                path.is_file()
                and not path.is_symlink()
                and (path.suffix == ".md" or (path.parent == notes / "images" and path.suffix in (".png", ".jpg")))
            ):
                found.append(path.relative_to(workspace))
    if _agents:
        for agent in _subdirs(workspace / "agents"):
            found += [agent.relative_to(workspace) / f for f in _memory_files(agent, _agents=False)]
    return found


def backup_state(config: Config, dest: Path) -> BackupReport:
    """Copy the state dir of `config` into the new directory `dest`. Raises BackupError."""
    state = config.state_dir.expanduser().absolute()
    dest = dest.expanduser().absolute()
    if not state.is_dir():
        raise BackupError(f"state directory {state} does not exist; nothing to back up")
    if _is_within(dest, state):
        raise BackupError(f"{dest} is inside the state directory {state}; choose a place outside it")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} already exists and is not an empty directory; choose a new path")
    if not dest.parent.is_dir():
        raise BackupError(f"{dest.parent} does not exist")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    os.chmod(staging, DIR_MODE)
    report = BackupReport(dest)
    try:
        copier = _Copier(state, staging, report, index_driver(config.memory.search.vector_backend).module)
        copier.whole_file(state / "config.toml", Path("config.toml"))
        copier.whole_file(config.token_file, Path("gateway.token"))
        for agent in _subdirs(state / "agents"):
            rel = agent.relative_to(state)
            sessions, trash = agent / "sessions", agent / "trash"
            copier.session_lists(sessions / "sessions.json", trash / "sessions.json", rel)
            # The trash's transcripts before and after the live ones: one a delete or a restore moves
            # between the folders meanwhile is copied from one of them.
            for folder in (trash / "sessions", sessions, trash / "sessions"):
                for transcript in sorted(folder.glob("*.jsonl")):
                    target = rel / folder.relative_to(agent) / transcript.name
                    if not (staging / target).exists():
                        copier.complete_lines(transcript, target)
            for kept in sorted((agent / "history").rglob("*.json")):
                if kept.is_file() and not kept.is_symlink():
                    copier.whole_file(kept, kept.relative_to(state))
            copier.sqlite(agent / "memory.sqlite", rel / "memory.sqlite")
        workspace = config.workspace_dir.expanduser().absolute()
        for note in _memory_files(workspace):
            copier.whole_file(workspace / note, Path("workspace") / note)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        os.replace(staging, dest)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise BackupError(f"{exc.filename or dest}: {exc.strerror or exc}") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return report


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink()) if path.is_dir() else []


def _is_within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents
