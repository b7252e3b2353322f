"""The trash of one agent's sessions (sessions.delete; kept `memory.trashDays`), beside its sessions
folder; sessions.py's docstring says how the trash and sessions.json agree, and what a crash leaves.

    agents/<agentId>/trash/sessions.json          {"version": 1, "trash": {key: metadata + deletedAt}}
    agents/<agentId>/trash/sessions/<key>.jsonl   the transcript, moved there whole

Blocking: the store (FileSessionStore) calls these in its threads, under sessions.json's lock.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson

from ...errors import NotFound
from ...fsutil import atomic_write, ensure_private_dir, fsync_dir, remove
from ...sessions.history import check_session_key


class SessionTrash:
    def __init__(self, sessions_dir: Path):
        self.dir = sessions_dir.parent / "trash"
        self.path = self.dir / "sessions.json"

    def file(self, key: str) -> Path:
        """Where the transcript of `key` lies while it is in the trash."""
        return self.dir / "sessions" / f"{check_session_key(key)}.jsonl"

    def read_sync(self) -> dict[str, dict[str, Any]]:
        """The trash's entries: key → the session's metadata and deletedAt."""
        try:
            parsed = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except orjson.JSONDecodeError as exc:
            raise RuntimeError(f"{self.path} is not valid JSON ({exc}); restore it from a backup") from None
        trash = parsed.get("trash") if isinstance(parsed, dict) else None
        return {k: v for k, v in trash.items() if isinstance(v, dict)} if isinstance(trash, dict) else {}

    def write_sync(self, trash: dict[str, dict[str, Any]]) -> None:
        for folder in (self.dir, self.dir / "sessions"):
            ensure_private_dir(folder)
        atomic_write(self.path, orjson.dumps({"version": 1, "trash": trash}, option=orjson.OPT_INDENT_2))

    def purge_sync(
        self, listed: dict[str, dict[str, Any]], keys: Sequence[str] | None, before: str | None
    ) -> list[str]:
        """Sessions deleted for good: `keys` (each must be in the trash), or all; only those deleted before
        `before` when given. `listed`: sessions.json's sessions, read under its lock, which the caller holds."""
        trash = {k: v for k, v in self.read_sync().items() if k not in listed}
        missing = [k for k in keys or () if k not in trash]
        if missing:
            raise NotFound(f"no session {missing[0]} in the trash", {"sessionKey": missing[0]})
        gone = sorted(
            k
            for k, v in trash.items()
            if (keys is None or k in keys) and (before is None or str(v.get("deletedAt", "")) < before)
        )
        if gone:
            self.write_sync({k: v for k, v in self.read_sync().items() if k not in gone})
            for k in gone:  # after the entry: a crash leaves a file nothing lists, removed on open
                remove(self.file(k))
        return gone

    def move(self, src: Path, dst: Path) -> None:
        """A transcript moved between the sessions folder and the trash, both folders synced."""
        for folder in (self.dir, self.dir / "sessions"):
            ensure_private_dir(folder)
        os.replace(src, dst)
        fsync_dir(src.parent)
        fsync_dir(dst.parent)

    def settle_sync(
        self, listed: dict[str, dict[str, Any]], live_file: Callable[[str], Path], only: str | None
    ) -> None:
        """Finish what a delete, restore or purge cut short left (sessions.py's docstring): for `only`, or
        for every session in the trash. `listed`: sessions.json's sessions, read under its lock, which
        the caller holds; `live_file`: where a session's transcript lies when it is live."""
        trash = self.read_sync()
        try:
            files = {p.stem for p in (self.dir / "sessions").glob("*.jsonl")}
        except OSError:
            files = set()
        keys = {only} if only is not None else set(trash) | files
        changed = False
        for key in sorted(keys):
            moved, live = self.file(key), live_file(key)
            if key in listed:
                if key in files and not live.exists():
                    self.move(moved, live)
                elif key in files:
                    remove(moved)  # a second copy (a backup taken while it was restored)
                if key in trash:
                    del trash[key]
                    changed = True
            elif key in trash:
                if key not in files and live.exists():
                    self.move(live, moved)  # (a backup taken while it was restored)
            elif key in files:
                remove(moved)  # a purge's leftover
        if changed:
            self.write_sync(trash)
