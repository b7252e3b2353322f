"""What every storage engine provides: one Protocol per store, and the engine that makes them.

Two engines implement these (storage/files/, storage/postgres/); `open_storage(config)` (storage/__init__.py)
is the only place that chooses one. The rest of the gateway types against these Protocols only, and
tests/contract/ runs one suite per store against both engines.

Everything is async: a store that blocks (files) does its work in threads.
"""

from __future__ import annotations

import builtins  # `list` inside SessionStore and KeyedStore is their method: the type is builtins.list
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..errors import Unavailable
    from ..memory.embeddings.base import EmbeddingProvider
    from ..memory.index.indexer import SyncStats
    from ..memory.notes.keyed import Entry, KeyedCopy, Version
    from ..memory.search.snippets import Exclude
    from ..memory.sync import DirtyMarks, SyncRequest
    from ..principals import Principal

# The memory service, the gateway's Services and the Cluster sit above this layer (they use the stores);
# naming their classes here, even for type checkers only, would make an import cycle
# (tests/unit/test_import_cycles.py). The engines' own modules name them.
MemoryService = Any
Services = Any
Cluster = Any


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


class KeyedStore(Protocol):
    """One agent's keyed memories (memory.set/get/delete/list): small named facts, one per key across
    the categories (memory/notes/keyed.py has the rules and the file layout), with their versions and a
    trash.

    Every write of a value is a version (memory/notes/keyed.Version: value, category, when, the door it
    came through), numbered from 1 per key; a key keeps its last `memory.versions` of them. A delete moves
    the memory, versions and all, to the trash, from which `untrash` brings it back whole; only `purge`
    removes it (the gateway purges what was deleted `memory.trashDays` ago). Setting a key that is in
    the trash takes it out: its trashed value stays a version. `by`: the door a write came through.

    Errors: Invalid for a bad key, category or value, NotFound for a key that has no memory (and, for
    the trash, none there), Conflict for `untrash` of a key that is live."""

    async def find(self, key: str) -> Entry | None: ...
    async def get(self, key: str) -> Entry: ...
    async def set(
        self, key: str, value: str, category: str | None, by: str = "", principal: str | None = None
    ) -> tuple[Entry, bool, str | None]:
        """Create or replace: (the entry, whether it replaced one, the category it moved from if it did).
        The new version records `by` (the door) and `principal` (who)."""

    async def delete(self, key: str, by: str = "") -> Entry:
        """Move the memory to the trash; the entry as it was."""

    async def list(self, category: str | None, limit: int, offset: int) -> dict[str, Any]:
        """{"memories": [brief, …] newest first, "total": n}."""

    async def history(self, key: str) -> builtins.list[Version]:
        """The key's kept versions, newest first (the first is its value now, or when it was deleted),
        live or in the trash (what memory.history and an export read)."""

    async def trash(self) -> builtins.list[KeyedCopy]:
        """What is in the trash (each whole: entry, versions, when deleted and by which door), the most
        recently deleted first."""

    async def untrash(self, key: str) -> Entry:
        """Bring a trashed memory back whole: value, category, created and updated as they were."""

    async def purge(self, keys: Sequence[str] | None = None, before: str | None = None) -> builtins.list[str]:
        """Remove from the trash for good: `keys` (each must be there), or all; with `before`, only what
        was deleted before that time. The keys purged."""

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

    async def reconcile(self, key: str | None = None) -> int:
        """Bring the workspace files in line with the record before they are indexed (`key`: the one
        another gateway changed; None: all). The number of files changed (0 where the files are the record)."""


class EmbeddingCacheStore(Protocol):
    """Vectors by text hash for one (provider, model): what is never embedded twice."""

    async def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]: ...
    async def put_many(self, items: dict[str, np.ndarray]) -> None: ...


@dataclass
class IndexContext:
    """What the memory service hands its index at open."""

    provider: EmbeddingProvider
    provider_problem: str | None  # why the configured provider is not the one in use
    marks: DirtyMarks  # what the index lags behind the files: a rebuild or a set-aside marks everything
    hidden: set[str]  # deleted sessions that searches leave out until a sync drops their chunks
    resync: Callable[[str], None]  # ask for a forced sync of everything (the reason, for the log)


class MemoryIndex(Protocol):
    """One agent's memory index: the notes and transcripts as chunks with full text and vectors.

    The memory service (memory/service.py) sits above it: triggers, sync coalescing, search backends,
    re-ranking, status. The index does what depends on where it is kept: the writer (one sync request at
    a time, a rebuild when the settings changed, recovery from damage), the reader (candidates from full
    text and vectors, fused, as memory/search/searcher.py does on each engine), stored vectors for MMR,
    counts, the embedding cache.
    """

    backend: str  # the vectors: "sqlite-vec", "numpy", "pgvector" or "none" (set by open)
    shared: bool  # other processes write it too (PostgreSQL): `refresh` reads what they changed
    counts: dict[str, int]  # files, chunks, vectors, missing: as of the last sync or refresh
    last_sync_at: str | None
    corrupt_events: list[dict[str, str]]  # indexes set aside as damaged since open (memory.status)

    async def open(self, ctx: IndexContext) -> None:
        """Open the index (its schema migrated), check its settings' signature (a changed one marks
        everything dirty and sets `needs_rebuild`), read its counts."""

    async def close(self) -> None: ...

    @property
    def needs_rebuild(self) -> bool:
        """The settings changed: the next sync indexes everything anew (the old index answers meanwhile)."""

    @property
    def rebuilding(self) -> bool:
        """A rebuild or recovery is pending or under way (memory.status `rebuilding`)."""

    @property
    def degraded(self) -> str | None:
        """Why searches cannot reach the index now (it is being replaced after damage), else None."""

    @property
    def recovering(self) -> bool:
        """A damaged index is being rebuilt: searches answer from what is there, saying so."""

    async def sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        """Run one sync request (a rebuild instead when one is due): the writer, one at a time."""

    async def forget_session(self, session_key: str, busy: bool) -> bool:
        """Drop a deleted session's chunks now; False when that must wait for a sync (`busy`: one is
        running), which the caller then queues."""

    async def search(
        self,
        query: str,
        *,
        k: int,
        min_score: float,
        sources: tuple[str, ...],
        session_key: str | None,
        mode: str,
        exclude: Exclude | None = None,
        spare: int = 0,
    ) -> dict[str, Any]:
        """The built-in search backend's answer (memory.search's shape): the best k, plus up to `spare`
        more after them, ranked as for k (the memory service's room to fold repeats into one)."""

    async def stored_vectors(self, results: list[dict[str, Any]]) -> dict[int, np.ndarray] | None:
        """The results' stored vectors (index in `results` → vector) for MMR; None without vectors."""

    async def status_counts(self) -> tuple[dict[str, int], dict[str, int], int, int]:
        """Files and chunks by source, embedding cache entries, stored vector dims (0: none)."""

    def status(self) -> dict[str, Any]:
        """memory.status's engine-specific parts: `vector` (available, matrix, ann), `fts`, and an
        `error` when the vectors cannot be used."""

    def embedding_cache(self, provider: str, model: str, max_entries: int) -> EmbeddingCacheStore:
        """The cache, for vectors embedded outside a sync (images)."""

    async def warm(self) -> None:
        """Load what searches need ahead of the first one (the vector matrix, the ANN graph)."""

    async def refresh(self) -> None:
        """Bring `counts` up to date where another process may change the index."""


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

    async def read(self, since: str | None, principal: str | None, limit: int) -> list[dict[str, Any]]:
        """Entries at or after `since` (ISO 8601), of `principal` when given, oldest first, the newest
        `limit` of them."""


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

    def memory(self, agent_id: str) -> MemoryService:
        """The agent's memory service over `memory_index` and `keyed`, not yet opened."""

    def cluster(self, services: Services) -> Cluster | None:
        """What coordinates this gateway with the others on the same storage (None: alone)."""

    def principals(self) -> PrincipalStore:
        """Who may call the gateway besides its owner (gateway/principals.py)."""

    def audit(self) -> AuditLog:
        """The record of writes, deletes and principal changes."""

    def status(self) -> dict[str, Any]:
        """system.health's `storage`."""

    def unreachable(self, exc: BaseException) -> Unavailable | None:
        """The error to answer when `exc` says the storage cannot be reached, else None."""
