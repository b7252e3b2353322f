"""Session metadata in `sessions/sessions.json` and the transcripts beside it, and the trash.

sessions.json is replaced atomically (write a temp file, fsync, rename, fsync the folder) under an
exclusive `flock` (fsutil.locked), re-reading the file inside the lock, so two processes (the gateway
and a CLI, say) never lose each other's changes. File modes are 0600. File work runs in a
thread; in-process writers are serialised by an asyncio lock.

The trash (sessions.delete; kept `memory.trashDays`) is beside the sessions folder, under the same lock:

    agents/<agentId>/trash/sessions.json          {"version": 1, "trash": {key: metadata + deletedAt}}
    agents/<agentId>/trash/sessions/<key>.jsonl   the transcript, moved there whole

sessions.json decides: a session it lists is live, one the trash lists and it does not is trashed. A
delete moves the transcript, then writes the trash entry, then sessions.json; a restore writes
sessions.json, then moves the transcript back and drops the entry. Cut short anywhere (a crash), the
next open finishes what sessions.json says: a listed session gets its transcript back and leaves the
trash; a transcript in the trash that nothing lists was being purged and goes.

sessions_file.py holds the file's format (and a session's entry as served); session_trash.py the trash;
session_copies.py whole sessions in and out (jarvis migrate).
"""

from __future__ import annotations

import builtins

import asyncio
import contextlib
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson
import structlog

from ...errors import Conflict, DiskFull, NotFound, SessionLimit
from ...fsutil import atomic_write, ensure_private_dir, locked
from ...sessions import transcript as tx
from ...sessions.history import SETTINGS, check_session_key, history_page, in_trash
from ..base import Imported, SessionCopy
from .session_copies import FileSessionCopies
from .session_trash import SessionTrash
from .sessions_file import CLEAN_MARKER, apply_bumps, count_messages, exported_meta, parse_sessions_file, sessions_file
from ...timeutil import now_iso

log = structlog.get_logger("gateway.sessions")


class FileSessionStore:
    """The files engine's SessionStore (storage/base.py)."""

    def __init__(self, sessions_dir: Path, agent_id: str = "main", max_sessions: int = 10_000):
        self.dir = sessions_dir
        self.agent_id = agent_id
        self.max = max_sessions
        self.meta_path = sessions_dir / "sessions.json"
        self._lock = asyncio.Lock()
        self._transcripts: dict[str, tx.Transcript] = {}
        self._cached: tuple[tuple[int, int, int] | None, tuple[dict[str, dict[str, Any]], int]] = (None, ({}, 0))
        # Message counters bumped since the last write of sessions.json: key → [added, updatedAt].
        # The transcript is the record; these are written in coalesced batches (see _flush_soon),
        # and reconciled from the transcripts on open if a crash lost a batch.
        self._bumps: dict[str, list[Any]] = {}
        # Bumps taken out of _bumps by a write, each with the generation that write gives sessions.json
        # (None until its thread holds the file lock and knows it: the file's own plus one). A reader
        # whose file is older adds them (see _view), so no count goes missing or counts twice mid-write;
        # the last few stay, for readers whose file was read before a write and resumed after it.
        self._written: list[list[Any]] = []  # [[bumps, generation | None], …], oldest first
        self._flusher: asyncio.Task[None] | None = None
        self.flush_delay = 0.25
        # Present only while nobody has the folder open and it was closed with every counter written.
        self.clean_marker = sessions_dir / CLEAN_MARKER
        self._clean_owner = False
        self.trash_bin = SessionTrash(sessions_dir)
        self.copies = FileSessionCopies(self)

    # ---- files ---------------------------------------------------------------------------------
    def open_sync(self) -> None:
        """Open the folder. After a crash (no clean-close marker) every counter is recounted from the
        transcripts; after a clean close (an idle agent reopened, a restart) that scan is skipped."""
        ensure_private_dir(self.dir)
        try:
            os.unlink(self.clean_marker)
        except FileNotFoundError:
            if self.meta_path.exists():
                self._reconcile_sync()
        self._clean_owner = True  # the marker is gone while we have it open; close() puts it back
        if self.meta_path.exists():
            os.chmod(self.meta_path, 0o600)
        self._settle_trash_sync()

    def _reconcile_sync(self) -> None:
        """Recount every session's messages from its transcript (the record). A crash can lose the last
        coalesced counter update, and file times cannot tell which sessions it hit: sessions.json may
        have been rewritten for another session after this one's bump was lost."""
        fixes: dict[str, tuple[int, str]] = {}
        for key, meta in self._read_sync().items():
            path = self.dir / f"{key}.jsonl"
            if not path.exists():
                continue
            count, last = count_messages(tx.iter_records(path))
            if meta.get("messageCount") != count or last > meta.get("updatedAt", ""):
                fixes[key] = (count, last)
        if not fixes:
            return

        def fix(sessions: dict[str, dict[str, Any]]) -> None:
            for key, (count, updated) in fixes.items():
                if key in sessions:
                    sessions[key]["messageCount"] = count
                    sessions[key]["updatedAt"] = max(sessions[key].get("updatedAt", ""), updated)

        self._mutate_sync(fix)
        log.info("session counters reconciled", sessions=len(fixes))

    async def open(self) -> None:
        await asyncio.to_thread(self.open_sync)

    def transcript_path(self, key: str) -> Path:
        return self.dir / f"{check_session_key(key)}.jsonl"

    async def local_transcript(self, key: str) -> Path:
        """The transcript as a local file, for readers that take a path (here: the file itself)."""
        return self.transcript_path(key)

    async def append_records(self, key: str, *records: dict[str, Any]) -> None:
        """Append non-message records (a compaction marker) durably; no counter changes."""
        await self._append(key, records)

    async def _append(self, key: str, records: tuple[dict[str, Any], ...]) -> None:
        """Append to the transcript of an existing session: a deleted one's is not made again."""
        try:
            await self.transcript(key).append(*records)
        except FileNotFoundError:
            raise NotFound(f"session not found: {key}", {"sessionKey": key}) from None

    def transcript(self, key: str) -> tx.Transcript:
        t = self._transcripts.get(key)
        if t is None:
            t = self._transcripts[key] = tx.Transcript(self.transcript_path(key))
        return t

    def _read_sync(self) -> dict[str, dict[str, Any]]:
        return self._read_generation_sync()[0]

    def _read_generation_sync(self) -> tuple[dict[str, dict[str, Any]], int]:
        """sessions.json's sessions and the generation of the write that made it (0: none recorded),
        cached by (inode, mtime_ns, size) so an unchanged file is not re-parsed."""
        try:
            st = self.meta_path.stat()
        except FileNotFoundError:
            return {}, 0
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # every atomic replace is a new inode
        cached_stamp, cached = self._cached  # one attribute: threads read and replace it whole
        if stamp != cached_stamp:
            try:
                cached = parse_sessions_file(self.meta_path.read_bytes())
            except orjson.JSONDecodeError as exc:
                raise RuntimeError(f"{self.meta_path} is not valid JSON ({exc}); restore it from a backup") from None
            self._cached = (stamp, cached)
        return cached

    def _mutate_sync(self, fn: Callable[[dict[str, dict[str, Any]]], Any], written: list[Any] | None = None) -> Any:
        """Under the file lock: read, apply `written`'s bumps and `fn`, write as the next generation
        (published in `written` before the file is replaced, for `_view`)."""
        with locked(self.meta_path):
            current, on_disk = self._read_generation_sync()
            sessions = {k: dict(v) for k, v in current.items()}
            apply_bumps(sessions, written[0] if written else {})
            result = fn(sessions)
            payload = sessions_file(sessions, on_disk + 1)
            if written is not None:
                written[1] = on_disk + 1
            atomic_write(self.meta_path, payload)
            return result

    async def _mutate(self, fn: Callable[[dict[str, dict[str, Any]]], Any]) -> Any:
        """Read-modify-write sessions.json; pending counter bumps ride along in the same write."""
        async with self._lock:
            bumps, self._bumps = self._bumps, {}
            written = [bumps, None]
            self._written.append(written)  # readers of an older file still count them
            # An executor future, not a task: a loop shutting down cancels tasks, and the write must be
            # settled by what its thread did (re-queueing counts already written would count them twice).
            write = asyncio.get_running_loop().run_in_executor(None, self._mutate_sync, fn, written)
            cancelled: asyncio.CancelledError | None = None
            while not write.done():
                try:
                    await asyncio.wait([write])
                except asyncio.CancelledError as exc:
                    cancelled = exc
            if write.exception() is None:
                del self._written[:-8]
            else:
                self._written.remove(written)
                self._merge_back(bumps)
            if cancelled is not None:
                raise cancelled
            with tx.disk_full_as_error("the session list"):
                return write.result()

    async def _view(self, key: str | None = None) -> dict[str, dict[str, Any]]:
        """Sessions as written plus the counts not yet on disk: those waiting for the next write, and
        those of a write that finished after this read of the file. No lock: sessions.json is only ever
        replaced whole (rename), so waiting behind a write's fsync would stall every reader for nothing."""
        sessions, generation = await asyncio.to_thread(self._read_generation_sync)
        if key is not None:
            sessions = {key: sessions[key]} if key in sessions else {}
        view = {k: dict(v) for k, v in sessions.items()}
        for bumps, written_as in self._written:
            # A file of that generation or later was written from one holding these bumps (every
            # writer, in any process, reads the file under the lock and writes the next generation).
            if written_as is None or generation < written_as:
                apply_bumps(view, bumps)
        apply_bumps(view, self._bumps)
        return view

    def _merge_back(self, bumps: dict[str, list[Any]]) -> None:
        for key, (added, updated) in bumps.items():
            cur = self._bumps.setdefault(key, [0, updated])
            cur[0] += added
            cur[1] = max(cur[1], updated)

    def _flush_soon(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.flush_delay)
        await self.flush()

    async def flush(self) -> None:
        """Write pending counter bumps now (also called on close)."""
        if not self._bumps:
            return
        try:
            await self._mutate(lambda sessions: None)
        except DiskFull as exc:  # kept in memory; the next write carries them
            log.warning("session list not updated", error=exc.message)

    async def close(self) -> None:
        # Let a flush under way finish (a cancelled one would leave its write to its thread).
        if self._flusher is not None and not self._flusher.done():
            with contextlib.suppress(Exception):
                await self._flusher
        await self.flush()
        if self._clean_owner and not self._bumps:  # every counter is on disk: no recount next open
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self.clean_marker.touch, 0o600)

    # ---- the trash --------------------------------------------------------------------------------
    def _settle_trash_sync(self, only: str | None = None) -> None:
        """Finish what a delete, restore or purge cut short left (see the module docstring): for `only`,
        or for every session in the trash."""
        with locked(self.meta_path):
            self.trash_bin.settle_sync(self._read_sync(), self.transcript_path, only)

    async def trash(self) -> builtins.list[dict[str, Any]]:
        def run() -> builtins.list[dict[str, Any]]:
            listed = self._read_sync()
            items = [
                exported_meta(k, v, b"", False) | {"deletedAt": v.get("deletedAt", "")}
                for k, v in self.trash_bin.read_sync().items()
                if k not in listed
            ]
            return sorted(items, key=lambda m: (m["deletedAt"], m["sessionKey"]), reverse=True)

        return await asyncio.to_thread(run)

    async def restore(self, key: str) -> dict[str, Any]:
        def back(sessions: dict[str, dict[str, Any]]) -> dict[str, Any]:
            trash = self.trash_bin.read_sync()
            if key in sessions:
                raise Conflict(f"session {key} is not in the trash: it exists", {"sessionKey": key})
            if key not in trash:
                raise NotFound(f"no session {key} in the trash", {"sessionKey": key})
            if len(sessions) >= self.max:
                raise SessionLimit(self.agent_id, self.max)
            sessions[key] = exported_meta(key, trash[key], b"", False)
            return dict(sessions[key])

        meta = await self._mutate(back)  # listed: it is live; then its transcript comes back
        await asyncio.to_thread(self._settle_trash_sync, key)
        self._transcripts.pop(key, None)
        return meta

    async def purge(self, keys: Sequence[str] | None = None, before: str | None = None) -> builtins.list[str]:
        def run() -> builtins.list[str]:
            with locked(self.meta_path):
                return self.trash_bin.purge_sync(self._read_sync(), keys, before)

        return await asyncio.to_thread(run)

    # ---- other gateways: none share a state dir (it is locked), so nobody else changes these files ----
    async def refresh_mirrors(self) -> None:
        """The transcripts are the files themselves: nothing is mirrored."""

    async def grown(self, key: str) -> None:
        """Never called: no other gateway appends here."""

    async def gone(self, key: str) -> None:
        """Never called: no other gateway deletes here."""

    # ---- whole sessions in and out (jarvis migrate): session_copies.py -------------------------------
    async def export(self, key: str) -> SessionCopy | None:
        return await self.copies.export(key)

    async def import_sessions(self, copies: Sequence[SessionCopy], dry_run: bool = False) -> list[Imported]:
        return await self.copies.import_sessions(copies, dry_run)

    async def strays(self) -> list[str]:
        return await self.copies.strays()

    # ---- queries -------------------------------------------------------------------------------
    async def all(self) -> dict[str, dict[str, Any]]:
        return await self._view()

    async def get(self, key: str) -> dict[str, Any]:
        one = await self._view(key)
        if key not in one:
            raise NotFound(f"session not found: {key}", {"sessionKey": key})
        return one[key]

    async def exists(self, key: str) -> bool:
        return key in await asyncio.to_thread(self._read_sync)

    async def list(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        sessions = sorted(
            (await self.all()).values(), key=lambda s: (s.get("updatedAt", ""), s["sessionKey"]), reverse=True
        )
        return [dict(s) for s in sessions[offset : offset + limit]], len(sessions)

    # ---- mutations -----------------------------------------------------------------------------
    async def create(
        self, label: str | None = None, key: str | None = None, settings: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        key = check_session_key(key) if key else str(uuid.uuid4())
        exists = Conflict(f"session already exists: {key}", {"sessionKey": key})
        if await self.exists(key):
            raise exists
        if key in await asyncio.to_thread(self.trash_bin.read_sync):
            raise in_trash(key)
        now = now_iso()
        session = {
            "sessionKey": key,
            "label": label,
            "createdAt": now,
            "updatedAt": now,
            "messageCount": 0,
            **{k: v for k, v in (settings or {}).items() if k in SETTINGS and v},
        }
        # The transcript header first, so a session listed in metadata always has its file.
        path = self.transcript_path(key)
        created = False
        if not await asyncio.to_thread(path.exists):
            created = True
            try:
                await self.transcript(key).append(tx.header(key, self.agent_id, now), create=True)
            except BaseException:
                await self._drop_transcript(key)
                raise

        def add(sessions: dict[str, dict[str, Any]]) -> None:
            if key in sessions:
                raise exists
            if key in self.trash_bin.read_sync():
                raise in_trash(key)
            if len(sessions) >= self.max:  # under the file lock: exact however many ask at once
                raise SessionLimit(self.agent_id, self.max)
            sessions[key] = session

        try:
            await self._mutate(add)
        except BaseException as exc:
            # Not listed, so not a session: leave no orphan transcript behind (the disk may be full).
            if created and exc is not exists:
                await self._drop_transcript(key)
            raise
        return dict(session)

    async def _drop_transcript(self, key: str) -> None:
        self._transcripts.pop(key, None)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(os.unlink, self.transcript_path(key))

    async def update(self, key: str, **changes: Any) -> dict[str, Any]:
        def upd(sessions: dict[str, dict[str, Any]]) -> dict[str, Any]:
            if key not in sessions:
                raise NotFound(f"session not found: {key}", {"sessionKey": key})
            s = sessions[key]
            s.update(changes)
            for name in SETTINGS:  # a setting set to "" or None is reset: the configured one applies
                if name in s and not s[name]:
                    del s[name]
            s["updatedAt"] = now_iso()
            return dict(s)

        return await self._mutate(upd)

    async def append_messages(self, key: str, *records: dict[str, Any]) -> None:
        """Append message records durably; bump messageCount/updatedAt in memory, written soon.

        The transcript line is the record. Counters are batched into one sessions.json write per
        `flush_delay` instead of a locked rewrite + fsync per message, which serialised every chat."""
        await self._append(key, records)
        # updatedAt is the last message's own timestamp, which a recount after a crash finds too.
        updated = max((r["timestamp"] for r in records if isinstance(r.get("timestamp"), str)), default=now_iso())
        self._merge_back({key: [len(records), updated]})
        self._flush_soon()

    async def delete(self, key: str, trash: bool = True) -> None:
        if not trash:
            self._bumps.pop(key, None)  # (to the trash, its last counts go along)

        def rm(sessions: dict[str, dict[str, Any]]) -> None:
            path = self.transcript_path(key)
            if key not in sessions and not path.exists():
                raise NotFound(f"session not found: {key}", {"sessionKey": key})
            if trash and key in sessions:  # the transcript, the trash entry, then (the caller's write) the list
                if path.exists():
                    self.trash_bin.move(path, self.trash_bin.file(key))
                entries = self.trash_bin.read_sync()
                entries[key] = {**sessions[key], "deletedAt": now_iso()}
                self.trash_bin.write_sync(entries)
            sessions.pop(key, None)

        await self._mutate(rm)
        self._transcripts.pop(key, None)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.unlink, self.transcript_path(key))

    async def history(self, key: str, limit: int, before: str | None, max_bytes: int = 2 << 20) -> dict[str, Any]:
        """The last `limit` messages before `before`, oldest first, and at most about `max_bytes`
        of content (at least one message), so one answer never outgrows a client's buffer."""
        path = self.transcript_path(key)
        if not await asyncio.to_thread(path.exists):
            raise NotFound(f"session not found: {key}", {"sessionKey": key})
        return await asyncio.to_thread(history_page, key, path, limit, before, max_bytes)
