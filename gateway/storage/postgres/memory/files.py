"""`memory_files`: what an agent's PostgreSQL index holds of each file (memory/ports.py's FileRows)."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from ....memory.index.sources import MEMORY, SESSIONS, SIGNATURE_SQL, SourceFile, session_key_of, session_path
from ....memory.ports import FileStat, Indexed, Scope
from .agent import SyncSession, remove_files

log = structlog.get_logger("gateway.memory")


def _stale_mirrors(items: list[tuple[SourceFile, int | None]]) -> set[str]:
    """Blocking: the paths whose file has fewer lines than `lines` (or whose session is gone: None)."""
    out = set()
    for sf, lines in items:
        if lines is None:
            out.add(sf.path)
            continue
        try:
            with open(sf.abs, "rb") as f:
                have = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except OSError:
            out.add(sf.path)
            continue
        if have < lines:
            out.add(sf.path)
    return out


class PgFileRows:
    """One row per indexed file of the agent."""

    transcripts_are_sessions = False  # the sessions table decides which transcripts are gone
    notes_by_name = True  # one index of every gateway's folder: the notes' names (storage/postgres/notes.py)

    def __init__(self, session: SyncSession):
        self.s = session

    def _where(self, memory: bool, sessions: Scope) -> tuple[str, list[Any]]:
        """The rows of memory_files a sync covers: a condition after `agent_id = $1`, and its arguments."""
        if sessions is not True and sessions:
            paths = [session_path(k) for k in sorted(sessions)]
            return ("(source = 'memory' OR path = ANY($2::text[]))" if memory else "path = ANY($2::text[])"), [paths]
        sources = [src for src, on in ((MEMORY, memory), (SESSIONS, sessions)) if on]
        return "source = ANY($2::text[])", [sources]

    async def indexed(self, memory: bool, sessions: Scope, max_file_bytes: int) -> Indexed:
        where, args = self._where(memory, sessions)
        signatures: set[str] = set()
        sources: set[str] = set()
        count = 0
        for source, n, sigs in await self.s.db.fetch(
            f"SELECT source, count(*), array_agg({SIGNATURE_SQL}) FILTER (WHERE source <> 'memory' OR size <= $3) "
            f"FROM memory_files WHERE agent_id = $1 AND {where} GROUP BY source",
            self.s.agent_id,
            *args,
            max_file_bytes,
        ):
            signatures.update(sigs or ())
            sources.add(source)
            count += n
        total = None
        if not (memory and sessions is True):
            total = int(
                await self.s.db.fetchval(
                    "SELECT count(*) FROM (SELECT 1 FROM memory_files WHERE agent_id = $1 LIMIT $2) AS t",
                    self.s.agent_id,
                    2 * count + 1,
                )
            )
        return Indexed(signatures, sources, count, total)

    async def rows_of(self, paths: list[str]) -> dict[str, FileStat]:
        rows = await self.s.db.fetch(
            "SELECT path, size, mtime_ns, hash FROM memory_files WHERE agent_id = $1 AND path = ANY($2::text[])",
            self.s.agent_id,
            paths,
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    async def paths_in_scope(self, memory: bool, sessions: Scope) -> set[str]:
        where, args = self._where(memory, sessions)
        paths = await self.s.db.fetchval(
            f"SELECT array_agg(path) FROM memory_files WHERE agent_id = $1 AND {where}", self.s.agent_id, *args
        )
        return set(paths or ())

    async def confirm_gone(self, paths: list[str]) -> list[str]:
        """A transcript is gone when its session is, not when this gateway's mirror is missing (it may
        not have caught up with a session made through another gateway yet)."""
        keys = [k for k in map(session_key_of, paths) if k]
        if not keys:
            return paths
        alive = {
            r[0]
            for r in await self.s.db.fetch(
                "SELECT session_key FROM sessions WHERE agent_id = $1 AND session_key = ANY($2::text[])",
                self.s.agent_id,
                keys,
            )
        }
        return [p for p in paths if session_key_of(p) not in alive]

    async def ready(self, files: list[SourceFile]) -> list[SourceFile]:
        """Leave out transcripts whose local mirror has fewer lines than the session (another gateway
        appended and this one has not mirrored it yet: indexing it would replace newer chunks with
        older ones) or whose session is gone. The mirror's update schedules the session's sync again."""
        keys = [sf.session_key for sf in files if sf.source == SESSIONS and sf.session_key]
        if not keys:
            return files
        counts = {
            r[0]: int(r[1])
            for r in await self.s.db.fetch(
                "SELECT session_key, line_count FROM sessions WHERE agent_id = $1 AND session_key = ANY($2::text[])",
                self.s.agent_id,
                keys,
            )
        }
        want = {sf.path: counts.get(sf.session_key or "") for sf in files if sf.source == SESSIONS}
        stale = await asyncio.to_thread(_stale_mirrors, [(sf, want[sf.path]) for sf in files if sf.path in want])
        if stale:
            log.debug("memory_mirror_behind", files=len(stale))
        return [sf for sf in files if sf.path not in stale]

    async def remove(self, paths: list[str]) -> int:
        gone: list[int] = []
        async with self.s.connection() as conn:
            async with conn.transaction():
                n = await remove_files(conn, self.s.agent_id, paths, gone)
        self.s.deleted.extend(gone)  # committed
        return n
