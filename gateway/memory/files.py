"""Durable little files for the memory features that write into an agent's workspace
(keyed memories, LEARNINGS.md, images).

    atomic_write(path, data)        temp file in the same folder + fsync + rename + fsync of the folder, 0600
    locked(path)                    an exclusive flock on `<dir>/.<name>.lock` (gateway and CLI agree)
    parse_front_matter(text)        ({"key": "…", …}, body) for a leading `---` … `---` block

Every write moves the file's mtime forward (at least 1 ns past the old one): the indexer skips a file
whose size and mtime did not change, and two same-size writes within one clock tick must not look alike.
All of this is blocking: call it from a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

FILE_MODE = 0o600
DIR_MODE = 0o700


def ensure_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)


def atomic_write(path: Path, data: bytes) -> None:
    ensure_dir(path.parent)
    try:
        old_mtime = path.stat().st_mtime_ns
    except OSError:
        old_mtime = None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_FM = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.S)


def parse_front_matter(text: str) -> tuple[dict[str, str], str]:
    """`key: value` lines of a leading `---` block, and the text after it."""
    m = _FM.match(text)
    if not m:
        return {}, text
    meta: dict[str, str] = {}
    for line in m.group(1).splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip():
            meta[k.strip()] = v.strip()
    return meta, text[m.end():]


def front_matter(meta: dict[str, str]) -> str:
    return "---\n" + "".join(f"{k}: {v}\n" for k, v in meta.items()) + "---\n"


def one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
