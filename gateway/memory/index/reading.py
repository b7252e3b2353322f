"""A batch of source files read, hashed and chunked (blocking: a thread or a worker process runs it), and
what its chunks change against the ones stored.

The ledger's statements of a changed file are extracted here too, in the same pass as its chunks (issue
46): in the thread that chunks, or in the worker process for a large sync, not in a thread trip of their
own on the writer's side (where, beside the writes, they were 9–15% of a sync's CPU in the one process)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from ...timeutil import to_iso
from ..ledger.extract import from_chunks
from ..ports import ChunkKey, FileStat, Statement
from .chunking import Chunk, chunk_markdown, chunk_transcript, note_date, sha256
from .settings import IndexSettings
from .sources import MEMORY, SourceFile


@dataclass
class Work:
    sf: SourceFile
    file_hash: str
    chunks: list[Chunk] | None  # None: content unchanged, only the stat moved
    statements: list[Statement] = field(default_factory=list)  # the ledger's, of a changed file's chunks


def statements_of(sf: SourceFile, chunks: list[Chunk]) -> list[Statement]:
    """The ledger's statements of a file's chunks (ledger/extract.py), dated by the file's mtime where a
    chunk has no date of its own."""
    return from_chunks(sf.path, chunks, lambda: to_iso(datetime.fromtimestamp(sf.mtime_ns / 1e9, tz=timezone.utc)))


def read_and_chunk(
    files: list[SourceFile], known: dict[str, FileStat], force: bool, s: IndexSettings, extract: bool = True
) -> list[Work]:
    """Blocking: hash each file, chunk those whose content changed (or all when forced), and extract the
    ledger's statements of those (`extract` false: the caller has them extracted elsewhere)."""
    out = []
    for sf in files:
        try:
            data = read_capped(sf, s.max_file_bytes)
        except OSError:
            continue  # vanished between scan and read; the next sync removes it
        if data is None:
            continue  # grew past the cap since the scan; the next sync's scan skips it
        h = sha256(data)
        old = known.get(sf.path)
        if old is not None and old[2] == h and not force:
            out.append(Work(sf, h, None))
            continue
        if sf.source == MEMORY:
            text = data.decode("utf-8", errors="replace")
            chunks = chunk_markdown(text, s.tokens, s.overlap, note_date(sf.path, text))
        else:
            chunks = chunk_transcript(
                sf.abs, s.session_tokens, s.tokens, s.session_overlap, s.session_context, data, s.redact
            )
        out.append(Work(sf, h, chunks, statements_of(sf, chunks) if extract else []))
    return out


def extract_statements(works: list[Work]) -> None:
    """Blocking: the ledger's statements of each changed file of `works`, set in place."""
    for w in works:
        if w.chunks is not None:
            w.statements = statements_of(w.sf, w.chunks)


def read_capped(sf: SourceFile, cap: int) -> bytes | None:
    """The file's bytes; None for a memory file over `cap` bytes (at most cap + 1 bytes are read: a file
    that grew since the scan never loads whole). Transcripts are not capped."""
    if sf.source != MEMORY:
        return sf.abs.read_bytes()
    with open(sf.abs_path, "rb") as fh:
        data = fh.read(cap + 1)
    return None if len(data) > cap else data


def new_texts(changed: list[Work], stored: dict[str, set[ChunkKey]]) -> dict[str, str]:
    """Text hash → text of the chunks of `changed` files that are not stored already (same lines and
    hash keep their row and vector)."""
    need: dict[str, str] = {}
    for w in changed:
        keep = stored.get(w.sf.path, set())
        for c in w.chunks or ():
            if (c.start_line, c.end_line, c.hash) not in keep:
                need.setdefault(c.text_hash, c.text)
    return need


def chunk_diff(current: dict[ChunkKey, int], chunks: list[Chunk]) -> tuple[list[int], list[Chunk]]:
    """Against a file's stored chunks (lines and hash → id): the ids no longer wanted, and the chunks
    to insert. A chunk with the same lines and hash keeps its row (and vector)."""
    wanted = {(c.start_line, c.end_line, c.hash) for c in chunks}
    stale = [cid for key, cid in current.items() if key not in wanted]
    new, seen = [], set(current)
    for c in chunks:
        key = (c.start_line, c.end_line, c.hash)
        if key not in seen:
            seen.add(key)
            new.append(c)
    return stale, new
