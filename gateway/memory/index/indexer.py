"""Incremental sync of memory files and transcripts into one index database.

For each source file: unchanged size and mtime → skip; else read and hash it; unchanged hash → only the
stat is updated; else chunk it and diff the chunks against the stored ones (same lines and hash → kept
as is). New chunks take their vectors from the embedding cache or the provider, in batches, before the
write transaction (so the write lock is never held while embedding). Files that vanished lose their
chunks. If the provider fails, chunks are stored anyway (full-text search works) with `embedded = 0`,
and every later sync first retries those. Blocking work (stat, read, chunk) runs in a thread, SQLite
work on the aiosqlite thread, embedding in the provider's thread: the event loop never waits on them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import errno
import multiprocessing
import multiprocessing.connection
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, NamedTuple

import numpy as np
import orjson
import structlog

from ...timeutil import now_iso
from .chunking import Chunk, chunk_markdown, chunk_transcript, note_date, sha256
from .db import Database
from ..embeddings import EmbeddingError, EmbeddingProvider
from ..embeddings.base import check_vectors, provider_name, usable
from ..embeddings.cache import EmbeddingCache
from ...storage.files.migrations import delete_chunks, ensure_vector_table, get_meta, set_meta, vector_table
from .sources import (
    MEMORY,
    SESSIONS,
    SIGNATURE_SQL,
    Scan,
    ScanError,
    SourceFile,
    folder_empty,
    session_path,
)
from .ann import AnnIndex
from .vectors import VectorStore

if TYPE_CHECKING:  # pragma: no cover
    from ...config import MemoryConfig

log = structlog.get_logger("gateway.memory")

Progress = Callable[[int, int], None]
BATCH_CHUNKS = 2048
BATCH_FILES = 512
# A sync of this many files or more reads, chunks and embeds in worker processes (when it may): below it,
# starting them (~1 s: Python, numpy, the model) costs more than they save.
PROCESS_MIN_FILES = 2 * BATCH_FILES


@dataclass(frozen=True)
class IndexSettings:
    """What the indexer needs, built from the config (`memory.chunking.*`, …) by `from_config`: no
    defaults of its own, so the config is the one place a default lives."""

    workspace: Path
    sessions_dir: Path
    tokens: int
    overlap: int
    session_tokens: int
    session_overlap: int
    session_context: int
    vector_backend: str  # "sqlite-vec", "numpy" or "none": the one the manager picked
    cache_max_entries: int
    processes: int  # worker processes for a large sync (`memory.sync.processes`, resolved: 0 = none)
    recheck_s: float  # the pause before a sync that would remove most of the index looks again
    max_file_bytes: int  # a memory file larger than this is skipped (`memory.maxFileBytes`)
    redact: bool  # secrets in transcript messages are masked before they are chunks (`memory.redactSecrets`)

    @classmethod
    def from_config(
        cls, m: "MemoryConfig", workspace: Path, sessions_dir: Path, vector_backend: str
    ) -> "IndexSettings":
        c = m.chunking
        return cls(
            workspace=workspace,
            sessions_dir=sessions_dir,
            tokens=c.tokens,
            overlap=c.overlap,
            session_tokens=c.session_tokens,
            session_overlap=c.session_overlap,
            session_context=c.session_context,
            vector_backend=vector_backend,
            cache_max_entries=m.embeddings.cache_max_entries,
            processes=resolve_processes(m.sync.processes),
            recheck_s=m.sync.recheck_ms / 1000.0,
            max_file_bytes=m.max_file_bytes,
            redact=m.redact_secrets,
        )


def resolve_processes(setting: int) -> int:
    """`memory.sync.processes`: -1 → one per core but one (this process writes), at most 4; none below
    4 cores, where one worker and this process share the CPU no better than threads do (measured on 2
    cores: 7.1k chunks/s with one worker, 7.3–8.1k without). Four: one worker prepares ~9.5k chunks/s
    (~105 µs a chunk), the one writer takes ~12–20k/s, and each worker holds ~280 MB (the model)."""
    if setting >= 0:
        return setting
    cores = usable_cores()
    return min(4, cores - 1) if cores >= 4 else 0


TRIM_AFTER_BYTES = 8 << 20


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc; elsewhere nothing). After a sync that read
    a big file, or removed one, what its texts and chunks took stays in malloc's arenas otherwise:
    indexing a 50 MB note and deleting it left RSS 235 MB above where it began; trimmed, 95 MB."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, cut to a cgroup v2 CPU quota (a container
    limited to 2 CPUs on a 32-core host has 2)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


@dataclass
class SyncStats:
    indexed: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks_embedded: int = 0
    cache_hits: int = 0
    duration_ms: int = 0
    missing_vectors: int = 0
    embed_error: str | None = None
    retry_after: float | None = None
    changed: bool = False
    # Memory files left out for their size, by path: their bytes (None: the memory files were not scanned).
    skipped: dict[str, int] | None = None
    bytes_read: int = 0  # of the files read (new or changed)
    compare_ms: int = 0  # of duration_ms: finding what changed (the scan and the index's signatures, at once)
    scan_ms: int = 0  # of compare_ms: the scan of the files on disk

    def result(self) -> dict:
        return {
            "indexed": self.indexed,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "chunksEmbedded": self.chunks_embedded,
            "cacheHits": self.cache_hits,
            "durationMs": self.duration_ms,
        }

    def merge(self, other: "SyncStats") -> None:
        for f in ("indexed", "removed", "unchanged", "chunks_embedded", "cache_hits"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.changed = self.changed or other.changed
        self.embed_error = other.embed_error or self.embed_error


# The files table is read for a sync's comparison this many rowids at a time (`_in_scope`).
_WINDOW = 1 << 17


class Indexed(NamedTuple):
    """What the index holds of the files a sync covers."""

    signatures: set[str]  # `sources.signature` of each file (not of a memory file over maxFileBytes)
    sources: set[str]  # the sources with files
    count: int  # the files
    total: int | None  # where that is not the whole index: at least as much of its file count as the
    # removal guard needs (None: these are all of its files)


@dataclass
class _Work:
    sf: SourceFile
    file_hash: str
    chunks: list[Chunk] | None  # None: content unchanged, only the stat moved


def _read_and_chunk(
    files: list[SourceFile], known: dict[str, tuple[int, int, str]], force: bool, s: IndexSettings
) -> list[_Work]:
    """Blocking: hash each file, chunk those whose content changed (or all when forced)."""
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
            out.append(_Work(sf, h, None))
            continue
        if sf.source == MEMORY:
            text = data.decode("utf-8", errors="replace")
            chunks = chunk_markdown(text, s.tokens, s.overlap, note_date(sf.path, text))
        else:
            chunks = chunk_transcript(
                sf.abs, s.session_tokens, s.tokens, s.session_overlap, s.session_context, data, s.redact
            )
        out.append(_Work(sf, h, chunks))
    return out


# A worker found dead this long while its batch is still pending: the pool is taken for broken (_watched).
WORKER_DEAD_GRACE_S = 2.0


async def _watched(pool: ProcessPoolExecutor, fut: asyncio.Future) -> Any:
    """The result of a worker's future. A worker killed while it was writing its result leaves half a
    message in the result pipe, and CPython's pool then waits for the rest forever (its manager thread
    blocks in recv; the batch never ends, nor does the sync, nor the process's exit). So: a worker seen
    dead for WORKER_DEAD_GRACE_S while the future is still pending breaks the pool here — every worker
    killed and the parent's end of the result pipe closed, so the read ends (EOFError) and the pool fails
    its futures with BrokenProcessPool, which the caller turns into threads."""
    dead_since: float | None = None
    try:
        while True:
            done, _ = await asyncio.wait({fut}, timeout=WORKER_DEAD_GRACE_S / 4)
            if done:
                return fut.result()
            procs = _workers_of(pool)
            if not _any_dead(procs):
                dead_since = None
                continue
            now = time.monotonic()
            dead_since = dead_since or now
            if now - dead_since >= WORKER_DEAD_GRACE_S:
                log.warning("memory_sync_worker_pool_stuck", note="a worker died mid-result; the pool is broken here")
                for p in procs:
                    with contextlib.suppress(Exception):
                        p.kill()
                with contextlib.suppress(Exception):
                    pool._result_queue._writer.close()  # type: ignore[attr-defined]
                dead_since = now
    except asyncio.CancelledError:
        fut.cancel()
        raise


def _any_dead(procs: list) -> bool:
    """Whether one of these processes has ended (its sentinel is ready; nothing is reaped here)."""
    try:
        return bool(multiprocessing.connection.wait([p.sentinel for p in procs], timeout=0))
    except (OSError, ValueError):  # a sentinel closed meanwhile: the pool itself saw to that process
        return False


def _workers_of(pool: ProcessPoolExecutor) -> list:
    """The pool's worker processes (a private attribute of CPython's pool; none known: an empty list)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def read_capped(sf: SourceFile, cap: int) -> bytes | None:
    """The file's bytes; None for a memory file over `cap` bytes (at most cap + 1 bytes are read: a file
    that grew since the scan never loads whole). Transcripts are not capped."""
    if sf.source != MEMORY:
        return sf.abs.read_bytes()
    with open(sf.abs_path, "rb") as fh:
        data = fh.read(cap + 1)
    return None if len(data) > cap else data


def _new_texts(changed: list[_Work], stored: dict[str, set[tuple[int, int, str]]]) -> dict[str, str]:
    """Text hash → text of the chunks of `changed` files that are not stored already (same lines and
    hash keep their row and vector)."""
    need: dict[str, str] = {}
    for w in changed:
        keep = stored.get(w.sf.path, set())
        for c in w.chunks or ():
            if (c.start_line, c.end_line, c.hash) not in keep:
                need.setdefault(c.text_hash, c.text)
    return need


_worker_provider: EmbeddingProvider | None = None


def _worker_start(provider_type: type[EmbeddingProvider] | None) -> None:
    """A worker process's start: make (and warm) its own copy of the portable provider."""
    global _worker_provider
    if provider_type is not None:
        _worker_provider = provider_type()
        with contextlib.suppress(EmbeddingError):
            _worker_provider.embed_sync(["warm"])


def _prepare_in_worker(
    batch: list[SourceFile],
    known: dict[str, tuple[int, int, str]],
    stored: dict[str, set[tuple[int, int, str]]],
    force: bool,
    s: IndexSettings,
    embed: bool,
) -> tuple[list[_Work], list[str], np.ndarray | None, EmbeddingError | None]:
    """In a worker process: read, hash and chunk a batch, and embed what is new. Returns the works, the
    text hashes embedded, their vectors (one row each) and the provider's error, if it failed."""
    works = _read_and_chunk(batch, known, force, s)
    need = _new_texts([w for w in works if w.chunks is not None], stored) if embed else {}
    if not need or _worker_provider is None:
        return works, [], None, None
    try:
        return works, list(need), _worker_provider.embed_sync(list(need.values())), None
    except EmbeddingError as exc:
        return works, [], None, EmbeddingError(str(exc), exc.retryable, exc.retry_after)


def chunk_diff(current: dict[tuple[int, int, str], int], chunks: list[Chunk]) -> tuple[list[int], list[Chunk]]:
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


class Indexer:
    # A transcript file that is gone means its session is gone. (Not so on PostgreSQL, where the session
    # table says so and the files are one gateway's mirror, which may lag or be missing.)
    transcripts_are_sessions = True

    def __init__(self, db: Database, provider: EmbeddingProvider, settings: IndexSettings):
        self.db, self.provider, self.s = db, provider, settings
        self.cache = EmbeddingCache(db, provider.name, provider.model, settings.cache_max_entries, provider.cached)
        self.vectors: VectorStore | None = None
        self.ann: AnnIndex | None = None  # the search side's graph, which this index's writes keep up to date
        self._workers_died = False  # this sync's worker processes died: it prepares in threads

    # ---- vectors -----------------------------------------------------------------------------------
    @property
    def embeds(self) -> bool:
        return self.provider.enabled and self.s.vector_backend != "none"

    async def _vector_store(self, dims: int) -> VectorStore:
        if self.vectors is None or self.vectors.dims != dims:
            existing = await vector_table(self.db)
            if existing is None:
                await ensure_vector_table(self.db, self.s.vector_backend, dims)
            elif existing != (self.s.vector_backend, dims):
                raise EmbeddingError(
                    f"the index holds {existing[1]}-d vectors but the provider gives {dims}-d; "
                    "the index must be rebuilt",
                    retryable=False,
                )
            self.vectors = VectorStore(self.db, self.s.vector_backend, dims, ann=self.ann)
        return self.vectors

    async def _embed(
        self,
        texts_by_hash: dict[str, str],
        stats: SyncStats,
        rdb: Database | None = None,
        fresh_out: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Vectors for these texts: cache first, then the provider. Raises EmbeddingError.
        With `fresh_out`, new vectors are collected there for the caller to cache (in its transaction)."""
        vecs = await self.cache.get_many(list(texts_by_hash), rdb)
        stats.cache_hits += len(vecs)
        todo = [h for h in texts_by_hash if h not in vecs]
        step = max(1, self.provider.max_batch) * (8 if not self.provider.remote else 1)
        for i in range(0, len(todo), step):
            part = todo[i : i + step]
            # Checked here for every provider (a third-party one too): nothing unusable is cached or stored.
            out = check_vectors(
                await self.provider.embed([texts_by_hash[h] for h in part]), provider_name(self.provider), len(part)
            )
            fresh = {h: out[j] for j, h in enumerate(part)}
            if fresh_out is not None:
                fresh_out.update(fresh)
            else:
                await self.cache.put_many(fresh)
            vecs.update(fresh)
            stats.chunks_embedded += len(part)
        return vecs

    # ---- sync ------------------------------------------------------------------------------------------
    async def sync(
        self,
        *,
        force: bool = False,
        memory: bool = True,
        sessions: bool | set[str] = True,
        progress: Progress | None = None,
    ) -> SyncStats:
        """One pass. `sessions`: True for all transcripts, a set of session keys, or False."""
        t0 = time.perf_counter()
        stats = SyncStats()
        known, gone, todo = await self.compare(self.db, memory, sessions, force, stats)
        if gone:
            async with self.db.transaction():
                await delete_chunks(self.db, "path", gone)
                for path in gone:
                    await self.db.execute("DELETE FROM files WHERE path = ?", (path,))
            stats.removed = len(gone)
            stats.changed = True

        total, done = len(todo), 0
        if progress and total:
            progress(0, total)
        # Preparing reads through its own connection: the writer's thread is busy with the previous batch.
        rdb = await Database(self.db.path, self.db.driver, use_vec=False).open() if total > BATCH_FILES else None
        try:
            async with contextlib.aclosing(self._prepared(todo, known, force, stats, rdb)) as prepared:
                async for n, works, vecs, fresh in prepared:
                    await self._write_batch(works, vecs, stats, fresh)
                    done += n
                    if progress:
                        progress(done, total)
        finally:
            if rdb is not None:
                await rdb.close()

        if force and self.embeds:
            await self._drop_unusable_vectors(stats)
        if self.embeds and stats.embed_error is None:
            await self.fill_missing(stats)
        stats.missing_vectors = (
            int(await self.db.scalar("SELECT count(*) FROM chunks WHERE embedded = 0", default=0)) if self.embeds else 0
        )
        async with self.db.transaction():
            if stats.changed:
                gen = int(await get_meta(self.db, "generation", "0") or 0) + 1
                await set_meta(self.db, "generation", str(gen))
                if self.ann is not None:
                    self.ann.written(str(gen - 1), str(gen))
            await set_meta(self.db, "last_sync_at", now_iso())
            await self.cache.prune()
        stats.duration_ms = int((time.perf_counter() - t0) * 1000)
        return stats

    # ---- what changed ---------------------------------------------------------------------------------
    async def compare(
        self, db: Any, memory: bool, sessions: bool | set[str], force: bool, stats: SyncStats
    ) -> tuple[dict[str, tuple[int, int, str]], list[str], list[SourceFile]]:
        """The files on disk against those indexed, for the sources a sync covers: (the stored size,
        mtime and content hash of each file to read that is indexed, the paths in scope that are gone,
        the files to read). The index gives the signatures of its files (`indexed`), the scan keeps only
        the files whose signature is not among them (in a thread: at 460k files the scan is the sync), and
        only those are looked up again. What is gone is worked out only when the files found do not add
        up to the files indexed (`_gone`)."""
        t0 = time.perf_counter()
        only = sessions if isinstance(sessions, set) else None

        def scan_timed() -> Scan:
            t = time.perf_counter()
            scan = self._scan(memory, sessions, only)
            stats.scan_ms = int((time.perf_counter() - t) * 1000)
            return scan

        # The scan (a thread) and the index's signatures (SQLite's thread) at once.
        scanning = asyncio.ensure_future(asyncio.to_thread(scan_timed))
        try:
            indexed = await self._indexed(db, memory, sessions)
        except BaseException:
            with contextlib.suppress(BaseException):
                await scanning
            raise
        scan = await scanning
        # The sources of which files in scope are indexed (transcripts count only where they are sessions).
        roots = {src for src in indexed.sources if src == MEMORY or self.transcripts_are_sessions}
        scan.check(roots)

        async def looked_at(scan: Scan) -> tuple[list[SourceFile], dict[str, tuple[int, int, str]]]:
            """The files of the scan the index does not know as they are, and their rows (if indexed)."""
            files = await asyncio.to_thread(scan.files, None if force else indexed.signatures)
            return files, (await self._rows_of(db, [sf.path for sf in files]) if indexed.count else {})

        files, known = await looked_at(scan)
        gone: set[str] = set()
        if len(scan.signatures) - len(files) + len(known) != indexed.count:  # some indexed file not found
            in_scope = await self._paths_in_scope(db, memory, sessions)
            again, gone = await asyncio.to_thread(
                self._gone, scan, in_scope, indexed.total, memory, sessions, only, roots
            )
            if again is not scan:
                scan = again
                files, known = await looked_at(scan)
        unchanged = len(scan.signatures) - len(files)
        if memory:
            cap = self.s.max_file_bytes
            stats.skipped = {sf.path: sf.size for sf in files if sf.source == MEMORY and sf.size > cap}
            if stats.skipped:
                files = [sf for sf in files if sf.path not in stats.skipped]
                gone |= stats.skipped.keys() & known.keys()  # indexed while smaller: its chunks go
        stats.unchanged += unchanged
        stats.bytes_read += sum(sf.size for sf in files)
        stats.compare_ms = int((time.perf_counter() - t0) * 1000)
        return known, sorted(gone), files

    async def _in_scope(
        self, db: Database, memory: bool, sessions: bool | set[str], columns: str, args: list[Any]
    ) -> list[tuple]:
        """`SELECT columns` (aggregates; `args` their parameters) over the files a sync covers: whole
        sources a window of rowids at a time (a range of the table's own order: no sort, and one joined
        string stays far below SQLite's 1 GB length limit however many files there are), a set of
        sessions at once."""
        out: list[tuple] = []
        sources = [src for src, on in ((MEMORY, memory), (SESSIONS, sessions is True)) if on]
        if sources:
            lo, hi = await db.fetchone("SELECT min(rowid), max(rowid) FROM files") or (None, None)
            one = [] if len(sources) == 2 else sources
            for start in range(lo, hi + 1, _WINDOW) if lo is not None else ():
                out += await db.fetchall(
                    f"SELECT {columns} FROM files WHERE rowid >= ? AND rowid < ?{' AND source = ?' if one else ''}",
                    [*args, start, start + _WINDOW, *one],
                )
        if sessions is not True and sessions:
            keys = orjson.dumps([session_path(k) for k in sorted(sessions)]).decode()
            out += await db.fetchall(
                f"SELECT {columns} FROM (SELECT f.* FROM json_each(?) AS j CROSS JOIN files AS f ON f.path = j.value)",
                [*args, keys],
            )
        return out

    async def _indexed(self, db: Database, memory: bool, sessions: bool | set[str]) -> Indexed:
        """The signatures (`sources.signature`) of the indexed files this sync covers, joined by SQLite:
        a no-op sync of 460k files read 460k rows (0.38 s), now 4 strings (0.13 s). A memory file over
        `maxFileBytes` (lowered since it was indexed) has none: the scan hands it on, and it is skipped
        and its chunks removed."""
        sig = f"group_concat(CASE WHEN source != '{MEMORY}' OR size <= ? THEN {SIGNATURE_SQL} END, char(0))"
        signatures: set[str] = set()
        count = notes = 0
        for n, m, blob in await self._in_scope(
            db, memory, sessions, f"count(*), sum(source = '{MEMORY}'), {sig}", [self.s.max_file_bytes]
        ):
            signatures.update(blob.split("\0") if blob else ())
            count, notes = count + n, notes + (m or 0)
        sources = {src for src, n in ((MEMORY, notes), (SESSIONS, count - notes)) if n}
        total = None
        if not (memory and sessions is True):
            # The guard (more than half of the index removed) compares 2 × the files gone in scope with
            # the index's file count: counting up to 2 × the files in scope + 1 decides it as the full
            # count would.
            total = int(
                await db.scalar("SELECT count(*) FROM (SELECT 1 FROM files LIMIT ?)", (2 * count + 1,), default=0)
            )
        return Indexed(signatures, sources, count, total)

    async def _rows_of(self, db: Database, paths: list[str]) -> dict[str, tuple[int, int, str]]:
        """The stored size, mtime and content hash of each of these files that is indexed."""
        out: dict[str, tuple[int, int, str]] = {}
        for i in range(0, len(paths), 50_000):
            for path, size, mtime, h in await db.fetchall(
                "SELECT f.path, f.size, f.mtime_ns, f.hash FROM json_each(?) AS j "
                "CROSS JOIN files AS f ON f.path = j.value",
                [orjson.dumps(paths[i : i + 50_000]).decode()],
            ):
                out[path] = (size, mtime, h)
        return out

    async def _paths_in_scope(self, db: Database, memory: bool, sessions: bool | set[str]) -> set[str]:
        """Every indexed path this sync covers (read only when some of them may be gone)."""
        out: set[str] = set()
        for (blob,) in await self._in_scope(db, memory, sessions, "group_concat(path, char(0))", []):
            out.update(blob.split("\0") if blob else ())
        return out

    def _gone(
        self,
        scan: Scan,
        in_scope: set[str],
        indexed_total: int | None,
        memory: bool,
        sessions: bool | set[str],
        only: set[str] | None,
        roots: set[str],
    ) -> tuple[Scan, set[str]]:
        """The indexed paths in scope not found by the scan (blocking). A sync about to remove more than
        half of the index looks again first (`_recheck`), which may give another scan."""
        gone = in_scope.difference(scan.paths)
        at_risk = (
            len(gone) if self.transcripts_are_sessions else sum(1 for p in gone if not p.startswith(SESSIONS + "/"))
        )
        total = len(in_scope) if indexed_total is None else max(indexed_total, len(in_scope))
        if at_risk and 2 * at_risk > total:
            return self._recheck(memory, sessions, only, roots, in_scope, at_risk, total)
        return scan, gone

    def _scan(self, memory: bool, sessions: bool | set[str], only: set[str] | None) -> Scan:
        """The source files on disk (blocking)."""
        scan = Scan(self.s.workspace, self.s.sessions_dir)
        if memory:
            scan.memory()
        if sessions:
            scan.sessions(only)
        return scan

    def _recheck(
        self,
        memory: bool,
        sessions: bool | set[str],
        only: set[str] | None,
        roots: set[str],
        in_scope: set[str],
        missing: int,
        total: int,
    ) -> tuple[Scan, set[str]]:
        """A sync about to remove more than half of the index: look again after a pause (a mount that
        blinked, a folder moved away and back) and stat what is still missing. Only files still absent
        (ENOENT) are removed; one that cannot be stat'ed stops the sync (ScanError). So does a workspace
        left with nothing in it at all while notes of it are indexed: the empty mount point of a share
        that is not mounted (a file put in it says it is empty on purpose)."""
        log.warning("memory_sync_recheck", missing=missing, indexed=total, pause_s=self.s.recheck_s)
        time.sleep(self.s.recheck_s)  # blocking: this runs in a thread
        scan = self._scan(memory, sessions, only)
        scan.check(roots)
        gone = in_scope.difference(scan.paths)
        notes = sum(1 for p in gone if not p.startswith(SESSIONS + "/"))
        if notes and all(p.startswith(SESSIONS + "/") for p in scan.paths) and folder_empty(self.s.workspace):
            raise ScanError(
                "the workspace",
                self.s.workspace,
                OSError(
                    getattr(errno, "ENOMEDIUM", errno.ENOENT),
                    f"empty while {notes} notes of it are indexed: a share "
                    "that is not mounted? Put a file in it to say it is empty on purpose",
                ),
            )
        for path in gone:
            where = (
                self.s.sessions_dir / path.split("/", 1)[1]
                if path.startswith(SESSIONS + "/")
                else self.s.workspace / path
            )
            try:
                os.lstat(where)  # there but not indexable (a symlink now pointing out): gone from the index
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    raise ScanError("the file", where, exc) from None
        if gone:
            log.warning("memory_sync_removing_most", removing=len(gone), indexed=total)
        return scan, gone

    async def _prepared(
        self,
        todo: list[SourceFile],
        known: dict[str, tuple[int, int, str]],
        force: bool,
        stats: SyncStats,
        rdb: Any = None,
    ) -> AsyncIterator[tuple[int, list[_Work], dict[str, np.ndarray], dict[str, np.ndarray]]]:
        """The batches of `todo`, read, chunked and embedded, in order: (files, works, vectors, fresh
        vectors to cache). A pipeline: while the caller writes one batch, the next ones are prepared, in
        worker processes for a large sync (that work is Python, which threads would run on one core),
        else one batch ahead in threads. Used with contextlib.aclosing: leaving it stops what is under way."""
        batches = collections.deque(todo[i : i + BATCH_FILES] for i in range(0, len(todo), BATCH_FILES))
        workers = self._workers_for(len(todo))
        pool = self._start_workers(workers) if workers else None
        self._workers_died = False
        # Load the embedding model (the local one: ~1 s) while the first files are read and chunked.
        warm = getattr(self.provider, "warm", None) if todo and self.embeds and pool is None else None
        warming = asyncio.ensure_future(warm()) if warm is not None else None
        pending: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

        def submit() -> None:
            if batches:
                batch = batches.popleft()
                elsewhere = pool is not None and not self._workers_died
                pending.append(
                    (
                        len(batch),
                        asyncio.ensure_future(
                            self._prepare_elsewhere(pool, batch, known, force, stats, rdb)
                            if elsewhere
                            else self._prepare(batch, known, force, stats, rdb)
                        ),
                    )
                )

        try:
            for _ in range(workers if pool is not None else 1):
                submit()
            while pending:
                n, prepared = pending.popleft()
                works, vecs, fresh = await prepared
                submit()
                yield n, works, vecs, fresh
        finally:
            for _, prepared in pending:
                prepared.cancel()
                with contextlib.suppress(BaseException):
                    await prepared
            if pool is not None:
                await asyncio.to_thread(pool.shutdown, True, cancel_futures=True)
            if warming is not None:
                with contextlib.suppress(Exception):  # a provider that cannot load fails its embed calls
                    await warming

    async def _prepare(
        self,
        batch: list[SourceFile],
        known: dict[str, tuple[int, int, str]],
        force: bool,
        stats: SyncStats,
        rdb: Database | None = None,
    ) -> tuple[list[_Work], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Read, hash and chunk a batch of files (in a thread); embed the chunks that are new."""
        mine = {sf.path: known[sf.path] for sf in batch if sf.path in known}
        works = await asyncio.to_thread(_read_and_chunk, batch, mine, force, self.s)
        changed = [w for w in works if w.chunks is not None]
        stored = await self._stored_keys([w.sf.path for w in changed if w.sf.path in known], rdb)
        vecs, fresh = await self._embed_new(changed, stored, stats, rdb)
        return works, vecs, fresh

    def _workers_for(self, files: int) -> int:
        """How many worker processes a sync of `files` files gets: none when it is small or when they
        could not embed (a provider that is not portable, or whose vectors go through the embedding
        cache, which is this process's; with no provider they only read and chunk)."""
        if files < PROCESS_MIN_FILES or (self.embeds and (not self.provider.portable or self.provider.cached)):
            return 0
        return min(self.s.processes, -(-files // BATCH_FILES))

    def _start_workers(self, workers: int) -> ProcessPoolExecutor | None:
        """`workers` processes (None where processes cannot be started: threads prepare instead)."""
        try:
            return ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_start,
                initargs=(type(self.provider) if self.embeds else None,),
            )
        except (OSError, ValueError, ImportError, NotImplementedError) as exc:  # no processes here: threads do it
            log.warning("memory_sync_workers_unavailable", error=str(exc))
            return None

    async def _prepare_elsewhere(
        self,
        pool: ProcessPoolExecutor,
        batch: list[SourceFile],
        known: dict[str, tuple[int, int, str]],
        force: bool,
        stats: SyncStats,
        rdb: Database | None,
    ) -> tuple[list[_Work], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """`_prepare` in a worker process: reading, chunking and embedding all happen there. (What is
        stored is looked up first, for every known file of the batch: which ones changed is only known
        after reading.) A worker that died (killed, out of memory) leaves the batch to a thread."""
        mine = {sf.path: known[sf.path] for sf in batch if sf.path in known}
        stored = await self._stored_keys(list(mine), rdb)
        embed = self.embeds and stats.embed_error is None
        try:
            works, hashes, out, error = await _watched(
                pool,
                asyncio.get_running_loop().run_in_executor(
                    pool, _prepare_in_worker, batch, mine, stored, force, self.s, embed
                ),
            )
        except (BrokenProcessPool, OSError) as exc:  # died, or could not start (processes start at submit)
            if not self._workers_died:
                self._workers_died = True
                log.warning(
                    "memory_sync_worker_died", error=str(exc) or type(exc).__name__, note="this sync goes on in threads"
                )
            return await self._prepare(batch, known, force, stats, rdb)
        if error is not None and stats.embed_error is None:
            stats.embed_error, stats.retry_after = str(error), error.retry_after
            log.warning("memory_embedding_failed", error=str(error), note="indexed full text; vectors retried later")
        stats.chunks_embedded += len(hashes)
        vecs = dict(zip(hashes, out)) if out is not None else {}
        return works, vecs, {}

    async def _stored_keys(self, paths: list[str], rdb: Database | None) -> dict[str, set[tuple[int, int, str]]]:
        """(start line, end line, hash) of the chunks stored for these files, by path."""
        stored: dict[str, set[tuple[int, int, str]]] = {}
        for i in range(0, len(paths), 500):
            part = paths[i : i + 500]
            rows = await (rdb or self.db).fetchall(
                f"SELECT path, start_line, end_line, hash FROM chunks WHERE path IN ({','.join('?' * len(part))})", part
            )
            for path, a, b, h in rows:
                stored.setdefault(path, set()).add((a, b, h))
        return stored

    async def _embed_new(
        self,
        changed: list[_Work],
        stored: dict[str, set[tuple[int, int, str]]],
        stats: SyncStats,
        rdb: Database | None = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Vectors for the chunks of `changed` files that are not stored already (same lines and hash
        keep theirs): (vectors by text hash, the fresh ones to cache). A failing provider is noted in
        `stats` and leaves the chunks without vectors (full text only) until a later sync."""
        vecs: dict[str, np.ndarray] = {}
        fresh: dict[str, np.ndarray] = {}
        if not self.embeds:
            return vecs, fresh
        need = _new_texts(changed, stored)
        if need and stats.embed_error is None:
            try:
                vecs = await self._embed(need, stats, rdb, fresh)
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                stats.retry_after = exc.retry_after
                log.warning("memory_embedding_failed", error=str(exc), note="indexed full text; vectors retried later")
        return vecs, fresh

    async def _write_batch(
        self,
        works: list[_Work],
        vecs: dict[str, np.ndarray],
        stats: SyncStats,
        fresh: dict[str, np.ndarray] | None = None,
    ) -> None:
        if vecs:
            dims = int(next(iter(vecs.values())).shape[0])
            try:
                await self._vector_store(dims)
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                vecs = {}
        now = now_iso()
        async with self.db.transaction():
            next_id = int(await self.db.scalar("SELECT max(id) FROM chunks", default=0)) + 1
            # What is stored now, read inside the write transaction, for every changed file, known at the
            # start of this sync or not: another writer (the gateway's watcher and a `jarvis memory`
            # command, both seeing a new file) may have stored it since.
            stored = await self._current_chunks([w.sf.path for w in works if w.chunks is not None])
            touched, stale, inserts, vec_rows, file_rows = [], [], [], [], []
            for w in works:
                sf = w.sf
                if w.chunks is None:
                    touched.append((sf.size, sf.mtime_ns, sf.path))
                    stats.unchanged += 1
                    continue
                gone, new = chunk_diff(stored.get(sf.path, {}), w.chunks)
                stale.extend(gone)
                for c in new:
                    v = vecs.get(c.text_hash)
                    inserts.append(
                        (
                            next_id,
                            sf.path,
                            sf.source,
                            sf.session_key,
                            c.start_line,
                            c.end_line,
                            c.hash,
                            c.text,
                            orjson.dumps(c.spans).decode() if c.spans else None,
                            1 if v is not None else 0,
                            c.context,
                            c.date,
                        )
                    )
                    if v is not None:
                        vec_rows.append((next_id, sf.source, sf.session_key, v))
                    next_id += 1
                file_rows.append(
                    (sf.path, sf.source, sf.session_key, sf.size, sf.mtime_ns, w.file_hash, len(w.chunks), now)
                )
                stats.indexed += 1
                stats.changed = True
            if touched:
                await self.db.executemany("UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?", touched)
            if stale:
                await delete_chunks(self.db, "id", stale)
            if inserts:
                await self.db.insert_rows(
                    "INSERT INTO chunks(id, path, source, session_key, start_line, end_line, hash, text, "
                    "spans, embedded, context, date)",
                    inserts,
                )
                await self.db.execute(
                    "INSERT INTO chunks_fts(rowid, text, context) SELECT id, text, context FROM chunks "
                    "WHERE id >= ? AND id <= ?",
                    (inserts[0][0], inserts[-1][0]),
                )
            if vec_rows and self.vectors is not None:
                await self.vectors.insert(vec_rows)
            if file_rows:
                await self.db.insert_rows(
                    "INSERT OR REPLACE INTO files(path, source, session_key, size, mtime_ns, hash, chunks, indexed_at)",
                    file_rows,
                )
            if fresh:
                await self.cache.put_many(fresh)

    async def _current_chunks(self, paths: list[str]) -> dict[str, dict[tuple[int, int, str], int]]:
        """path → {(start line, end line, hash): chunk id} of the chunks stored for these files, in one
        statement (the ids through json_each, each looked up in the identity index)."""
        out: dict[str, dict[tuple[int, int, str], int]] = {}
        if paths:
            for path, cid, a, b, h in await self.db.fetchall(
                "SELECT c.path, c.id, c.start_line, c.end_line, c.hash FROM json_each(?) AS j "
                "CROSS JOIN chunks AS c ON c.path = j.value",
                [orjson.dumps(paths).decode()],
            ):
                out.setdefault(path, {})[(a, b, h)] = cid
        return out

    async def _drop_unusable_vectors(self, stats: SyncStats) -> None:
        """On a forced sync: drop the cache entries and stored vectors that are NaN or all zeros (stored
        before providers' answers were checked; searches pass them over) so that fill_missing embeds
        their chunks again."""
        async with self.db.transaction():
            await self.cache.purge_unusable()
        if await vector_table(self.db) is None:
            return
        bad: list[int] = []
        async with self.db.c.execute("SELECT chunk_id, embedding FROM chunks_vec") as cur:
            while rows := await cur.fetchmany(BATCH_CHUNKS):
                v = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                ok = await asyncio.to_thread(usable, v)
                bad.extend(int(r[0]) for r, good in zip(rows, ok) if not good)
        if bad:
            async with self.db.transaction():
                await self.db.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", [(i,) for i in bad])
                await self.db.executemany("UPDATE chunks SET embedded = 0 WHERE id = ?", [(i,) for i in bad])
            log.warning("memory_unusable_vectors_dropped", chunks=len(bad), note="embedded again")
            stats.changed = True

    async def fill_missing(self, stats: SyncStats) -> None:
        """Give vectors to chunks stored without one (the provider was down when they were indexed)."""
        last = 0
        while True:
            rows = await self.db.fetchall(
                "SELECT id, source, session_key, hash, text FROM chunks WHERE embedded = 0 AND id > ? "
                "ORDER BY id LIMIT ?",
                (last, BATCH_CHUNKS),
            )
            if not rows:
                return
            last = rows[-1][0]
            try:
                vecs = await self._embed({sha256(t): t for _, _, _, _, t in rows}, stats)
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                stats.retry_after = exc.retry_after
                return
            if not vecs:
                return
            dims = int(next(iter(vecs.values())).shape[0])
            try:
                store = await self._vector_store(dims)
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                return
            async with self.db.transaction():
                # Only rows still present and still without a vector (a concurrent writer may have acted).
                ids = [r[0] for r in rows]
                live = {
                    r[0]
                    for r in await self.db.fetchall(
                        f"SELECT id FROM chunks WHERE embedded = 0 AND id IN ({','.join('?' * len(ids))})", ids
                    )
                }
                todo = [
                    (cid, src, key, vecs[sha256(t)])
                    for cid, src, key, _, t in rows
                    if cid in live and sha256(t) in vecs
                ]
                await store.insert(todo)
                await self.db.executemany("UPDATE chunks SET embedded = 1 WHERE id = ?", [(r[0],) for r in todo])
            stats.changed = stats.changed or bool(todo)

    async def forget(self, paths: list[str]) -> int:
        """Remove these files' chunks and rows now; returns how many files were known."""
        async with self.db.transaction():
            n = 0
            await delete_chunks(self.db, "path", paths)
            for path in paths:
                n += await self.db.execute("DELETE FROM files WHERE path = ?", (path,))
            if n:
                gen = int(await get_meta(self.db, "generation", "0") or 0) + 1
                await set_meta(self.db, "generation", str(gen))
                if self.ann is not None:
                    self.ann.written(str(gen - 1), str(gen))
            return n
