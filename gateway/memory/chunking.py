"""Split sources into chunks that remember their 1-based inclusive line ranges.

Markdown: by lines, about `tokens` tokens per chunk (4 characters ≈ 1 token) with `overlap` tokens
carried into the next chunk, ending a chunk before a heading or after a blank line when one is near
the end. A line longer than a whole chunk is cut into pieces that all carry that line number.

Transcripts: by whole messages (never split one unless it alone is longer than a chunk), so a chunk's
lines are the JSONL lines of its first and last message. Small groups of messages keep results precise;
`spans` records where each message starts in the chunk text so snippets can show whole messages.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..sessions.transcript import iter_records, message_text

CHARS_PER_TOKEN = 4
# Bump when chunk boundaries change for the same settings: the index is then rebuilt.
CHUNKER_VERSION = 3


@dataclass(frozen=True)
class Chunk:
    start_line: int
    end_line: int
    text: str
    hash: str
    # Transcripts: [(line, offset of the message in text)], one per message, in order.
    spans: tuple[tuple[int, int], ...] | None = None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pieces(text: str, max_chars: int) -> list[tuple[int, str]]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[tuple[int, str]] = []
    for no, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if len(line) <= max_chars:
            out.append((no, line))
        else:
            for off in range(0, len(line), max_chars):
                out.append((no, line[off:off + max_chars]))
    return out


_HEADING = re.compile(r"^\s{0,3}#{1,6}(\s|$)")


def _is_heading(line: str) -> bool:
    return bool(_HEADING.match(line))


def chunk_markdown(text: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    max_chars = max(64, tokens * CHARS_PER_TOKEN)
    overlap_chars = max(0, min(overlap, tokens - 1)) * CHARS_PER_TOKEN
    pieces = _pieces(text, max_chars)
    n = len(pieces)
    chunks: list[Chunk] = []
    i = 0
    while i < n:
        # Grow the chunk as far as the budget allows (always at least one piece).
        j, size = i, 0
        while j < n and (j == i or size + len(pieces[j][1]) + 1 <= max_chars):
            size += len(pieces[j][1]) + 1
            j += 1
        heading_break = False
        if j < n:
            # Prefer to end before a heading, else after a blank line, within the last half.
            lo = i + max(1, (j - i) // 2)
            blank = None
            for b in range(j, lo - 1, -1):
                if _is_heading(pieces[b][1]) and pieces[b][0] != pieces[b - 1][0]:
                    j, heading_break = b, True
                    break
                if blank is None and not pieces[b - 1][1].strip():
                    blank = b
            else:
                if blank is not None:
                    j = blank
        body = pieces[i:j]
        if any(p[1].strip() for p in body):
            chunk_text = "\n".join(p[1] for p in body)
            chunks.append(Chunk(body[0][0], body[-1][0], chunk_text, sha256(chunk_text)))
        if j >= n:
            break
        k = j
        if not heading_break and overlap_chars:
            ov = 0
            while k - 1 > i and ov + len(pieces[k - 1][1]) + 1 <= overlap_chars:
                k -= 1
                ov += len(pieces[k][1]) + 1
        i = k
    return chunks


@dataclass(frozen=True)
class Message:
    line: int
    role: str
    text: str


def read_messages(path: Path) -> list[Message]:
    """Messages of a transcript with their JSONL line numbers (torn/corrupt lines are skipped)."""
    out: list[Message] = []
    for rec in iter_records(path):
        d = rec.data
        m = d.get("message")
        if d.get("type") != "message" or not isinstance(m, dict):
            continue
        text = message_text(m.get("content")).strip()
        if text:
            out.append(Message(rec.line, str(m.get("role") or "user"), text))
    return out


def chunk_messages(messages: Iterable[Message], tokens: int = 120, max_tokens: int = 400,
                   overlap_messages: int = 0) -> list[Chunk]:
    """Group whole messages into chunks of about `tokens` tokens. A message longer than `max_tokens`
    is cut into pieces of its own (each piece keeps the message's line)."""
    target = max(16, tokens) * CHARS_PER_TOKEN
    hard = max(target, max_tokens * CHARS_PER_TOKEN)
    units: list[tuple[int, str, bool]] = []  # (line, text, is a piece of a split message)
    for m in messages:
        t = m.text
        if len(t) <= hard:
            units.append((m.line, t, False))
        else:
            units.extend((m.line, t[o:o + hard], True) for o in range(0, len(t), hard))
    chunks: list[Chunk] = []
    i, n = 0, len(units)
    while i < n:
        # Pieces of a split message stand alone; whole messages group up to the target size.
        j, size = i + 1, len(units[i][1]) + 1
        if not units[i][2]:
            while j < n and not units[j][2] and size + len(units[j][1]) + 1 <= target:
                size += len(units[j][1]) + 1
                j += 1
        body = units[i:j]
        spans, parts, off = [], [], 0
        for line, t, _ in body:
            spans.append((line, off))
            parts.append(t)
            off += len(t) + 1
        text = "\n".join(parts)
        chunks.append(Chunk(body[0][0], body[-1][0], text, sha256(text), tuple(spans)))
        if j >= n:
            break
        i = max(i + 1, j - overlap_messages) if overlap_messages else j
    return chunks


def chunk_transcript(path: Path, tokens: int = 120, max_tokens: int = 400,
                     overlap_messages: int = 0) -> list[Chunk]:
    return chunk_messages(read_messages(path), tokens, max_tokens, overlap_messages)
