"""The files engine's KeyedStore (storage/base.py): the markdown files of memory/notes/keyed.py are the
record, and beside them, in the agent's folder of the state dir, each key's versions and trash mark:

    agents/<agentId>/history/keyed/<key>.json    {"key", "versions": [Version…] oldest first,
                                                  "trashed": null | {"at", "by", "created", "updated"}}

The newest version is what the file holds. A file edited by hand (or written before versions were kept)
differs from it: the next write takes the file's text as a version first (by "file", or "" when there
was no history), so nothing said in it is lost. A delete writes the trash mark first and removes the
file after; a restore writes the file first and clears the mark after: cut short by a crash, either
leaves a live file and a mark, and a live file is live (the mark is stale and cleared by the next write).
Their work blocks (flock, fsync), so each call runs in a thread, under the keyed folder's lock.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import orjson

from ...errors import Conflict, Invalid, NotFound
from ...fsutil import atomic_write, ensure_private_dir, locked, remove
from ...memory.notes.keyed import (
    _KEY,
    Entry,
    KeyedCopy,
    KeyedFiles,
    Version,
    VersionLimits,
    check_entry,
    check_key,
    kept,
    next_version,
    render,
)
from ...timeutil import now_iso
from ..base import ADDED, PRESENT, REFUSED, Imported


@dataclass
class _History:
    versions: list[Version]
    trashed: dict[str, str] | None  # {"at", "by", "created", "updated"}


class FileKeyedStore:
    def __init__(self, workspace: Path, history_dir: Path, limits: VersionLimits | None = None):
        self.files = KeyedFiles(workspace)
        self.history_dir = history_dir
        self.limits = limits or VersionLimits()

    # ---- the history files ---------------------------------------------------------------------
    def _hist(self, key: str) -> Path:
        return self.history_dir / f"{key}.json"

    def _load(self, key: str) -> _History:
        try:
            d = orjson.loads(self._hist(key).read_bytes())
            versions = [Version.of(v) for v in d.get("versions") or []]
            trashed = d.get("trashed")
            return _History(versions, trashed if isinstance(trashed, dict) else None)
        except FileNotFoundError:
            return _History([], None)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RuntimeError(f"{self._hist(key)} is damaged ({exc}); restore it from a backup or remove it") from None

    def _save(self, key: str, h: _History) -> None:
        if not h.versions:
            remove(self._hist(key))
            return
        for folder in (self.history_dir.parent.parent, self.history_dir.parent, self.history_dir):
            ensure_private_dir(folder)  # agents/<id>/history/keyed, each owner-only
        versions = kept(h.versions, self.limits, lambda v: v.value)
        data = {"key": key, "versions": [v.full() for v in versions], "trashed": h.trashed}
        atomic_write(self._hist(key), orjson.dumps(data))

    @staticmethod
    def _settle(h: _History, live: Entry | None) -> _History:
        """The history as the live file makes it: its text the newest version (taken as one when it is
        not: edited by hand, or from before versions), and no trash mark (a delete cut short)."""
        if live is None:
            return h
        by = "file" if h.versions else ""
        return _History(next_version(h.versions, live.value, live.category, live.updated, by), None)

    def _state(self, key: str) -> tuple[Entry | None, _History]:
        found = self.files._found(key)
        live = found[0] if found else None
        return live, self._settle(self._load(key), live)

    # ---- the Protocol ----------------------------------------------------------------------------
    async def find(self, key: str) -> Entry | None:
        return await asyncio.to_thread(self.files.find, key)

    async def get(self, key: str) -> Entry:
        return await asyncio.to_thread(self.files.get, key)

    async def set(
        self, key: str, value: str, category: str | None, by: str = "", principal: str | None = None
    ) -> tuple[Entry, bool, str | None]:
        return await asyncio.to_thread(self._set, key, value, category, by, principal)

    def _set(
        self, key: str, value: str, category: str | None, by: str, principal: str | None
    ) -> tuple[Entry, bool, str | None]:
        value = check_entry(key, value, category)
        with locked(self.files.root):
            live, h = self._state(key)
            out = self.files.write(key, value, category)  # the record first: history follows it
            entry = out[0]
            versions = next_version(h.versions, value, entry.category, entry.updated, by, principal)
            self._save(key, _History(versions, None))
        return out

    async def delete(self, key: str, by: str = "") -> Entry:
        return await asyncio.to_thread(self._delete, key, by)

    def _delete(self, key: str, by: str) -> Entry:
        check_key(key)
        with locked(self.files.root):
            live, h = self._state(key)
            if live is None:
                raise NotFound(f"no memory with key {key!r}", {"key": key})
            h.trashed = {"at": now_iso(), "by": by, "created": live.created, "updated": live.updated}
            self._save(key, h)  # in the trash before the file goes
            self.files.unlink(key)
        return live

    async def list(self, category: str | None, limit: int, offset: int) -> dict[str, Any]:
        return await asyncio.to_thread(self.files.list, category, limit, offset)

    async def history(self, key: str) -> builtins.list[Version]:
        return await asyncio.to_thread(self._history, key)

    def _history(self, key: str) -> builtins.list[Version]:
        live, h = self._state(check_key(key))  # reads only (every write is atomic): no lock
        if not h.versions:
            raise NotFound(f"no memory with key {key!r}, and none in the trash", {"key": key})
        return list(reversed(h.versions))

    async def untrash(self, key: str) -> Entry:
        return await asyncio.to_thread(self._untrash, key)

    def _untrash(self, key: str) -> Entry:
        check_key(key)
        with locked(self.files.root):
            live, h = self._state(key)
            if live is not None:
                raise Conflict(f"memory {key!r} is not in the trash: it exists", {"key": key})
            if h.trashed is None or not h.versions:
                raise NotFound(f"no memory with key {key!r} in the trash", {"key": key})
            v = h.versions[-1]
            created, updated = h.trashed.get("created") or v.at, h.trashed.get("updated") or v.at
            path = self.files._file(v.category, key)
            atomic_write(path, render(key, v.category, v.value, created, updated))  # the file first
            self._save(key, _History(h.versions, None))
        return Entry(key, v.category, v.value, created, updated, self.files._rel(v.category, key), path)

    def _keys(self) -> builtins.list[str]:
        try:
            names = os.listdir(self.history_dir)
        except OSError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and _KEY.fullmatch(n[:-5]))

    def _trashed(self) -> builtins.list[KeyedCopy]:
        """Every key in the trash, the longest deleted last."""
        out = []
        for key in self._keys():
            try:
                live, h = self._state(key)
            except RuntimeError:
                continue  # a damaged history file is no trash; history() names it
            if live is None and h.trashed is not None and h.versions:
                out.append(self._copy(key, h))
        out.sort(key=lambda c: (c.deleted or "", c.entry.key), reverse=True)
        return out

    def _copy(self, key: str, h: _History, live: Entry | None = None) -> KeyedCopy:
        if live is not None:
            return KeyedCopy(live, tuple(h.versions))
        v, t = h.versions[-1], h.trashed or {}
        entry = Entry(
            key,
            v.category,
            v.value,
            t.get("created") or v.at,
            t.get("updated") or v.at,
            self.files._rel(v.category, key),
            self.files._file(v.category, key),
        )
        return KeyedCopy(entry, tuple(h.versions), t.get("at"), t.get("by") or "")

    async def trash(self) -> builtins.list[KeyedCopy]:
        return await asyncio.to_thread(self._trashed)  # reads only: no lock (which would make the folder)

    async def purge(self, keys: Sequence[str] | None = None, before: str | None = None) -> builtins.list[str]:
        return await asyncio.to_thread(self._purge, keys, before)

    def _purge(self, keys: Sequence[str] | None, before: str | None) -> builtins.list[str]:
        if not keys and not self._keys():  # nothing kept: the lock (and the folder it makes) is not needed
            return []
        with locked(self.files.root):
            trashed = {c.entry.key: c for c in self._trashed()}
            if keys is not None:
                missing = [k for k in keys if k not in trashed]
                if missing:
                    raise NotFound(f"no memory with key {missing[0]!r} in the trash", {"key": missing[0]})
            gone = [
                k
                for k, c in trashed.items()
                if (keys is None or k in keys) and (before is None or (c.deleted or "") < before)
            ]
            for k in gone:
                remove(self._hist(k))
        return sorted(gone)

    async def reconcile(self, key: str | None = None) -> int:
        """Nothing to do: the files are the record."""
        return 0

    # ---- whole memories in and out (jarvis migrate) ------------------------------------------------
    async def entries(self) -> builtins.list[Entry]:
        return await asyncio.to_thread(self.files.all)

    async def copies(self) -> builtins.list[KeyedCopy]:
        def run() -> builtins.list[KeyedCopy]:
            live = [self._copy(e.key, self._settle(self._load(e.key), e), e) for e in self.files.all()]
            return live + self._trashed()

        return await asyncio.to_thread(run)

    async def import_entries(self, entries: Sequence[Entry], dry_run: bool = False) -> builtins.list[Imported]:
        return await self.import_copies([KeyedCopy(e, ()) for e in entries], dry_run)

    async def import_copies(self, copies: Sequence[KeyedCopy], dry_run: bool = False) -> builtins.list[Imported]:
        return await asyncio.to_thread(self._import, copies, dry_run)

    def _import(self, copies: Sequence[KeyedCopy], dry_run: bool) -> builtins.list[Imported]:
        out = []
        with locked(self.files.root):
            for c in copies:
                e = c.entry
                try:
                    check_entry(e.key, e.value, e.category)
                except Invalid as exc:
                    out.append(Imported(REFUSED, exc.message))
                    continue
                if self.files._found(e.key):
                    out.append(Imported(PRESENT, "a keyed memory of this key is there"))
                    continue
                with contextlib.suppress(RuntimeError):
                    if self._load(e.key).versions:
                        out.append(Imported(PRESENT, "a keyed memory of this key is in the trash there"))
                        continue
                if not dry_run:
                    versions = list(c.versions) or next_version([], e.value, e.category, e.updated, "")
                    trashed = (
                        {"at": c.deleted, "by": c.deleted_by, "created": e.created, "updated": e.updated}
                        if c.deleted
                        else None
                    )
                    self._save(e.key, _History(versions, trashed))  # before the file: a trashed one has none
                    if not c.deleted:
                        try:
                            atomic_write(
                                self.files._file(e.category, e.key),
                                render(e.key, e.category, e.value, e.created, e.updated),
                            )
                        except BaseException:  # nothing of it stays: versions without a file would hold
                            self._save(e.key, _History([], None))  # the key as if in the trash
                            raise
                out.append(Imported(ADDED))
        return out
