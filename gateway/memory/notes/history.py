"""The last versions of each note written through memory.write (the web editor), for memory.history
{path} and memory.restore {path, version}.

    agents/<agentId>/history/notes/<sha256 of the path, 32 hex>.json
        {"path": "memory/boat.md", "versions": [{"version", "at", "by", "principal", "content"}, …]}

oldest first; the newest is what the note holds. A note edited by hand (or written before versions
were kept) differs from it: the next write takes the note's text as a version first (by "file", or ""
when it had no history), so nothing that was in it is lost. Kept within `VersionLimits` (the current
version always stays). The files live in the state dir, beside the agent, not in the workspace: the
index never sees them. Blocking: called by files.write_file under the note's lock, and in threads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from ...fsutil import atomic_write, ensure_private_dir
from ...timeutil import to_iso
from .frontmatter import one_line
from .keyed import VersionLimits, kept

PREVIEW_CHARS = 160
_FIELDS = ("version", "at", "by", "principal", "content")


@dataclass(frozen=True)
class NoteVersion:
    version: int
    at: str
    by: str  # the door the write came through (CallContext.via), "file" for an edit by hand, "" unknown
    content: str
    principal: str | None = None  # the principal who wrote it; None: unknown (older writes, edits by hand)

    def brief(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "at": self.at,
            "by": self.by,
            "principal": self.principal,
            "bytes": len(self.content.encode("utf-8")),
            "preview": one_line(self.content, PREVIEW_CHARS),
        }

    def full(self) -> dict[str, Any]:
        return {**self.brief(), "content": self.content}


def _added(
    versions: list[NoteVersion], content: str, at: str, by: str, principal: str | None = None
) -> list[NoteVersion]:
    if versions and versions[-1].content == content:
        return versions
    return [*versions, NoteVersion((versions[-1].version if versions else 0) + 1, at, by, content, principal)]


class NoteHistory:
    def __init__(self, folder: Path, limits: VersionLimits):
        self.folder = folder
        self.limits = limits

    def _file(self, rel: str) -> Path:
        return self.folder / f"{hashlib.sha256(rel.encode()).hexdigest()[:32]}.json"

    def _load(self, rel: str) -> list[NoteVersion]:
        try:
            d = orjson.loads(self._file(rel).read_bytes())
        except FileNotFoundError:
            return []
        except orjson.JSONDecodeError as exc:
            raise RuntimeError(
                f"{self._file(rel)} is damaged ({exc}); remove it to start {rel}'s history anew"
            ) from None
        if d.get("path") != rel:  # another path with the same hash prefix: not this note's
            return []
        return [
            NoteVersion(int(v["version"]), str(v["at"]), str(v.get("by") or ""), str(v["content"]), v.get("principal"))
            for v in d.get("versions") or []
        ]

    def versions(self, rel: str, current: str | None, current_at: str = "") -> list[NoteVersion]:
        """The note's versions, oldest first, with what it holds now (`current`; None: no file) the newest."""
        versions = self._load(rel)
        if current is None:
            return versions
        return _added(versions, current, current_at, "file" if versions else "")

    def record(
        self, rel: str, before: str | None, before_at: str, after: str, by: str, principal: str | None = None
    ) -> None:
        """A write replaced `before` (None: a new note) with `after` — through door `by`, by `principal` —;
        call it after the note is written."""
        now = to_iso(datetime.now(timezone.utc))
        versions = _added(self.versions(rel, before, before_at), after, now, by, principal)
        for folder in (self.folder.parent.parent, self.folder.parent, self.folder):
            ensure_private_dir(folder)
        kept_ = kept(versions, self.limits, lambda v: v.content)
        data = {"path": rel, "versions": [{k: getattr(v, k) for k in _FIELDS} for v in kept_]}
        atomic_write(self._file(rel), orjson.dumps(data))

    def put(self, rel: str, versions: list[NoteVersion]) -> None:
        """Keep `versions` (oldest first) as the note's whole history, within the limits (`jarvis migrate`)."""
        for folder in (self.folder.parent.parent, self.folder.parent, self.folder):
            ensure_private_dir(folder)
        kept_ = kept(versions, self.limits, lambda v: v.content)
        data = {"path": rel, "versions": [{k: getattr(v, k) for k in _FIELDS} for v in kept_]}
        atomic_write(self._file(rel), orjson.dumps(data))

    def recorded(self, rel: str) -> list[NoteVersion]:
        """The versions kept for the note, without what the file holds now."""
        return self._load(rel)
