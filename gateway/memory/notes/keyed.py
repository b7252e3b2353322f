"""Keyed memories: small named facts the assistant (or you) can set, read, list and delete by key.

Layout, one markdown file per key, in the agent's workspace (so they are indexed like any memory file
and you can edit them by hand):

    memory/keyed/<category>/<key>.md

    ---
    key: favorite-color
    category: preferences
    created: 2026-11-22T10:00:00.000Z
    updated: 2026-11-22T10:05:00.000Z
    ---
    # favorite-color

    Navy blue.

The folder decides the category and the file name the key (the front matter is informative; a file
without it is still an entry, its dates then come from the file's mtime). A key is one entry across all
categories: setting it under another category moves it. Keys match KEY_PATTERN (no `/`, no leading
dot, at most 128 characters), so no path can be built from one; categories are the fixed CATEGORIES.
Writes are atomic (temp + fsync + rename, 0600) under an flock, so the gateway and the CLI never lose
each other's changes. Everything here blocks: call it in a thread.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from ...errors import Invalid, NotFound
from ...timeutil import now_iso, parse_iso, to_iso
from ...fsutil import atomic_write, locked, remove
from ..layout import KEYED_DIR
from .frontmatter import front_matter, one_line, parse_front_matter

if TYPE_CHECKING:  # pragma: no cover
    from ...config import Config

KEY_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
CATEGORIES = ("general", "preferences", "facts", "people", "projects", "decisions", "tasks")
DEFAULT_CATEGORY = "general"
MAX_VALUE_CHARS = 20_000
PREVIEW_CHARS = 160

_KEY = re.compile(KEY_PATTERN)


@dataclass
class Entry:
    key: str
    category: str
    value: str
    created: str
    updated: str
    path: str  # workspace-relative
    abs: Path

    def brief(self) -> dict:
        return {
            "key": self.key,
            "category": self.category,
            "path": self.path,
            "preview": one_line(self.value, PREVIEW_CHARS),
            "created": self.created,
            "updated": self.updated,
        }

    def full(self) -> dict:
        return {
            "key": self.key,
            "category": self.category,
            "value": self.value,
            "path": self.path,
            "created": self.created,
            "updated": self.updated,
        }


@dataclass(frozen=True)
class Version:
    """One value a keyed memory had (memory.history): each write is a version, numbered from 1."""

    version: int
    value: str
    category: str
    at: str  # when it was written
    by: str  # the door it came through (CallContext.via: "websocket", "model", "mcp", "cli", …), "file"
    # for an edit made to the file by hand, "" when unknown (a memory from before versions were kept)
    principal: str | None = None  # the principal who wrote it (principals.py); None: unknown (older writes)

    def full(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "value": self.value,
            "category": self.category,
            "at": self.at,
            "by": self.by,
            "principal": self.principal,
        }

    @classmethod
    def of(cls, d: dict[str, Any]) -> "Version":
        return cls(
            int(d["version"]),
            str(d["value"]),
            str(d["category"]),
            str(d["at"]),
            str(d.get("by") or ""),
            d.get("principal") if isinstance(d.get("principal"), str) else None,
        )


@dataclass(frozen=True)
class KeyedCopy:
    """A keyed memory whole, as one engine hands it to another (`jarvis migrate`): the entry as it stands
    (a trashed one's as it was when deleted), its versions oldest first (the last is the entry's value),
    and when and through which door it went to the trash (None: it is live)."""

    entry: Entry
    versions: tuple[Version, ...]
    deleted: str | None = None
    deleted_by: str = ""

    def brief(self) -> dict[str, Any]:
        """memory.trash's view of a trashed one."""
        return {**self.entry.brief(), "deletedAt": self.deleted, "deletedBy": self.deleted_by}


@dataclass(frozen=True)
class VersionLimits:
    """How much of a keyed memory's (or a note's) past is kept: `memory.versions.keep` versions, the
    current one included, and `memory.versions.maxBytes` of their text; the oldest go first."""

    keep: int = 20
    max_bytes: int = 1 << 20

    @classmethod
    def of(cls, config: "Config") -> "VersionLimits":
        return cls(config.memory.versions.keep, config.memory.versions.max_bytes)


T = TypeVar("T")


def kept(versions: Sequence[T], limits: VersionLimits, text: Callable[[T], str]) -> list[T]:
    """The newest of `versions` (oldest first) within the limits, counting `text` of each (UTF-8); the
    newest always stays."""
    out: list[T] = []
    used = 0
    for v in reversed(versions):
        size = len(text(v).encode("utf-8"))
        if out and (len(out) >= limits.keep or used + size > limits.max_bytes):
            break
        out.append(v)
        used += size
    out.reverse()
    return out


def next_version(
    versions: Sequence[Version], value: str, category: str, at: str, by: str, principal: str | None = None
) -> list[Version]:
    """`versions` (oldest first) with a write of `value` added, unless it is what the newest already holds."""
    if versions and (versions[-1].value, versions[-1].category) == (value, category):
        return list(versions)
    return [*versions, Version((versions[-1].version if versions else 0) + 1, value, category, at, by, principal)]


def check_key(key: str, field: str = "key") -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise Invalid(
            f"must match {KEY_PATTERN} (letters, digits, '.', '_', '-'; "
            f"starting with a letter or digit; at most 128 characters)",
            field=field,
        )
    return key


def check_category(category: str, field: str = "category") -> str:
    if category not in CATEGORIES:
        raise Invalid(f"unknown category {category!r}; must be one of {', '.join(CATEGORIES)}", field=field)
    return category


def check_entry(key: str, value: str, category: str | None) -> str:
    """Check what memory.set writes; returns the value as both engines keep it: its line ends "\n"
    ("\r\n" and a lone "\r" become "\n", as the files engine's markdown reads back), without its
    leading and trailing blank lines."""
    check_key(key)
    if category is not None:
        check_category(category)
    if "\r" in value:
        value = value.replace("\r\n", "\n").replace("\r", "\n")
    value = value.strip("\n")
    if not value.strip():
        raise Invalid("must not be blank", field="value")
    return value


def _mtime_iso(path: Path) -> str:
    try:
        return to_iso(datetime.fromtimestamp(path.stat().st_mtime, timezone.utc))
    except OSError:
        return now_iso()


def read_entry(abs_path: Path, key: str, category: str, rel: str) -> Entry | None:
    try:
        text = abs_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    meta, body = parse_front_matter(text)
    body = body.lstrip("\n")
    first, _, rest = body.partition("\n")
    if first.strip() == f"# {key}":
        body = rest
    fallback = _mtime_iso(abs_path)
    created = meta.get("created", "")
    updated = meta.get("updated", "")
    return Entry(
        key,
        category,
        body.strip("\n"),
        created if parse_iso(created) else fallback,
        updated if parse_iso(updated) else fallback,
        rel,
        abs_path,
    )


def render(key: str, category: str, value: str, created: str, updated: str, version: int | None = None) -> bytes:
    meta = {"key": key, "category": category, "created": created, "updated": updated}
    if (
        version is not None
    ):  # a mirror of a PostgreSQL row (storage/postgres/keyed.py): the row's version it was written from
        meta["version"] = str(version)
    return (front_matter(meta) + f"# {key}\n\n{value}\n").encode("utf-8")


class KeyedFiles:
    """Keyed memories as files, blocking: the files engine's record (storage/files/keyed.py wraps it
    async) and the PostgreSQL engine's mirror (storage/postgres/keyed.py)."""

    def __init__(self, workspace: Path):
        self.workspace = workspace
        self.root = workspace / KEYED_DIR

    def _file(self, category: str, key: str) -> Path:
        return self.root / category / f"{key}.md"

    def _rel(self, category: str, key: str) -> str:
        return f"{KEYED_DIR}/{category}/{key}.md"

    def _found(self, key: str) -> list[Entry]:
        out = []
        for cat in CATEGORIES:
            p = self._file(cat, key)
            if p.is_file() and not p.is_symlink():
                e = read_entry(p, key, cat, self._rel(cat, key))
                if e is not None:
                    out.append(e)
        out.sort(key=lambda e: e.updated, reverse=True)
        return out

    def find(self, key: str) -> Entry | None:
        found = self._found(check_key(key))
        return found[0] if found else None

    def get(self, key: str) -> Entry:
        e = self.find(key)
        if e is None:
            raise NotFound(f"no memory with key {key!r}", {"key": key})
        return e

    def set(self, key: str, value: str, category: str | None) -> tuple[Entry, bool, str | None]:
        """Create or replace. Returns (entry, replaced, previous category when it moved)."""
        value = check_entry(key, value, category)
        with locked(self.root):
            return self.write(key, value, category)

    def write(self, key: str, value: str, category: str | None) -> tuple[Entry, bool, str | None]:
        """`set` of a checked entry, for a caller that holds the lock."""
        old = self._found(key)
        cat = category or (old[0].category if old else DEFAULT_CATEGORY)
        now = now_iso()
        created = old[0].created if old else now
        target = self._file(cat, key)
        atomic_write(target, render(key, cat, value, created, now))
        moved = None
        for e in old:
            if e.category != cat:
                remove(e.abs)
                moved = moved or e.category
        entry = Entry(key, cat, value, created, now, self._rel(cat, key), target)
        return entry, bool(old), moved

    def delete(self, key: str) -> Entry:
        check_key(key)
        with locked(self.root):
            return self.unlink(key)

    def unlink(self, key: str) -> Entry:
        """`delete` for a caller that holds the lock."""
        found = self._found(key)
        if not found:
            raise NotFound(f"no memory with key {key!r}", {"key": key})
        for e in found:
            remove(e.abs)
        return found[0]

    def all(self, category: str | None = None) -> list[Entry]:
        cats = (check_category(category),) if category else CATEGORIES
        out: list[Entry] = []
        for cat in cats:
            folder = self.root / cat
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                if not name.endswith(".md"):
                    continue
                key = name[:-3]
                p = folder / name
                if not _KEY.fullmatch(key) or p.is_symlink() or not p.is_file():
                    continue
                e = read_entry(p, key, cat, self._rel(cat, key))
                if e is not None:
                    out.append(e)
        out.sort(key=lambda e: (e.updated, e.key), reverse=True)
        return out

    def list(self, category: str | None, limit: int, offset: int) -> dict:
        entries = self.all(category)
        return {"memories": [e.brief() for e in entries[offset : offset + limit]], "total": len(entries)}


_KEYED_PATH = re.compile(rf"^{re.escape(KEYED_DIR)}/[^/]+/({KEY_PATTERN})\.md$")
_META_LINE = re.compile(r"^(key|category|created|updated|version):")  # version: a PostgreSQL mirror's (render)


def snippet_value(path: str, snippet: str) -> str:
    """What a search result of a keyed memory shows: its value, without the front matter (`---`,
    `key:`, `created:` …) and the `# key` heading the file starts with. Other paths: the snippet as is."""
    m = _KEYED_PATH.match(path)
    if not m:
        return snippet
    lines = snippet.splitlines()
    # The block, or its end when the snippet starts inside it: meta lines up to a closing `---`.
    start = 1 if lines and lines[0].strip() == "---" else 0
    end = start
    while end < len(lines) and _META_LINE.match(lines[end]):
        end += 1
    if end < len(lines) and lines[end].strip() == "---" and (start or end):
        lines = lines[end + 1 :]
    while lines and (not lines[0].strip() or lines[0].strip() == f"# {m.group(1)}"):
        lines.pop(0)
    return "\n".join(lines).strip() or snippet
