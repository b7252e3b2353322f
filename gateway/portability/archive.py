"""`jarvis export`: one agent's memory as one zip, readable without Jarvis.

    manifest.json            what is in it: format, version, agent, engine, when, counts, every file's
                             size and SHA-256
    README.md                the same in words, for whoever opens the zip
    sessions/index.jsonl     one line per session: its metadata (sessionKey, label, createdAt, updatedAt,
                             messageCount, model?, systemPrompt?)
    sessions/<name>.jsonl    its transcript, byte for byte (PROTOCOL.md §6: a header record, naming the
                             session, then one JSON message record per line); <name> is the key made a file
                             name every platform can unpack (`file_name`: ':' and other characters Windows
                             refuses percent-encoded, its device names and case-folded twins told apart)
    keyed.jsonl              one keyed memory (memory.set) per line: key, category, value, created, updated,
                             versions (memory.history's, oldest first); one in the trash with deletedAt
    notes/…                  the workspace's memory files at their own paths (MEMORY.md, memory/**), keyed
                             memories' files left out (they are keyed.jsonl)

Everything is read through the stores (SessionStore.export, KeyedStore.copies), so either engine
exports alike, a session as of one moment. The zip is written to `<out>.partial` (owner-only) and renamed
when complete: an export cut short leaves no half archive under the name asked for. One session, one
note at a time is in memory, whatever the agent holds.

`keyed_record` is the one place that writes a keyed memory's line; the manifest's `keyed.versions` says
that lines carry their `versions` (true since they do; an older export's lines have none).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

from .. import __version__
from ..memory.layout import KEYED_DIR, NOTES_DIR, ROOT_FILES
from ..memory.notes.keyed import KeyedCopy
from ..storage.base import KeyedStore, SessionStore
from ..timeutil import now_iso

FORMAT, VERSION = "jarvis-export", 1
README = """\
# Jarvis export

This zip holds one agent's memory from a Jarvis Gateway, in plain formats:

- `sessions/<name>.jsonl`: each conversation's transcript (the name is its key, with characters some
  systems refuse in a file name, such as `:`, written as `%3A`), one JSON object per line. The first line
  (`"type":"session"`) names the session; each `"type":"message"` line is one message:
  `{"id", "timestamp" (ISO 8601 UTC), "message": {"role": "user"|"assistant"|…, "content": "…"}}`.
- `sessions/index.jsonl`: each session's label, dates and message count, one JSON object per line.
- `keyed.jsonl`: the named facts (memory.set), one JSON object per line: key, category, value, created,
  updated, and `versions` (each value it had: version, value, category, at, by (the door), principal),
  oldest first; one deleted into the trash has `deletedAt` too.
- `notes/`: the markdown notes (MEMORY.md, memory/…) as they were in the workspace.
- `manifest.json`: what is here, with each file's size and SHA-256.

Bring it into another Jarvis (either storage engine) with `jarvis import jsonl THIS.zip`.
"""


@dataclass
class ExportTally:
    sessions: int = 0
    messages: int = 0
    session_bytes: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    torn: int = 0
    keyed: int = 0
    trashed: int = 0
    notes: int = 0
    note_bytes: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)


def keyed_record(c: KeyedCopy) -> dict[str, Any]:
    """A keyed memory's line in keyed.jsonl: the entry, its versions, and when it went to the trash if it did."""
    e = c.entry
    out: dict[str, Any] = {
        "key": e.key,
        "category": e.category,
        "value": e.value,
        "created": e.created,
        "updated": e.updated,
        "versions": [v.full() for v in c.versions],
    }
    if c.deleted:
        out["deletedAt"], out["deletedBy"] = c.deleted, c.deleted_by
    return out


_PORTABLE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
# Names Windows keeps for devices, whatever the extension ("con.jsonl" cannot be made there).
_DEVICES = frozenset(["con", "prn", "aux", "nul"] + [f"{d}{n}" for d in ("com", "lpt") for n in "0123456789"])


def file_name(key: str, taken: set[str]) -> str:
    """A session key as a file name every platform can unpack: characters outside [A-Za-z0-9._-] (':'
    of "openai:…", which Windows refuses) percent-encoded, a device name's first letter too, and a name
    that differs from one already `taken` only in case (one file on Windows and macOS) given "~2", "~3".
    The key itself is in the transcript's header: the name only has to be one a file can have."""
    name = "".join(c if c in _PORTABLE else "".join(f"%{b:02X}" for b in c.encode()) for c in key)
    if name.split(".", 1)[0].lower() in _DEVICES:
        name = f"%{ord(name[0]):02X}{name[1:]}"
    base, n = name, 1
    while name.casefold() in taken:
        n += 1
        name = f"{base}~{n}"
    taken.add(name.casefold())
    return name


def note_files(workspace: Path) -> list[tuple[str, Path]]:
    """(workspace-relative path, file) of the memory files to export, in path order: the root files and
    everything under memory/ but keyed memories' files; no symlinks, nothing hidden."""
    out: list[tuple[str, Path]] = []
    for name in ROOT_FILES:
        p = workspace / name
        if p.is_file() and not p.is_symlink():
            out.append((name, p))
    base = workspace / NOTES_DIR
    for root, dirs, files in os.walk(base):
        rel_root = Path(root).relative_to(workspace).as_posix()
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and f"{rel_root}/{d}" != KEYED_DIR)
        for name in sorted(files):
            p = Path(root) / name
            if name.startswith(".") or p.is_symlink() or not p.is_file():
                continue
            out.append((f"{rel_root}/{name}", p))
    return out


class _Zip:
    """The archive being written, in a thread per call (one call at a time)."""

    def __init__(self, path: Path, tally: ExportTally):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.fh = os.fdopen(fd, "wb")
        self.zf = zipfile.ZipFile(self.fh, "w", zipfile.ZIP_DEFLATED, compresslevel=6)
        self.tally = tally

    def put(self, name: str, data: bytes) -> None:
        self.zf.writestr(name, data)
        self.tally.files.append({"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})

    def put_file(self, name: str, path: Path) -> int:
        h = hashlib.sha256()
        size = 0
        with path.open("rb") as src, self.zf.open(name, "w", force_zip64=True) as dst:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                dst.write(chunk)
                size += len(chunk)
        self.tally.files.append({"path": name, "bytes": size, "sha256": h.hexdigest()})
        return size

    def close(self) -> None:
        self.zf.close()
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()


async def export_agent(
    *,
    agent_id: str,
    engine: str,
    sessions: SessionStore,
    keyed: KeyedStore | None,
    workspace: Path,
    out: Path,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Write the archive to `out` (which must not exist); → what it holds (the manifest, less its file list)."""
    started = time.monotonic()
    tally = ExportTally()
    partial = out.with_name(out.name + ".partial")
    z = await asyncio.to_thread(_Zip, partial, tally)
    done = False
    try:
        keys = sorted((await sessions.all()).keys())
        index: list[bytes] = []
        taken: set[str] = set()
        last = 0.0
        for n, key in enumerate(keys, 1):
            copy = await sessions.export(key)
            if copy is None:  # deleted meanwhile
                continue
            if copy.problem:
                tally.skipped.append({"sessionKey": key, "reason": copy.problem})
                continue
            data = b"".join(line + b"\n" for line in copy.lines)
            await asyncio.to_thread(z.put, f"sessions/{file_name(key, taken)}.jsonl", data)
            index.append(orjson.dumps(copy.meta))
            tally.sessions += 1
            tally.messages += int(copy.meta.get("messageCount") or 0)
            tally.session_bytes += len(data)
            tally.torn += copy.torn
            if progress is not None and (time.monotonic() - last >= 0.25 or n == len(keys)):
                last = time.monotonic()
                progress({"phase": "sessions", "done": n, "total": len(keys)})
        await asyncio.to_thread(z.put, "sessions/index.jsonl", b"".join(line + b"\n" for line in index))
        copies = await keyed.copies() if keyed is not None else []
        tally.keyed = sum(1 for c in copies if not c.deleted)
        tally.trashed = len(copies) - tally.keyed
        lines = b"".join(
            orjson.dumps(keyed_record(c)) + b"\n"
            for c in sorted(copies, key=lambda c: (c.deleted is not None, c.entry.key))
        )
        await asyncio.to_thread(z.put, "keyed.jsonl", lines)
        notes = await asyncio.to_thread(note_files, workspace)
        for rel, path in notes:
            try:
                tally.note_bytes += await asyncio.to_thread(z.put_file, f"notes/{rel}", path)
                tally.notes += 1
            except FileNotFoundError:  # deleted meanwhile
                continue
        if progress is not None:
            progress({"phase": "notes", "done": len(notes), "total": len(notes)})
        summary = {
            "format": FORMAT,
            "version": VERSION,
            "exportedAt": now_iso(),
            "gateway": __version__,
            "agentId": agent_id,
            "engine": engine,
            "sessions": {
                "count": tally.sessions,
                "messages": tally.messages,
                "bytes": tally.session_bytes,
                "skipped": tally.skipped,
                "tornBytes": tally.torn,
            },
            "keyed": {"count": tally.keyed, "trashed": tally.trashed, "versions": True},
            "notes": {"count": tally.notes, "bytes": tally.note_bytes},
        }
        await asyncio.to_thread(z.put, "README.md", README.encode())
        manifest = {**summary, "files": list(tally.files)}
        await asyncio.to_thread(z.put, "manifest.json", orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        await asyncio.to_thread(z.close)
        await asyncio.to_thread(os.replace, partial, out)
        done = True
    finally:
        if not done:
            await asyncio.to_thread(_discard, z, partial)
    size = (await asyncio.to_thread(out.stat)).st_size
    return {**summary, "path": str(out), "bytes": size, "durationMs": round((time.monotonic() - started) * 1000)}


def _discard(z: _Zip, partial: Path) -> None:
    try:
        z.zf.close()
        z.fh.close()
    except Exception:  # the archive is being thrown away: how it closes does not matter
        pass
    try:
        os.unlink(partial)
    except FileNotFoundError:
        pass
