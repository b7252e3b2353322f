"""Where memory lives in an agent's workspace: the one owner of those paths.

    MEMORY.md, memory.md          the user's own notes (ROOT_FILES, with LEARNINGS.md)
    LEARNINGS.md                  what the assistant learned about working with you (notes/learnings.py)
    memory/**/*.md                notes; every one is indexed
    memory/YYYY-MM-DD.md          a day file: compaction flushes (`append_to_day_file`), dated by its name
    memory/keyed/<cat>/<key>.md   keyed memories (notes/keyed.py)
    memory/images/<key>.*         images and their markdown sidecars (notes/images.py)

Paths here are relative to the workspace, with `/` separators, as the index and the clients see them.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

from ..errors import Invalid
from ..fsutil import locked

ROOT_FILES = ("MEMORY.md", "memory.md", "LEARNINGS.md")
NOTES_DIR = "memory"
LEARNINGS_FILE = "LEARNINGS.md"
KEYED_DIR = f"{NOTES_DIR}/keyed"
IMAGES_DIR = f"{NOTES_DIR}/images"
DAY_FILE = re.compile(r"(\d{4})-(\d{2})-(\d{2})\.md")  # a file name; any folder under memory/

# The path rule of every note door on both engines (memory.get, memory.write, memory.history,
# memory.restore): names every gateway's folder can hold — a note the record took but a mirror cannot
# write is lost there. Common file systems (ext4, APFS, NTFS) hold 255 bytes a name; the atomic write's
# temp file and the lock beside a long name take a shortened stem (fsutil.sibling_stem).
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 1024


def check_lengths(parts: list[str], rel: str, field: str = "path") -> None:
    """Invalid (-32602) unless each name of `rel` (its `parts`) is at most MAX_NAME_BYTES of UTF-8 and
    the whole at most MAX_PATH_BYTES."""
    longest = max(len(p.encode("utf-8", "surrogatepass")) for p in parts)
    if longest > MAX_NAME_BYTES:
        raise Invalid(
            f"each folder or file name must be at most {MAX_NAME_BYTES} bytes of UTF-8, got {longest}", field=field
        )
    size = len(rel.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise Invalid(f"must be at most {MAX_PATH_BYTES} bytes of UTF-8, got {size}", field=field)


# The bytes of a file name that is not UTF-8 (`caf\xe9.md` from Latin-1), as Python spells them: lone
# surrogates, which neither PostgreSQL text nor JSON can hold — the one kind of name a scan leaves out.
# Control characters and long names are held as they always were (a door refuses to write a long one:
# check_lengths; one found on disk is a note like any other — leaving it out would read as its deletion).
NOT_UTF8 = re.compile(r"[\ud800-\udfff]")
# What `shown` escapes for a log line or a terminal: those bytes, and control characters.
_ESCAPED = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def unholdable(rel: str) -> str | None:
    """Why a path found on disk cannot be a note of the record or the index (None: it can): its name is
    not UTF-8."""
    return "its name is not UTF-8" if NOT_UTF8.search(rel) is not None else None


def shown(rel: str) -> str:
    """A path found on disk as a person and JSON can read it: bytes that are not UTF-8 and control
    characters escaped (`memory/caf\\xe9.md`)."""
    if _ESCAPED.search(rel) is None:
        return rel
    return repr(os.fsencode(rel))[2:-1]


def through_link(workspace: Path, rel: str) -> bool:
    """Whether `rel` is, in this workspace, a symlink or under a symlinked folder (blocking): no note of
    this folder when its notes go by name (sources.Scan `by_name`), and not gone either — a link is one
    machine's arrangement, never a deletion."""
    here = workspace
    for part in rel.split("/"):
        here = here / part
        if here.is_symlink():
            return True
        if not here.exists():
            return False
    return False


def is_note(rel: str) -> bool:
    """Whether a clean relative path (no `..`, no empty segments) names a memory file the index holds."""
    return rel in ROOT_FILES or (rel.startswith(NOTES_DIR + "/") and rel.endswith(".md"))


def day_file(day: str) -> str:
    """The day file of `day` (YYYY-MM-DD)."""
    return f"{NOTES_DIR}/{day}.md"


def day_of(path: str) -> datetime | None:
    """The day a day file is named after, as UTC midnight (`memory/2026-11-20.md` or `2026-11-20.md`
    → 2026-11-20 00:00 UTC); None for any other name, or a date that does not exist (2026-13-45.md)."""
    m = DAY_FILE.fullmatch(path.rsplit("/", 1)[-1])
    if not m:
        return None
    try:
        return datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=timezone.utc)
    except ValueError:
        return None


def append_to_day_file(workspace: Path, day: str, section: str) -> tuple[str, int, int]:
    """Blocking: append a `## …` section to the day file of `day` (created 0600 with a `# day` title),
    durably, under the file's lock (other sessions and memory writers append to the same file).
    Returns (relative path, first line, last line) of the section."""
    rel = day_file(day)
    target = workspace / rel
    with locked(target):
        existing = target.read_text(encoding="utf-8") if target.exists() else ""
        prefix = "" if existing else f"# {day}\n"
        if existing and not existing.endswith("\n"):
            prefix = "\n"
        block = prefix + "\n" + section
        start = existing.count("\n") + prefix.count("\n") + 2  # the section's heading line
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # notes are private
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(block)
            fh.flush()
            os.fsync(fh.fileno())
    return rel, start, start + section.rstrip("\n").count("\n")
