"""Copy sessions from one storage engine to the other, and check the copy (`jarvis migrate`).

    await to_postgres(config, url)   every agent's sessions in config.state_dir's files → the database
                                     at `url` (its schema migrations run first)
    await to_files(url, config)      every session in the database → config.state_dir's files

Both open the two sides with the engines of gateway/storage (open_storage) and copy through the
SessionStore and KeyedStore interfaces (storage/base.py: `export`, `import_sessions`, `strays`;
`entries`, `import_entries`); neither knows a file format or a table. Both return a `Report` and print
nothing (gateway/cli/migrate.py shows it). What is copied, per session: its metadata (sessionKey,
label, createdAt, updatedAt, messageCount, and model and systemPrompt when the session has its own) and
its transcript, line by line, byte for byte, in order; per keyed memory (memory.set): its category,
value, created and updated and its versions, and the keyed memories in the trash the same way, into the
trash (the same rules: never overwritten, compared, read back); per note (MEMORY.md, LEARNINGS.md,
memory/**/*.md): its text and versions (NoteStore: `copies`, `import_copies`; a note that holds the same
text there is identical, another text a conflict left unchanged). Images are files in the workspace
either way, and are not copied. Sessions in the trash are copied into
the destination's trash the same way as live ones (and do not count against its sessions.max).

Not copied, and why: memory indexes are derived from the transcripts and memory files, rebuilt by the
gateway that serves them; the run ledger holds only what lives while a gateway runs (active runs,
idempotency keys of a few minutes), and none may run during a migration.

Rules:
- Complete lines only. A transcript whose last line lacks its newline (a write torn by a crash) has
  that tail skipped: the file engine's readers skip it too and its writer cuts it off before the next
  append, so it was never part of the session. The bytes skipped are reported (`torn_bytes`).
- Nothing at the destination is overwritten. A session already there with the same transcript and
  metadata is skipped (`identical`), so running it again is a no-op; one with different content is a
  `conflict` and left as it is (so is one the destination says is in the way, see import_sessions).
- Every session copied is read back from the destination and compared with its source: line count,
  SHA-256 over the transcript bytes (each line with its newline) and metadata; a difference is `failed`.
- A session the destination cannot hold (PostgreSQL text: a line not UTF-8 or with a NUL byte), or
  whose source is not a sound transcript, fails alone and is not copied.
- Transcripts that are no session (the source's `strays`) are not copied and are reported (`unlisted`).
- Each session is copied whole or not at all, so an interrupted run is resumed by running it again.
- An agent that would hold more sessions at the destination than its `sessions.max` (there already +
  new) stops the migration before any session is written (MigrateError naming the numbers).

The caller holds the state dir's lock (gateway.fsutil.lock_state_dir), so no gateway changes it meanwhile.
Errors: MigrateError (the copy cannot start or go on: the message says why), errors.Unavailable (the
database cannot be reached); neither ever holds the database password.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable
from urllib.parse import unquote, urlsplit

import asyncpg

from ..config import Config
from ..errors import Unavailable
from ..schema import AGENT_ID, SESSION_KEY
from . import open_storage
from ..memory.notes.keyed import KeyedCopy
from .base import ADDED, PRESENT, KeyedStore, SessionCopy, SessionStore, Storage
from .copynotes import CONFLICT, COPIED, FAILED, IDENTICAL, WOULD_COPY, NoteEntry, copy_notes  # the statuses
from .postgres import redact

AGENT_RE, KEY_RE = re.compile(AGENT_ID), re.compile(SESSION_KEY)
BATCH, BATCH_BYTES = 1000, 64 << 20  # sessions handed to the destination at once (its session list: one write)

Progress = Callable[[str, int, int], None]  # (phase "copy" | "verify", done, total)


class MigrateError(Exception):
    """The migration cannot start or go on; the message says why (never with a password)."""


# ---- what is compared -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Digest:
    """What verification compares of a transcript, kept instead of its lines once they are copied."""

    count: int
    sha256: str
    nbytes: int

    @classmethod
    def of(cls, lines: tuple[bytes, ...]) -> "Digest":
        h, n = hashlib.sha256(), 0
        for line in lines:
            h.update(line)
            h.update(b"\n")
            n += len(line) + 1
        return cls(len(lines), h.hexdigest(), n)


def _difference(src_meta: dict[str, Any], src: Digest, dst: SessionCopy, deleted: str | None = None) -> str:
    """What differs between a session at the source and at the destination ("" for nothing)."""
    out = []
    there = Digest.of(dst.lines)
    if (there.count, there.sha256) != (src.count, src.sha256):
        out.append(
            f"transcript: {there.count} lines, sha256 {there.sha256[:12]}… there; "
            f"{src.count} lines, sha256 {src.sha256[:12]}… here"
        )
    fields = [k for k in src_meta if src_meta[k] != dst.meta.get(k)]
    if fields:
        out.append("metadata: " + ", ".join(f"{k} {dst.meta.get(k)!r} there, {src_meta[k]!r} here" for k in fields))
    if (deleted is None) != (dst.deleted is None):
        out.append(f"{'in the trash' if dst.deleted else 'live'} there, {'in the trash' if deleted else 'live'} here")
    return "; ".join(out)


# ---- the report -------------------------------------------------------------------------------------
@dataclass
class Entry:
    """One session's outcome."""

    agent: str
    key: str
    status: str = ""
    lines: int = 0
    bytes: int = 0
    sha256: str = ""
    torn_bytes: int = 0
    detail: str = ""
    verified: bool | None = None  # read back from the destination and equal (None: not checked)
    trashed: bool = False  # it is in the trash (copied there)

    @property
    def name(self) -> str:
        return f"{self.agent}/{self.key}"


@dataclass
class KeyedEntry:
    """One keyed memory's outcome."""

    agent: str
    key: str
    category: str
    trashed: bool = False  # it is in the trash (copied there)
    status: str = ""
    detail: str = ""
    verified: bool | None = None

    @property
    def name(self) -> str:
        return f"{self.agent}/{self.key}"


@dataclass
class Report:
    source: str  # where from and to, for people (a database URL without its password)
    destination: str
    dry_run: bool = False
    entries: list[Entry] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)  # "agent/key.jsonl": transcripts that are no session
    schema: list[str] = field(default_factory=list)  # migrations applied (a dry run: that would be)
    keyed: list[KeyedEntry] = field(default_factory=list)  # the keyed memories' outcomes
    notes: list[NoteEntry] = field(default_factory=list)  # the notes' outcomes

    @property
    def agents(self) -> list[str]:
        return sorted({e.agent for e in self.entries})

    def of(self, *statuses: str) -> list[Entry]:
        return [e for e in self.entries if e.status in statuses]

    @property
    def ok(self) -> bool:
        return (
            not self.of(CONFLICT, FAILED)
            and not self.keyed_of(CONFLICT, FAILED)
            and not self.notes_of(CONFLICT, FAILED)
        )

    def keyed_of(self, *statuses: str) -> list["KeyedEntry"]:
        return [e for e in self.keyed if e.status in statuses]

    def notes_of(self, *statuses: str) -> list["NoteEntry"]:
        return [e for e in self.notes if e.status in statuses]


# ---- the two directions -----------------------------------------------------------------------------
async def to_postgres(config: Config, url: str, *, dry_run: bool = False, progress: Progress | None = None) -> Report:
    """Copy every agent's sessions in config.state_dir's files into the database at `url`."""
    report = Report(f"files in {config.state_dir}", redact(url), dry_run)
    return await _clearly(url, _between(_engine(config, ""), _engine(config, url), report, progress))


async def to_files(url: str, config: Config, *, dry_run: bool = False, progress: Progress | None = None) -> Report:
    """Copy every session in the database at `url` into config.state_dir's files."""
    report = Report(redact(url), f"files in {config.state_dir}", dry_run)
    return await _clearly(url, _between(_engine(config, url), _engine(config, ""), report, progress))


def _engine(config: Config, url: str) -> Config:
    """`config` with `storage.url` set to `url` ("" : the files in its state dir)."""
    return dataclasses.replace(config, storage=dataclasses.replace(config.storage, url=url))


async def _open(config: Config) -> Storage:
    """A tool's engine (no part in coordinating gateways), its schema left as it is."""
    url = config.storage.url
    try:
        return await open_storage(config, serve=False, schema=False)
    except Unavailable as exc:
        raise Unavailable(_scrub(exc.message, url), retryable=True) from None
    except (asyncpg.InterfaceError, ValueError) as exc:  # a URL asyncpg cannot use
        raise Unavailable(f"PostgreSQL unreachable at {redact(url)}: {_scrub(str(exc), url)}", retryable=True) from None


AGAIN = "each session is copied whole or not at all: run the command again to go on"


async def _clearly(url: str, work: Awaitable[Report]) -> Report:
    """`work`'s report, or an error that says what went wrong mid-way (a lost connection, a refused
    statement, a full disk, an unreadable session list) instead of a traceback."""
    where = f"PostgreSQL at {redact(url)}"
    try:
        return await work
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise MigrateError(f"{where}: {_scrub(str(exc), url)}; {AGAIN}") from None
    except OSError as exc:
        if exc.filename:
            raise MigrateError(f"{exc.filename}: {exc.strerror or exc}; {AGAIN}") from None
        raise Unavailable(f"{where}: {_scrub(str(exc), url)}; {AGAIN}", retryable=True) from None
    except RuntimeError as exc:  # the files engine's: a session list that is not JSON, say
        raise MigrateError(f"{_scrub(str(exc), url)}; {AGAIN}") from None


def _scrub(text: str, url: str) -> str:
    try:
        password = unquote(urlsplit(url).password or "")
    except ValueError:
        password = ""
    return text.replace(password, "***") if password else text


def _tick(progress: Progress | None, phase: str, done: int, total: int) -> None:
    if progress is not None:
        progress(phase, done, total)


# ---- the copy, through the interface ----------------------------------------------------------------
async def _between(src_config: Config, dst_config: Config, report: Report, progress: Progress | None) -> Report:
    src = await _open(src_config)
    try:
        dst = await _open(dst_config)
        try:
            await _copy(src, dst, report, progress)
        finally:
            await dst.close()
    finally:
        await src.close()
    return report


class _Copier:
    """One agent's sessions on their way: handed to the destination in batches."""

    def __init__(self, dst: SessionStore, report: Report, dry_run: bool):
        self.dst, self.report, self.dry_run = dst, report, dry_run
        self.pending: list[tuple[Entry, SessionCopy]] = []
        self.nbytes = 0
        self.sources: dict[tuple[str, str], tuple[dict[str, Any], Digest, str | None]] = {}

    async def add(self, e: Entry, copy: SessionCopy, digest: Digest) -> None:
        self.pending.append((e, copy))
        self.nbytes += digest.nbytes
        if len(self.pending) >= BATCH or self.nbytes >= BATCH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        if not self.pending:
            return
        done = await self.dst.import_sessions([c for _, c in self.pending], self.dry_run)
        for (e, copy), outcome in zip(self.pending, done):
            e.detail = outcome.detail
            if outcome.status == ADDED:
                e.status = WOULD_COPY if self.dry_run else COPIED
                # Not the lines: all need not fit in memory.
                self.sources[(e.agent, e.key)] = (copy.meta, Digest(e.lines, e.sha256, e.bytes), copy.deleted)
            elif outcome.status == PRESENT:
                e.status, e.detail = CONFLICT, f"{outcome.detail}; left unchanged"
            else:
                e.status, e.detail = FAILED, f"{outcome.detail}; not copied"
        self.pending, self.nbytes = [], 0


async def _copy(src: Storage, dst: Storage, report: Report, progress: Progress | None) -> None:
    pending = await src.schema(apply=False)
    agents = await src.agents()
    if pending and not agents:
        raise MigrateError(f"{report.source} holds no Jarvis sessions (its schema lacks {', '.join(pending)})")
    if pending:
        raise MigrateError(
            f"{report.source} has an older schema (it lacks {', '.join(pending)}): start a gateway "
            f"of this version on it once, which migrates it, then run this again"
        )
    report.schema = await dst.schema(apply=not report.dry_run)
    there = set(await dst.agents())

    plan: list[tuple[str, str]] = []
    trashed: set[tuple[str, str]] = set()  # sessions in the trash: copied into the trash
    sources = {agent: src.sessions(agent) for agent in agents}  # one store each: it caches its session list
    for agent, store in sources.items():
        plan += [(agent, key) for key in sorted(await store.all())]
        in_trash = sorted(t["sessionKey"] for t in await store.trash())
        trashed |= {(agent, key) for key in in_trash}
        plan += [(agent, key) for key in in_trash]
        report.unlisted += [f"{agent}/{key}.jsonl" for key in await store.strays()]
    targets = {agent: dst.sessions(agent) for agent in agents if AGENT_RE.fullmatch(agent)}
    await _check_room([p for p in plan if p not in trashed], targets, there)

    copiers: dict[str, _Copier] = {}
    for i, (agent, key) in enumerate(plan, start=1):
        _tick(progress, "copy", i - 1, len(plan))
        if not AGENT_RE.fullmatch(agent) or not KEY_RE.fullmatch(key):  # "../x", say: not even a file name
            what = "session key" if AGENT_RE.fullmatch(agent) else "agent id"
            report.entries.append(
                Entry(agent, key, FAILED, detail=f"not a valid {what} (no gateway could have made it); not copied")
            )
            continue
        copy = await sources[agent].export(key)
        if copy is None:
            report.entries.append(Entry(agent, key, FAILED, detail="gone from the source meanwhile; not copied"))
            continue
        digest = Digest.of(copy.lines)
        e = Entry(
            agent,
            key,
            lines=digest.count,
            bytes=digest.nbytes,
            sha256=digest.sha256,
            torn_bytes=copy.torn,
            trashed=copy.deleted is not None,
        )
        report.entries.append(e)
        if agent not in copiers:
            for other in copiers.values():  # one agent at a time: the last one's batch goes first
                await other.flush()
            copiers[agent] = _Copier(targets[agent], report, report.dry_run)
        existing = await copiers[agent].dst.export(key) if agent in there else None
        if existing is not None:
            diff = _difference(copy.meta, digest, existing, copy.deleted)
            e.status, e.detail = (CONFLICT, diff + "; left unchanged") if diff else (IDENTICAL, "")
        elif copy.problem:
            e.status, e.detail = FAILED, copy.problem + "; not copied"
        else:
            await copiers[agent].add(e, copy, digest)
    for copier in copiers.values():
        await copier.flush()
    _tick(progress, "copy", len(plan), len(plan))

    copied = report.of(COPIED)
    for i, e in enumerate(copied, start=1):
        _tick(progress, "verify", i - 1, len(copied))
        meta, digest, deleted = copiers[e.agent].sources[(e.agent, e.key)]
        back = await copiers[e.agent].dst.export(e.key)
        diff = (
            "not found at the destination after copying"
            if back is None
            else (back.problem or _difference(meta, digest, back, deleted))
        )
        e.verified = not diff
        if diff:
            e.status, e.detail = FAILED, f"the copy differs from its source: {diff}"
    if copied:
        _tick(progress, "verify", len(copied), len(copied))
    for agent in agents:
        if AGENT_RE.fullmatch(agent):
            await _copy_keyed(src.keyed(agent), dst.keyed(agent), agent, report)
            report.notes += await copy_notes(src.notes(agent), dst.notes(agent), agent, report.dry_run)


async def _check_room(plan: list[tuple[str, str]], targets: dict[str, SessionStore], there: set[str]) -> None:
    """Refuse before any session is written when an agent would hold more sessions at the destination
    than its `sessions.max` (copied anyway, they would leave its gateway refusing every sessions.create;
    the check is here, not per session, so a migration is never left half done by it)."""
    coming: dict[str, set[str]] = {}
    for agent, key in plan:
        if KEY_RE.fullmatch(key):
            coming.setdefault(agent, set()).add(key)
    over, limit = [], 0
    for agent, store in targets.items():
        present = set(await store.all()) if agent in there else set()
        new = coming.get(agent, set()) - present
        if new and len(present) + len(new) > store.max:
            limit = store.max
            over.append(
                f"agent {agent!r} would hold {len(present) + len(new):,} ({len(new):,} to copy, "
                f"{len(present):,} there already)"
            )
    if over:
        raise MigrateError(
            f"sessions.max is {limit:,} at the destination: {'; '.join(over)}; raise sessions.max "
            "(config.toml [sessions] max) or delete sessions there, then run this again; nothing was copied"
        )


def _keyed_difference(src: KeyedCopy, dst: KeyedCopy) -> str:
    a, b = src.entry, dst.entry
    fields = [k for k in ("category", "value", "created", "updated") if getattr(a, k) != getattr(b, k)]
    out = [
        f"{k} {getattr(b, k)!r} there, {getattr(a, k)!r} here"
        if k != "value"
        else f"value ({len(b.value)} characters there, {len(a.value)} here)"
        for k in fields
    ]
    if (src.deleted is None) != (dst.deleted is None):
        out.append(
            f"{'in the trash' if dst.deleted else 'live'} there, {'in the trash' if src.deleted else 'live'} here"
        )
    if [v.full() for v in src.versions] != [v.full() for v in dst.versions]:
        out.append(f"versions ({len(dst.versions)} there, {len(src.versions)} here)")
    return ", ".join(out)


async def _copy_keyed(src: KeyedStore, dst: KeyedStore, agent: str, report: Report) -> None:
    """The agent's keyed memories and its trash: each copied whole with its timestamps and versions, or
    left where it is taken."""
    there = {c.entry.key: c for c in await dst.copies()}
    todo: list[tuple[KeyedEntry, KeyedCopy]] = []
    for e in sorted(await src.copies(), key=lambda c: c.entry.key):
        k = KeyedEntry(agent, e.entry.key, e.entry.category, trashed=e.deleted is not None)
        report.keyed.append(k)
        if e.entry.key in there:
            diff = _keyed_difference(e, there[e.entry.key])
            k.status, k.detail = (CONFLICT, f"{diff}; left unchanged") if diff else (IDENTICAL, "")
        else:
            todo.append((k, e))
    done = await dst.import_copies([e for _, e in todo], report.dry_run) if todo else []
    for (k, _), outcome in zip(todo, done):
        if outcome.status == ADDED:
            k.status = WOULD_COPY if report.dry_run else COPIED
        elif outcome.status == PRESENT:
            k.status, k.detail = CONFLICT, f"{outcome.detail}; left unchanged"
        else:
            k.status, k.detail = FAILED, f"{outcome.detail}; not copied"
    copied = [(k, e) for k, e in todo if k.status == COPIED]
    if copied:
        back = {c.entry.key: c for c in await dst.copies()}
        for k, e in copied:
            key = e.entry.key
            diff = _keyed_difference(e, back[key]) if key in back else "not found there after copying"
            k.verified = not diff
            if diff:
                k.status, k.detail = FAILED, f"the copy differs from its source: {diff}"
