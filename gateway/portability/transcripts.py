"""`jarvis import jsonl`: this project's own formats back into an agent, through its stores.

- a Jarvis export (archive.py's zip): every session with its metadata and transcript byte for byte, the
  keyed memories (KeyedStore.import_entries), and the notes at their own workspace paths;
- a transcript file (`<key>.jsonl`, PROTOCOL.md §6), or a folder of them (a sessions folder copied from
  another machine: its `sessions.json` or `index.jsonl`, when there, gives labels and settings). Lines of
  `jarvis sessions export KEY --format jsonl` (`{id, role, content, timestamp}`) are taken as messages.

Idempotent like the vendors' imports: a session of the same key whose records are the first part of the
incoming ones gets the rest appended (nothing, when they are the same); one whose records differ is left
as it is and reported. A keyed memory whose key is taken is left as it is (reported when its value
differs); a note is placed as notes.place says (never over a file changed here).
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.parse
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson

from ..errors import Invalid, SessionLimit, Unavailable
from ..memory.layout import KEYED_DIR
from ..memory.notes.keyed import Entry, KeyedCopy, Version
from ..sessions import transcript as tx
from ..sessions.history import check_session_key
from ..storage.base import ADDED, PRESENT, KeyedStore, SessionCopy, SessionStore
from .archive import FORMAT, VERSION
from .conversation import BadExport, dict_or_empty
from .importer import SHOWN, Counts
from .notes import NotesTally, copy_files, is_exported_note

ARCHIVE_STATE = "memory/.jarvis-import-notes.json"  # an archive's notes as they were copied (notes.copy_files)


@dataclass
class Incoming:
    """One session as a file gives it: its lines (whole, checked), and its metadata when the file had some."""

    key: str
    lines: list[bytes]
    records: list[dict[str, Any]]
    meta: dict[str, Any] | None
    where: str
    oversize: int = 0  # its bytes, when over the most one session may be: not read, skipped


@dataclass
class SessionsTally(Counts):
    def as_dict(self) -> dict[str, Any]:
        return {**self.counts(), "messagesAdded": self.messages_added, "skippedSessions": self.skipped_list}


# ---- reading ----------------------------------------------------------------------------------------


def parse_lines(data: bytes, where: str, agent_id: str, key_hint: str | None) -> Incoming:
    """A transcript's bytes as a session. BadExport (naming the file and line) for a line that is not a
    JSON object, and for a file that names no usable session key."""
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    records: list[dict[str, Any]] = []
    lines: list[bytes] = []  # each record's line: as the file had it, unless it was converted
    for n, line in enumerate(raw, 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise BadExport(f"is not JSON ({exc})", where=where, at=f"line {n}") from None
        if type(rec) is not dict:
            raise BadExport("is not a JSON object", where=where, at=f"line {n}")
        if "type" not in rec and isinstance(rec.get("role"), str) and "content" in rec:  # a history message
            rec = tx.message_record(
                str(rec.get("id") or f"line-{n}"),
                rec["role"],
                tx.message_text(rec["content"]),
                timestamp=rec.get("timestamp") if isinstance(rec.get("timestamp"), str) else None,
            )
            line = orjson.dumps(rec)
        records.append(rec)
        lines.append(line.rstrip(b"\r"))
    head = records[0] if records and records[0].get("type") == "session" else None
    key = (head or {}).get("sessionKey") if isinstance((head or {}).get("sessionKey"), str) else key_hint
    try:
        key = check_session_key(key or "")
    except Invalid:
        raise BadExport(
            f"names no usable session key ({key!r}); give the file a name that is one", where=where
        ) from None
    if head is None:
        stamps = [r["timestamp"] for r in records if isinstance(r.get("timestamp"), str)]
        records.insert(0, tx.header(key, agent_id, min(stamps) if stamps else None))
        lines.insert(0, orjson.dumps(records[0]))
    return Incoming(key, lines, records, None, where)


def derived_meta(inc: Incoming) -> dict[str, Any]:
    """Metadata for a session whose file brought none: from its header and messages."""
    head = inc.records[0]
    stamps = [r["timestamp"] for r in inc.records if r.get("type") == "message" and isinstance(r.get("timestamp"), str)]
    created = head.get("createdAt") if isinstance(head.get("createdAt"), str) else (min(stamps) if stamps else "")
    imported = dict_or_empty(head.get("imported"))
    title = imported.get("title")
    return {
        "sessionKey": inc.key,
        "label": title[:200] if isinstance(title, str) and title else None,
        "createdAt": created,
        "updatedAt": max([created, *stamps]),
        "messageCount": sum(1 for r in inc.records if r.get("type") == "message"),
    }


def _meta_from(raw: Any, key: str) -> dict[str, Any] | None:
    """A session's metadata as an index or sessions.json gives it, kept to the fields a store holds."""
    if not isinstance(raw, dict):
        return None
    meta = {
        k: raw[k] for k in ("label", "createdAt", "updatedAt", "model", "systemPrompt") if isinstance(raw.get(k), str)
    }
    meta["sessionKey"] = key
    meta.setdefault("label", None)
    return meta


def _too_big(key: str, where: str, size: int) -> Incoming:
    return Incoming(key, [], [], None, where, oversize=size)


def folder_sessions(folder: Path, agent_id: str, max_bytes: int) -> Iterator[Incoming]:
    """Every `*.jsonl` of a folder, with sessions.json's (or index.jsonl's) metadata where it has some."""
    metas: dict[str, Any] = {}
    sj = folder / "sessions.json"
    if sj.is_file():
        try:
            parsed = orjson.loads(sj.read_bytes())
            metas = parsed.get("sessions", {}) if isinstance(parsed, dict) else {}
        except orjson.JSONDecodeError:
            raise BadExport("is not JSON", where=str(sj)) from None
    ij = folder / "index.jsonl"
    if ij.is_file():
        metas.update(_index(ij.read_bytes(), str(ij)))
    for path in sorted(folder.glob("*.jsonl")):
        if path.name == "index.jsonl" or path.is_symlink() or not path.is_file():
            continue
        if path.stat().st_size > max_bytes:
            yield _too_big(path.stem, str(path), path.stat().st_size)
            continue
        inc = parse_lines(path.read_bytes(), str(path), agent_id, path.stem)
        inc.meta = _meta_from(metas.get(inc.key), inc.key)
        yield inc


def json_lines(data: bytes, where: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines file; BadExport naming the line that is
    not JSON."""
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, orjson.loads(line)
        except orjson.JSONDecodeError:
            raise BadExport("is not JSON", where=where, at=f"line {n}") from None


def _index(data: bytes, where: str) -> dict[str, Any]:
    return {
        meta["sessionKey"]: meta
        for _, meta in json_lines(data, where)
        if isinstance(meta, dict) and isinstance(meta.get("sessionKey"), str)
    }


MAX_VERSIONS = 10_000  # of one keyed memory in an export (the store keeps memory.versions.keep of them)


def _versions(raw: Any, where: str, n: int) -> tuple[Version, ...]:
    """A keyed.jsonl line's `versions`, checked: absent (an older export) is none; else objects with a
    version number (rising from 1), value, category, at and by as strings, principal a string or null."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_VERSIONS:
        raise BadExport(f"versions: must be a list of at most {MAX_VERSIONS} versions", where=where, at=f"line {n}")
    out: list[Version] = []
    for i, v in enumerate(raw):
        strings = ("value", "category", "at")
        if (
            not isinstance(v, dict)
            or type(v.get("version")) is not int
            or not all(isinstance(v.get(k), str) for k in strings)
            or not isinstance(v.get("by", ""), str)
            or not isinstance(v.get("principal"), (str, type(None)))
        ):
            raise BadExport(
                f"versions[{i}]: must be an object with an integer version, string value, category, at and by, "
                "and principal a string or null",
                where=where,
                at=f"line {n}",
            )
        if v["version"] < 1 or (out and v["version"] <= out[-1].version):
            raise BadExport(f"versions[{i}]: version numbers must rise from 1", where=where, at=f"line {n}")
        out.append(Version.of(v))
    return tuple(out)


class Archive:
    """A Jarvis export opened for reading (blocking; one call at a time)."""

    def __init__(self, path: Path):
        self.name = path.name
        try:
            self.zf = zipfile.ZipFile(path)
            manifest = orjson.loads(self.zf.read("manifest.json"))
        except (zipfile.BadZipFile, KeyError, OSError, orjson.JSONDecodeError) as exc:
            raise BadExport(f"not a readable Jarvis export ({exc})", where=path.name) from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise BadExport(f"manifest.json: not a Jarvis export (format is not {FORMAT!r})", where=path.name)
        if not isinstance(manifest.get("version"), int) or manifest["version"] > VERSION:
            raise BadExport(
                f"manifest.json: version {manifest.get('version')!r}; this gateway reads version {VERSION} and older",
                where=path.name,
            )
        self.manifest = manifest
        names = set(self.zf.namelist())
        self.metas = (
            _index(self.zf.read("sessions/index.jsonl"), "sessions/index.jsonl")
            if "sessions/index.jsonl" in names
            else {}
        )
        self.session_names = sorted(
            n
            for n in names
            if n.startswith("sessions/") and n.endswith(".jsonl") and n.count("/") == 1 and n != "sessions/index.jsonl"
        )
        self.note_names = sorted(n for n in names if n.startswith("notes/") and not n.endswith("/"))

    def sessions(self, agent_id: str, max_bytes: int) -> Iterator[Incoming]:
        for name in self.session_names:
            where = f"{self.name}:{name}"
            # the key as archive.file_name wrote it (the header names it; this is for a file without one)
            stem = urllib.parse.unquote(name[len("sessions/") : -len(".jsonl")].split("~", 1)[0])
            size = self.zf.getinfo(name).file_size
            if size > max_bytes:
                yield _too_big(stem, where, size)
                continue
            inc = parse_lines(self._read(name, where), where, agent_id, stem)
            inc.meta = _meta_from(self.metas.get(inc.key), inc.key)
            yield inc

    def keyed(self) -> list[KeyedCopy]:
        """keyed.jsonl's memories, each with its versions (none in an export older than them) and, for one
        in the trash, when it went there."""
        if "keyed.jsonl" not in self.zf.namelist():
            return []
        out = []
        where = f"{self.name}:keyed.jsonl"
        for n, rec in json_lines(self._read("keyed.jsonl", where), where):
            fields = ("key", "category", "value", "created", "updated")
            if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) for k in fields):
                raise BadExport(f"must be an object with string {', '.join(fields)}", where=where, at=f"line {n}")
            rel = f"{KEYED_DIR}/{rec['category']}/{rec['key']}.md"
            entry = Entry(rec["key"], rec["category"], rec["value"], rec["created"], rec["updated"], rel, Path(rel))
            deleted = rec.get("deletedAt")
            if deleted is not None and not isinstance(deleted, str):
                raise BadExport("deletedAt: must be a string (when it went to the trash)", where=where, at=f"line {n}")
            by = rec["deletedBy"] if isinstance(rec.get("deletedBy"), str) else ""
            out.append(KeyedCopy(entry, _versions(rec.get("versions"), where, n), deleted or None, by))
        return out

    def notes(self) -> Iterator[tuple[str, Callable[[], bytes], int]]:
        for name in self.note_names:
            info = self.zf.getinfo(name)
            yield name[len("notes/") :], functools.partial(self._read, name, f"{self.name}:{name}"), info.file_size

    def _read(self, name: str, where: str) -> bytes:
        try:
            return self.zf.read(name)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise BadExport(f"cannot be read ({exc}); the export is damaged", where=where) from None

    def close(self) -> None:
        self.zf.close()


# ---- writing ----------------------------------------------------------------------------------------


async def import_sessions(
    store: SessionStore,
    incoming: Iterator[Incoming],
    *,
    dry_run: bool,
    tally: SessionsTally,
    max_bytes: int,
    tick: Callable[[], None] = lambda: None,
    stopping: Callable[[], bool] = lambda: False,
) -> None:
    """Each incoming session: added whole, extended with what it has more, or left (see the docstring).
    `incoming` blocks: each item is read in a thread."""
    known = set((await store.all()).keys())
    end = object()
    while True:
        if stopping():
            raise Unavailable(
                f"the import stopped after {tally.found} sessions (the gateway is stopping, or its caller "
                f"left); run it again to go on: what was imported is kept, and found",
                retryable=True,
            )
        inc = await asyncio.to_thread(next, incoming, end)
        if inc is end:
            return
        assert isinstance(inc, Incoming)
        tally.found += 1
        if inc.oversize:
            tally.skip({"sessionKey": inc.key}, f"{inc.oversize} bytes, over the {max_bytes} one session may be")
            continue
        if inc.key in known:
            await _extend(store, inc, dry_run, tally)
        else:
            if len(known) >= store.max:
                raise SessionLimit(store.agent_id, store.max)
            meta = derived_meta(inc)
            if inc.meta:
                meta.update({k: v for k, v in inc.meta.items() if v is not None or k == "label"})
            copy = SessionCopy(meta, tuple(inc.lines))
            result = (await store.import_sessions([copy], dry_run=dry_run))[0]
            if result.status == ADDED:
                known.add(inc.key)
                tally.added += 1
                tally.messages_added += meta["messageCount"]
                if not dry_run:
                    await store.local_transcript(inc.key)
            else:
                tally.skip({"sessionKey": inc.key}, result.detail or result.status)
        tick()


async def _extend(store: SessionStore, inc: Incoming, dry_run: bool, tally: SessionsTally) -> None:
    copy = await store.export(inc.key)
    if copy is None:
        tally.skip({"sessionKey": inc.key}, "deleted while the import ran")
        return
    have = await asyncio.to_thread(_records, copy.lines)
    if have != inc.records[: len(have)]:
        tally.skip({"sessionKey": inc.key}, "a session of this key is here with other messages: left as it is")
        return
    rest = inc.records[len(have) :]
    if not rest:
        tally.unchanged += 1
        return
    if not dry_run:
        run: list[dict[str, Any]] = []
        for rec in rest + [{}]:  # consecutive messages in one append; other records in theirs
            is_msg = rec.get("type") == "message"
            if run and (not rec or is_msg != (run[0].get("type") == "message")):
                if run[0].get("type") == "message":
                    await store.append_messages(inc.key, *run)
                else:
                    await store.append_records(inc.key, *run)
                run = []
            if rec:
                run.append(rec)
    tally.extended += 1
    tally.messages_added += sum(1 for r in rest if r.get("type") == "message")


def _records(lines: tuple[bytes, ...]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if type(rec) is dict:
            out.append(rec)
    return out


async def import_keyed(keyed: KeyedStore, copies: list[KeyedCopy], dry_run: bool) -> dict[str, Any]:
    """Keyed memories with their versions (and the trash's into the trash), under keys free here."""
    results = await keyed.import_copies(copies, dry_run=dry_run)
    out: dict[str, Any] = {"found": len(copies), "added": 0, "unchanged": 0, "skipped": 0, "skippedKeys": []}
    trashed: set[str] | None = None
    for c, res in zip(copies, results):
        e = c.entry
        if res.status == ADDED:
            out["added"] += 1
            continue
        if res.status == PRESENT:
            there = await keyed.find(e.key)
            if there is not None and there.value.strip("\n") == e.value.strip("\n") and there.category == e.category:
                out["unchanged"] += 1
                continue
            if c.deleted and there is None:  # in the trash there too: the same archive imported again
                if trashed is None:
                    trashed = {t.entry.key for t in await keyed.trash()}
                if e.key in trashed:
                    out["unchanged"] += 1
                    continue
        out["skipped"] += 1
        if len(out["skippedKeys"]) < SHOWN:
            out["skippedKeys"].append({"key": e.key, "reason": res.detail or res.status})
    return out


def import_archive_notes(archive: Archive, workspace: Path, *, dry_run: bool) -> NotesTally:
    def why_not(rel: str, size: int) -> str | None:
        return None if is_exported_note(rel) else "not a memory file's path"

    return copy_files(archive.notes(), workspace, workspace / ARCHIVE_STATE, why_not, dry_run=dry_run, text_only=False)


def elapsed_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
