"""With a chat model configured, the model distils the statements of finished conversations into the
ledger, beside the offline extractor (which always runs).

A conversation is *finished* when it has been quiet for `memory.ledger.distillAfterS` after its last
turn (`finished`, debounced per session). Finished conversations are distilled a batch at a time, one
request per conversation, in the background: the user's messages since the last distillation (with
their line numbers, at most `maxInputChars`), and the current facts of the ledger, go to the model with
the lexicon's subjects; it answers Mem0-style decisions, JSON:

    {"decisions": [{"op": "add"|"update"|"close", "subject": "home", "value": "Dundee", "line": 4}]}

Each decision is checked (a subject of the lexicon, optionally qualified `code:shed`; a value of at most
120 characters for add/update; the line of one of this conversation's user messages) and the valid ones
are written as lines of a note of their own, `memory/ledger/<session>.md`, which the index reads like
any note (so the ledger can be rebuilt from the sources without asking the model again):

    - 2025-08-20T10:00:00.000Z · update · partner · Noor · sessions/<key>.jsonl:4 · Noor and I made it…

Bounded: at most `maxCallsPerHour` requests, `maxDecisions` decisions an answer, the input cut to
`maxInputChars`; a model that fails, answers garbage, refuses or is slower than `timeoutS` leaves the
note as it was (a failed conversation is tried again once, after the next quiet period) and never holds
up indexing: the offline extractor's statements are there either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import orjson
import structlog

from ...fsutil import atomic_write
from ..index.chunking import read_messages
from ..index.sources import session_path
from ..ports import Statement
from .facts import facts
from .lexicon import BY_NAME, SUBJECTS

log = structlog.get_logger("gateway.memory")

LEDGER_NOTES = "memory/ledger"  # the model's statements, one note per conversation
# What was distilled: {session key: the last line read}, beside the notes (not a note: the index reads
# only .md), so a restart or an index rebuild does not send a conversation to the model again.
DISTILLED = f"{LEDGER_NOTES}/distilled.json"
MAX_VALUE = 120
MAX_FACTS_SHOWN = 80
MAX_TRIES = 2  # a conversation whose distillation failed is tried once more
_SUBJECT = re.compile(r"^([a-z]+)(?::([a-z0-9][a-z0-9-]{0,30}))?$")
_LINE = re.compile(
    r"^- (?P<said>\S+) · (?P<op>add|update|close) · (?P<subject>[a-z]+(?::[a-z0-9-]+)?) · (?P<value>.*?) · "
    r"(?P<where>sessions/\S+?):(?P<line>\d+) · (?P<text>.*)$"
)

SYSTEM = (
    "You keep a ledger of facts about the user's life. From the user's messages of one conversation, "
    "decide what they state about themselves, against the facts already known. Answer only JSON: "
    '{"decisions": [{"op": "add"|"update"|"close", "subject": SUBJECT, "value": VALUE, "line": LINE}]}. '
    "add: a subject not known yet; update: a known subject has a new value; close: it no longer holds "
    "(they broke up, quit, sold it). Only what the user states as true of themselves now: no questions, "
    "plans, wishes or other people's facts. VALUE: a few words. LINE: the line number of the message that "
    "states it. SUBJECT: one of {subjects}, optionally with ':' and one word naming which one (code:shed, "
    'membership:choir). No decision: {"decisions": []}.'
)


@dataclass
class DistillSettings:
    after_s: float = 120.0
    timeout_s: float = 30.0
    max_calls_per_hour: int = 30
    max_input_chars: int = 12_000
    max_decisions: int = 20


def note_path(session_key: str) -> str:
    return f"{LEDGER_NOTES}/{session_key}.md"


def parse_note(path: str, text: str) -> list[Statement]:
    """The statements of a ledger note (`extract.from_chunks` reads them this way)."""
    out = []
    for i, line in enumerate(text.split("\n"), 1):
        m = _LINE.match(line.strip())
        if m:
            ending = m["op"] == "close"
            out.append(
                Statement(m["subject"], "" if ending else m["value"], m["said"], path, i, i, m["text"], "model", ending)
            )
    return out


def decisions_of(answer: str, lines: dict[int, tuple[str, str]], limit: int) -> tuple[list[dict[str, Any]], int]:
    """The valid decisions of a model's answer (the first JSON object in it), and how many were not."""
    start, end = answer.find("{"), answer.rfind("}")
    if start < 0 or end <= start:
        return [], 0
    try:
        data = orjson.loads(answer[start : end + 1])
    except orjson.JSONDecodeError:
        return [], 0
    raw = data.get("decisions") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        return [], 0
    good, bad = [], 0
    for d in raw[: limit * 2]:
        if not isinstance(d, dict):
            bad += 1
            continue
        op, subject, value, line = d.get("op"), d.get("subject"), d.get("value"), d.get("line")
        m = _SUBJECT.match(subject) if isinstance(subject, str) else None
        ok = (
            op in ("add", "update", "close")
            and m is not None
            and m.group(1) in BY_NAME
            and isinstance(line, int)
            and not isinstance(line, bool)
            and line in lines
            and (op == "close" or (isinstance(value, str) and 0 < len(value.strip()) <= MAX_VALUE))
        )
        if not ok:
            bad += 1
            continue
        v = "" if op == "close" else " ".join(str(value).split()).replace(" · ", " - ")
        good.append({"op": op, "subject": subject, "value": v, "line": line})
        if len(good) >= limit:
            break
    return good, bad


Complete = Callable[[list[dict[str, str]]], Awaitable[str]]


class Distiller:
    """The background distillation of one agent's finished conversations."""

    def __init__(
        self,
        settings: DistillSettings,
        complete: Complete,
        workspace: Path,
        sessions_dir: Path,
        statements: Callable[[], Awaitable[list[Statement]]],
        written: Callable[[], Awaitable[Any]],
    ):
        self.s, self.complete = settings, complete
        self.workspace, self.sessions_dir = workspace, sessions_dir
        self.statements, self.written = statements, written
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._queue: list[str] = []
        self._tries: dict[str, int] = {}
        self._done_line: dict[str, int] = {}  # per session: the last line distilled (DISTILLED on disk)
        self._loaded = False
        self._calls: list[float] = []
        self._task: asyncio.Task | None = None
        self._closed = False
        # calls: requests made; answered: answers read (whatever they said); failed: no answer in time or
        # an error; decisions: kept; rejected: decisions that did not pass the checks; skipped: over budget
        self.stats = {"calls": 0, "answered": 0, "failed": 0, "decisions": 0, "rejected": 0, "skipped": 0}

    def finished(self, session_key: str) -> None:
        """A turn of this conversation ended: distil it once it has been quiet for `after_s`."""
        if self._closed:
            return
        if (t := self._timers.pop(session_key, None)) is not None:
            t.cancel()
        loop = asyncio.get_running_loop()
        self._timers[session_key] = loop.call_later(self.s.after_s, self._ready, session_key)

    def _ready(self, session_key: str) -> None:
        self._timers.pop(session_key, None)
        if session_key not in self._queue:
            self._queue.append(session_key)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def idle(self) -> None:
        """Wait until the queued conversations are distilled (tests, shutdown)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        self._closed = True
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def _may_call(self) -> bool:
        now = time.monotonic()
        self._calls = [t for t in self._calls if now - t < 3600.0]
        return len(self._calls) < self.s.max_calls_per_hour

    async def _drain(self) -> None:
        wrote = False
        while self._queue and not self._closed:
            key = self._queue.pop(0)
            if not self._may_call():
                self.stats["skipped"] += 1 + len(self._queue)
                log.warning("memory_ledger_distill_budget", note="maxCallsPerHour reached; later turns distil them")
                self._queue.clear()
                break
            try:
                wrote = await self._one(key) or wrote
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.stats["failed"] += 1
                tries = self._tries[key] = self._tries.get(key, 0) + 1
                log.warning(
                    "memory_ledger_distill_failed",
                    session=key,
                    error=str(exc)[:200] or type(exc).__name__,
                    note="the offline extractor's statements stand"
                    + ("; tried again later" if tries < MAX_TRIES else ""),
                )
                if tries < MAX_TRIES and not self._closed:
                    self.finished(key)
        if wrote:
            await self.written()

    def _load(self) -> dict[str, int]:
        """What was distilled before this process (DISTILLED); a file that cannot be read is said so and
        taken as nothing distilled (the model's notes stay as they are; a conversation may be read again)."""
        path = self.workspace / DISTILLED
        try:
            data = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("memory_ledger_distilled_unreadable", path=DISTILLED, error=str(exc)[:200])
            return {}
        if not isinstance(data, dict):
            log.warning("memory_ledger_distilled_unreadable", path=DISTILLED, error="not a JSON object")
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}

    def _save(self) -> None:
        path = self.workspace / DISTILLED
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, orjson.dumps(self._done_line, option=orjson.OPT_SORT_KEYS))

    async def _one(self, key: str) -> bool:
        """Distil one conversation; whether the note changed."""
        if not self._loaded:
            self._done_line = {**await asyncio.to_thread(self._load), **self._done_line}
            self._loaded = True
        messages = await asyncio.to_thread(read_messages, self.sessions_dir / f"{key}.jsonl")
        after = self._done_line.get(key, 0)
        lines = {
            m.line: (m.when, m.text.split(": ", 1)[1] if m.text.startswith("User: ") else m.text)
            for m in messages
            if m.role == "user" and m.line > after
        }
        if not lines:
            return False
        convo, size = [], 0
        for line, (_, text) in sorted(lines.items()):
            piece = f"[line {line}] {text}"
            if size + len(piece) > self.s.max_input_chars:
                break
            convo.append(piece)
            size += len(piece)
        known = facts(await self.statements())
        shown = [
            f"- {f.subject}: {f.current.value}" for f in list(known.values())[:MAX_FACTS_SHOWN] if f.current is not None
        ]
        prompt = [
            {"role": "system", "content": SYSTEM.replace("{subjects}", ", ".join(s.name for s in SUBJECTS))},
            {
                "role": "user",
                "content": "Known facts:\n"
                + ("\n".join(shown) or "(none)")
                + "\n\nThe user's messages:\n"
                + "\n".join(convo),
            },
        ]
        self._calls.append(time.monotonic())
        self.stats["calls"] += 1
        answer = await asyncio.wait_for(self.complete(prompt), self.s.timeout_s)
        decisions, bad = decisions_of(answer, lines, self.s.max_decisions)
        self.stats["rejected"] += bad
        self._done_line[key] = max(lines)
        await asyncio.to_thread(self._save)
        self._tries.pop(key, None)
        if bad:
            log.info("memory_ledger_distill_rejected", session=key, rejected=bad, kept=len(decisions))
        if not decisions:
            self.stats["answered"] += 1
            return False
        self.stats["decisions"] += len(decisions)
        rows = [
            f"- {lines[d['line']][0]} · {d['op']} · {d['subject']} · {d['value']} · {session_path(key)}:{d['line']} · "
            + " ".join(lines[d["line"]][1].split())[:600]
            for d in decisions
        ]
        await asyncio.to_thread(self._append, key, rows)
        self.stats["answered"] += 1
        return True

    def _append(self, key: str, rows: list[str]) -> None:
        path = self.workspace / note_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        old = (
            path.read_text(encoding="utf-8")
            if path.exists()
            else (f"# What the model distilled from sessions/{key}.jsonl\n\n")
        )
        atomic_write(path, (old + "\n".join(rows) + "\n").encode())


def openai_complete(
    api_key: str, base_url: str, model: str, timeout: float
) -> tuple[Complete, Callable[[], Awaitable[None]]]:
    """A `Complete` over an OpenAI-compatible chat completions endpoint (not streamed), and its close."""
    import openai

    client = openai.AsyncOpenAI(api_key=api_key or "unused", base_url=base_url or None, timeout=timeout, max_retries=0)

    async def complete(messages: list[dict[str, str]]) -> str:
        resp = await client.chat.completions.create(model=model, messages=messages, temperature=0)  # type: ignore[arg-type]
        choice = resp.choices[0] if resp.choices else None
        return (choice.message.content or "") if choice is not None and choice.message is not None else ""

    return complete, client.close
