"""What memory asks of a storage engine: narrow ports, typed as Protocols, and the values they carry.

The memory feature thinks — change detection, chunking, embedding, batching, filling missing vectors,
fusion, snippets, re-ranking (memory/index/pipeline.py, memory/search/searcher.py) — and an engine only
stores: like basic-memory's vector index, a port never calls an embedding provider, it owns persistence
and lookup. Each engine implements them in its own package (storage/files/memory/, storage/postgres/memory/),
and tests/contract/test_index_store.py holds the contract once, on both.

    index side (a sync)   FileRows      what the index holds of each file: signatures, stats, removal
                          ChunkStore    chunk rows: read back by identity, written a batch at a time,
                                        their vectors (the missing ones, the unusable ones)
                          EmbeddingCacheStore   vectors by text hash: what is never embedded twice
                          LedgerStore   statements about the person (memory/ledger/), by file
                          IndexStore    the three together, and the sync's session (locks, bulk loads)
    search side           FullText      ranked chunk ids for query words (BM25 or its PostgreSQL twin)
                          VectorSearch  the nearest chunk ids to a query vector
                          ChunkReader   the rows of chunk ids (text, spans, date…), their stored vectors
                          SearchPorts   an engine's FullText and ChunkReader, as the searcher takes them
    the service           MemoryIndex   one agent's index as the memory service drives it (sync, search,
                                        counts, status), opened with an IndexContext
                          IndexEngine   what an engine's index gives the index lifecycle (memory/index/
                                        lifecycle.py: signature checks, rebuilds, the searcher)
    the notes feature     KeyedMemories the keyed memories (memory.set & co.), which a sync reconciles, and
                          NoteRecord    the notes with their versions: memory/notes/ports.py's, named here too

This module imports nothing from storage/ (tests/unit/test_layering.py holds memory to that): the
engines import the ports, never the other way round.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence

import orjson

from .notes.ports import KeyedMemories as KeyedMemories
from .notes.ports import NoteRecord as NoteRecord

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from .embeddings.base import EmbeddingProvider
    from .hit import Found, Hit
    from .index.chunking import Chunk
    from .index.settings import SyncStats
    from .index.sources import SourceFile
    from .search.request import SearchRequest
    from .sync import DirtyMarks, SyncRequest

ChunkKey = tuple[int, int, str]  # a chunk's identity within its file: (start line, end line, hash)
FileStat = tuple[int, int, str]  # a file as indexed: (size, mtime_ns, content hash)
Scope = bool | set[str]  # the transcripts a sync covers: all (True), these session keys, or none (False)


class Indexed(NamedTuple):
    """What the index holds of the files a sync covers."""

    signatures: set[str]  # `sources.signature` of each file (not of a memory file over maxFileBytes)
    sources: set[str]  # the sources with files
    files: int  # how many
    total: int | None  # where that is not the whole index: at least as much of its file count as the
    # removal guard needs (None: these are all of its files)


class NewChunk(NamedTuple):
    file: SourceFile
    chunk: Chunk
    vector: np.ndarray | None  # None: stored without one (`embedded` false), filled by a later sync

    def columns(self, text: Callable[[str], str] | None = None) -> tuple[Any, ...]:
        """Its row as every engine stores it: path, source, session_key, start_line, end_line, hash, text,
        spans (JSON), context, date (`text`: what the engine's text columns need done to a string). A
        sync's writer calls this for every chunk with other threads chunking and embedding beside it,
        so it stays a few bytecodes (issue 46)."""
        sf, c = self.file, self.chunk
        return (
            sf.path,
            sf.source,
            sf.session_key,
            c.start_line,
            c.end_line,
            c.hash,
            c.text if text is None else text(c.text),
            orjson.dumps(c.spans).decode() if c.spans else None,
            c.context if text is None else text(c.context),
            c.date,
        )

    @classmethod
    def of(cls, file: SourceFile, chunks: Iterable[Chunk], vectors: Mapping[str, np.ndarray]) -> list[NewChunk]:
        """New chunks of one file, each with its vector from `vectors` (by text hash) where there is one:
        made in C (`tuple.__new__`, not the NamedTuple's Python `__new__`), as a sync makes one a chunk."""
        make, get = tuple.__new__, vectors.get
        return [make(cls, (file, c, get(c.text_hash))) for c in chunks]


@dataclass
class WriteBatch:
    """One batch of a sync, as the pipeline planned it against what the index held: written in one
    transaction by `ChunkStore.write`."""

    now: str  # indexed_at of the files written
    touched: list[SourceFile] = field(default_factory=list)  # content unchanged: only size and mtime move
    stale: list[int] = field(default_factory=list)  # chunk ids no longer wanted (with their vectors)
    chunks: list[NewChunk] = field(default_factory=list)  # new chunks, in order
    files: list[tuple[SourceFile, str, int]] = field(default_factory=list)  # (file, content hash, chunks)
    fresh: dict[str, np.ndarray] = field(default_factory=dict)  # new vectors by text hash, for the cache


class Unembedded(NamedTuple):
    """A chunk stored without a vector."""

    id: int
    source: str
    session_key: str | None
    text: str


class VectorRow(NamedTuple):
    id: int
    source: str
    session_key: str | None
    vector: np.ndarray


class Statement(NamedTuple):
    """One statement about the person, as the ledger keeps it (memory/ledger/): `subject` ("home",
    "code:shed", …) given `value` when it was said, with its evidence. A later statement of the same
    subject supersedes it; an `ending` ("we broke up") closes the subject. Derived from the sources,
    like the chunks: a sync writes a file's statements anew whenever it indexes the file."""

    subject: str
    value: str
    said: str  # ISO 8601 UTC: when it was said (the chunk's date, or the file's)
    path: str
    start_line: int
    end_line: int
    text: str  # the message or line it was said in (the evidence), as a snippet shows it
    source: str = "extractor"  # extractor | model | correction
    ending: bool = False


class ChunkRow(NamedTuple):
    """A chunk as a search shows it."""

    id: int
    path: str
    source: str
    session_key: str | None
    start_line: int
    end_line: int
    text: str
    spans: str | None  # JSON of the chunk's message spans (transcripts)
    context: str
    date: str | None
    mtime_ns: int | None  # its file's modification time where the chunk has no date (the hit's date then); else None


# ---- the index side ------------------------------------------------------------------------------------
class FileRows(Protocol):
    """What the index holds of each file: one row (path, source, session key, size, mtime, hash)."""

    # A transcript file that is gone means its session is gone (False where the sessions are rows of
    # their own and the files only a mirror, which may lag: `confirm_gone` decides).
    transcripts_are_sessions: bool
    # The memory files are indexed by name (sources.Scan `by_name`: each name of a hard link, no symlinked
    # file) where the index is shared by gateways of their own folders, each a mirror of the notes by name:
    # a link on one machine then changes no other's search. Else one file reached twice is indexed once.
    notes_by_name: bool

    async def indexed(self, memory: bool, sessions: Scope, max_file_bytes: int) -> Indexed:
        """The signatures of the files a sync covers (`sources.SIGNATURE_SQL`; none for a memory file over
        `max_file_bytes`), their sources and count."""

    async def rows_of(self, paths: list[str]) -> dict[str, FileStat]:
        """The stored size, mtime and content hash of each of these files that is indexed."""

    async def paths_in_scope(self, memory: bool, sessions: Scope) -> set[str]:
        """Every indexed path a sync covers (asked only when some of them may be gone)."""

    async def confirm_gone(self, paths: list[str]) -> list[str]:
        """Of the indexed files a scan did not find, those whose chunks go."""

    async def ready(self, files: list[SourceFile]) -> list[SourceFile]:
        """Of the files to read, those that can be read now (a mirror behind its session waits)."""

    async def remove(self, paths: list[str]) -> int:
        """Drop these files' rows and chunks; how many files were indexed."""


class ChunkStore(Protocol):
    """The chunk rows of the index, and their vectors."""

    async def stored(self, paths: list[str]) -> dict[str, set[ChunkKey]]:
        """The identities of the chunks stored for these files (read beside a batch being written)."""

    async def write(self, paths: list[str], plan: Callable[[dict[str, dict[ChunkKey, int]]], WriteBatch]) -> None:
        """One transaction: read the chunks stored for `paths` (identity → id), as they are inside it (another
        writer may have stored some since they were read), and write what `plan` makes of them."""

    async def ready_vectors(self, dims: int) -> None:
        """Make room for vectors of `dims` dimensions; EmbeddingError (not retryable) when the index
        holds vectors of another size and must be rebuilt."""

    async def unembedded(self, after: int, limit: int) -> list[Unembedded]:
        """Chunks stored without a vector, by id, `limit` of them from after id `after`."""

    async def add_vectors(self, rows: list[VectorRow]) -> int:
        """Store the vectors of chunks that are still there and still without one; how many were."""

    async def count_unembedded(self) -> int: ...

    async def drop_unusable(self) -> int:
        """Drop the cached and stored vectors that are NaN or all zeros (stored before providers'
        answers were checked), so that their chunks are embedded again; how many stored ones went."""


class EmbeddingCacheStore(Protocol):
    """Vectors by text hash for one (provider, model): what is never embedded twice."""

    async def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]: ...
    async def put_many(self, items: dict[str, np.ndarray]) -> None: ...


class LedgerStore(Protocol):
    """The ledger of statements about the person (memory/ledger/), kept beside the chunks of the files
    they were said in: written a file at a time as a sync indexes it, read back whole or by subject.
    Only statements of files the index holds are read (a file removed, or an index reset, leaves none)."""

    async def replace(self, paths: list[str], statements: list[Statement]) -> None:
        """The statements of these files are now `statements` (each of them of one of `paths`; a path
        with none left loses all of its)."""

    async def statements(self, subjects: Sequence[str] | None = None) -> list[Statement]:
        """The statements of these subjects (None: all), oldest first."""


class IndexStore(Protocol):
    """An engine's index as one sync writes it."""

    @property
    def files(self) -> FileRows: ...
    @property
    def chunks(self) -> ChunkStore: ...
    @property
    def cache(self) -> EmbeddingCacheStore: ...
    @property
    def ledger(self) -> LedgerStore: ...

    def syncing(self) -> AbstractAsyncContextManager[None]:
        """Around a whole sync: what keeps other writers out (PostgreSQL: the agent's lock)."""

    def loading(self, files: int) -> AbstractAsyncContextManager[None]:
        """Around the batches of a sync that reads `files` files (a reader beside the writer; a bulk load's
        index built once at its end)."""

    async def finish(self, stats: SyncStats) -> None:
        """After a sync: its time, the index generation when it changed, the cache pruned, upkeep."""


# ---- the search side -----------------------------------------------------------------------------------
class FullText(Protocol):
    async def search(
        self,
        terms: Sequence[str],
        n: int,
        sources: tuple[str, ...],
        session_key: str | None,
        *,
        generation: str | None,
        total: int,
        extra: bool = False,
    ) -> list[tuple[int, float]]:
        """The best `n` chunk ids for these words, as (id, rank) with lower ranks better (BM25's sign),
        among `sources` (and of transcripts only `session_key`'s, when given). `total`: the chunks in the
        index, `generation`: its generation (what an engine may cache word counts by). `extra`: the words
        are a query's related words: on a big index only those within pruning.EXTRA_BUDGET are searched
        (rarest first; none when even the rarest is over it)."""


class VectorSearch(Protocol):
    # Chunk ids whose stored vector is NaN or zero, passed over by the latest search (said in `degraded`).
    unusable: set[int]

    async def knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, generation: str, count: int
    ) -> list[tuple[int, float]]:
        """The `n` nearest chunks as (id, cosine similarity), best first."""


class ChunkReader(Protocol):
    async def chunk_rows(self, ids: list[int]) -> list[ChunkRow]:
        """The rows of these ids that are still there, in any order."""

    async def vectors_at(
        self, keys: list[tuple[str, int, int]], ids: Mapping[tuple[str, int, int], int] | None = None
    ) -> dict[tuple[str, int, int], np.ndarray]:
        """The stored vectors of the chunks at these (path, start line, end line). `ids`: each key's chunk
        id as a search found it (every key's): looked up by id, kept where the chunk is still at its key."""

    async def vectors_of(self, ids: list[int], read: bool = True) -> dict[int, np.ndarray]:
        """The stored vectors of these chunk ids (those that have one), by id. `read` False: only those
        in hand (the last `chunk_rows` came with), without reading."""


# ---- the service's view of an index -----------------------------------------------------------------------
@dataclass(frozen=True)
class SearchPorts:
    """What an engine gives the one searcher: its full text and chunk rows."""

    text: FullText
    rows: ChunkReader


class IndexEngine(Protocol):
    """What an engine's index gives the index lifecycle (memory/index/lifecycle.py), which it holds and
    which decides the rest: the signature check, when a rebuild runs instead of the sync asked, when
    vectors are bound, the searcher."""

    backend: str  # where its vectors are kept ("sqlite-vec", "numpy", "pgvector"; "none"), set by open
    counts: dict[str, int]  # files, chunks, vectors, missing: as of the last sync or refresh

    def backend_problem(self) -> str | None:
        """Why the engine keeps no vectors when it could not (PostgreSQL without pgvector), else None."""

    async def stored_vector_layout(self) -> tuple[str, int] | None:
        """The backend that stored the vectors and their dims; None: none stored yet."""

    async def bind_vectors(self, dims: int) -> VectorSearch:
        """Vector search over the stored vectors (they fit the provider)."""

    def search_ports(self, vectors: VectorSearch | None) -> SearchPorts:
        """The full text and chunk rows of the index as it is now."""

    async def run_sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        """The pipeline's sync of what is asked, in the engine's write turn."""

    async def run_rebuild(self, progress: Any) -> SyncStats:
        """Everything indexed anew under the current settings, the engine's way."""

    async def refresh_counts(self, delta: dict[str, int] | None = None) -> None:
        """Read the counts again; `delta` (files, chunks, missing) is what the sync just done changed,
        for an engine that may add it instead of counting everything."""

    def reading(self) -> AbstractAsyncContextManager[str]:
        """What a search holds while it reads the index; it gives the index's generation."""


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
    a time, a rebuild when the settings changed, recovery from damage), the reader (memory/search/searcher.py
    over the engine's FullText, VectorSearch and ChunkReader), stored vectors for MMR, counts, the cache.
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

    async def search(self, req: SearchRequest) -> Found:
        """The built-in search backend's answer (memory/hit.py's Found): the best k, plus up to `spare`
        more after them, ranked as for k (the memory service's room to fold repeats into one)."""

    async def stored_vectors(
        self, results: list[Hit], ids: Mapping[tuple[str, int, int], int] | None = None
    ) -> dict[int, np.ndarray] | None:
        """The results' stored vectors (index in `results` → vector) for MMR and the timeline; None without
        vectors. `ids`: chunk ids by hit key (Found.ids), read by id when every result's is there."""

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

    async def statements(self, subjects: Sequence[str] | None = None) -> list[Statement]:
        """The ledger's statements (of these subjects; None: all), oldest first, as the index holds them
        now ([] while it cannot be read)."""

    async def generation(self) -> str | None:
        """A token of what the index holds now, moved by every change to it (chunks, files, statements;
        on a shared engine another process's too): an equal token read earlier means nothing changed
        since. None while it cannot be read (keep nothing by it)."""
