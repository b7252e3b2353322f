"""Copy sessions between the state dir's files and PostgreSQL, and check the copy (`jarvis migrate`).

    await to_postgres(state_dir, url)   every agent's sessions.json + <key>.jsonl → `sessions` and
                                        `transcript_lines` rows (the schema migrations run first)
    await to_files(url, state_dir)      the rows → sessions.json + <key>.jsonl under
                                        <stateDir>/agents/<agentId>/sessions/

Both return a `Report` and print nothing (gateway/cli/migrate.py shows it). What is copied, per session:
its metadata (sessionKey, label, createdAt, updatedAt, messageCount, and model and systemPrompt when
the session has its own) and its transcript, line by line,
byte for byte, in order (a row holds a line without its newline; `line_count` is set). Memory indexes
are not copied: they are derived from the transcripts and rebuilt by the gateway that serves them.

Rules:
- Complete lines only. A transcript whose last line lacks its newline (a write torn by a crash) has
  that tail skipped: the file engine's readers skip it too and its writer cuts it off before the next
  append, so it was never part of the session. The bytes skipped are reported (`torn_bytes`).
- Nothing at the destination is overwritten. A session already there with the same transcript and
  metadata is skipped (`identical`), so running it again is a no-op; one with different content is a
  `conflict` and left as it is. The one exception, copying into files: a transcript file that
  sessions.json does not list (so no session) and whose bytes are a prefix of the database's — the
  local mirror a gateway on the database kept — is brought up to date.
- Every session copied is read back from the destination and compared with its source: line count,
  SHA-256 over the transcript bytes (each line with its newline) and metadata; a difference is `failed`.
- A line PostgreSQL `text` cannot hold (not UTF-8, or a NUL byte) fails its session, which is not copied.
- Transcripts that sessions.json does not list are not sessions (the file engine never shows them):
  they are not copied and are reported (`unlisted`).
- Counters: a sessions dir without the clean-close marker (its gateway crashed) may hold stale message
  counts; they are recounted from the transcript as the file engine does when it opens such a dir.

The caller holds the state dir's lock (gateway.fsutil.lock_state_dir), so no gateway changes it meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

import asyncpg
import orjson

from ..fsutil import atomic_write, ensure_private_dir, locked
from ..schema import AGENT_ID, SESSION_KEY
from ..sessions import transcript as tx
from ..sessions.history import SETTINGS
from .files.sessions import CLEAN_MARKER, parse_sessions_file, sessions_file
from .postgres import MIGRATIONS, migrate, redact
from .postgres.sessions import row_meta

AGENT_RE, KEY_RE = re.compile(AGENT_ID), re.compile(SESSION_KEY)
META_BATCH = 1000  # sessions.json is rewritten after this many new sessions (and at each agent's end)

COPIED, WOULD_COPY, IDENTICAL, CONFLICT, FAILED = "copied", "would copy", "identical", "conflict", "failed"

Progress = Callable[[str, int, int], None]  # (phase "copy" | "verify", done, total)


class MigrateError(Exception):
    """The migration cannot start or go on; the message says why (never with a password).
    `exit_code`: 1, or 3 where the database cannot be reached (the CLI's "cannot connect")."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


# ---- one transcript, as complete lines ------------------------------------------------------------
@dataclass(frozen=True)
class Lines:
    """A transcript's complete lines (without their newlines), and what could not be taken of it."""

    lines: tuple[bytes, ...] = ()
    torn: int = 0  # bytes after the last newline, not copied
    problem: str = ""  # why these lines cannot be copied as they are ("" when they can)

    @classmethod
    def of_file(cls, data: bytes) -> "Lines":
        parts = data.split(b"\n")
        return cls(tuple(parts[:-1]), len(parts[-1]))

    @cached_property
    def data(self) -> bytes:
        return b"".join(line + b"\n" for line in self.lines)

    @property
    def count(self) -> int:
        return len(self.lines)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def digest(self) -> "Digest":
        return Digest(self.count, self.sha256)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def text_problem(self) -> str:
        """Why PostgreSQL `text` cannot hold these lines, or ""."""
        for n, line in enumerate(self.lines, start=1):
            if b"\x00" in line:
                return f"line {n} holds a NUL byte, which PostgreSQL text cannot store"
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return f"line {n} is not UTF-8 text, which PostgreSQL text cannot store"
        return ""


@dataclass(frozen=True)
class Digest:
    """What verification compares of a transcript, kept instead of its lines once they are copied."""

    count: int
    sha256: str


def _messages(lines: Lines) -> tuple[int, str]:
    """(message records, the last message timestamp) as FileSessionStore's recount finds them."""
    stamps = [r.data.get("timestamp") for r in tx.iter_records(Path(), lines.data)
              if r.data.get("type") == "message"]
    return len(stamps), next((t for t in reversed(stamps) if isinstance(t, str)), "")


def _meta(key: str, raw: dict[str, Any], lines: Lines, recount: bool) -> dict[str, Any]:
    """The fields a session's metadata has, from a sessions.json entry."""
    created = raw.get("createdAt")
    if not isinstance(created, str):  # an entry written by hand, say: the transcript header knows
        head = next(iter(tx.iter_records(Path(), lines.data[: lines.data.find(b"\n") + 1])), None)
        created = head.data.get("createdAt") if head and head.data.get("type") == "session" else None
        created = created if isinstance(created, str) else ""
    updated = raw.get("updatedAt") if isinstance(raw.get("updatedAt"), str) else created
    label = raw.get("label")
    count = raw.get("messageCount")
    meta = {"sessionKey": key, "label": None if label is None else str(label), "createdAt": created,
            "updatedAt": updated, "messageCount": count if type(count) is int else 0}
    for name in SETTINGS:  # kept only when set, as both stores keep them
        if isinstance(raw.get(name), str) and raw[name]:
            meta[name] = raw[name]
    if recount:  # FileSessionStore._reconcile_sync's rule
        n, last = _messages(lines)
        if meta["messageCount"] != n or last > meta["updatedAt"]:
            meta["messageCount"], meta["updatedAt"] = n, max(meta["updatedAt"], last)
    return meta


def _difference(src_meta: dict[str, Any], src: Lines | Digest, dst_meta: dict[str, Any] | None,
                dst: Lines) -> str:
    """What differs between a session at the source and at the destination ("" for nothing)."""
    out = []
    if dst.count != src.count or dst.sha256 != src.sha256:
        out.append(f"transcript: {dst.count} lines, sha256 {dst.sha256[:12]}… there; "
                   f"{src.count} lines, sha256 {src.sha256[:12]}… here")
    if dst_meta is None:
        out.append("metadata: missing there")
    else:
        fields = [k for k in src_meta if src_meta[k] != dst_meta.get(k)]
        if fields:
            out.append("metadata: " + ", ".join(f"{k} {dst_meta.get(k)!r} there, {src_meta[k]!r} here" for k in fields))
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

    @property
    def agents(self) -> list[str]:
        return sorted({e.agent for e in self.entries})

    def of(self, *statuses: str) -> list[Entry]:
        return [e for e in self.entries if e.status in statuses]

    @property
    def ok(self) -> bool:
        return not self.of(CONFLICT, FAILED)


# ---- the files side -------------------------------------------------------------------------------
class _Files:
    def __init__(self, state_dir: Path):
        self.agents_dir = state_dir / "agents"

    def agents(self) -> list[str]:
        if not self.agents_dir.is_dir():
            return []
        return sorted(p.name for p in self.agents_dir.iterdir()
                      if AGENT_RE.fullmatch(p.name) and (p / "sessions").is_dir() and not p.is_symlink())

    def dir(self, agent: str) -> Path:
        return self.agents_dir / agent / "sessions"

    def listed(self, agent: str) -> dict[str, dict[str, Any]]:
        """sessions.json's entries, as the files engine reads them."""
        return self._listed(agent)[0]

    def _listed(self, agent: str) -> tuple[dict[str, dict[str, Any]], int]:
        path = self.dir(agent) / "sessions.json"
        try:
            return parse_sessions_file(path.read_bytes())
        except FileNotFoundError:
            return {}, 0
        except orjson.JSONDecodeError as exc:
            raise MigrateError(f"{path} is not valid JSON ({exc}); restore it from a backup") from None

    def clean(self, agent: str) -> bool:
        """Whether sessions.json's counters are exact (closed cleanly, or nothing to count)."""
        d = self.dir(agent)
        return (d / CLEAN_MARKER).exists() or not (d / "sessions.json").exists()

    def transcripts(self, agent: str) -> list[str]:
        return sorted(p.stem for p in self.dir(agent).glob("*.jsonl"))

    def read(self, agent: str, key: str) -> Lines | None:
        try:
            return Lines.of_file((self.dir(agent) / f"{key}.jsonl").read_bytes())
        except FileNotFoundError:
            return None

    def raw(self, agent: str, key: str) -> bytes | None:
        try:
            return (self.dir(agent) / f"{key}.jsonl").read_bytes()
        except FileNotFoundError:
            return None

    def make_dir(self, agent: str) -> None:
        for d in (self.agents_dir, self.agents_dir / agent, self.dir(agent)):
            ensure_private_dir(d)

    def write_transcript(self, agent: str, key: str, lines: Lines) -> None:
        self.make_dir(agent)
        atomic_write(self.dir(agent) / f"{key}.jsonl", lines.data)

    def add_listed(self, agent: str, metas: dict[str, dict[str, Any]]) -> None:
        """Add entries to sessions.json (under its lock, as the files engine writes it, as its next
        generation); never replace one."""
        d = self.dir(agent)
        self.make_dir(agent)
        path = d / "sessions.json"
        fresh = not path.exists()
        with locked(path):
            sessions, generation = self._listed(agent)
            for key, meta in metas.items():
                sessions.setdefault(key, meta)
            atomic_write(path, sessions_file(sessions, generation + 1))
        if fresh:  # every counter written is exact: the first open need not recount
            (d / CLEAN_MARKER).touch(0o600)


# ---- the database side ----------------------------------------------------------------------------
async def connect(url: str) -> asyncpg.Connection:
    """A connection to `url`, or MigrateError (exit code 3) saying why, without the password."""
    if not re.match(r"^postgres(ql)?://", url):
        raise MigrateError(f"not a postgresql:// URL: {redact(url)}", exit_code=2)
    try:
        return await asyncpg.connect(url, timeout=15)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncio.TimeoutError, ValueError) as exc:
        reason = _scrub(str(exc) or type(exc).__name__, url)
        raise MigrateError(f"PostgreSQL unreachable at {redact(url)}: {reason}", exit_code=3) from None


AGAIN = "each session is copied whole or not at all: run the command again to go on"


async def _clearly(url: str, work: Any) -> Report:
    """`work`'s report, or a MigrateError that says what went wrong mid-way (a lost connection, a
    refused statement, a full disk) instead of a traceback."""
    try:
        return await work
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise MigrateError(f"PostgreSQL at {redact(url)}: {_scrub(str(exc), url)}; {AGAIN}") from None
    except OSError as exc:
        if exc.filename:
            raise MigrateError(f"{exc.filename}: {exc.strerror or exc}; {AGAIN}") from None
        raise MigrateError(f"PostgreSQL at {redact(url)}: {_scrub(str(exc), url)}; {AGAIN}", exit_code=3) from None


def _scrub(text: str, url: str) -> str:
    password = _password(url)
    return text.replace(password, "***") if password else text


def _password(url: str) -> str:
    try:
        return unquote(urlsplit(url).password or "")
    except ValueError:
        return ""


async def _has_schema(conn: asyncpg.Connection) -> bool:
    return await conn.fetchval("SELECT to_regclass('sessions') IS NOT NULL AND "
                               "to_regclass('transcript_lines') IS NOT NULL")


async def _pending_migrations(conn: asyncpg.Connection) -> list[str]:
    done: set[str] = set()
    if await conn.fetchval("SELECT to_regclass('jarvis_migrations') IS NOT NULL"):
        done = {r["name"] for r in await conn.fetch("SELECT name FROM jarvis_migrations")}
    return [name for name, _ in MIGRATIONS if name not in done]


# The session's own settings (migration 0006): read through to_jsonb, which is NULL for a column a
# database not yet migrated lacks (a dry run reads such a database as it is).
_SETTINGS_COLS = "to_jsonb(sessions) ->> 'model' AS model, to_jsonb(sessions) ->> 'system_prompt' AS system_prompt"


async def _db_sessions(conn: asyncpg.Connection, agent: str | None = None) -> list[Any]:
    cols = f"agent_id, session_key, label, created_at, updated_at, message_count, line_count, {_SETTINGS_COLS}"
    if agent is None:
        return await conn.fetch(f"SELECT {cols} FROM sessions ORDER BY agent_id, session_key")
    return await conn.fetch(f"SELECT {cols} FROM sessions WHERE agent_id = $1 ORDER BY session_key", agent)


async def _db_read(conn: asyncpg.Connection, agent: str, key: str) -> tuple[dict[str, Any], Lines] | None:
    row = await conn.fetchrow(f"SELECT session_key, label, created_at, updated_at, message_count, line_count, "
                              f"{_SETTINGS_COLS} FROM sessions WHERE agent_id = $1 AND session_key = $2", agent, key)
    if row is None:
        return None
    return row_meta(row), await _db_lines(conn, agent, key, int(row["line_count"]))


async def _db_lines(conn: asyncpg.Connection, agent: str, key: str, line_count: int) -> Lines:
    rows = await conn.fetch("SELECT seq, line FROM transcript_lines WHERE agent_id = $1 AND session_key = $2 "
                            "ORDER BY seq", agent, key)
    lines = tuple(r["line"].encode() for r in rows)
    problem = ""
    if [int(r["seq"]) for r in rows] != list(range(1, len(rows) + 1)):
        problem = "its transcript rows have gaps in seq"
    elif len(rows) != line_count:
        problem = f"line_count is {line_count} but it has {len(rows)} transcript rows"
    elif any(b"\n" in line for line in lines):
        problem = "a transcript row holds a newline, so it is not one JSONL line"
    return Lines(lines, 0, problem)


async def _db_insert(conn: asyncpg.Connection, agent: str, meta: dict[str, Any], lines: Lines) -> bool:
    """Insert a session and its lines in one transaction; False if it exists (made meanwhile)."""
    async with conn.transaction():
        made = await conn.fetchval(
            "INSERT INTO sessions(agent_id, session_key, label, created_at, updated_at, message_count, line_count, "
            "model, system_prompt) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING 1",
            agent, meta["sessionKey"], meta["label"], meta["createdAt"], meta["updatedAt"], meta["messageCount"],
            len(lines.lines), meta.get("model"), meta.get("systemPrompt"))
        if not made:
            return False
        if lines.lines:
            await conn.copy_records_to_table(
                "transcript_lines", columns=["agent_id", "session_key", "seq", "line"],
                records=((agent, meta["sessionKey"], n, line.decode()) for n, line in enumerate(lines.lines, 1)))
    return True


def _entry(agent: str, key: str, lines: Lines) -> Entry:
    return Entry(agent, key, lines=len(lines.lines), bytes=lines.nbytes, sha256=lines.sha256, torn_bytes=lines.torn)


def _tick(progress: Progress | None, phase: str, done: int, total: int) -> None:
    if progress is not None:
        progress(phase, done, total)


# ---- files → PostgreSQL ---------------------------------------------------------------------------
async def to_postgres(state_dir: Path, url: str, *, dry_run: bool = False,
                      progress: Progress | None = None) -> Report:
    """Copy every agent's sessions under `state_dir` into the database at `url` (see the module doc)."""
    return await _clearly(url, _to_postgres(state_dir, url, dry_run, progress))


async def _to_postgres(state_dir: Path, url: str, dry_run: bool, progress: Progress | None) -> Report:
    files = _Files(state_dir)
    report = Report(f"files in {state_dir}", redact(url), dry_run)
    plan: list[tuple[str, str, dict[str, Any], bool]] = []  # (agent, key, sessions.json entry, clean)
    for agent in files.agents():
        listed, clean = files.listed(agent), files.clean(agent)
        plan += [(agent, key, listed[key], clean) for key in sorted(listed)]
        report.unlisted += [f"{agent}/{key}.jsonl" for key in files.transcripts(agent) if key not in listed]

    conn = await connect(url)
    try:
        if dry_run:
            report.schema = await _pending_migrations(conn)
        else:
            report.schema = await migrate(conn)
        schema = await _has_schema(conn)
        sources: dict[tuple[str, str], tuple[dict[str, Any], Digest]] = {}
        for i, (agent, key, raw, clean) in enumerate(plan, start=1):
            _tick(progress, "copy", i - 1, len(plan))
            if not KEY_RE.fullmatch(key):  # not even a file name to read: "../x", say
                report.entries.append(Entry(agent, key, FAILED, detail="not a valid session key (sessions.json "
                                                                       "names it, no gateway could); not copied"))
                continue
            found = files.read(agent, key)
            lines = found or Lines()
            e = _entry(agent, key, lines)
            report.entries.append(e)
            if found is None:
                e.detail = "sessions.json lists it but it has no transcript file: no lines"
            meta = _meta(key, raw, lines, recount=not clean)
            problem = lines.text_problem()
            there = await _db_read(conn, agent, key) if schema else None
            if there is not None:
                diff = _difference(meta, lines, *there)
                e.status, e.detail = (CONFLICT, diff + "; left unchanged") if diff else (IDENTICAL, "")
            elif problem:
                e.status, e.detail = FAILED, problem + "; not copied"
            elif dry_run:
                e.status = WOULD_COPY
            elif await _db_insert(conn, agent, meta, lines):
                e.status = COPIED
                sources[(agent, key)] = (meta, lines.digest())  # not the lines: all need not fit in memory
            else:
                e.status, e.detail = CONFLICT, "created in the database meanwhile; left unchanged"
        _tick(progress, "copy", len(plan), len(plan))

        copied = report.of(COPIED)
        for i, e in enumerate(copied, start=1):
            _tick(progress, "verify", i - 1, len(copied))
            meta, digest = sources[(e.agent, e.key)]
            there = await _db_read(conn, e.agent, e.key)
            diff = _difference(meta, digest, *there) if there else "gone from the database after copying"
            if there is not None and there[1].problem:
                diff = there[1].problem
            _verified(e, diff)
        if copied:
            _tick(progress, "verify", len(copied), len(copied))
    finally:
        await conn.close()
    return report


def _verified(e: Entry, diff: str) -> None:
    e.verified = not diff
    if diff:
        e.status, e.detail = FAILED, f"the copy differs from its source: {diff}"


# ---- PostgreSQL → files ---------------------------------------------------------------------------
async def to_files(url: str, state_dir: Path, *, dry_run: bool = False,
                   progress: Progress | None = None) -> Report:
    """Copy every session in the database at `url` into `state_dir`'s files (see the module doc)."""
    return await _clearly(url, _to_files(url, state_dir, dry_run, progress))


async def _to_files(url: str, state_dir: Path, dry_run: bool, progress: Progress | None) -> Report:
    files = _Files(state_dir)
    report = Report(redact(url), f"files in {state_dir}", dry_run)
    conn = await connect(url)
    try:
        if not await _has_schema(conn):
            raise MigrateError(f"{redact(url)} holds no Jarvis sessions (it has no sessions table)")
        # One snapshot: sessions and their lines as they were at one moment, gateways serving or not.
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            rows = await _db_sessions(conn)
            sources: dict[tuple[str, str], tuple[dict[str, Any], Digest]] = {}
            pending: dict[str, dict[str, dict[str, Any]]] = {}  # agent → key → metadata to list
            listed: dict[str, tuple[dict[str, dict[str, Any]], bool]] = {}
            for i, row in enumerate(rows, start=1):
                _tick(progress, "copy", i - 1, len(rows))
                agent, key = row["agent_id"], row["session_key"]
                lines = await _db_lines(conn, agent, key, int(row["line_count"]))
                e = _entry(agent, key, lines)
                report.entries.append(e)
                meta = row_meta(row)
                if not AGENT_RE.fullmatch(agent) or not KEY_RE.fullmatch(key):
                    e.status, e.detail = FAILED, "its agent id or session key cannot name a file; not copied"
                    continue
                if agent not in listed:
                    if pending:  # one agent at a time: list what the last one got
                        _flush(files, pending)
                    listed[agent] = (files.listed(agent), files.clean(agent)) if agent in files.agents() else ({}, True)
                there_listed, clean = listed[agent]
                if key in there_listed:
                    there = files.read(agent, key) or Lines()
                    diff = _difference(meta, lines, _meta(key, there_listed[key], there, not clean), there)
                    e.status, e.detail = (CONFLICT, diff + "; left unchanged") if diff else (IDENTICAL, "")
                    continue
                if lines.problem:
                    e.status, e.detail = FAILED, lines.problem + "; not copied"
                    continue
                old = files.raw(agent, key)
                if old is not None and not lines.data.startswith(old):
                    e.status, e.detail = CONFLICT, ("a transcript file sessions.json does not list is in the way "
                                                   "(its bytes are not a prefix of this session's); left unchanged")
                    continue
                if dry_run:
                    e.status = WOULD_COPY
                    continue
                if old is not None:
                    e.detail = ("its transcript was there unlisted (a gateway's local mirror)" if old == lines.data
                                else "an unlisted transcript holding its first part (a mirror) was brought up to date")
                if old != lines.data:
                    files.write_transcript(agent, key, lines)
                pending.setdefault(agent, {})[key] = meta
                sources[(agent, key)] = (meta, lines.digest())  # not the lines: all need not fit in memory
                e.status = COPIED
                if sum(len(v) for v in pending.values()) >= META_BATCH:
                    _flush(files, pending)
            _flush(files, pending)
            _tick(progress, "copy", len(rows), len(rows))
    finally:
        await conn.close()

    copied = report.of(COPIED)
    now_listed: dict[str, tuple[dict[str, dict[str, Any]], bool]] = {}
    for i, e in enumerate(copied, start=1):
        _tick(progress, "verify", i - 1, len(copied))
        meta, digest = sources[(e.agent, e.key)]
        if e.agent not in now_listed:
            now_listed[e.agent] = (files.listed(e.agent), files.clean(e.agent))
        entries, clean = now_listed[e.agent]
        there = files.read(e.agent, e.key)
        if e.key not in entries or there is None:
            _verified(e, "not found in the state dir after copying")
            continue
        _verified(e, _difference(meta, digest, _meta(e.key, entries[e.key], there, not clean), there))
    if copied:
        _tick(progress, "verify", len(copied), len(copied))
    return report


def _flush(files: _Files, pending: dict[str, dict[str, dict[str, Any]]]) -> None:
    for agent, metas in pending.items():
        if metas:
            files.add_listed(agent, metas)
    pending.clear()
