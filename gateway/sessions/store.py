"""Session metadata in `sessions/sessions.json` and the transcripts beside it.

sessions.json is replaced atomically (write a temp file, fsync, rename, fsync the folder) under an
exclusive `flock` on `sessions.json.lock`, re-reading the file inside the lock, so two processes (the
gateway and a CLI, say) never lose each other's changes. File modes are 0600. File work runs in a
thread; in-process writers are serialised by an asyncio lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson
import structlog

from ..errors import Busy, InvalidParams, NotFound
from ..schema import SESSION_KEY
from ..timeutil import now_iso
from . import transcript as tx

log = structlog.get_logger("gateway.sessions")

SESSION_KEY_RE = re.compile(SESSION_KEY)  # not "." or "..": those leave the folder


def check_session_key(key: str, field: str = "params.sessionKey") -> str:
    if not SESSION_KEY_RE.fullmatch(key):
        raise InvalidParams(f"{field}: must match [A-Za-z0-9._:-]{{1,128}} and not be dots only", field=field)
    return key


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) as owner-only; tighten it if it exists with looser bits."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)


def write_private_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically, mode 0600, durable once this returns."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class SessionStore:
    def __init__(self, sessions_dir: Path, agent_id: str = "main"):
        self.dir = sessions_dir
        self.agent_id = agent_id
        self.meta_path = sessions_dir / "sessions.json"
        self.lock_path = sessions_dir / "sessions.json.lock"
        self._lock = asyncio.Lock()
        self._transcripts: dict[str, tx.Transcript] = {}
        self._cache: dict[str, dict[str, Any]] = {}
        self._cache_stamp: tuple[int, int] | None = None

    # ---- files ---------------------------------------------------------------------------------
    def open_sync(self) -> None:
        ensure_private_dir(self.dir)
        if self.meta_path.exists():
            os.chmod(self.meta_path, 0o600)

    def transcript_path(self, key: str) -> Path:
        return self.dir / f"{check_session_key(key)}.jsonl"

    def transcript(self, key: str) -> tx.Transcript:
        t = self._transcripts.get(key)
        if t is None:
            t = self._transcripts[key] = tx.Transcript(self.transcript_path(key))
        return t

    @contextlib.contextmanager
    def _flock(self) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _read_sync(self) -> dict[str, dict[str, Any]]:
        """Read sessions.json, cached by (mtime_ns, size) so unchanged files are not re-parsed."""
        try:
            st = self.meta_path.stat()
        except FileNotFoundError:
            self._cache, self._cache_stamp = {}, None
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._cache_stamp:
            try:
                data = orjson.loads(self.meta_path.read_bytes())
            except orjson.JSONDecodeError as exc:
                raise RuntimeError(f"{self.meta_path} is not valid JSON ({exc}); restore it from a backup") from None
            sessions = data.get("sessions", {}) if isinstance(data, dict) else {}
            self._cache = {k: v for k, v in sessions.items() if isinstance(v, dict)}
            self._cache_stamp = stamp
        return self._cache

    def _mutate_sync(self, fn: Callable[[dict[str, dict[str, Any]]], Any]) -> Any:
        with self._flock():
            sessions = {k: dict(v) for k, v in self._read_sync().items()}
            result = fn(sessions)
            payload = orjson.dumps({"version": 1, "sessions": sessions}, option=orjson.OPT_INDENT_2)
            write_private_atomic(self.meta_path, payload)
            self._cache_stamp = None
            return result

    async def _mutate(self, fn: Callable[[dict[str, dict[str, Any]]], Any]) -> Any:
        async with self._lock:
            with tx.disk_full_as_error("the session list"):
                return await asyncio.to_thread(self._mutate_sync, fn)

    # ---- queries -------------------------------------------------------------------------------
    async def all(self) -> dict[str, dict[str, Any]]:
        async with self._lock:
            return dict(await asyncio.to_thread(self._read_sync))

    async def get(self, key: str) -> dict[str, Any]:
        sessions = await self.all()
        if key not in sessions:
            raise NotFound(f"session not found: {key}", {"sessionKey": key})
        return dict(sessions[key])

    async def exists(self, key: str) -> bool:
        return key in await self.all()

    async def list(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        sessions = sorted((await self.all()).values(), key=lambda s: (s.get("updatedAt", ""), s["sessionKey"]),
                          reverse=True)
        return [dict(s) for s in sessions[offset : offset + limit]], len(sessions)

    # ---- mutations -----------------------------------------------------------------------------
    async def create(self, label: str | None = None, key: str | None = None) -> dict[str, Any]:
        key = check_session_key(key) if key else str(uuid.uuid4())
        exists = Busy(f"session already exists: {key}", {"sessionKey": key})
        if await self.exists(key):
            raise exists
        now = now_iso()
        session = {"sessionKey": key, "label": label, "createdAt": now, "updatedAt": now, "messageCount": 0}
        # The transcript header first, so a session listed in metadata always has its file.
        path = self.transcript_path(key)
        if not path.exists():
            await self.transcript(key).append(tx.header(key, self.agent_id, now))

        def add(sessions: dict[str, dict[str, Any]]) -> None:
            if key in sessions:
                raise exists
            sessions[key] = session

        await self._mutate(add)
        return dict(session)

    async def update(self, key: str, **changes: Any) -> dict[str, Any]:
        def upd(sessions: dict[str, dict[str, Any]]) -> dict[str, Any]:
            if key not in sessions:
                raise NotFound(f"session not found: {key}", {"sessionKey": key})
            s = sessions[key]
            s.update(changes)
            s["updatedAt"] = now_iso()
            return dict(s)

        return await self._mutate(upd)

    async def append_messages(self, key: str, *records: dict[str, Any]) -> dict[str, Any]:
        """Append message records durably, then bump messageCount/updatedAt."""
        await self.transcript(key).append(*records)

        def bump(sessions: dict[str, dict[str, Any]]) -> dict[str, Any]:
            s = sessions.get(key)
            if s is None:  # deleted meanwhile: the transcript line stands, metadata stays gone
                return {}
            s["messageCount"] = int(s.get("messageCount", 0)) + len(records)
            s["updatedAt"] = now_iso()
            return dict(s)

        try:
            return await self._mutate(bump)
        except tx.DiskFull as exc:
            # The transcript line is durable and it is the record; only the counters lag. Failing here
            # would tell the client "not saved" for a message that was, and a retry would store it twice.
            log.warning("session list not updated", session=key, error=exc.message)
            return {}

    async def delete(self, key: str) -> None:
        def rm(sessions: dict[str, dict[str, Any]]) -> None:
            if key not in sessions and not self.transcript_path(key).exists():
                raise NotFound(f"session not found: {key}", {"sessionKey": key})
            sessions.pop(key, None)

        await self._mutate(rm)
        self._transcripts.pop(key, None)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.unlink, self.transcript_path(key))

    async def history(self, key: str, limit: int, before: str | None) -> dict[str, Any]:
        path = self.transcript_path(key)
        if not await asyncio.to_thread(path.exists):
            raise NotFound(f"session not found: {key}", {"sessionKey": key})
        messages = await asyncio.to_thread(tx.read_messages, path)
        if before is not None:
            idx = next((i for i, m in enumerate(messages) if m["id"] == before), None)
            if idx is None:
                raise NotFound(f"message not found in session {key}: {before}", {"before": before})
            messages = messages[:idx]
        has_more = len(messages) > limit
        page = messages[-limit:] if limit else []
        for m in page:
            m.pop("line", None)
        return {"messages": page, "hasMore": has_more}
