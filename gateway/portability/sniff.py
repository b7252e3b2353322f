"""What a file handed to `jarvis import` looks like, so each kind of import recognises the others' files
and says which command takes it, instead of failing deep inside on a field the file never had.

    seen = look(path)      # Seen(kind="claude", what="a Claude export (conversations.json with chat_messages)")
    seen.kind              # "chatgpt" | "claude" | "jsonl" | "markdown" | None (none of ours: what says what)

Only the head of a file is read (HEAD_BYTES), a folder's names one level down (and its markdown files a few
levels down), a zip's list of names and the head of one member: a look is cheap on a 2 GB export. Where it
cannot tell, it says nothing (kind and what None) and the import goes on as asked. What a file's bytes
are is said in words and hex, never decoded as text they are not (no mojibake).
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import orjson

HEAD_BYTES = 64 << 10
CONVERSATIONS = "conversations.json"
KINDS = {"chatgpt": "ChatGPT", "claude": "Claude", "jsonl": "Jarvis", "markdown": "markdown"}
MAGIC = {  # what some binary files are, by their first bytes
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"%PDF": "a PDF document",
    b"\x1f\x8b": "gzip-compressed data",
    b"SQLite format 3": "an SQLite database",
    b"GIF8": "a GIF image",
    b"PK\x03\x04": "a zip file",
}


@dataclass(frozen=True)
class Seen:
    kind: str | None  # the import that takes it, or None
    what: str | None  # in words; None: cannot tell


UNSURE = Seen(None, None)


def look(path: Path) -> Seen:
    try:
        if path.is_dir():
            return _folder(path)
        if zipfile.is_zipfile(path):
            return _zip(path)
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
    except (OSError, zipfile.BadZipFile):
        return UNSURE  # the import itself says what is wrong with the path
    return _bytes(head, path.name)


def _conversations(head: bytes) -> Seen:
    """The head of a vendor's conversations.json: ChatGPT's conversations have a `mapping`, Claude's
    `chat_messages` (whichever of the two names comes first: a message's text may quote the other)."""
    gpt, claude = head.find(b'"mapping"'), head.find(b'"chat_messages"')
    if gpt >= 0 and (claude < 0 or gpt < claude):
        return Seen("chatgpt", "a ChatGPT export (its conversations have a mapping)")
    if claude >= 0:
        return Seen("claude", "a Claude export (its conversations have chat_messages)")
    return UNSURE


def _folder(path: Path) -> Seen:
    try:
        names = sorted(os.listdir(path))[:10_000]
    except OSError:
        return UNSURE
    if CONVERSATIONS in names:
        try:
            with (path / CONVERSATIONS).open("rb") as fh:
                return _conversations(fh.read(HEAD_BYTES))
        except OSError:
            return UNSURE
    if "manifest.json" in names and "sessions" in names:
        return Seen("jsonl", "an unzipped Jarvis export")
    if any(n.endswith(".jsonl") for n in names):
        return Seen("jsonl", "a folder of Jarvis transcripts (.jsonl)")
    seen = 0
    for _root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(f.lower().endswith((".md", ".markdown")) for f in files):
            return Seen("markdown", "a folder of markdown notes")
        seen += 1
        if seen > 200:
            break
    return UNSURE


def _zip(path: Path) -> Seen:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()[:100_000]
            if "manifest.json" in names and any(n.startswith("sessions/") for n in names):
                return Seen("jsonl", "a Jarvis export (jarvis export)")
            member = next((n for n in names if n == CONVERSATIONS or n.endswith("/" + CONVERSATIONS)), None)
            if member is not None:
                with zf.open(member) as fh:
                    return _conversations(fh.read(HEAD_BYTES))
            if any(n.lower().endswith((".md", ".markdown")) for n in names):
                return Seen("markdown", "a zip of markdown notes")
    except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError):  # encrypted, damaged
        return UNSURE
    return UNSURE


def _bytes(head: bytes, name: str) -> Seen:
    if not head:
        return Seen(None, "an empty file")
    for magic, what in MAGIC.items():
        if head.startswith(magic):
            return Seen(None, what)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return Seen(None, "text in UTF-16 (save it as UTF-8)")
    if b"\x00" in head or not _utf8(head):
        shown = " ".join(f"{b:02x}" for b in head[:8])
        return Seen(None, f"binary data, not text (its first bytes: {shown})")
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return _conversations(head)
    if text.startswith(b"{"):
        first = text.split(b"\n", 1)[0]
        try:
            rec = orjson.loads(first)
        except orjson.JSONDecodeError:
            rec = None
        if isinstance(rec, dict) and (rec.get("type") in ("session", "message") or "role" in rec):
            return Seen("jsonl", "a Jarvis transcript (.jsonl, one record per line)")
        if isinstance(rec, dict) and rec.get("format") == "jarvis-export":
            return Seen("jsonl", "a Jarvis export's manifest (import the zip itself)")
        return UNSURE
    if name.lower().endswith((".md", ".markdown")) or text.startswith(b"#"):
        return Seen("markdown", "a markdown note (import the folder it is in)")
    return Seen(None, "text that is not JSON")


def _utf8(head: bytes) -> bool:
    """Whether `head` is UTF-8, a sequence cut at its end by the read allowed."""
    for cut in range(4):
        try:
            head[: len(head) - cut].decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


def mistaken(source: str, path: Path) -> str | None:
    """What to say instead of importing `path` as `source`: it is another kind's (which command takes
    it), or nothing any import takes; None when it may be `source`'s (or cannot be told)."""
    seen = look(path)
    if seen.what is None or seen.kind == source:
        return None
    if source == "markdown" and seen.kind is None and not path.is_dir() and not zipfile.is_zipfile(path):
        return None  # the markdown import's own check says a vault is a folder or a zip
    want = f"a {KINDS[source]} export" if source in ("chatgpt", "claude") else f"what `jarvis import {source}` takes"
    if seen.kind is None:
        return f"this is {seen.what}, not {want}"
    return f"this looks like {seen.what}, not {want}: import it with `jarvis import {seen.kind} {path}`"
