"""Whole sessions of one agent in and out of the state dir (`jarvis migrate`, storage/migrate.py, through
the SessionStore's `export`, `import_sessions` and `strays`): a session's entry and its transcript's lines,
live or in the trash; copies written transcript first, then one write of sessions.json listing them all.
The PostgreSQL engine's counterpart is storage/postgres/session_copies.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from ...errors import Invalid
from ...fsutil import atomic_write, ensure_private_dir, fsync_dir, locked
from ..base import ADDED, PRESENT, REFUSED, Imported, SessionCopy
from .session_trash import SessionTrash
from .sessions_file import exported_meta


class _Store(Protocol):
    """What the copies use of the store (FileSessionStore): its files, and its reads and writes of
    sessions.json."""

    dir: Path
    meta_path: Path
    clean_marker: Path
    trash_bin: SessionTrash
    _clean_owner: bool

    def transcript_path(self, key: str) -> Path: ...
    def _read_sync(self) -> dict[str, dict[str, Any]]: ...
    def _mutate_sync(self, fn: Callable[[dict[str, dict[str, Any]]], Any], written: list[Any] | None = None) -> Any: ...


class FileSessionCopies:
    """Blocking work in a thread, under sessions.json's lock where it writes, as the store's own."""

    def __init__(self, store: _Store):
        self.store = store

    async def export(self, key: str) -> SessionCopy | None:
        return await asyncio.to_thread(self._export_sync, key)

    def _export_sync(self, key: str) -> SessionCopy | None:
        raw = self.store._read_sync().get(key)
        path, deleted = self.store.transcript_path(key), None
        if raw is None:
            raw = self.store.trash_bin.read_sync().get(key)
            if raw is None:
                return None
            path, deleted = self.store.trash_bin.file(key), str(raw.get("deletedAt", ""))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        parts = data.split(b"\n")
        lines = b"".join(line + b"\n" for line in parts[:-1])
        meta = exported_meta(key, raw, lines, recount=deleted is None and not self.store.clean_marker.exists())
        return SessionCopy(meta, tuple(parts[:-1]), len(parts[-1]), deleted=deleted)

    async def import_sessions(self, copies: Sequence[SessionCopy], dry_run: bool = False) -> list[Imported]:
        return await asyncio.to_thread(self._import_sync, copies, dry_run)

    def _import_sync(self, copies: Sequence[SessionCopy], dry_run: bool) -> list[Imported]:
        """Each transcript is written (atomically) before sessions.json lists it; then one write of
        sessions.json lists them all. A transcript file that sessions.json does not list is in the way
        unless its bytes are the first part of the session's (a mirror a gateway on PostgreSQL kept
        here): that is brought up to date."""
        listed = self.store._read_sync()
        trash = self.store.trash_bin.read_sync()
        out: list[Imported] = []
        add: dict[str, dict[str, Any]] = {}
        trashed: dict[str, dict[str, Any]] = {}
        for copy in copies:
            key = copy.meta["sessionKey"]
            if key in listed or key in add or key in trash or key in trashed:
                out.append(Imported(PRESENT, "a session with this key is there" + (" in the trash" * (key in trash))))
                continue
            if copy.deleted is not None:
                try:
                    path = self.store.trash_bin.file(key)
                except Invalid as exc:
                    out.append(Imported(REFUSED, str(exc)))
                    continue
                if not dry_run:
                    for d in (
                        self.store.dir.parent.parent,
                        self.store.dir.parent,
                        self.store.trash_bin.dir,
                        path.parent,
                    ):
                        ensure_private_dir(d)
                    atomic_write(path, b"".join(line + b"\n" for line in copy.lines))  # the file before its entry
                    trashed[key] = {**copy.meta, "deletedAt": copy.deleted}
                out.append(Imported(ADDED, "into the trash"))
                continue
            try:
                path = self.store.transcript_path(key)
            except Invalid as exc:  # no file could be named so
                out.append(Imported(REFUSED, str(exc)))
                continue
            data = b"".join(line + b"\n" for line in copy.lines)
            try:
                old = path.read_bytes()
            except FileNotFoundError:
                old = None
            if old is not None and not data.startswith(old):
                out.append(
                    Imported(
                        PRESENT,
                        "a transcript file sessions.json does not list is in the way (its "
                        "bytes are not a prefix of this session's)",
                    )
                )
                continue
            detail = ""
            if old is not None:
                detail = (
                    "its transcript was there unlisted (a gateway's local mirror)"
                    if old == data
                    else "an unlisted transcript holding its first part (a mirror) was brought up to date"
                )
            if not dry_run:
                if not add:
                    for d in (self.store.dir.parent.parent, self.store.dir.parent, self.store.dir):
                        ensure_private_dir(d)
                if old != data:
                    atomic_write(path, data, sync_dir=False)  # the folder is synced once, below
                add[key] = copy.meta
            out.append(Imported(ADDED, detail))
        if trashed:
            with locked(self.store.meta_path):
                self.store.trash_bin.write_sync({**self.store.trash_bin.read_sync(), **trashed})
        if add:
            fsync_dir(self.store.dir)  # every transcript's name is durable before sessions.json lists it
            fresh = not self.store.meta_path.exists()

            def put(sessions: dict[str, dict[str, Any]]) -> None:
                for k, meta in add.items():
                    sessions.setdefault(k, dict(meta))

            self.store._mutate_sync(put)
            if fresh and not self.store._clean_owner:  # every counter is exact: the first open need not recount
                self.store.clean_marker.touch(0o600)  # (an open store's marker is its close's to put back)
        return out

    async def strays(self) -> list[str]:
        def unlisted() -> list[str]:
            listed = self.store._read_sync()
            return sorted(p.stem for p in self.store.dir.glob("*.jsonl") if p.stem not in listed)

        return await asyncio.to_thread(unlisted)
