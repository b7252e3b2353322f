"""One import or export, whatever its source: what `admin.import` and `admin.export` (methods/admin.py)
call with an agent's stores, so the method stays a door-side shell.

    report = await run_import(Target(...), "chatgpt", path, dry_run=False, progress=emit)
    summary = await run_export(Target(...), out, progress=emit)

After an import that wrote something, the agent's memory is synced (the report's `index`), so what came in
is searchable when the call answers; a sync that fails does not undo the import (its error is in `index`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import SessionLimit, Unavailable
from ..storage.base import KeyedStore, SessionStore
from . import archive, importer, notes, sniff, transcripts
from .conversation import BadExport

SOURCES = ("chatgpt", "claude", "markdown", "jsonl")
Progress = Callable[[dict[str, Any]], None]


@dataclass
class Target:
    """What an import writes into / an export reads: one agent's stores and workspace."""

    agent_id: str
    engine: str  # "files" | "postgresql"
    sessions: SessionStore
    keyed: KeyedStore | None  # None: memory is off
    memory: Any  # the agent's MemoryService (sync after an import), or None
    workspace: Path
    max_file_bytes: int  # memory.maxFileBytes: a note over it would not be indexed
    limits: importer.Limits = importer.Limits()
    stopping: Callable[[], bool] = lambda: False


async def run_import(
    target: Target,
    source: str,
    path: Path,
    *,
    dry_run: bool,
    folder: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    started = time.monotonic()
    head: dict[str, Any] = {"source": source, "path": str(path), "agentId": target.agent_id, "dryRun": dry_run}
    problem = await asyncio.to_thread(sniff.mistaken, source, path)  # another kind's file: say which command
    if problem:
        raise BadExport(problem, where=path.name or str(path))
    if source in ("chatgpt", "claude"):
        body = await importer.import_export(
            target.sessions,
            path,
            source,
            agent_id=target.agent_id,
            limits=target.limits,
            dry_run=dry_run,
            progress=progress,
            stopping=target.stopping,
        )
        wrote = body["conversations"]["added"] + body["conversations"]["extended"] > 0
    elif source == "markdown":
        chosen = notes.check_folder(folder) if folder else notes.default_folder(path)
        ticker = _ticker(progress, lambda t: {"phase": "notes", "files": t.found, "added": t.added})
        body = await asyncio.to_thread(
            notes.import_vault,
            path,
            target.workspace,
            chosen,
            max_file_bytes=target.max_file_bytes,
            dry_run=dry_run,
            tick=ticker,
        )
        wrote = body["added"] + body["updated"] > 0
    else:
        body = await _import_jsonl(target, path, dry_run, progress)
        wrote = any(
            body[k]["added"] + body[k].get("extended", 0) + body[k].get("updated", 0)
            for k in body
            if k in ("sessions", "keyed", "notes")
        )
    report = {**head, **body, "durationMs": round((time.monotonic() - started) * 1000)}
    report["index"] = await _sync(target, progress) if wrote and not dry_run else None
    return report


async def _import_jsonl(target: Target, path: Path, dry_run: bool, progress: Progress | None) -> dict[str, Any]:
    tally = transcripts.SessionsTally()
    tick = _ticker(progress, lambda t: {"phase": "sessions", "sessions": t.found, "added": t.added})
    if path.is_dir() or path.suffix.lower() == ".jsonl":
        limit = target.limits.conversation_bytes
        incoming = (
            transcripts.folder_sessions(path, target.agent_id, limit)
            if path.is_dir()
            else iter([await asyncio.to_thread(_one_file, path, target.agent_id, limit)])
        )
        await _sessions(target, incoming, dry_run, tally, tick)
        return {"sessions": tally.as_dict()}
    opened = await asyncio.to_thread(transcripts.Archive, path)
    try:
        await _sessions(
            target, opened.sessions(target.agent_id, target.limits.conversation_bytes), dry_run, tally, tick
        )
        out: dict[str, Any] = {"sessions": tally.as_dict(), "manifest": _brief(opened.manifest)}
        entries = await asyncio.to_thread(opened.keyed)
        if target.keyed is not None:
            out["keyed"] = await transcripts.import_keyed(target.keyed, entries, dry_run)
        else:
            out["keyed"] = {"found": len(entries), "added": 0, "skipped": len(entries), "why": "memory is off"}
        placed = await asyncio.to_thread(transcripts.import_archive_notes, opened, target.workspace, dry_run=dry_run)
        out["notes"] = placed.as_dict()
        return out
    finally:
        await asyncio.to_thread(opened.close)


async def _sessions(target: Target, incoming: Any, dry_run: bool, tally: Any, tick: Callable[[Any], None]) -> None:
    try:
        await transcripts.import_sessions(
            target.sessions,
            incoming,
            dry_run=dry_run,
            tally=tally,
            max_bytes=target.limits.conversation_bytes,
            tick=lambda: tick(tally),
            stopping=target.stopping,
        )
    except (BadExport, SessionLimit, Unavailable) as exc:
        exc.data = {**(exc.data or {}), "done": {"sessions": tally.as_dict()}}
        raise


def _one_file(path: Path, agent_id: str, max_bytes: int) -> transcripts.Incoming:
    size = path.stat().st_size
    if size > max_bytes:
        return transcripts.Incoming(path.stem, [], [], None, path.name, oversize=size)
    return transcripts.parse_lines(path.read_bytes(), path.name, agent_id, path.stem)


def _brief(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: manifest.get(k) for k in ("agentId", "engine", "exportedAt", "gateway")}


def _ticker(progress: Progress | None, shape: Callable[[Any], dict[str, Any]]) -> Callable[[Any], None]:
    last = [0.0]

    def tick(tally: Any) -> None:
        now = time.monotonic()
        if progress is not None and now - last[0] >= importer.PROGRESS_EVERY_S:
            last[0] = now
            progress(shape(tally))

    return tick


async def _sync(target: Target, progress: Progress | None) -> dict[str, Any] | None:
    """Index what came in now, so it is found when the import answers."""
    if target.memory is None:
        return None
    if progress is not None:
        progress({"phase": "indexing"})
    try:
        stats = await target.memory.sync()
    except Exception as exc:  # the import stands; the next sync (on any trigger) indexes it
        return {"error": getattr(exc, "message", None) or str(exc)}
    return {k: stats[k] for k in ("indexed", "chunksEmbedded", "durationMs") if k in stats}


async def run_export(target: Target, out: Path, *, progress: Progress | None = None) -> dict[str, Any]:
    return await archive.export_agent(
        agent_id=target.agent_id,
        engine=target.engine,
        sessions=target.sessions,
        keyed=target.keyed,
        workspace=target.workspace,
        out=out,
        progress=progress,
    )
