"""What every storage engine provides: one Protocol per store, and the engine that makes them.

Two engines implement these (storage/files/, storage/postgres/); `open_storage(config)` (storage/__init__.py)
is the only place that chooses one. The rest of the gateway types against these Protocols only, and
tests/contract/ runs one suite per store against both engines.

Everything is async: a store that blocks (files) does its work in threads. The memory index is held to
the memory feature's ports (memory/ports.py: MemoryIndex, and the narrow ports its pipeline writes and
searches through), which each engine's memory package implements.
"""

from __future__ import annotations

import builtins  # `list` inside SessionStore and KeyedStore is their method: the type is builtins.list
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

# What the memory feature asks of an engine is declared with it, in its ports (memory never imports
# storage): named here too, as part of what an engine provides.
from ..memory.ports import EmbeddingCacheStore as EmbeddingCacheStore
from ..memory.ports import IndexContext as IndexContext
from ..memory.ports import KeyedMemories, MemoryIndex, NoteRecord

if TYPE_CHECKING:  # pragma: no cover
    from ..errors import Unavailable
    from ..memory.notes.history import NoteVersion
    from ..memory.notes.keyed import Entry, KeyedCopy
    from ..principals import Principal


@dataclass(frozen=True)
class SessionCopy:
    """A whole session as one engine hands it to another (`jarvis migrate`, storage/migrate.py)."""

    meta: dict[str, Any]  # as `get` answers it
    lines: tuple[bytes, ...] = ()  # the transcript's complete lines, in order, each without its newline
    torn: int = 0  # bytes after the last newline (a write cut short by a crash): never read, not copied
    problem: str = ""  # why `lines` is not a sound transcript ("" when it is): it is not copied
    deleted: str | None = None  # when it went to the trash (None: it is live)


ADDED, PRESENT, REFUSED = "added", "present", "refused"


@dataclass(frozen=True)
class Imported:
    """What `import_sessions` did with one session: ADDED; PRESENT (something of its key is there
    already: nothing written); REFUSED (this engine cannot hold it as it is). `detail` says more."""

    status: str
    detail: str = ""


class SessionStore(Protocol):
    """One agent's sessions: metadata (sessionKey, label, createdAt, updatedAt, messageCount and the own
    settings in sessions/history.SETTINGS when set) and each session's append-only transcript.

    A delete moves a session, metadata and transcript, to the trash (`memory.trashDays`), from which
    `restore` brings it back whole; only `purge` (or `delete(trash=False)`: retention) removes it. A key
    in the trash is taken: `create` of it is a Conflict until it is restored or purged.

    Errors: NotFound for a session that does not exist (for the trash: is not there), Conflict for
    `create` of one that does or past the store's `max` sessions (SessionLimit), Invalid for a key
    outside the session key rule (sessions/history.check_session_key)."""

    dir: Path  # where transcripts (or their local mirrors) are files
    agent_id: str
    max: int  # sessions it may hold (config sessions.max)

    async def open(self) -> None: ...
    async def flush(self) -> None:
        """Write what is pending now (counters the files engine batches)."""

    async def close(self) -> None: ...

    async def all(self) -> dict[str, dict[str, Any]]: ...
    async def get(self, key: str) -> dict[str, Any]: ...
    async def exists(self, key: str) -> bool: ...
    async def list(self, limit: int, offset: int) -> tuple[builtins.list[dict[str, Any]], int]:
        """A page of sessions, most recently updated first, and how many there are."""

    async def create(
        self, label: str | None = None, key: str | None = None, settings: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A new session (a uuid key unless `key` is given) with its transcript header."""

    async def update(self, key: str, **changes: Any) -> dict[str, Any]:
        """Set label / model / systemPrompt; a setting given as "" or None is reset."""

    async def append_messages(self, key: str, *records: dict[str, Any]) -> None:
        """Append message records durably; messageCount grows by their number, updatedAt to the last
        timestamp."""

    async def append_records(self, key: str, *records: dict[str, Any]) -> None:
        """Append non-message records (a compaction marker): no counter changes."""

    async def delete(self, key: str, trash: bool = True) -> None:
        """To the trash (its transcript's chunks leave the index); `trash=False`: gone for good."""

    async def trash(self) -> builtins.list[dict[str, Any]]:
        """The trashed sessions' metadata with `deletedAt`, the most recently deleted first."""

    async def restore(self, key: str) -> dict[str, Any]:
        """Bring a trashed session back whole (SessionLimit past `max`); its metadata."""

    async def purge(self, keys: Sequence[str] | None = None, before: str | None = None) -> builtins.list[str]:
        """Remove from the trash for good: `keys` (each must be there), or all; with `before`, only what
        was deleted before that time. The keys purged."""

    async def history(self, key: str, limit: int, before: str | None, max_bytes: int = 2 << 20) -> dict[str, Any]:
        """sessions.history's page: {"messages": […], "hasMore": bool}."""

    def transcript_path(self, key: str) -> Path: ...
    async def local_transcript(self, key: str) -> Path:
        """The transcript as an up-to-date local file, for readers that take a path."""

    # Whole sessions in and out (`jarvis migrate`; beside no gateway: the store need not be opened).
    async def export(self, key: str) -> SessionCopy | None:
        """The session whole (metadata as `get` would answer it once the store is open), live or in the
        trash (`deleted` set), or None."""

    async def import_sessions(self, copies: Sequence[SessionCopy], dry_run: bool = False) -> builtins.list[Imported]:
        """Add whole sessions exactly as given (metadata, and the lines byte for byte; a `deleted` one into
        the trash), each whole or not at all; never replace or change anything there (live or in the
        trash). `dry_run`: say what would happen, write nothing."""

    async def strays(self) -> builtins.list[str]:
        """Keys of transcripts here that are no session (the files engine never shows them)."""

    # What another gateway on the same storage changed (the cluster calls these; alone, never).
    async def refresh_mirrors(self) -> None: ...
    async def grown(self, key: str) -> None: ...
    async def gone(self, key: str) -> None: ...


@dataclass(frozen=True)
class NoteCopy:
    """A whole note as one engine hands it to another (`jarvis migrate`): its versions, oldest first,
    the last what it holds now; `problem`: why it cannot be copied (a file that is not UTF-8 text)."""

    path: str
    versions: tuple[NoteVersion, ...]
    problem: str = ""


class NoteStore(NoteRecord, Protocol):
    """An agent's notes (memory/ports.py's NoteRecord), and whole notes in and out (`jarvis migrate`)."""

    async def copies(self) -> builtins.list[NoteCopy]:
        """Every note with its versions, by path."""

    async def import_copies(self, copies: Sequence[NoteCopy], dry_run: bool = False) -> builtins.list[Imported]:
        """Each note with its versions: ADDED; PRESENT with detail IDENTICAL_NOTE when it holds that
        text already, else PRESENT (another text is there: nothing written); REFUSED (this engine
        cannot hold it)."""


IDENTICAL_NOTE = "it holds that text already"


class RunLedger(Protocol):
    """Which runs are active and which idempotency keys were used, for one agent.

    seen(session, key)          the run a live idempotency key started, or None
    remember(session, key, run) record a key for `chat.idempotencyTtl` seconds
    claim(session, run)         None when the session is free (now held by `run`); else the holder's id
    release(session, run)       the run is over
    holder(session)             (runId, instanceId) of the session's active run anywhere, or None
    forget_session(session)     the session was deleted: its keys go (a new life starts with none)
    """

    shared: bool  # other gateways see these records: a release must reach them even as a run is torn down
    ttl: float

    async def seen(self, session: str, key: str) -> str | None: ...
    async def remember(self, session: str, key: str, run_id: str) -> None: ...
    async def claim(self, session: str, run_id: str) -> str | None: ...
    async def release(self, session: str, run_id: str) -> None: ...
    async def holder(self, session: str) -> tuple[str, str] | None: ...
    async def forget_session(self, session: str) -> None: ...


class KeyedStore(KeyedMemories, Protocol):
    """One agent's keyed memories: what the memory feature asks of them (memory/ports.py's KeyedMemories:
    find, get, set, delete, list, history, trash, untrash, purge, reconcile), and whole entries and
    copies (with their versions, and the trash) in and out for `jarvis migrate`, export and import."""

    # Whole entries in and out (`jarvis migrate`, `jarvis export` / `import jsonl`).
    async def entries(self) -> builtins.list[Entry]:
        """Every keyed memory (not the trash), whole."""

    async def import_entries(self, entries: Sequence[Entry], dry_run: bool = False) -> builtins.list[Imported]:
        """Add keyed memories exactly as given (category, value, created, updated) under keys that are
        free here; never replace or change one. `dry_run`: say what would happen, write nothing."""

    async def copies(self) -> builtins.list[KeyedCopy]:
        """Every keyed memory and everything in the trash, each with its versions."""

    async def import_copies(self, copies: Sequence[KeyedCopy], dry_run: bool = False) -> builtins.list[Imported]:
        """`import_entries` with the versions and the trash: each added exactly as given (a trashed one
        into the trash) under a key that is free here, live and in the trash."""


class PrincipalStore(Protocol):
    """The principals other than the owner (gateway/principals.py): one set per storage, shared by
    every gateway of a PostgreSQL database. Revoked ones are kept (listed as revoked) until their name is
    given to a new principal."""

    async def all(self) -> list[Principal]:
        """Every principal, revoked ones too. A stored record that is not one is left out and logged,
        saying where it is."""

    async def add(self, principal: Principal) -> None:
        """Store a new principal; Conflict when a live one has its name (a revoked one is replaced)."""

    async def revoke(self, name: str, when: str) -> Principal:
        """Mark `name` revoked at `when` (ISO 8601); NotFound when no live principal has that name."""

    async def touch(self, name: str, when: str) -> None:
        """Record when the principal's token was last used (best effort)."""

    async def version(self) -> str:
        """A value that changes whenever the set does (another process's or gateway's change too): the
        gateway polls it to follow revocations."""


class AuditLog(Protocol):
    """Every write and delete of memory and sessions and every principal change: who (principal), what
    (method), on what (`target`: a key, path, session or name — never a message body, a memory's value or
    a token), through which door, when. Append-only."""

    async def append(self, entry: dict[str, Any]) -> None:
        """Record one entry: {at, principal, method, door, agent?, target?, ok}."""

    async def read(
        self,
        since: str | None,
        principal: str | None,
        limit: int,
        agents: tuple[str, ...] | None = None,
        own: str | None = None,
    ) -> list[dict[str, Any]]:
        """Entries at or after `since` (ISO 8601), of `principal` when given, oldest first, the newest
        `limit` of them. `agents` given: only entries of those agents and (with `own`) that principal's
        own entries — what a principal of some agents may see (audit.list)."""


@dataclass(frozen=True)
class ResponseLimits:
    """What one principal may keep of /v1/responses (openaiApi.storedResponses, storedResponseBytes,
    storedResponseDays)."""

    count: int
    bytes: int
    keep_s: float

    @classmethod
    def of(cls, config: Any) -> "ResponseLimits":
        api = config.openai_api
        return cls(api.stored_responses, api.stored_response_bytes, api.stored_response_days * 86400.0)


class ResponseStore(Protocol):
    """The /v1/responses responses kept (`store` not false), each its agent's and its principal's: the
    response and all it was asked, read by GET /v1/responses/{id} and continued by previous_response_id
    through any gateway on the engine. Per principal at most `limits.count` of them and `limits.bytes`
    (their JSON), the oldest evicted first; each readable for `limits.keep_s` seconds, then purged."""

    limits: ResponseLimits

    async def put(self, agent_id: str, principal: str, response_id: str, record: dict[str, Any]) -> bool:
        """Keep `record` (JSON-able) under `response_id`, evicting the principal's oldest past the limits;
        False when it was not kept (bigger than `limits.bytes` alone, or the limits keep none)."""

    async def get(self, agent_id: str, principal: str, response_id: str) -> dict[str, Any] | None:
        """The record kept, None when there is none of this agent and principal, or it expired."""

    async def purge(self) -> int:
        """Remove the expired; how many went."""

    async def count_by_principal(self) -> dict[str, int]:
        """How many unexpired responses each principal (as `put` named it) has kept."""

    async def close(self) -> None: ...


class Storage(Protocol):
    """An engine: makes each agent's stores, and says what it is."""

    name: str  # "files" or "postgresql", as system.health reports it
    shared: bool  # several gateways may serve the same sessions (cluster.py)

    async def close(self) -> None: ...
    async def agents(self) -> list[str]:
        """Every agent this engine holds sessions of (`jarvis migrate`)."""

    async def schema(self, apply: bool) -> list[str]:
        """The schema migrations this engine's store lacks, applied when `apply` (those applied)."""

    async def has_agent(self, agent_id: str) -> bool:
        """The engine holds sessions of `agent_id` (beside its folder in the state dir)."""

    def sessions(self, agent_id: str) -> SessionStore: ...
    def ledger(self, agent_id: str) -> RunLedger: ...
    def keyed(self, agent_id: str) -> KeyedStore:
        """The agent's keyed memories: its memory service's, and what `jarvis migrate` copies."""

    def memory_index(self, agent_id: str) -> MemoryIndex:
        """The agent's memory index, not yet opened."""

    def notes(self, agent_id: str) -> NoteStore:
        """The agent's notes (MEMORY.md, LEARNINGS.md, memory/**/*.md): the folder, or rows it mirrors."""

    def principals(self) -> PrincipalStore:
        """Who may call the gateway besides its owner (gateway/principals.py)."""

    def audit(self) -> AuditLog:
        """The record of writes, deletes and principal changes."""

    def responses(self) -> ResponseStore:
        """The /v1/responses responses kept, shared by every gateway on the engine (one per engine)."""

    def status(self) -> dict[str, Any]:
        """system.health's `storage`."""

    def unreachable(self, exc: BaseException) -> Unavailable | None:
        """The error to answer when `exc` says the storage cannot be reached, else None."""
