"""Durable little files: the one place for atomic owner-only writes, private folders and file locks.

    atomic_write(path, data)   temp file in the same folder + fsync + rename + fsync of the folder, 0600
    ensure_private_dir(path)   create (0700) and tighten an existing folder that is looser
    locked(path)               an exclusive flock on `<dir>/.<name>.lock` (gateway and CLI agree; a name
                               too long for its siblings: a shortened stem, sibling_stem)
    create_closed(path)        an empty 0600 file made without a descriptor of it ever being open under that name
    ofd_lock(fd, kind)         a whole-file lock of one open file description: atomic shared ⇄ exclusive

Every write moves the file's mtime forward (at least 1 ns past the old one): the memory indexer skips a
file whose size and mtime did not change, and two same-size writes within one clock tick must not look
alike. All of this is blocking: call it from a thread (or at start-up).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import struct
import tempfile
from pathlib import Path
from typing import Iterator

FILE_MODE = 0o600
DIR_MODE = 0o700


def ensure_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)


NAME_MAX = 255  # bytes a name, on the file systems the gateway runs on (ext4, XFS, btrfs, APFS)
SIBLING_ROOM = 14  # what a sibling adds to a name: `.<name>.XXXXXXXX.tmp` (the lock's `.<name>.lock`: 6)
SIBLING_KEEP = 200  # bytes of a long name kept in its siblings' stem, cut at a character's edge


def sibling_stem(name: str) -> str:
    """`name` as the stem of a hidden sibling's name (`.<stem>.XXXXXXXX.tmp`, `.<stem>.lock`): itself, or,
    when the temp file's name would pass NAME_MAX, its first whole characters (at most SIBLING_KEEP bytes of
    UTF-8) and a digest of the whole name — the same stem for the same name, so every process locks the same
    file, and a different one for another name (unless a note is named exactly as another's shortened stem:
    the two then share a lock, which only makes their writes take turns)."""
    raw = os.fsencode(name)
    if len(raw) + SIBLING_ROOM <= NAME_MAX:
        return name
    return raw[:SIBLING_KEEP].decode("utf-8", "ignore") + "~" + hashlib.sha256(raw).hexdigest()[:16]


def atomic_write(path: Path, data: bytes, sync_dir: bool = True) -> None:
    """Replace `path` with `data` whole (temp file, fsync, rename), owner-only. `sync_dir` False: the
    caller fsyncs the folder itself, once for many files (`fsync_dir`), before it relies on the names."""
    ensure_dir(path.parent)
    try:
        old_mtime = path.stat().st_mtime_ns
    except OSError:
        old_mtime = None
    fd, tmp = tempfile.mkstemp(prefix=f".{sibling_stem(path.name)}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if old_mtime is not None and os.stat(tmp).st_mtime_ns <= old_mtime:
            os.utime(tmp, ns=(old_mtime + 1, old_mtime + 1))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def remove(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive lock for a read-modify-write of `path` (a flock on a hidden sibling lock file)."""
    ensure_dir(path.parent)
    lock = path.parent / f".{sibling_stem(path.name)}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def create_closed(path: Path, mode: int = FILE_MODE) -> bool:
    """Create `path` empty with `mode` unless it exists; → whether it was created. Never opens `path`.

    For files that others hold POSIX (fcntl) locks on, SQLite databases above all: those locks belong to
    the process and the file, so closing ANY descriptor of the file drops every lock the process holds on
    it — an `open()`+`close()` of a live database lets another process's SQLite believe it is alone,
    checkpoint and unlink the WAL under our connections. The file is made under a temporary name, closed,
    then linked into place (which fails, harmlessly, when the file appeared meanwhile)."""
    if os.path.lexists(path):
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{sibling_stem(path.name)}.", suffix=".new", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return True


SHARED, EXCLUSIVE, UNLOCK = "shared", "exclusive", "unlock"
_OFD_TYPES = {SHARED: fcntl.F_RDLCK, EXCLUSIVE: fcntl.F_WRLCK, UNLOCK: fcntl.F_UNLCK}


def ofd_lock(fd: int, kind: str) -> bool:
    """Lock the whole file of `fd` (SHARED, EXCLUSIVE or UNLOCK) without waiting; → False when another
    descriptor holds a conflicting lock.

    An open-file-description lock (Linux F_OFD_SETLK): it belongs to the descriptor like a flock, so no
    close of another descriptor drops it (as it would a classic fcntl lock), and unlike a flock, turning a
    shared lock into an exclusive one is atomic: a refused upgrade keeps the shared lock. (flock first
    drops it: while the upgrade is refused, another process sees no lock at all and may take its own
    exclusive one.) Where OFD locks do not exist, flock, with that weakness."""
    cmd = getattr(fcntl, "F_OFD_SETLK", None)
    try:
        if cmd is None:  # pragma: no cover - not Linux
            flag = {SHARED: fcntl.LOCK_SH, EXCLUSIVE: fcntl.LOCK_EX, UNLOCK: fcntl.LOCK_UN}[kind]
            fcntl.flock(fd, flag | fcntl.LOCK_NB)
        else:  # struct flock: l_type, l_whence, l_start, l_len (0: to the end), l_pid (0 for OFD locks)
            fcntl.fcntl(fd, cmd, struct.pack("hhqqi4x", _OFD_TYPES[kind], os.SEEK_SET, 0, 0, 0))
    except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: held elsewhere
        return False
    return True


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) as owner-only; tighten it if it exists with looser bits."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if path.stat().st_mode & 0o077:
        os.chmod(path, DIR_MODE)


class StateDirInUse(RuntimeError):
    """Another gateway serves this state dir (it holds `<stateDir>/gateway.lock`)."""

    def __init__(self, state_dir: Path, pid: str):
        self.pid = pid
        super().__init__(
            f"another gateway (pid {pid or 'unknown'}) is serving {state_dir}; stop it first, "
            f"or give this one its own state dir (--state-dir / JARVIS_STATE_DIR)"
        )


def lock_state_dir(state_dir: Path) -> int:
    """Take the exclusive serve lock of a state dir; → the fd that holds it (close it to release).

    Two gateways on one state dir would both append to the same transcripts and swap the same index. The
    lock file holds the owner's pid for the message the second one prints; the kernel drops the lock when
    the process dies, so a crash never leaves it stale. `jarvis memory …` commands do not take it."""
    ensure_private_dir(state_dir)
    path = state_dir / "gateway.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise StateDirInUse(state_dir, pid) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
