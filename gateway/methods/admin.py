"""admin.* — bring history in, take memory out: `admin.import` and `admin.export`.

They read and write files on the gateway's machine, as the gateway's user, by path: the namespace is the
gateway owner's (`admin` in principals.METHOD_SCOPES), and a path is taken only from a caller on
the same machine (a loopback connection, or `jarvis` in process), never from a remote client holding the
token. The CLI hands the gateway the path of the export and the gateway reads it where it lies (an export
is hundreds of MB, a frame 1 MiB). A client elsewhere — the web page in a browser — sends the file in
pieces instead (`admin.upload`, portability/uploads.py) and imports the upload (`admin.import {upload}`).
The work is gateway/portability/.

While an import or export runs, its caller gets `admin.import.progress` / `admin.export.progress`
notifications (about four a second at most); the gateway keeps answering everyone meanwhile (the reading
and converting run in threads). One import or export at a time per agent: a second is -32009.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import os
from pathlib import Path
from typing import Any, Callable

import structlog

from ..errors import Conflict, Invalid
from ..events import Event
from ..portability import sniff, uploads
from ..portability.run import SOURCES, Target, run_export, run_import
from ..registry import CallContext, registry
from ..schema import Bool, Int, Obj, Str
from .sessions import with_agent

log = structlog.get_logger("gateway.admin")

PATH = 4096
_busy: set[str] = set()  # agents with an import or export under way in this process
_uploads: dict[Path, uploads.Uploads] = {}  # per state dir (one gateway per process; tests run several)


def _uploads_of(ctx: CallContext) -> uploads.Uploads:
    folder = ctx.services.config.state_dir / "uploads"
    return _uploads.setdefault(folder, uploads.Uploads(folder))


def local_path(ctx: CallContext, raw: str, field: str = "path") -> Path:
    """`raw` as a path on this machine, when the caller is on this machine (see the module docstring)."""
    peer = ctx.connection.peer if ctx.connection is not None else ""
    if not _on_this_machine(peer):
        raise Invalid(
            "a path on the gateway's machine is taken only from a caller on that machine (loopback, or "
            "jarvis in process)",
            field,
        )
    if "\x00" in raw or not os.path.isabs(raw):
        raise Invalid("must be an absolute path on the gateway's machine", field)
    return Path(os.path.normpath(raw))


def _on_this_machine(peer: str) -> bool:
    if peer == "local":
        return True
    try:
        return ipaddress.ip_address(peer.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _kind(path: Path) -> str | None:
    """ "folder", "file" (anything else that is there), or None when nothing is."""
    if path.is_dir():
        return "folder"
    return "file" if os.path.lexists(path) else None


def _progress(ctx: CallContext, method: str, base: dict[str, Any]) -> Callable[[dict[str, Any]], None] | None:
    conn = ctx.connection
    if conn is None:
        return None
    return lambda event: conn.deliver(Event(method, {**base, **event}))


async def _target(ctx: CallContext, agent_id: str | None, create: bool) -> Target:
    agent = await ctx.services.agent(agent_id, create=create)
    cfg = ctx.services.config
    memory = agent.memory
    return Target(
        agent_id=agent.id,
        engine=ctx.services.storage.name,
        sessions=agent.sessions,
        keyed=memory.keyed if memory is not None else None,
        memory=memory,
        workspace=cfg.agent_workspace(agent.id),
        max_file_bytes=cfg.memory.max_file_bytes,
        stopping=lambda: ctx.services.stopping or (ctx.connection is not None and ctx.connection.closing),
    )


class _One:
    """One import or export per agent at a time."""

    def __init__(self, agent_id: str):
        self.key = agent_id

    def __enter__(self) -> None:
        if self.key in _busy:
            raise Conflict(
                f"an import or export of agent {self.key!r} is under way; wait for it to finish",
                {"agentId": self.key},
            )
        _busy.add(self.key)

    def __exit__(self, *exc: Any) -> None:
        _busy.discard(self.key)


@registry.method(
    "admin.import",
    with_agent(
        source=Str(choices=SOURCES, description="chatgpt | claude (their data exports) | markdown (a vault) | jsonl"),
        path=Str(
            1,
            PATH,
            optional=True,
            description="absolute path on the gateway's machine: the export's .zip or conversations.json "
            "(chatgpt, claude); a vault folder or .zip (markdown); a transcript .jsonl, a folder of them, or a "
            "Jarvis export .zip (jsonl)",
        ),
        upload=Str(32, 32, optional=True, description="instead of path: an uploadId of admin.upload, complete"),
        dryRun=Bool(
            default=False,
            description="say what would be imported (counts, dates, what is left out and why); write nothing",
        ),
        folder=Str(
            1,
            420,
            optional=True,
            description="markdown: the folder under memory/ to copy the vault into (default: the vault's name)",
        ),
    ),
    "Import conversations (ChatGPT, Claude), a markdown vault or this gateway's own transcripts and exports "
    "into an agent; importing again adds only what is new. Admin; from a caller on the gateway's machine. "
    "→ the report: what was added, extended, unchanged, left out and why, the date range, and `index` (the sync).",
)
async def import_(ctx: CallContext, p: dict) -> dict:
    if (p["path"] is None) == (p["upload"] is None):
        raise Invalid("give exactly one of path and upload", "path")
    if p["folder"] is not None and p["source"] != "markdown":
        raise Invalid("goes with source markdown only", "folder")
    upload = None
    if p["upload"] is not None:
        upload = await asyncio.to_thread(_uploads_of(ctx).take, p["upload"])
        path, field = upload.path, "upload"
    else:
        path, field = local_path(ctx, p["path"]), "path"
    try:
        kind = await asyncio.to_thread(_kind, path)
        if kind is None:
            raise Invalid("no such file or folder on the gateway's machine", field)
        if p["source"] == "markdown" and not (kind == "folder" or path.suffix.lower() == ".zip"):
            seen = await asyncio.to_thread(sniff.look, path)  # another import's file: which one
            also = (
                f"; this looks like {seen.what}: import it with `jarvis import {seen.kind}`"
                if seen.kind
                else f"; this is {seen.what}"
                if seen.what
                else ""
            )
            raise Invalid(f"markdown: must be a vault folder or a .zip of one{also}", field)
        target = await _target(ctx, p["agentId"], create=not p["dryRun"])
        with _One(target.agent_id):
            base = {"agentId": target.agent_id, "source": p["source"], "path": path.name if upload else str(path)}
            log.info("import started", agent=target.agent_id, source=p["source"], dry_run=p["dryRun"])
            report = await run_import(
                target,
                p["source"],
                path,
                dry_run=p["dryRun"],
                folder=p["folder"],
                progress=_progress(ctx, "admin.import.progress", base),
            )
            log.info("import done", agent=target.agent_id, source=p["source"], duration_ms=report["durationMs"])
            if upload is not None:
                report["path"] = upload.path.name
            return report
    finally:
        if upload is not None:
            await asyncio.to_thread(_uploads_of(ctx).done, upload)


@registry.method(
    "admin.upload",
    Obj(
        uploadId=Str(32, 32, optional=True, description="the upload to add to (none: start one)"),
        name=Str(1, 255, optional=True, description="first piece: the file's name (.zip, .json or .jsonl)"),
        offset=Int(0, description="the bytes sent before this piece (pieces go in order, once)"),
        data=Str(0, 1_000_000, description=f"the piece, base64 (at most {uploads.PIECE_BYTES} bytes decoded)"),
    ),
    "Send a file to the gateway in pieces, for admin.import {upload}: the first piece names the file and "
    "starts an upload, the next name its uploadId. → {uploadId, bytes (received so far)}. Admin; at most "
    f"{uploads.MAX_BYTES >> 20} MiB an upload and {uploads.MAX_OPEN} at once; one left alone "
    f"{uploads.IDLE_S:.0f} s is dropped.",
)
async def upload(ctx: CallContext, p: dict) -> dict:
    try:
        data = base64.b64decode(p["data"], validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("must be base64", "data") from None
    if len(data) > uploads.PIECE_BYTES:
        raise Invalid(f"a piece is at most {uploads.PIECE_BYTES} bytes decoded, got {len(data)}", "data")
    store = _uploads_of(ctx)
    if p["uploadId"] is None:
        if p["name"] is None:
            raise Invalid("the first piece names the file (no uploadId: a new upload)", "name")
        if p["offset"] != 0:
            raise Invalid("must be 0 for the first piece", "offset")
        up = await asyncio.to_thread(store.start, p["name"])
        if data:
            up = await asyncio.to_thread(store.append, up.id, 0, data)
    else:
        up = await asyncio.to_thread(store.append, p["uploadId"], p["offset"], data)
    return {"uploadId": up.id, "bytes": up.size}


@registry.method(
    "admin.export",
    with_agent(
        path=Str(1, PATH, description="absolute path on the gateway's machine of the .zip to write (must not exist)"),
    ),
    "Write one agent's sessions (JSONL), notes, keyed memories and a manifest into one zip, readable without "
    "Jarvis and importable with admin.import source jsonl. Admin; from a caller on the gateway's machine. "
    "→ what it holds (the manifest's counts), its path and size.",
)
async def export(ctx: CallContext, p: dict) -> dict:
    out = local_path(ctx, p["path"])
    if await asyncio.to_thread(_kind, out) is not None:
        raise Invalid("exists already; choose another name (an export never overwrites a file)", "path")
    if await asyncio.to_thread(_kind, out.parent) != "folder":
        raise Invalid(f"its folder {str(out.parent)!r} does not exist", "path")
    target = await _target(ctx, p["agentId"], create=False)
    with _One(target.agent_id):
        progress = _progress(ctx, "admin.export.progress", {"agentId": target.agent_id, "path": str(out)})
        summary = await run_export(target, out, progress=progress)
        log.info("export done", agent=target.agent_id, bytes=summary["bytes"], duration_ms=summary["durationMs"])
        return summary
