"""What the index may hold, and where it lives.

    memory    MEMORY.md, memory.md, LEARNINGS.md and memory/**/*.md in the workspace → path relative to the workspace
    sessions  <sessionsDir>/<sessionKey>.jsonl of the agent → path "sessions/<sessionKey>.jsonl"

A symlink is followed only when its target stays inside the workspace and is a .md file. The same rules
decide what `memory.get` may read, so it can never reach anything the index could not hold.

A folder that cannot be listed (EMFILE, EACCES, EIO, a network mount gone) raises ScanError: a scan
never reads "cannot look" as "nothing there", which a sync would take for every file deleted. A root
(the workspace, the sessions folder) that does not exist is empty only when nothing of it was indexed
(`Scan.check`, `must_exist`); a folder or file that vanishes while it is scanned is simply gone.
"""

from __future__ import annotations

import errno
import functools
import itertools
import operator
import os
import re
import stat
from pathlib import Path
from typing import NamedTuple

from ...errors import Invalid, NotFound, Unavailable
from ...schema import SESSION_KEY
from ..layout import NOT_UTF8, NOTES_DIR, ROOT_FILES, check_lengths, is_note, shown, unholdable

MEMORY = "memory"
SESSIONS = "sessions"
SOURCES = (MEMORY, SESSIONS)

_SESSION_KEY = re.compile(SESSION_KEY)
_IGNORED_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".obsidian", ".trash"}


_VANISHED = (errno.ENOENT, errno.ENOTDIR)
# A folder whose names, joined, hold bytes that are not UTF-8 (layout.unholdable) has each checked
# (Scan._holdable): one search a folder, not a name; none where they are ASCII (no surrogate; issue 46).
_ODD_CHAR = NOT_UTF8.search
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
        self.vanished = exc.errno in _VANISHED  # not there (rather than not readable)


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


def session_key_of(path: str) -> str | None:
    """The session key of a transcript's index path (None for a memory file)."""
    return path[len(SESSIONS) + 1 : -6] if path.startswith(SESSIONS + "/") else None


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


def _root(folder: Path, what: str) -> Path:
    """The real path of a root folder. Raises ScanError (`vanished` when it does not exist)."""
    try:
        root = folder.resolve(strict=True)
        if not root.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        return root
    except RuntimeError as exc:  # a symlink loop
        raise ScanError(what, folder, OSError(errno.ELOOP, str(exc))) from None
    except OSError as exc:
        raise ScanError(what, folder, exc) from None


def signature(size: int, mtime_ns: int, path: str) -> str:
    """One file as the index last saw it: equal signatures, same path, size and mtime (no need to read
    it). `SIGNATURE_SQL` is the same text built by the database from a row of `files`."""
    return f"{size}:{mtime_ns}:{path}"


SIGNATURE_SQL = "size || ':' || mtime_ns || ':' || path"


class Scan:
    """One scan of the sources: `signatures`, the signature of every file found, in scan order (memory files depth-first
    and sorted, then transcripts by path). Blocking: run in a thread. A no-op sync of 460k files is mostly this scan, so
    a file costs one stat and one string; `files()` makes SourceFiles only of those asked for (the ones whose signature
    the index does not know).

    Memory files: one file reached twice (MEMORY.md and memory.md on a case-insensitive filesystem, a symlink or hard
    link to a note) counts once, by (device, inode): the first name in the walk's order. `by_name` (the notes of a
    folder, storage/postgres/note_folder.py): each name of a regular file is one, however many names a file has, and a
    symlinked file is none. A file or folder whose name no note can have (layout.unholdable) is left out, in `unnamable`
    (its name `shown` → why). A root folder (the workspace, the sessions folder) that does not exist is noted in
    `missing`, with the error to raise should the caller have files of it indexed (`check`)."""

    def __init__(self, workspace: Path | None = None, sessions_dir: Path | None = None, by_name: bool = False):
        self.workspace = workspace or Path()
        self.sessions_dir = sessions_dir or Path()
        self.by_name = by_name
        self.signatures: list[str] = []
        self.missing: dict[str, ScanError] = {}
        self.unnamable: dict[str, str] = {}

    @property
    def paths(self) -> list[str]:
        return [sig.split(":", 2)[2] for sig in self.signatures]

    def check(self, indexed: set[str]) -> None:
        """Raise ScanError when a root folder is missing whose files (`indexed`: sources) are indexed:
        a disk or mount problem, not every file deleted."""
        for source, exc in self.missing.items():
            if source in indexed:
                raise exc

    def files(self, known: set[str] | None = None) -> list[SourceFile]:
        """The files found whose signature is not in `known` (None: all of them), in scan order."""
        sigs = self.signatures if known is None else list(itertools.filterfalse(known.__contains__, self.signatures))
        ws, sd, out = str(self.workspace), str(self.sessions_dir), []
        for sig in sigs:
            size, mtime, path = sig.split(":", 2)
            sf: tuple[str, str, str, str | None, int, int]
            if path.startswith(_SESSIONS_PREFIX):
                name = path[len(_SESSIONS_PREFIX) :]
                sf = (path, os.path.join(sd, name), SESSIONS, name[:-6], int(size), int(mtime))
            else:
                sf = (path, os.path.join(ws, path), MEMORY, None, int(size), int(mtime))
            out.append(_source_file(sf))
        return out

    # ---- memory files --------------------------------------------------------------------------------
    def memory(self) -> Scan:
        """Every memory file of the workspace. Raises ScanError when a folder cannot be read."""
        try:
            root = _root(self.workspace, "the workspace")
        except ScanError as exc:
            if exc.vanished:
                self.missing[MEMORY] = exc
                return self
            raise
        self._root, self._dev = root, root.stat().st_dev
        # A file's inode on the workspace's device, (device, inode) on another (a mount inside it): a set
        # of ints is cheaper to fill than one of tuples.
        self._seen: set[int | tuple[int, int]] = _NoneSeen() if self.by_name else set()
        for name in ROOT_FILES:
            self._add(name, self.workspace / name)
        self._walk(str(self.workspace / NOTES_DIR), NOTES_DIR)
        return self

    def _add(self, rel: str, abs_path: Path) -> None:
        """A file that may be a symlink or outside the workspace: checked (`_memory_file`)."""
        if self.by_name and os.path.islink(abs_path):
            return
        st = _memory_file(abs_path, self._root)
        if st is None:
            return
        ident = st.st_ino if st.st_dev == self._dev else (st.st_dev, st.st_ino)
        if ident not in self._seen:
            self._seen.add(ident)
            self.signatures.append(signature(st.st_size, st.st_mtime_ns, rel))

    def _walk(self, folder: str, rel: str) -> None:
        """Depth-first, sorted, never into symlinked folders. Each folder's real path must stay in the
        workspace (one realpath per folder, so a folder swapped for a symlink mid-scan is caught); a
        regular file in it then needs no resolving, and a symlinked file gets the full check (`_add`). A
        folder that does not exist (any more) holds nothing; one that cannot be listed raises ScanError.
        Files are stat'ed relative to their open folder (the kernel does not walk the whole path again
        for each: ~11% of a scan)."""
        if not _inside(Path(os.path.realpath(folder)), self._root):
            return
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in _VANISHED or exc.errno == errno.ELOOP:  # gone, or swapped for a symlink
                return
            raise ScanError("the memory folder", folder, exc) from None
        folders = []
        prefix = rel + "/"
        seen, dev, add = self._seen, self._dev, self.signatures.append
        try:
            try:
                with os.scandir(fd) as it:
                    entries = sorted(it, key=_NAME)
            except OSError as exc:
                raise ScanError("the memory folder", folder, exc) from None
            joined = "".join([e.name for e in entries])
            if not joined.isascii() and _ODD_CHAR(joined):
                entries = self._holdable(entries, prefix)
            for e in entries:
                # As little Python per file as it takes: a regular file is the common case, asked first.
                name = e.name
                try:
                    if e.is_file(follow_symlinks=False):
                        if not name.endswith(".md") or name == ".md":
                            continue
                        st = e.stat(follow_symlinks=False)
                    elif e.is_dir(follow_symlinks=False):
                        if name not in _IGNORED_DIRS and not name.startswith("."):
                            folders.append(name)
                        continue
                    else:
                        if e.is_symlink() and name.endswith(".md") and name != ".md" and not self.by_name:
                            self._add(prefix + name, Path(folder, name))
                        continue
                except OSError as exc:
                    if exc.errno in _VANISHED:
                        continue
                    raise ScanError("the memory file", os.path.join(folder, name), exc) from None
                ident = st.st_ino if st.st_dev == dev else (st.st_dev, st.st_ino)
                if ident not in seen:
                    seen.add(ident)
                    add(f"{st.st_size}:{st.st_mtime_ns}:{prefix}{name}")  # signature(), inlined
        finally:
            os.close(fd)
        for name in folders:  # files first, then sub-folders (as os.walk would)
            self._walk(os.path.join(folder, name), prefix + name)

    def _holdable(self, entries: list[os.DirEntry], prefix: str) -> list[os.DirEntry]:
        """The entries whose names a note can have; the others (a .md file, a folder) in `unnamable`."""
        out = []
        for e in entries:
            why = unholdable(prefix + e.name)
            if why is None:
                out.append(e)
            elif e.name.endswith(".md") or e.is_dir(follow_symlinks=False):
                self.unnamable[shown(prefix + e.name)] = why
        return out

    # ---- transcripts ---------------------------------------------------------------------------------
    def sessions(self, only: set[str] | None = None) -> Scan:
        """Every transcript `<sessionKey>.jsonl` (`only`: these session keys), in path order. Raises
        ScanError when the folder cannot be listed."""
        start = len(self.signatures)
        if only is not None and len(only) <= STAT_AT_MOST:
            self._stat_sessions(only)
        else:
            self._list_sessions(only)
        self.signatures[start:] = sorted(self.signatures[start:], key=_path_of)
        return self

    def _no_folder(self, exc: OSError) -> None:
        """The sessions folder cannot be read: missing (noted), or ScanError."""
        error = ScanError("the sessions folder", self.sessions_dir, exc)
        if not error.vanished:
            raise error from None
        self.missing[SESSIONS] = error

    def _list_sessions(self, only: set[str] | None) -> None:
        try:
            fd = os.open(self.sessions_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            return self._no_folder(exc)
        try:
            try:
                with os.scandir(fd) as it:  # each transcript stat'ed relative to the folder (see _walk)
                    entries = list(it)
            except OSError as exc:
                return self._no_folder(exc)
            add, match = self.signatures.append, _SESSION_KEY.fullmatch
            for e in entries:
                name = e.name
                if not name.endswith(".jsonl"):
                    continue
                key = name[:-6]
                if (only is not None and key not in only) or not match(key):
                    continue
                try:
                    if not e.is_file(follow_symlinks=False):
                        continue
                    st = e.stat(follow_symlinks=False)
                except OSError as exc:
                    if exc.errno in _VANISHED:
                        continue
                    raise ScanError("the transcript", os.path.join(self.sessions_dir, name), exc) from None
                add(f"{st.st_size}:{st.st_mtime_ns}:{_SESSIONS_PREFIX}{name}")  # signature(…, session_path(key))
        finally:
            os.close(fd)

    def _stat_sessions(self, only: set[str]) -> None:
        """A few session keys: each transcript stat'ed (not followed: a symlink is not a transcript),
        the folder only checked, with the same errors as a listing."""
        try:
            if not stat.S_ISDIR(os.stat(self.sessions_dir).st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        except OSError as exc:
            return self._no_folder(exc)
        for key in only:
            if not _SESSION_KEY.fullmatch(key):
                continue
            where = os.path.join(self.sessions_dir, key + ".jsonl")
            try:
                st = os.lstat(where)
            except OSError as exc:
                if exc.errno in _VANISHED:
                    continue
                raise ScanError("the transcript", where, exc) from None
            if stat.S_ISREG(st.st_mode):
                self.signatures.append(signature(st.st_size, st.st_mtime_ns, session_path(key)))


_SESSIONS_PREFIX = SESSIONS + "/"


def _path_of(sig: str) -> str:
    return sig.split(":", 2)[2]


class _NoneSeen(set):  # a scan `by_name`: no file was seen before (a hard link's every name counts)
    def __contains__(self, item: object) -> bool:
        return False


# A SourceFile from a tuple, in C: NamedTuple's own __new__ is a Python call.
_source_file = functools.partial(tuple.__new__, SourceFile)

# A sync of this many sessions or fewer (the one after a chat turn) stats their transcripts instead of
# listing the folder (60k transcripts at 1M chunks: ~30 ms, before the turn's next recall).
STAT_AT_MOST = 64


def scan_memory(workspace: Path, must_exist: bool = False) -> list[SourceFile]:
    """Every memory file of the workspace, in walk order (see Scan). Raises ScanError when a folder
    cannot be read, or when the workspace is missing and `must_exist`."""
    scan = Scan(workspace=workspace).memory()
    scan.check({MEMORY} if must_exist else set())
    return scan.files()


def scan_sessions(sessions_dir: Path, only: set[str] | None = None, must_exist: bool = False) -> list[SourceFile]:
    """Every transcript `<sessionKey>.jsonl`, in path order (see Scan; `only`: these session keys). Raises
    ScanError when the folder cannot be listed, or is missing and `must_exist`."""
    scan = Scan(sessions_dir=sessions_dir).sessions(only)
    scan.check({SESSIONS} if must_exist else set())
    return scan.files()


_ALLOWED = "MEMORY.md, memory.md, LEARNINGS.md, memory/**/*.md or sessions/<sessionKey>.jsonl"


def clean_relative(path: str, field: str = "path") -> str:
    """`path` with `/` separators when it is a clean path relative to the workspace, short enough for
    every gateway's folder (layout.check_lengths), of names a scan finds (UTF-8: layout.unholdable); else
    Invalid."""
    if not path or "\x00" in path or NOT_UTF8.search(path):
        raise Invalid("must be a non-empty path of UTF-8 text, without NUL", field=field)
    norm = path.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:/", norm) or norm.startswith("~"):
        raise Invalid("must be relative to the workspace (like memory/notes.md), not an absolute path", field=field)
    parts = norm.split("/")
    if ".." in parts:
        raise Invalid("must not contain '..'", field=field)
    if any(p in ("", ".") for p in parts):
        raise Invalid("must not contain empty or '.' segments", field=field)
    check_lengths(parts, norm, field)
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
