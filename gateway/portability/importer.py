"""Import a ChatGPT or Claude export into one agent's sessions, through its SessionStore (storage/base.py),
so it works alike on both engines.

    report = await import_export(store, path, "chatgpt", Limits(...), progress=emit, dry_run=False)

How it runs:

- **Streamed.** A thread reads the export's one big JSON array an element at a time (jsonarray.py) and
  converts each conversation (chatgpt.py / claude.py) into a batch of at most `Limits.batch` conversations
  or `Limits.batch_bytes` of JSON; the event loop only writes batches, while the next one is read. Memory
  holds two batches and the read buffer: bounded by the batch size and the largest conversation
  (`Limits.conversation_bytes`), whatever the export's size.
- **Whole or not at all, per conversation.** New conversations go in through `import_sessions` (a batch:
  each session whole; the files engine writes sessions.json once per batch); new turns of a conversation
  already here go in through `append_messages` (one durable append, one transaction on PostgreSQL).
- **Idempotent, and so resumable.** A conversation's session key comes from its id and each turn's message
  id from the vendor's: importing the same export again adds nothing; a newer export adds new conversations
  and the new turns of those already here (a conversation continued on another branch gets that branch's
  new turns appended, and the report names it). An import cut short (Ctrl-C, a stop, a crash) resumes by
  running it again: what was written is found and skipped.
- **Errors keep what came before.** A malformed or truncated export raises BadExport naming the
  conversation and the field; every batch before it is written, and the conversations of its batch that
  came before it are written first. Nothing of the bad one is.
- **Limits.** The agent's `sessions.max` holds: the conversation that would pass it stops the import
  (SessionLimit); a dry run says how many would not fit. A conversation of more than
  `Limits.conversation_nodes` nodes or messages (counted in its bytes, before it is parsed) is skipped,
  the report naming it and the limit; one past `Limits.conversation_bytes` of JSON stops the import.
"""

from __future__ import annotations

import asyncio
import time
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

from ..errors import SessionLimit, Unavailable
from ..storage.base import ADDED, SessionCopy, SessionStore
from . import chatgpt, claude
from .conversation import BadExport, Conversation, dict_or_empty
from .jsonarray import Malformed, elements
from .reading import open_conversations

CONVERTERS: dict[str, Callable[[Any, int, str], Conversation]] = {
    "chatgpt": chatgpt.convert,
    "claude": claude.convert,
}
# What each node or message of a conversation has once, as a key: counted in the raw JSON (a string value
# can hold the word only with its quotes escaped, so text in a message does not count).
NODE_KEYS = {"chatgpt": b'"children"', "claude": b'"sender"'}
SHOWN = 50  # conversations named in a report's lists, at most
PROGRESS_EVERY_S = 0.25

Progress = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Limits:
    conversation_bytes: int = 64 << 20  # one conversation's JSON, at most
    # One conversation's nodes (ChatGPT's mapping) or messages (Claude's), at most: counted in its bytes
    # before it is parsed, since parsed each costs ~5 KB of objects (a 240,000-node chain: 1.4 GB).
    conversation_nodes: int = 20_000
    batch: int = 200  # conversations written together
    batch_bytes: int = 8 << 20  # transcript bytes written together


@dataclass
class Counts:
    """How many sessions an import found, added, extended, left unchanged and skipped (the first SHOWN
    skipped named, with why): what every import's report counts (transcripts.py's too)."""

    found: int = 0
    added: int = 0
    extended: int = 0
    unchanged: int = 0
    skipped: int = 0
    messages_added: int = 0
    skipped_list: list[dict[str, Any]] = field(default_factory=list)

    def skip(self, ref: dict[str, Any], reason: str) -> None:
        self.skipped += 1
        if len(self.skipped_list) < SHOWN:
            self.skipped_list.append({**ref, "reason": reason})

    def counts(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("found", "added", "extended", "unchanged", "skipped")}


@dataclass
class Tally(Counts):
    """What a vendor's import did (or, dry, would do): the report's numbers and named lists."""

    messages_skipped: Counter[str] = field(default_factory=Counter)
    branched: list[dict[str, Any]] = field(default_factory=list)
    first: str | None = None
    last: str | None = None
    bytes_read: int = 0
    bytes_total: int = 0

    def dates(self, turns: list[Any]) -> None:
        for t in turns:
            if self.first is None or t.timestamp < self.first:
                self.first = t.timestamp
            if self.last is None or t.timestamp > self.last:
                self.last = t.timestamp

    def as_dict(self) -> dict[str, Any]:
        return {
            "conversations": self.counts(),
            "messages": {"added": self.messages_added, "skipped": sum(self.messages_skipped.values())},
            "skippedMessages": dict(self.messages_skipped.most_common()),
            "skippedConversations": self.skipped_list,
            "branched": self.branched,
            "dateRange": {"from": self.first, "to": self.last} if self.first else None,
            "bytes": self.bytes_read,
        }

    def progress(self) -> dict[str, Any]:
        return {
            "bytesRead": self.bytes_read,
            "bytesTotal": self.bytes_total,
            "conversations": self.found,
            "added": self.added,
            "extended": self.extended,
            "messagesAdded": self.messages_added,
        }


class _Batches:
    """The export's conversations, converted, a batch at a time: `next()` blocks (call it in a thread)."""

    def __init__(self, path: Path, source: str, limits: Limits, tally: Tally):
        self.path, self.source, self.limits, self.tally = path, source, limits, tally
        self._opened = open_conversations(path, source)
        opened = self._opened.__enter__()
        self.name = opened.name
        tally.bytes_total = opened.size
        self._elements = elements(opened.stream, max_element=limits.conversation_bytes, on_read=self._count)
        self._convert = CONVERTERS[source]
        self._index = 0

    def _count(self, n: int) -> None:
        self.tally.bytes_read += n

    def next(self) -> tuple[list[Conversation], BadExport | None]:
        """Up to a batch of conversations, and the error that ended the export there (None: no error).
        An empty batch without error: the end."""
        out: list[Conversation] = []
        size = 0
        try:
            for element in self._elements:
                self._index = element.index + 1
                nodes = element.data.count(NODE_KEYS[self.source])
                if nodes > self.limits.conversation_nodes:  # skipped before it is parsed: never held as objects
                    self.tally.found += 1
                    self.tally.skip(
                        {"index": element.index},
                        f"{nodes} messages and branches, more than the {self.limits.conversation_nodes} one "
                        "conversation may have (the import's nodes-per-conversation limit)",
                    )
                    continue
                try:
                    obj = orjson.loads(element.data)
                except orjson.JSONDecodeError as exc:
                    raise BadExport(
                        f"is not valid JSON ({exc})",
                        where=self.name,
                        conversation={"index": element.index},
                    ) from None
                conv = self._convert(obj, element.index, self.name)
                out.append(conv)
                size += len(element.data)
                if len(out) >= self.limits.batch or size >= self.limits.batch_bytes:
                    break
        except BadExport as exc:
            return out, exc
        except Malformed as exc:  # its message names the conversation already
            bad = BadExport(exc.message, where=self.name)
            if exc.index is not None:
                bad.data = {**(bad.data or {}), "conversation": {"index": exc.index}}
            return out, bad
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            return out, BadExport(
                f"cannot be read past byte {self.tally.bytes_read} ({exc}); the export is damaged or truncated",
                where=self.name,
                conversation={"index": self._index},
            )
        return out, None

    def close(self) -> None:
        self._opened.__exit__(None, None, None)


def _existing_ids(lines: tuple[bytes, ...]) -> tuple[set[str], dict[str, Any]]:
    """The message ids of a transcript, and its header record ({} when it has none)."""
    ids: set[str] = set()
    head: dict[str, Any] = {}
    for raw in lines:
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if type(rec) is not dict:
            continue
        if rec.get("type") == "message" and isinstance(rec.get("id"), str):
            ids.add(rec["id"])
        elif rec.get("type") == "session" and not head:
            head = rec
    return ids, head


def _copy(conv: Conversation, agent_id: str) -> SessionCopy:
    lines = [orjson.dumps(conv.header(agent_id))] + [orjson.dumps(t.record()) for t in conv.turns]
    meta = {
        "sessionKey": conv.key,
        "label": (conv.title or "")[:200] or None,
        "createdAt": conv.created,
        "updatedAt": max([conv.created] + [t.timestamp for t in conv.turns]),
        "messageCount": len(conv.turns),
    }
    return SessionCopy(meta, tuple(lines))


async def import_export(
    store: SessionStore,
    path: Path,
    source: str,
    *,
    agent_id: str,
    limits: Limits = Limits(),
    dry_run: bool = False,
    progress: Progress | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Import the `source` ("chatgpt" | "claude") export at `path` into `store` (see the module docstring).
    → the report (Tally.as_dict, plus `durationMs`). Raises BadExport, SessionLimit or Unavailable (the
    gateway stops) with `data.done` holding the report of what was imported before."""
    started = time.monotonic()
    tally = Tally()
    known = set((await store.all()).keys())
    batches = await asyncio.to_thread(_Batches, path, source, limits, tally)
    last_told = 0.0

    def tell(final: bool = False) -> None:
        nonlocal last_told
        now = time.monotonic()
        if progress is not None and (final or now - last_told >= PROGRESS_EVERY_S):
            last_told = now
            progress({"phase": "done" if final else "reading", **tally.progress()})

    def report() -> dict[str, Any]:
        return {**tally.as_dict(), "durationMs": round((time.monotonic() - started) * 1000)}

    # The next batch is read and converted (in a thread) while this one is written: two batches in memory.
    ahead: asyncio.Future[tuple[list[Conversation], BadExport | None]] | None = None
    try:
        reading = ahead = asyncio.ensure_future(asyncio.to_thread(batches.next))
        while True:
            if stopping():
                raise Unavailable(
                    f"the import stopped after {tally.found} conversations (the gateway is stopping, or its "
                    f"caller left); run it again to go on: what was imported is kept, and found",
                    retryable=True,
                )
            batch, error = await reading
            ahead = None
            if batch and error is None:
                reading = ahead = asyncio.ensure_future(asyncio.to_thread(batches.next))
            try:
                await _write(store, batch, agent_id, known, tally, dry_run)
            except SessionLimit as exc:
                exc.data = {**(exc.data or {}), "done": report()}
                raise
            tell()
            if error is not None:
                error.data = {**(error.data or {}), "done": report()}
                raise error
            if not batch:
                break
    except Unavailable as exc:
        exc.data = {**(exc.data or {}), "done": report()}
        raise
    finally:
        if ahead is not None:  # its thread reads the file: let it finish before the file closes
            await asyncio.wait([ahead])
            if not ahead.cancelled():
                ahead.exception()  # retrieved: a read-ahead nobody needs fails quietly
        await asyncio.to_thread(batches.close)
    tell(final=True)
    return report()


async def _write(
    store: SessionStore, batch: list[Conversation], agent_id: str, known: set[str], tally: Tally, dry_run: bool
) -> None:
    """One batch: new conversations whole through import_sessions, new turns through append_messages."""
    new: list[Conversation] = []
    pending: set[str] = set()
    for conv in batch:
        tally.found += 1
        tally.messages_skipped.update(conv.skipped)
        if not conv.turns:
            tally.skip(conv.ref, "no messages to import")
            continue
        if conv.key in pending:
            tally.skip(conv.ref, "the export holds this conversation twice: the first one was taken")
            continue
        if conv.key not in known:
            if len(known) >= store.max:
                if dry_run:
                    tally.skip(conv.ref, f"over sessions.max ({store.max})")
                    continue
                await _add(store, new, agent_id, known, tally)
                raise SessionLimit(agent_id, store.max)
            known.add(conv.key)
            pending.add(conv.key)
            new.append(conv)
            continue
        await _extend(store, conv, tally, dry_run)
    if dry_run:
        for conv in new:
            tally.added += 1
            tally.messages_added += len(conv.turns)
            tally.dates(conv.turns)
        return
    await _add(store, new, agent_id, known, tally)


async def _add(store: SessionStore, new: list[Conversation], agent_id: str, known: set[str], tally: Tally) -> None:
    if not new:
        return
    copies = await asyncio.to_thread(lambda: [_copy(c, agent_id) for c in new])
    results = await store.import_sessions(copies)
    for conv, res in zip(new, results):
        if res.status == ADDED:
            tally.added += 1
            tally.messages_added += len(conv.turns)
            tally.dates(conv.turns)
            await store.local_transcript(conv.key)  # a PostgreSQL gateway's mirror, which its index reads
        else:
            known.discard(conv.key)
            tally.skip(conv.ref, res.detail or res.status)
    new.clear()


async def _extend(store: SessionStore, conv: Conversation, tally: Tally, dry_run: bool) -> None:
    """A conversation whose session is here: append the turns it lacks, if it is this conversation's."""
    copy = await store.export(conv.key)
    if copy is None:  # deleted meanwhile
        tally.skip(conv.ref, "its session was deleted while the import ran")
        return
    have, head = await asyncio.to_thread(_existing_ids, copy.lines)
    imported = dict_or_empty(head.get("imported"))
    if imported.get("source") != conv.source or imported.get("conversationId") != conv.id:
        tally.skip(conv.ref, f"session {conv.key} is there and was not imported from this conversation")
        return
    fresh = [t for t in conv.turns if t.id not in have]
    if not fresh:
        tally.unchanged += 1
        return
    on_path = {t.id for t in conv.turns}
    if not have <= on_path and len(tally.branched) < SHOWN:
        tally.branched.append({**conv.ref, "sessionKey": conv.key, "added": len(fresh)})
    if not dry_run:
        await store.append_messages(conv.key, *(t.record() for t in fresh))
    tally.extended += 1
    tally.messages_added += len(fresh)
    tally.dates(fresh)
