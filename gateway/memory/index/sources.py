"""What the index may hold, and where it lives.

    memory    MEMORY.md, memory.md, LEARNINGS.md and memory/**/*.md in the workspace → path relative to the workspace
    sessions  <sessionsDir>/<sessionKey>.jsonl of the agent → path "sessions/<sessionKey>.jsonl"

A symlink is followed only when its target stays inside the workspace and is a .md file. The same rules
decide what `memory.get` may read, so it can never reach anything the index could not hold.

A folder that cannot be listed (EMFILE, EACCES, EIO, a network mount gone) raises ScanError: a scan
never reads "cannot look" as "nothing there", which a sync would take for every file deleted. A root
(the workspace, the sessions folder) that does not exist is empty only when the caller says nothing
of it was indexed (`must_exist`); a folder or file that vanishes while it is scanned is simply gone.
"""

from __future__ import annotations

import errno
import functools
import operator
import os
import re
import stat
from pathlib import Path
from typing import NamedTuple

from ...errors import Invalid, NotFound, Unavailable
from ...schema import SESSION_KEY
from ..layout import NOTES_DIR, ROOT_FILES, is_note

MEMORY = "memory"
SESSIONS = "sessions"
SOURCES = (MEMORY, SESSIONS)

_SESSION_KEY = re.compile(SESSION_KEY)
_IGNORED_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".obsidian", ".trash"}


_VANISHED = (errno.ENOENT, errno.ENOTDIR)
_NAME = operator.attrgetter("name")
_PATH = operator.itemgetter(0)


class ScanError(Unavailable):
    """A folder of the sources could not be read: the sync stops before it changes anything.
    `data.path` names the folder, `data.errno` the failure (EMFILE, EACCES, EIO, ENOENT, …)."""

    def __init__(self, what: str, path: Path | str, exc: OSError):
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        super().__init__(
            f"memory sync stopped: cannot read {what} {path} ({code}: {exc.strerror or exc}); "
            "nothing was removed from the index",
            retryable=True,
            retry_after_ms=5000,
        )
        assert self.data is not None
        self.data.update(path=str(path), errno=code)


class SourceFile(NamedTuple):
    path: str  # the index path (see module docstring)
    abs_path: str  # where it is on disk (a str: a Path per file was half the cost of a no-op sync's scan)
    source: str
    session_key: str | None
    size: int
    mtime_ns: int

    @property
    def abs(self) -> Path:
        return Path(self.abs_path)


def session_path(session_key: str) -> str:
    return f"{SESSIONS}/{session_key}.jsonl"


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def _memory_file(abs_path: Path, root: Path) -> os.stat_result | None:
    """stat of a memory file when it is a regular .md file whose real path stays in the workspace."""
    try:
        real = abs_path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not _inside(real, root) or real.suffix.lower() != ".md":
        return None
    try:
        st = real.stat()
    except OSError:
        return None
    if not os.path.isfile(real):
        return None
    return st


def folder_empty(folder: Path) -> bool:
    """The folder exists and holds nothing at all (the mount point of a share that is not mounted)."""
    try:
        with os.scandir(folder) as it:
            return next(it, None) is None
    except OSError:
        return False


def _root(folder: Path, what: str, must_exist: bool) -> Path | None:
    """The real path of a root folder; None when it does not exist and need not (nothing of it indexed)."""
    try:
        root = folder.resolve(strict=True)
        if not root.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        return root
    except RuntimeError as exc:  # a symlink loop
        raise ScanError(what, folder, OSError(errno.ELOOP, str(exc))) from None
    except OSError as exc:
        if exc.errno in _VANISHED and not must_exist:
            return None
        raise ScanError(what, folder, exc) from None


def scan_memory(workspace: Path, must_exist: bool = False) -> list[SourceFile]:
    """Every memory file of the workspace (blocking: run in a thread). Raises ScanError when a folder
    cannot be read, or when the workspace is missing and `must_exist` (notes of it are indexed)."""
    root = _root(workspace, "the workspace", must_exist)
    if root is None:
        return []
    scan = _MemoryScan(root)
    for name in ROOT_FILES:
        scan.add(name, str(workspace / name))
    scan.walk(workspace / NOTES_DIR, NOTES_DIR)
    return scan.out


# A SourceFile from a tuple, in C: NamedTuple's own __new__ is a Python call, a quarter of the scan's
# Python work per file.
_source_file = functools.partial(tuple.__new__, SourceFile)


class _MemoryScan:
    """One scan of the memory files: what it found, and the (device, inode) of each, so that one file
    reached twice (MEMORY.md and memory.md on a case-insensitive filesystem, a symlink to a note) counts
    once."""

    def __init__(self, root: Path):
        self.root = root
        self.dev = root.stat().st_dev
        self.out: list[SourceFile] = []
        # A file's inode on the workspace's device, (device, inode) on another (a mount inside it):
        # a set of ints is cheaper to fill than one of tuples.
        self.seen: set[int | tuple[int, int]] = set()

    def _ident(self, st: os.stat_result) -> int | tuple[int, int]:
        return st.st_ino if st.st_dev == self.dev else (st.st_dev, st.st_ino)

    def add(self, rel: str, abs_path: str) -> None:
        """A file that may be a symlink or outside the workspace: checked (`_memory_file`)."""
        st = _memory_file(Path(abs_path), self.root)
        if st is not None and self._ident(st) not in self.seen:
            self.seen.add(self._ident(st))
            self.out.append(_source_file((rel, abs_path, MEMORY, None, st.st_size, st.st_mtime_ns)))

    def walk(self, folder: Path, rel: str) -> None:
        """Depth-first, sorted, never into symlinked folders. Each folder's real path must stay in the
        workspace (one realpath per folder, so a folder swapped for a symlink mid-scan is caught); a
        regular file in it then needs no resolving, and a symlinked file gets the full check (`add`). A
        folder that does not exist (any more) holds nothing; one that cannot be listed raises ScanError."""
        if not _inside(Path(os.path.realpath(folder)), self.root):
            return
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=_NAME)
        except OSError as exc:
            if exc.errno in _VANISHED:
                return
            raise ScanError("the memory folder", folder, exc) from None
        folders = []
        prefix = rel + "/"
        seen, out, dev = self.seen, self.out, self.dev
        for e in entries:
            # As little Python per file as it takes: a no-op sync of 460k files is mostly this loop.
            name = e.name
            try:
                if e.is_dir(follow_symlinks=False):
                    if name not in _IGNORED_DIRS and not name.startswith("."):
                        folders.append(e)
                    continue
                if not name.endswith(".md") or name == ".md":
                    continue
                if e.is_symlink():
                    self.add(prefix + name, e.path)
                    continue
                if not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError as exc:
                if exc.errno in _VANISHED:
                    continue
                raise ScanError("the memory file", e.path, exc) from None
            ident = st.st_ino if st.st_dev == dev else (st.st_dev, st.st_ino)
            if ident not in seen:
                seen.add(ident)
                out.append(_source_file((prefix + name, e.path, MEMORY, None, st.st_size, st.st_mtime_ns)))
        for e in folders:  # files first, then sub-folders (as os.walk would)
            self.walk(Path(e.path), prefix + e.name)


def scan_sessions(sessions_dir: Path, only: set[str] | None = None, must_exist: bool = False) -> list[SourceFile]:
    """Every transcript `<sessionKey>.jsonl` (blocking: run in a thread). `only`: session keys. Raises
    ScanError when the folder cannot be listed, or is missing and `must_exist` (transcripts indexed)."""
    if only is not None and len(only) <= STAT_AT_MOST:
        return _stat_sessions(sessions_dir, only, must_exist)
    out: list[SourceFile] = []
    try:
        with os.scandir(sessions_dir) as it:
            entries = list(it)
    except OSError as exc:
        if exc.errno in _VANISHED and not must_exist:
            return out
        raise ScanError("the sessions folder", sessions_dir, exc) from None
    prefix = SESSIONS + "/"
    for e in entries:
        name = e.name
        if not name.endswith(".jsonl"):
            continue
        key = name[:-6]
        if (only is not None and key not in only) or not _SESSION_KEY.fullmatch(key):
            continue
        try:
            if not e.is_file(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
        except OSError as exc:
            if exc.errno in _VANISHED:
                continue
            raise ScanError("the transcript", e.path, exc) from None
        # prefix + name is session_path(key)
        out.append(_source_file((prefix + name, e.path, SESSIONS, key, st.st_size, st.st_mtime_ns)))
    out.sort(key=_PATH)
    return out


# A sync of this many sessions or fewer (the one after a chat turn) stats their transcripts instead of
# listing the folder (60k transcripts at 1M chunks: ~30 ms, before the turn's next recall).
STAT_AT_MOST = 64


def _stat_sessions(sessions_dir: Path, only: set[str], must_exist: bool) -> list[SourceFile]:
    """scan_sessions for a few session keys: each transcript stat'ed (not followed: a symlink is not a
    transcript), the folder only checked, with the same errors as a listing."""
    out: list[SourceFile] = []
    try:
        if not stat.S_ISDIR(os.stat(sessions_dir).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory")
    except OSError as exc:
        if exc.errno in _VANISHED and not must_exist:
            return out
        raise ScanError("the sessions folder", sessions_dir, exc) from None
    for key in only:
        if not _SESSION_KEY.fullmatch(key):
            continue
        where = os.path.join(sessions_dir, key + ".jsonl")
        try:
            st = os.lstat(where)
        except OSError as exc:
            if exc.errno in _VANISHED:
                continue
            raise ScanError("the transcript", where, exc) from None
        if stat.S_ISREG(st.st_mode):
            out.append(_source_file((session_path(key), where, SESSIONS, key, st.st_size, st.st_mtime_ns)))
    out.sort(key=_PATH)
    return out


_ALLOWED = "MEMORY.md, memory.md, LEARNINGS.md, memory/**/*.md or sessions/<sessionKey>.jsonl"


def clean_relative(path: str, field: str = "path") -> str:
    """`path` with `/` separators when it is a clean path relative to the workspace; else Invalid why."""
    if not path or "\x00" in path:
        raise Invalid("must be a non-empty path", field=field)
    norm = path.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:/", norm) or norm.startswith("~"):
        raise Invalid("must be relative to the workspace (like memory/notes.md), not an absolute path", field=field)
    parts = norm.split("/")
    if ".." in parts:
        raise Invalid("must not contain '..'", field=field)
    if any(p in ("", ".") for p in parts):
        raise Invalid("must not contain empty or '.' segments", field=field)
    return norm


def resolve_readable(path: str, workspace: Path, sessions_dir: Path) -> Path:
    """Map a `memory.get` path onto the file it names, or raise Invalid / NotFound saying why."""
    field = "path"
    norm = clean_relative(path, field)
    parts = norm.split("/")

    if parts[0] == SESSIONS and len(parts) == 2 and parts[1].endswith(".jsonl"):
        key = parts[1][:-6]
        if not _SESSION_KEY.fullmatch(key):
            raise Invalid(f"{key!r} is not a valid session key", field=field)
        target = sessions_dir / parts[1]
        if not target.is_file() or target.is_symlink():
            raise NotFound(f"no transcript for session {key!r}", {"path": path})
        return target

    if not is_note(norm):
        if not norm.endswith((".md", ".jsonl")):
            raise Invalid(f"only .md memory files and .jsonl transcripts can be read ({_ALLOWED})", field=field)
        raise Invalid(f"not a memory path; allowed: {_ALLOWED}", field=field)
    target = workspace / norm
    try:
        root = workspace.resolve(strict=True)
    except (OSError, RuntimeError):
        raise NotFound(f"memory file not found: {path}", {"path": path}) from None
    if not os.path.lexists(target):
        raise NotFound(f"memory file not found: {path}", {"path": path})
    try:
        real = target.resolve(strict=True)
    except (OSError, RuntimeError):
        raise NotFound(f"memory file not found: {path} (dangling symlink)", {"path": path}) from None
    if not _inside(real, root):
        raise Invalid("resolves outside the workspace (symlink); refused", field=field)
    if real.suffix.lower() != ".md" or not real.is_file():
        raise Invalid("resolves to something that is not a .md file; refused", field=field)
    return real


MAX_GET_CHARS = 256 * 1024


def read_lines(target: Path, start: int, count: int) -> tuple[list[str], bool]:
    """Lines start..start+count-1 (1-based) of a file, at most MAX_GET_CHARS in all (blocking).
    Returns (lines, more) where `more` says lines remain after those returned."""
    out: list[str] = []
    total = 0
    with open(target, "r", encoding="utf-8", errors="replace", newline="") as fh:
        for no, line in enumerate(fh, start=1):
            if no < start:
                continue
            if len(out) >= count:
                return out, True
            line = line.rstrip("\n").rstrip("\r")
            if total + len(line) > MAX_GET_CHARS:
                if not out:  # one giant line: cut it, continue on the next line
                    out.append(line[:MAX_GET_CHARS])
                return out, True
            out.append(line)
            total += len(line) + 1
    return out, False
