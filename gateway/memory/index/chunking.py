"""Split sources into chunks that remember their 1-based inclusive line ranges.

Markdown: by lines, about `tokens` tokens per chunk (4 characters ≈ 1 token) with `overlap` tokens
carried into the next chunk, ending a chunk before a heading or after a blank line when one is near
the end. A line longer than a whole chunk is cut into pieces that all carry that line number.

Transcripts: by whole messages (never split one unless it alone is longer than a chunk), so a chunk's
lines are the JSONL lines of its first and last message. Small groups of messages keep results precise;
`spans` records where each message starts in the chunk text so snippets can show whole messages.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Iterable, NamedTuple

from ...sessions.transcript import iter_records, memory_text
from ...timeutil import parse_iso, to_iso
from ..layout import day_of
from ..notes.frontmatter import parse_front_matter
from ..secrets import mask

CHARS_PER_TOKEN = 4
# Bump when chunk boundaries change for the same settings: the index is then rebuilt.
CHUNKER_VERSION = 7


@dataclass(frozen=True)
class Chunk:
    start_line: int
    end_line: int
    text: str
    hash: str  # of text and context: what decides whether a stored chunk is still the same
    text_hash: str  # of `text` alone (what the vector is of): `hash` when there is no context
    # Transcripts: one (line, where, start, end) per message in line order; `where` 0: the message is in
    # `text` (the core), 1: in `context` (a neighbour); start/end index that string.
    spans: tuple[tuple[int, int, int, int], ...] | None = None
    # Searchable surroundings of the core text (transcripts: dates and neighbouring messages).
    context: str = ""
    # When it was said (ISO 8601 UTC, as timeutil writes it): a transcript chunk's newest core message; a
    # note's dated heading, day file or front matter. None: the file's modification time stands in.
    date: str | None = None


def make_chunk(start: int, end: int, text: str, spans=None, context: str = "", date: str | None = None) -> Chunk:
    """A chunk with its hashes (computed here, in the thread that chunks, not on the event loop). Its
    date is part of its identity (a note's dated heading above it may change while its text does not)."""
    if not context and date is None:
        h = sha256(text)
        return Chunk(start, end, text, h, h, spans, context, date)
    key = text + "\n\x1f" + context + ("\n\x1e" + date if date else "")
    return Chunk(start, end, text, sha256(key), sha256(text), spans, context, date)


def sha256(data: str | bytes) -> str:
    """Hex SHA-256 of text (as UTF-8) or bytes: chunk, file and cache keys."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


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
                out.append((no, line[off : off + max_chars]))
    return out


_HEADING = re.compile(r"^\s{0,3}#{1,6}(\s|$)")


def _is_heading(line: str) -> bool:
    return bool(_HEADING.match(line))


_MONTHS = {
    m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)
}
_ISO_DAY = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_DAY_MONTH_YEAR = re.compile(r"(?<!\d)(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+(\d{4})(?!\d)", re.I)
_MONTH_DAY_YEAR = re.compile(_MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})(?!\d)", re.I)


def _iso_day(year: int, month: int, day: int) -> str | None:
    try:
        return date(year, month, day).isoformat() + "T00:00:00.000Z"
    except ValueError:
        return None


def text_date(text: str) -> str | None:
    """The first date written in `text` ("2026-03-01", "1 March 2026", "March 1st, 2026") as UTC midnight
    in ISO 8601, or None."""
    if m := _ISO_DAY.search(text):
        return _iso_day(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if m := _DAY_MONTH_YEAR.search(text):
        return _iso_day(int(m.group(3)), _MONTHS[m.group(2).lower()[:3]], int(m.group(1)))
    if m := _MONTH_DAY_YEAR.search(text):
        return _iso_day(int(m.group(3)), _MONTHS[m.group(1).lower()[:3]], int(m.group(2)))
    return None


def note_date(path: str, text: str) -> str | None:
    """A note's own date: the day its day file is named after (`memory/2026-03-01.md`), else its front
    matter's `updated`, `date` or `created` (keyed memories, image sidecars, imported notes); None for
    an undated note (the file's modification time stands in)."""
    if day := day_of(path):
        return to_iso(day)
    if text.startswith("---"):
        meta, _body = parse_front_matter(text)
        for key in ("updated", "date", "created"):
            value = meta.get(key, "").strip("'\"")
            if value and (dt := parse_iso(value) or (parse_iso(value[:10]) if len(value) >= 10 else None)):
                return to_iso(dt)
    return None


def _heading_level(line: str) -> int:
    stripped = line.lstrip()
    return len(stripped) - len(stripped.lstrip("#"))


def heading_dates(pieces: list[tuple[int, str]]) -> dict[int, str]:
    """Line number → the date of the dated heading it sits under (`## 2026-03-01`, `# Tuesday 3 March
    2026`): a dated heading holds until the next heading of its level or above."""
    out: dict[int, str] = {}
    stack: list[tuple[int, str | None]] = []  # (level, date) of the headings in effect
    current: str | None = None  # the innermost date of the stack: it changes only where a heading is
    for no, line in pieces:
        if "#" in line and _HEADING.match(line):  # most lines hold no "#": no expression tried (issue 46)
            level = _heading_level(line)
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text_date(line)))
            current = next((d for _lvl, d in reversed(stack) if d), None)
        if current:
            out[no] = current
    return out


def chunk_markdown(text: str, tokens: int, overlap: int, file_date: str | None = None) -> list[Chunk]:
    """`file_date`: the note's own date (`note_date`), for chunks under no dated heading."""
    max_chars = max(64, tokens * CHARS_PER_TOKEN)
    overlap_chars = max(0, min(overlap, tokens - 1)) * CHARS_PER_TOKEN
    pieces = _pieces(text, max_chars)
    dated = heading_dates(pieces) if "#" in text else {}
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
            when = max((dated[p[0]] for p in body if p[0] in dated), default=file_date) if dated else file_date
            chunks.append(make_chunk(body[0][0], body[-1][0], chunk_text, date=when))
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


class Message(NamedTuple):
    line: int
    role: str
    text: str
    date: str = ""  # "13 October 2023", from the message timestamp: searchable, not shown
    when: str = ""  # the timestamp as timeutil writes it (ISO 8601 UTC): the chunk's date


def iso_timestamp(ts: object) -> str:
    """A transcript timestamp as timeutil writes it ("" if it is none): most already are."""
    if not isinstance(ts, str):
        return ""
    if len(ts) == 24 and ts[-1] == "Z" and ts[10] == "T":
        return ts
    dt = parse_iso(ts)
    return to_iso(dt) if dt else ""


def _date_words(ts: object) -> str:
    if not isinstance(ts, str):
        return ""
    if len(ts) > 10 and ts[10] in "T ":  # ISO 8601: the date as written (parse_iso keeps the offset)
        return _iso_day_words(ts[:10])
    dt = parse_iso(ts)
    return _day_words(dt.year, dt.month, dt.day) if dt else ""


@functools.lru_cache(maxsize=4096)
def _iso_day_words(day: str) -> str:
    """ "2023-05-08" → "8 May 2023" ("" if it is no date)."""
    try:
        d = date.fromisoformat(day)
    except ValueError:
        return ""
    return _day_words(d.year, d.month, d.day)


@functools.lru_cache(maxsize=4096)
def _day_words(year: int, month: int, day: int) -> str:
    return f"{day} {date(year, month, day).strftime('%B')} {year}"  # strftime is the slow part


ROLE_LABELS = {"user": "User", "assistant": "Assistant", "system": "System"}
# "Caroline: …": a message that already starts with its speaker's name (imported chats, LoCoMo).
_SPEAKER_TAG = re.compile(r"^[^\W\d_][\w.'’-]*(?: [^\W\d_][\w.'’-]*){0,2}: \S")
NAMED_SHARE = 0.8  # of a transcript's messages starting with a speaker tag: the transcript names speakers


def speaker_label(role: str, name: object = None) -> str:
    """Who spoke, as a transcript chunk shows it: the message's `name` when it has one, else the role."""
    if isinstance(name, str) and name.strip():
        return " ".join(name.split())[:64]
    return ROLE_LABELS.get(role, role[:1].upper() + role[1:] if role else "User")


def read_messages(path: Path, data: bytes | None = None, redact: bool = False) -> list[Message]:
    """The messages of a transcript that are memory (see `transcript.memory_text`: not the offline
    responder's replies, not the recalled-memory blocks a reply quotes), with their JSONL line numbers
    (torn/corrupt lines are skipped). Each text starts with who spoke ("User: …", "Assistant: …", or
    the message's `name`), unless it is an imported message (no runId: not written by a chat run) in a
    transcript whose imported messages already start with their speakers' names ("Caroline: …"). `data`: the file's bytes when the caller has read them already.
    `redact`: secrets in the words are masked (memory/secrets.py; the transcript keeps them)."""
    # (line, role, text, date, when, who spoke, written by a chat run): a chat run's (it has a runId) words
    # are the speaker's own. Each Message is made once, at the end (issue 46: not made, then made anew).
    found: list[tuple[int, str, str, str, str, str, bool]] = []
    for no, d in iter_records(path, data):
        if d.get("type") != "message" or type(d.get("message")) is not dict:
            continue
        text = mask(memory_text(d)) if redact else memory_text(d)
        if text:
            m = d["message"]
            role = str(m.get("role") or "user")
            ts = d.get("timestamp")
            label = speaker_label(role, m.get("name"))
            found.append((no, role, text, _date_words(ts), iso_timestamp(ts), label, bool(d.get("runId"))))
    # Only messages that came from elsewhere (an imported chat) may name their speaker themselves: a
    # chat's "Remember: my boat is blue." is the user's words, "Remember" no speaker.
    imported = [f[2] for f in found if not f[6]]
    named = bool(imported) and _names_speakers(imported)
    return [
        Message(no, role, text if named and not chat else f"{label}: {text}", date, when)
        for no, role, text, date, when, label, chat in found
    ]


def _names_speakers(texts: list[str]) -> bool:
    """Whether NAMED_SHARE of `texts` start with a speaker's name; read only until too many do not (most
    transcripts: a few messages, not all of them, issue 46)."""
    need, n, misses = NAMED_SHARE * len(texts), len(texts), 0
    for t in texts:
        if not _SPEAKER_TAG.match(t):
            misses += 1
            if n - misses < need:  # even if every other one did
                return False
    return n - misses >= need


def chunk_messages(
    messages: Iterable[Message], tokens: int, max_tokens: int, overlap_messages: int = 0, context_tokens: int = 0
) -> list[Chunk]:
    """Group whole messages into chunks of about `tokens` tokens. A message longer than `max_tokens`
    is cut into pieces of its own (each piece keeps the message's line).

    `context_tokens`: whole neighbouring messages, up to this many tokens on each side, join the chunk as
    its context: its line range covers them, snippets may show them, full-text search sees them (with
    the dates of the core messages) at a lower weight; the core alone is embedded."""
    target = max(16, tokens) * CHARS_PER_TOKEN
    hard = max(target, max_tokens * CHARS_PER_TOKEN)
    units: list[tuple[int, str, bool]] = []  # (line, text, is a piece of a split message)
    dates: list[str] = []
    whens: list[str] = []
    for m in messages:
        t = m.text
        if len(t) <= hard:
            units.append((m.line, t, False))
            dates.append(m.date)
            whens.append(m.when)
        else:
            pieces = [(m.line, t[o : o + hard], True) for o in range(0, len(t), hard)]
            units.extend(pieces)
            dates.extend([m.date] * len(pieces))
            whens.extend([m.when] * len(pieces))
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
        text = "\n".join(u[1] for u in body)
        pre, post = _window(units, i, j, context_tokens * CHARS_PER_TOKEN)
        # The context column: the dates of the core messages, then the neighbours (whole messages).
        ctx_parts: list[str] = []
        when = " ".join(dict.fromkeys(d for d in dates[i:j] if d))
        if when:
            ctx_parts.append(when)
        spans: list[tuple[int, int, int, int]] = []  # (line, 0 = text | 1 = context, start, end)
        coff = len(when) + 1 if when else 0
        for u in units[pre:i]:
            spans.append((u[0], 1, coff, coff + len(u[1])))
            ctx_parts.append(u[1])
            coff += len(u[1]) + 1
        off = 0
        for u in body:
            spans.append((u[0], 0, off, off + len(u[1])))
            off += len(u[1]) + 1
        for u in units[j:post]:
            spans.append((u[0], 1, coff, coff + len(u[1])))
            ctx_parts.append(u[1])
            coff += len(u[1]) + 1
        context = "\n".join(ctx_parts)
        newest = max(whens[i:j]) or None  # ISO 8601 UTC strings sort as times
        chunks.append(make_chunk(units[pre][0], units[post - 1][0], text, tuple(spans), context, newest))
        if j >= n:
            break
        i = max(i + 1, j - overlap_messages) if overlap_messages else j
    return chunks


def _window(units: list[tuple[int, str, bool]], i: int, j: int, budget: int) -> tuple[int, int]:
    """Index range [pre, post) around the core [i, j): whole neighbouring messages, up to `budget`
    characters on each side (split-message pieces never join a window)."""
    if budget <= 0 or units[i][2]:
        return i, j
    pre, used = i, 0
    while pre > 0 and not units[pre - 1][2] and used + len(units[pre - 1][1]) + 1 <= budget:
        used += len(units[pre - 1][1]) + 1
        pre -= 1
    post, used = j, 0
    while post < len(units) and not units[post][2] and used + len(units[post][1]) + 1 <= budget:
        used += len(units[post][1]) + 1
        post += 1
    return pre, post


def chunk_transcript(
    path: Path,
    tokens: int,
    max_tokens: int,
    overlap_messages: int = 0,
    context_tokens: int = 0,
    data: bytes | None = None,
    redact: bool = False,
) -> list[Chunk]:
    return chunk_messages(read_messages(path, data, redact), tokens, max_tokens, overlap_messages, context_tokens)
