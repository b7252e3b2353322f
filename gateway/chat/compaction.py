"""Compaction: when a session's history outgrows the prompt, older messages are flushed into the
day's memory file as a readable summary, and the prompt carries on from the most recent ones.

The transcript stays append-only and complete. A compaction appends one marker line::

    {"type":"compaction","id":"…","timestamp":"…","throughId":"<last message id compacted>",
     "messages":11,"path":"memory/2026-11-22.md","startLine":12,"endLine":30,"summary":"…"}

and the summary goes to `<agent workspace>/memory/YYYY-MM-DD.md` (UTC date), which memory indexes at
once. The prompt then holds the messages after `throughId`, with the latest summary in the system
prompt. Summaries are extractive offline, and written by the model when one is configured (falling
back to extractive if the model fails).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from ..config import Config
from ..memory.layout import append_to_day_file
from ..memory.secrets import mask
from ..sessions import transcript as tx
from ..storage.base import SessionStore
from ..timeutil import now_iso, parse_iso
from .providers import ChatProvider, OfflineResponder
from .stream import Delta

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryService

log = structlog.get_logger("gateway.compaction")
CHARS_PER_TOKEN = 4
ITEM_CHARS = 320

SUMMARY_PROMPT = (
    "Summarise the conversation below for your own long-term memory. Write 3 to 10 short markdown "
    "bullet points of facts, decisions, preferences and open questions, each self-contained (name "
    "people, places, dates). No preamble."
)


@dataclass
class SessionState:
    """A session's messages split at its last compaction."""

    messages: list[dict[str, Any]]  # all messages, oldest first
    pending: list[dict[str, Any]]  # messages after the last compaction
    summary: str | None  # the last compaction's summary


def read_state(path: Path) -> SessionState:
    messages: list[dict[str, Any]] = []
    through: str | None = None
    summary: str | None = None
    for rec in tx.iter_records(path):
        d = rec.data
        if d.get("type") == "compaction" and isinstance(d.get("throughId"), str):
            through, summary = d["throughId"], d.get("summary") if isinstance(d.get("summary"), str) else None
    messages = tx.chosen_versions(tx.read_messages(path))  # a regenerated reply: its latest version
    if through is None:
        return SessionState(messages, messages, None)
    idx = next((i for i, m in enumerate(messages) if m["id"] == through), None)
    pending = messages if idx is None else messages[idx + 1 :]
    return SessionState(messages, pending, summary)


def _one_line(text: str, limit: int = ITEM_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    # End on a sentence or word boundary when one is near.
    m = re.search(r"^(.*[.!?])\s", cut)
    if m and len(m.group(1)) > limit // 2:
        return m.group(1) + " …"
    return cut.rsplit(" ", 1)[0] + " …"


def extractive_summary(messages: list[dict[str, Any]]) -> str:
    """One bullet per message: the user's words nearly whole, the assistant's first sentences."""
    lines = []
    for m in messages:
        text = m["content"]
        if m["role"] == "assistant" and text.startswith(OfflineResponder.PREAMBLE):
            continue  # the offline responder's echo carries nothing new
        if m["role"] == "assistant":
            text = tx.strip_recalled(text)  # a quoted recalled-memory block is already memory
        who = {"user": "User", "assistant": "Assistant"}.get(m["role"], m["role"].title())
        if text.strip():
            lines.append(f"- **{who}:** {_one_line(text, ITEM_CHARS if m['role'] == 'user' else ITEM_CHARS // 2)}")
    return "\n".join(lines) or "- (nothing but acknowledgements)"


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN


class Compactor:
    def __init__(
        self,
        config: Config,
        sessions: SessionStore,
        provider: ChatProvider,
        memory: "MemoryService | None",
        workspace: Path,
    ):
        self.config = config
        self.sessions = sessions
        self.provider = provider
        self.memory = memory
        self.workspace = workspace
        self._locks: dict[str, asyncio.Lock] = {}

    def due(self, state: SessionState) -> bool:
        """Compact when what is pending would no longer fit: over the token budget, or more messages
        than the prompt's window (so nothing silently falls out of the prompt unsaved)."""
        c = self.config.chat
        keep = c.compact_keep_recent
        if c.compact_budget_tokens == 0 or len(state.pending) <= keep:
            return False
        return _tokens(state.pending) > c.compact_budget_tokens or len(state.pending) > c.history_messages

    def forget(self, session_key: str) -> None:
        lock = self._locks.get(session_key)
        if lock is not None and not lock.locked():
            del self._locks[session_key]

    async def settled(self, session_key: str) -> None:
        """Wait for a compaction of this session that is under way, if any."""
        lock = self._locks.get(session_key)
        if lock is not None and lock.locked():
            async with lock:
                pass

    async def maybe_compact(self, session_key: str) -> dict[str, Any] | None:
        state = await asyncio.to_thread(read_state, await self.sessions.local_transcript(session_key))
        if not self.due(state):
            return None
        return await self.compact(session_key)

    async def compact(self, session_key: str) -> dict[str, Any]:
        """Flush everything but the most recent messages. Returns what was done."""
        lock = self._locks.setdefault(session_key, asyncio.Lock())
        async with lock:
            path = await self.sessions.local_transcript(session_key)
            state = await asyncio.to_thread(read_state, path)
            keep = self.config.chat.compact_keep_recent
            batch = state.pending[:-keep] if len(state.pending) > keep else []
            if not batch:
                return {"compacted": 0}
            summary = await self._summarise(batch)
            if self.config.memory.redact_secrets:  # it becomes memory: secrets stay in the transcript only
                summary = mask(summary)
            label = (await self.sessions.all()).get(session_key, {}).get("label") or session_key
            label = " ".join(str(label).split())  # one line: a label must not add headings to the file
            rel, start, end = await asyncio.to_thread(self._write_memory, label, session_key, batch, summary)
            # Index the flush before the marker is written: once a compaction shows in the
            # transcript, search finds what it flushed (forced when memory.sync.forceOnFlush).
            if self.memory is not None:
                try:
                    await self.memory.sync_after_flush(session_key)
                except Exception as exc:  # the file is written; the next sync indexes it
                    log.warning("memory sync after compaction failed", error=str(exc))
            marker = {
                "type": "compaction",
                "id": str(uuid.uuid4()),
                "timestamp": now_iso(),
                "throughId": batch[-1]["id"],
                "messages": len(batch),
                "path": rel,
                "startLine": start,
                "endLine": end,
                "summary": summary,
            }
            await self.sessions.append_records(session_key, marker)
            log.info("session compacted", session=session_key, messages=len(batch), path=rel)
        return {"compacted": len(batch), "path": rel, "startLine": start, "endLine": end}

    async def _summarise(self, batch: list[dict[str, Any]]) -> str:
        batch = [m for m in batch if m["role"] != "tool"]  # tool results quote memory that is already kept
        if self.provider.offline_now:  # no model to summarise with (none configured, or none answers)
            return extractive_summary(batch)
        transcript = "\n".join(f"{m['role']}: {m['content']}" for m in batch)
        messages = [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": transcript[-60_000:]}]
        try:
            parts = [item.text async for item in self.provider.stream(messages) if isinstance(item, Delta)]
            text = "".join(parts).strip()
            if text:
                return text
        except Exception as exc:  # a failing model must not lose the flush
            log.warning("model summary failed; using extractive", error=str(exc))
        return extractive_summary(batch)

    def _write_memory(
        self, label: str, session_key: str, batch: list[dict[str, Any]], summary: str
    ) -> tuple[str, int, int]:
        """Append the summary to today's day file; return (relative path, first line, last line)."""
        first = parse_iso(batch[0].get("timestamp") or "")
        last = parse_iso(batch[-1].get("timestamp") or "")
        span = f"{first:%H:%M}–{last:%H:%M} UTC" if first and last else ""
        section = (
            f"## Conversation “{label}” {span}".rstrip() + f"\n\n<!-- session {session_key} -->\n{summary.strip()}\n"
        )
        return append_to_day_file(self.workspace, datetime.now(timezone.utc).strftime("%Y-%m-%d"), section)
