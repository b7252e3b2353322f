"""Append-only JSONL transcripts (PROTOCOL.md §6).

    {"type":"session","version":1,"sessionKey":"…","agentId":"main","createdAt":"…"}
    {"type":"message","id":"…","timestamp":"…","runId":"…?","message":{"role":"user","content":"…"}}

Writers append one `\\n`-terminated line per record and fsync it before acknowledging. A line is never
rewritten in place. A torn last line (the process died mid-write) is skipped by readers and cut off by
the writer when it opens the file, so every complete line survives. The blocking file work is done
through `asyncio.to_thread` by the async wrappers; the sync functions are for threads and tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import orjson
import structlog

from ..errors import disk_full
from ..timeutil import now_iso

log = structlog.get_logger("gateway.transcript")


@contextlib.contextmanager
def disk_full_as_error(what: str):
    """Turn an out-of-space OSError into DiskFull; other errors pass through unchanged."""
    try:
        yield
    except OSError as exc:
        full = disk_full(what, exc)
        if full is not None:
            raise full from None
        raise


class Record(NamedTuple):
    line: int  # 1-based line number in the file
    data: dict[str, Any]


# ---- fields of the types readers use ----------------------------------------------------------------
# A transcript is the user's file (hand-edited, imported, written by an older version): any field of a
# line may hold any JSON value. Every reader takes a record's fields through these, so that one of the
# wrong type is coerced or its message skipped the same way everywhere, said once per line in the log.
_NOTED: dict[tuple[str, int, str], None] = {}


def note_odd(path: Path | str, line: int, what: str) -> None:
    """Log, once per file, line and kind, that a transcript line was read around a field of the wrong type."""
    mark = (str(path), line, what)
    if mark in _NOTED:
        return
    if len(_NOTED) >= 10_000:
        _NOTED.clear()
    _NOTED[mark] = None
    log.warning("transcript_line_odd", path=str(path), line=line, field=what)


def role_of(message: dict[str, Any]) -> str | None:
    """A message's role: "user" when it has none (null or ""); None when it is no string — such a
    message is skipped by every reader."""
    role = message.get("role")
    if role is None or role == "":
        return "user"
    return role if type(role) is str else None


def timestamp_of(record: dict[str, Any]) -> str | None:
    ts = record.get("timestamp")
    return ts if type(ts) is str else None


def id_of(record: dict[str, Any], line: int) -> str:
    """A message's id: its own when it is a string (or a whole number), else `line-<n>`."""
    mid = record.get("id")
    if type(mid) is str and mid:
        return mid
    if type(mid) is int:
        return str(mid)
    return f"line-{line}"


def tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's tool calls (OpenAI's shape) that a provider can take back: each an object with a string
    id and a function with a string name and string arguments."""
    calls = message.get("tool_calls")
    if type(calls) is not list:
        return []
    return [
        c
        for c in calls
        if type(c) is dict
        and type(c.get("id")) is str
        and type(c.get("function")) is dict
        and type(c["function"].get("name")) is str
        and type(c["function"].get("arguments")) is str
    ]


def message_text(content: Any) -> str:
    """`content` is a string or a list of parts [{"type":"text","text":…}]; return its text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


# ---- what of a transcript is memory -------------------------------------------------------------
# A reply whose record says `"remember": false` is not memory (the offline responder's replies: they
# only repeat the question and what was recalled). Transcripts written before that field existed are
# recognised by the offline responder's first words.
REMEMBER_FIELD = "remember"
OFFLINE_PREAMBLE = "I am Jarvis's offline responder, not a language model"

# A recalled-memory block quoted in a reply: the offline responder's list ("From memory I recalled:",
# then "- <citation> (score 0.87): …" lines) and the prompt's own form ("## Recalled memory", then
# "[<citation>]" and the snippet up to a blank line), which a model may echo. A citation is
# memory/present.py's heading — "2025-11-08 · session "…" · <path>:<a>-<b> · said 3 times, …" — or,
# from before it, the bare "<path>:<a>-<b>".
_MEMPATH = r"(?:sessions/[A-Za-z0-9._-]+\.jsonl|[^\s\[\]:]+\.md)"
_CITE = r'(?:\d{4}-\d{2}-\d{2} · )?(?:session ".*?" · )?' + _MEMPATH + r":\d+-\d+(?: · [^\]\n(]*)?"
_RECALL_LINE = re.compile(r"^\s*[-*] " + _CITE + r" \(score [0-9.]+\):")
_RECALL_HEAD = re.compile(r"^\s*\[" + _CITE + r"\]\s*$")
_RECALL_TITLE = re.compile(r"^\s*(?:From memory I recalled:|#{1,6} Recalled memory)\s*$")


def strip_recalled(text: str) -> str:
    """`text` without the recalled-memory blocks it quotes (see above); other lines are kept as they are."""
    if ":" not in text:
        return text
    out: list[str] = []
    in_block = False
    for line in text.split("\n"):
        if in_block:
            if line.strip():
                continue
            in_block = False
        if _RECALL_TITLE.match(line) or _RECALL_LINE.match(line):
            continue
        if _RECALL_HEAD.match(line):
            in_block = True
            continue
        out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def memory_text(record: dict[str, Any]) -> str:
    """The part of a message record that is memory ("" for none): the text of every user message; an
    assistant reply's text without the recalled-memory blocks it quotes; nothing of a reply marked
    `"remember": false` or written by the offline responder."""
    m = record.get("message")
    if type(m) is not dict or record.get(REMEMBER_FIELD) is False or role_of(m) is None:
        return ""
    c = m.get("content")
    text = (c if type(c) is str else message_text(c)).strip()
    if m.get("role") == "assistant" and text:
        if text.startswith(OFFLINE_PREAMBLE):
            return ""
        text = strip_recalled(text)
    return text


def iter_records(path: Path, data: bytes | None = None) -> Iterator[Record]:
    """Every complete, parseable JSON object line of a transcript, with its line number.

    A torn or corrupt line is skipped (never fatal); a missing file yields nothing. `data`: the file's
    bytes, when the caller has read them already.
    """
    if data is None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: nothing, or a torn line the writer never finished
    loads, error = orjson.loads, orjson.JSONDecodeError
    for lineno, raw in enumerate(lines, start=1):
        try:
            obj = loads(raw)
        except error:
            continue
        if type(obj) is dict:
            yield Record(lineno, obj)


def repair(path: Path) -> int:
    """Cut a torn last line off `path` (bytes after the last newline). Returns bytes removed."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        # Scan back from the end for the last newline, a block at a time.
        pos, block = size, 64 * 1024
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            chunk = os.pread(fd, pos - start, start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        removed = size - keep
        if removed:
            os.ftruncate(fd, keep)
            os.fsync(fd)
        return removed
    finally:
        os.close(fd)


def _encode(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record) + b"\n"


def append_sync(path: Path, records: list[dict[str, Any]], create: bool = True) -> None:
    """Append records as whole lines and fsync. On failure the file is cut back to where it was,
    so no partial line is ever left behind (e.g. a full disk). `create` False: FileNotFoundError
    when there is no file (a deleted session gets no new transcript)."""
    data = b"".join(_encode(r) for r in records)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0), 0o600)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def header(session_key: str, agent_id: str, created_at: str | None = None) -> dict[str, Any]:
    return {
        "type": "session",
        "version": 1,
        "sessionKey": session_key,
        "agentId": agent_id,
        "createdAt": created_at or now_iso(),
    }


def message_record(
    msg_id: str, role: str, content: str, run_id: str | None = None, timestamp: str | None = None, **extra: Any
) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": "message", "id": msg_id, "timestamp": timestamp or now_iso()}
    if run_id:
        rec["runId"] = run_id
    rec["message"] = {"role": role, "content": content}
    rec.update(extra)
    return rec


class Transcript:
    """One session's transcript file. Appends are serialised per file by an asyncio lock."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = asyncio.Lock()
        self._repaired = False

    async def append(self, *records: dict[str, Any], create: bool = False) -> None:
        """Append durably; FileNotFoundError when the file does not exist, unless `create`."""
        async with self._lock:
            if not self._repaired:
                await asyncio.to_thread(repair, self.path)
                self._repaired = True
            with disk_full_as_error("the message"):
                await asyncio.to_thread(append_sync, self.path, list(records), create)

    async def records(self) -> list[Record]:
        return await asyncio.to_thread(lambda: list(iter_records(self.path)))

    async def messages(self) -> list[dict[str, Any]]:
        """Messages as the protocol shows them: {id, role, content, timestamp, runId?, line}."""
        return await asyncio.to_thread(read_messages, self.path)


def read_messages(path: Path) -> list[dict[str, Any]]:
    """Messages as the protocol shows them: {id, role, content, timestamp, runId?, line, …}, every field
    of its type (see above); a message whose role is no string is left out."""
    out: list[dict[str, Any]] = []
    for rec in iter_records(path):
        d = rec.data
        if d.get("type") != "message" or not isinstance(d.get("message"), dict):
            continue
        m = d["message"]
        role = role_of(m)
        if role is None:
            note_odd(path, rec.line, "message.role")
            continue
        item: dict[str, Any] = {
            "id": id_of(d, rec.line),
            "role": role,
            "content": message_text(m.get("content")),
            "timestamp": timestamp_of(d),
            "line": rec.line,
        }
        if type(d.get("runId")) is str and d["runId"]:
            item["runId"] = d["runId"]
        if d.get("aborted") is True:
            item["aborted"] = True
            if isinstance(d.get("abortReason"), str):
                item["abortReason"] = d["abortReason"]
        if d.get("truncated") is True:
            item["truncated"] = True
        if isinstance(d.get("memory"), list) and d["memory"]:
            item["memory"] = [hit for hit in d["memory"] if type(hit) is dict]
        calls = tool_calls_of(m)
        if calls:  # the model called tools (OpenAI's shape)
            item["toolCalls"] = calls
        if m.get("tool_calls") and len(calls) != (len(m["tool_calls"]) if type(m["tool_calls"]) is list else -1):
            note_odd(path, rec.line, "message.tool_calls")
        if isinstance(m.get("tool_call_id"), str):  # a tool's result
            item["toolCallId"] = m["tool_call_id"]
            for name in ("tool", "summary", "denied"):
                if isinstance(d.get(name), str):
                    item[name] = d[name]
            if d.get("error") is True:
                item["error"] = True
        if isinstance(d.get("replaces"), str):
            item["replaces"] = d["replaces"]
        if isinstance(d.get("regenerates"), str):  # a tool step of a regeneration (chosen_versions)
            item["regenerates"] = d["regenerates"]
        if any(type(d.get(k)) not in (str, type(None)) for k in ("id", "runId", "timestamp")):
            note_odd(path, rec.line, "id, runId or timestamp")
        out.append(item)
    return out


VERSION_FIELDS = ("id", "content", "timestamp", "aborted", "abortReason", "truncated", "memory")


def chosen_versions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as it goes on: a regenerated reply (records with `"replaces": <its first
    version's id>`) appears once, at its first version's place, as its latest version, with every
    version in `versions` (oldest first: {id, content, timestamp, aborted?, truncated?, memory?}).
    The tool calls and results of a regenerated reply's versions (records of the version's run, or
    marked `"regenerates": <first version's id>`) go with it: the latest version's just before it, the
    others' (and a failed regeneration's) not at all. Replies never regenerated are left as they are."""
    groups: dict[str, list[dict[str, Any]]] = {}
    kept: list[dict[str, Any]] = []
    for m in messages:
        root = m.get("replaces")
        if root in groups:
            groups[root].append(m)
            continue
        if m["role"] == "assistant":
            groups[m["id"]] = [m]
        kept.append(m)
    regenerated = {g[0]["id"]: g for g in groups.values() if len(g) > 1}
    run_of = {v["runId"] for g in regenerated.values() for v in g if v.get("runId")}  # the versions' runs
    steps: dict[str, list[dict[str, Any]]] = {}  # a version's runId → its tool calls and results
    for m in kept:
        if (m.get("runId") in run_of and m["id"] not in regenerated or m.get("regenerates") in groups) and (
            m["role"] == "tool" or m.get("toolCalls")
        ):
            steps.setdefault(m.get("runId", ""), []).append(m)
    moved = {m["id"] for ms in steps.values() for m in ms}
    out = []
    for m in kept:
        if m["id"] in moved:
            continue
        versions = regenerated.get(m["id"])
        if versions:
            latest = {**versions[-1], "line": m.get("line", versions[-1].get("line"))}
            latest["versions"] = [{k: v[k] for k in VERSION_FIELDS if k in v} for v in versions]
            own = steps.get(versions[-1].get("runId", ""), [])
            out += [{k: v for k, v in step.items() if k != "regenerates"} for step in own]
            out.append(latest)
        else:
            out.append(m)
    return out
