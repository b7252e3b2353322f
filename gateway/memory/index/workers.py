"""Worker processes for a large sync, and the upkeep of this process's heap after one.

A sync of many files reads, chunks and embeds in a pool of worker processes (that work is Python, which
threads would run on one core); each worker makes its own copy of a portable provider. CPython's pool
is watched from outside (`watched`): a worker killed while it wrote its result would otherwise hang the
sync. After a sync that read or dropped a lot, `trim_heap` gives the C heap's free pages back.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import structlog

from ..embeddings import EmbeddingError, EmbeddingProvider
from ..ports import ChunkKey, FileStat, Statement
from .reading import Work, new_texts, read_and_chunk, statements_of
from .chunking import Chunk
from .settings import IndexSettings
from .sources import SourceFile

log = structlog.get_logger("gateway.memory")

# A worker found dead this long while its batch is still pending: the pool is taken for broken (watched).
WORKER_DEAD_GRACE_S = 2.0
TRIM_AFTER_BYTES = 8 << 20


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc; elsewhere nothing). After a sync that read
    a big file, or removed one, what its texts and chunks took stays in malloc's arenas otherwise:
    indexing a 50 MB note and deleting it left RSS 235 MB above where it began; trimmed, 95 MB."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def start_workers(workers: int, provider: EmbeddingProvider | None) -> ProcessPoolExecutor | None:
    """`workers` processes, each with its own copy of `provider` (None: they only read and chunk); None
    where processes cannot be started (threads prepare instead)."""
    try:
        return ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_start,
            initargs=(type(provider) if provider is not None else None,),
        )
    except (OSError, ValueError, ImportError, NotImplementedError) as exc:  # no processes here: threads do it
        log.warning("memory_sync_workers_unavailable", error=str(exc))
        return None


async def watched(pool: ProcessPoolExecutor, fut: asyncio.Future) -> Any:
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


def _any_dead(procs: list[Any]) -> bool:
    """Whether one of these processes has ended (its sentinel is ready; nothing is reaped here)."""
    try:
        return bool(multiprocessing.connection.wait([p.sentinel for p in procs], timeout=0))
    except (OSError, ValueError):  # a sentinel closed meanwhile: the pool itself saw to that process
        return False


def _workers_of(pool: ProcessPoolExecutor) -> list[Any]:
    """The pool's worker processes (a private attribute of CPython's pool; none known: an empty list)."""
    return list((getattr(pool, "_processes", None) or {}).values())


_worker_provider: EmbeddingProvider | None = None


def _worker_start(provider_type: type[EmbeddingProvider] | None) -> None:
    """A worker process's start: make (and warm) its own copy of the portable provider."""
    global _worker_provider
    if provider_type is not None:
        _worker_provider = provider_type()
        with contextlib.suppress(EmbeddingError):
            _worker_provider.embed_sync(["warm"])


def prepare_in_worker(
    batch: list[SourceFile],
    known: dict[str, FileStat],
    stored: dict[str, set[ChunkKey]],
    force: bool,
    s: IndexSettings,
    embed: bool,
) -> tuple[list[Work], list[str], np.ndarray | None, EmbeddingError | None]:
    """In a worker process: read, hash and chunk a batch, and embed what is new. Returns the works, the
    text hashes embedded, their vectors (one row each) and the provider's error, if it failed."""
    works = read_and_chunk(batch, known, force, s)
    need = new_texts([w for w in works if w.chunks is not None], stored) if embed else {}
    if not need or _worker_provider is None:
        return works, [], None, None
    try:
        return works, list(need), _worker_provider.embed_sync(list(need.values())), None
    except EmbeddingError as exc:
        return works, [], None, EmbeddingError(str(exc), exc.retryable, exc.retry_after)


def start_extractor(provider: EmbeddingProvider | None = None) -> ProcessPoolExecutor | None:
    """One process that extracts the ledger's statements (`statements_in_worker`) for a large sync
    prepared in threads on 2-3 cores, and with a portable `provider` embeds its new chunks too
    (`embed_in_worker`, its own copy of the provider): both are Python that would otherwise hold this
    process's GIL beside the reading, chunking and writes (issue 46). None where processes cannot start."""
    try:
        return ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_start,
            initargs=(type(provider) if provider is not None else None,),
        )
    except (OSError, ValueError, ImportError, NotImplementedError) as exc:
        log.warning("memory_sync_workers_unavailable", error=str(exc))
        return None


# What the extraction reads of a chunk (ledger/extract.py's from_chunks): sent as plain tuples, without
# the context and the hashes, which it does not read (a dataclass pickles through a dict of its fields).
ChunkForLedger = tuple[int, int, str, "tuple[tuple[int, int, int, int], ...] | None", "str | None"]


def for_ledger(chunks: list[Chunk]) -> list[ChunkForLedger]:
    return [(c.start_line, c.end_line, c.text, c.spans, c.date) for c in chunks]


def statements_in_worker(files: list[tuple[SourceFile, list[ChunkForLedger]]]) -> list[list[Statement]]:
    """In the extractor process: the ledger's statements of each (file, its chunks as `for_ledger` sent
    them), in order."""
    return [statements_of(sf, [Chunk(a, b, t, "", "", sp, "", d) for a, b, t, sp, d in rows]) for sf, rows in files]


def embed_in_worker(texts: list[str]) -> tuple[np.ndarray | None, EmbeddingError | None]:
    """In the extractor process: the vectors of `texts` by its copy of the provider (`embed_sync`, as a
    thread of the gateway would run it), or the provider's error."""
    if _worker_provider is None:  # pragma: no cover - started without a provider: never asked
        return None, EmbeddingError("no provider in the extractor process", retryable=False)
    try:
        return _worker_provider.embed_sync(texts), None
    except EmbeddingError as exc:
        return None, EmbeddingError(str(exc), exc.retryable, exc.retry_after)
