"""Incremental sync of memory files and transcripts into an engine's index: the one pipeline.

For each source file: unchanged size and mtime → skip; else read and hash it; unchanged hash → only the
stat is updated; else chunk it and diff the chunks against the stored ones (same lines and hash → kept
as is). New chunks take their vectors from the embedding cache or the provider, in batches, before the
write transaction (so the write lock is never held while embedding). Files that vanished lose their
chunks. If the provider fails, chunks are stored anyway (full-text search works) without a vector, and
every later sync first retries those. Blocking work (stat, read, chunk, the ledger's extraction) runs in
a thread or, for a large sync, in worker processes (workers.py); the event loop never waits on it.

The pipeline decides; the engine stores, through the ports of memory/ports.py (IndexStore: FileRows,
ChunkStore, the embedding cache). It never asks which engine it has, and no engine subclasses it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import AsyncGenerator

import numpy as np
import structlog

from ...timeutil import now_iso
from ..embeddings import EmbeddingError, EmbeddingProvider
from ..embeddings.base import check_vectors, provider_name
from ..ledger import record as ledger
from ..ports import ChunkKey, FileStat, IndexStore, NewChunk, Scope, VectorRow, WriteBatch
from .changes import Changes
from .chunking import sha256
from .reading import Work, chunk_diff, extract_statements, new_texts, read_and_chunk
from .settings import IndexSettings, Progress, SyncStats
from .sources import SourceFile
from .workers import (
    embed_in_worker,
    for_ledger,
    prepare_in_worker,
    start_extractor,
    start_workers,
    statements_in_worker,
    watched,
)

log = structlog.get_logger("gateway.memory")

BATCH_CHUNKS = 2048
BATCH_FILES = 512
# A sync of this many files or more reads, chunks and embeds in worker processes (when it may): below it,
# starting them (~1 s: Python, numpy, the model) costs more than they save.
PROCESS_MIN_FILES = 2 * BATCH_FILES
# A sync of this many files or more given an extractor process (2-3 cores) has it embed too, with its own
# copy of the local model: below it, that copy's load (~1-2 s before its first batch) costs more than the
# GIL it frees (issue 46, a loaded 2-core VM: 4,600 files 0.83x of embedding in threads, 9,200 even,
# 46,000 1.47x).
EMBED_ELSEWHERE_MIN_FILES = 16 * BATCH_FILES

Vectors = dict[str, np.ndarray]  # by text hash
Prepared = tuple[int, list[Work], Vectors, Vectors]  # (files, works, vectors, fresh vectors to cache)


class IndexPipeline:
    """Syncs the sources into one engine's IndexStore with one embedding provider."""

    def __init__(self, store: IndexStore, provider: EmbeddingProvider, settings: IndexSettings):
        self.store, self.provider, self.s = store, provider, settings
        self.changes = Changes(store.files, settings)
        self._workers_died = False  # this sync's worker processes died: it prepares in threads
        self._extractor: ProcessPoolExecutor | None = None  # this sync's extractor process (threads prepare)
        self._embeds_elsewhere = False  # the worker processes, or the extractor, embed this sync's new chunks
        self.embed_elsewhere_min_files = EMBED_ELSEWHERE_MIN_FILES

    @property
    def embeds(self) -> bool:
        return self.provider.enabled and self.s.vector_backend != "none"

    # ---- sync ------------------------------------------------------------------------------------------
    async def sync(
        self,
        *,
        force: bool = False,
        memory: bool = True,
        sessions: Scope = True,
        progress: Progress | None = None,
    ) -> SyncStats:
        """One pass. `sessions`: True for all transcripts, a set of session keys, or False."""
        async with self.store.syncing():
            return await self._sync(force, memory, sessions, progress)

    async def _sync(self, force: bool, memory: bool, sessions: Scope, progress: Progress | None) -> SyncStats:
        t0 = time.perf_counter()
        stats = SyncStats()
        rows = self.store.files
        known, gone, todo = await self.changes.compare(memory, sessions, force, stats)
        gone = await rows.confirm_gone(gone) if gone else gone
        if gone:
            await rows.remove(gone)
            await ledger.forget(self.store.ledger, gone)
            stats.removed = len(gone)
            stats.changed = True
        ready = await rows.ready(todo) if todo else todo
        stats.unchanged += len(todo) - len(ready)
        total, done = len(ready), 0
        if progress and total:
            progress(0, total)
        async with self.store.loading(total):
            async with contextlib.aclosing(self._prepared(ready, known, force, stats)) as prepared:
                async for n, works, vecs, fresh in prepared:
                    await self._write(works, vecs, fresh, stats)
                    done += n
                    if progress:
                        progress(done, total)
        if force and self.embeds:
            await self._drop_unusable(stats)
        if self.embeds and stats.embed_error is None:
            await self.fill_missing(stats)
        stats.missing_vectors = await self.store.chunks.count_unembedded() if self.embeds else 0
        await self.store.finish(stats)
        stats.duration_ms = int((time.perf_counter() - t0) * 1000)
        return stats

    # ---- writing ---------------------------------------------------------------------------------------
    async def _write(self, works: list[Work], vecs: Vectors, fresh: Vectors, stats: SyncStats) -> None:
        """One batch in one transaction: the chunks of each changed file diffed against what is stored
        inside it (another writer may have stored the file since this sync looked)."""
        if vecs:
            try:
                await self.store.chunks.ready_vectors(int(next(iter(vecs.values())).shape[0]))
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                vecs = {}

        def plan(stored: dict[str, dict[ChunkKey, int]]) -> WriteBatch:
            batch = WriteBatch(now_iso(), fresh=fresh)
            for w in works:
                sf = w.sf
                if w.chunks is None:
                    batch.touched.append(sf)
                    stats.unchanged += 1
                    continue
                gone, new = chunk_diff(stored.get(sf.path, {}), w.chunks)
                batch.stale.extend(gone)
                batch.chunks += NewChunk.of(sf, new, vecs)
                batch.files.append((sf, w.file_hash, len(w.chunks)))
                stats.indexed += 1
                stats.changed = True
            return batch

        await ledger.record(self.store.ledger, works)  # first: a crash between the two indexes the file again
        await self.store.chunks.write([w.sf.path for w in works if w.chunks is not None], plan)

    async def _drop_unusable(self, stats: SyncStats) -> None:
        """On a forced sync: drop the cache entries and stored vectors that are NaN or all zeros (stored
        before providers' answers were checked; searches pass them over) so that fill_missing embeds
        their chunks again."""
        dropped = await self.store.chunks.drop_unusable()
        if dropped:
            log.warning("memory_unusable_vectors_dropped", chunks=dropped, note="embedded again")
            stats.changed = True

    async def fill_missing(self, stats: SyncStats) -> None:
        """Give vectors to chunks stored without one (the provider was down when they were indexed)."""
        chunks = self.store.chunks
        last = 0
        while rows := await chunks.unembedded(last, BATCH_CHUNKS):
            last = rows[-1].id
            try:
                vecs = await self._embed({sha256(r.text): r.text for r in rows}, stats)
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                stats.retry_after = exc.retry_after
                return
            if not vecs:
                return
            try:
                await chunks.ready_vectors(int(next(iter(vecs.values())).shape[0]))
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                return
            todo = [
                VectorRow(r.id, r.source, r.session_key, v) for r in rows if (v := vecs.get(sha256(r.text))) is not None
            ]
            stored = await chunks.add_vectors(todo)
            stats.changed = stats.changed or bool(stored)

    # ---- preparing: read, chunk, embed -----------------------------------------------------------------
    async def _prepared(
        self, todo: list[SourceFile], known: dict[str, FileStat], force: bool, stats: SyncStats
    ) -> AsyncGenerator[Prepared, None]:
        """The batches of `todo`, read, chunked and embedded, in order: (files, works, vectors, fresh
        vectors to cache). A pipeline: while the caller writes one batch, the next ones are prepared, in
        worker processes for a large sync (that work is Python, which threads would run on one core),
        else one batch ahead in threads. Used with contextlib.aclosing: leaving it stops what is under way."""
        batches = collections.deque(todo[i : i + BATCH_FILES] for i in range(0, len(todo), BATCH_FILES))
        workers = self._workers_for(len(todo))
        pool = start_workers(workers, self.provider if self.embeds else None) if workers else None
        self._workers_died = False
        extractor = None  # shut down at the end even when lost mid-sync (then self._extractor is None)
        self._embeds_elsewhere = pool is not None and self.embeds
        if pool is None and self.s.extractor and len(todo) >= PROCESS_MIN_FILES:
            # A portable provider embeds there too (issue 46: on 2 cores this process's GIL was the limit).
            self._embeds_elsewhere = (
                self.embeds and self.provider.portable and len(todo) >= self.embed_elsewhere_min_files
            )
            extractor = self._extractor = start_extractor(self.provider if self._embeds_elsewhere else None)
        # Load the embedding model (the local one: ~1 s) while the first files are read and chunked.
        warming = asyncio.ensure_future(self.provider.warm()) if todo and self.embeds and pool is None else None
        pending: collections.deque[tuple[int, asyncio.Future[tuple[list[Work], Vectors, Vectors]]]]
        pending = collections.deque()

        def submit() -> None:
            if batches:
                batch = batches.popleft()
                pending.append(
                    (
                        len(batch),
                        asyncio.ensure_future(
                            self._prepare_elsewhere(pool, batch, known, force, stats)
                            if pool is not None and not self._workers_died
                            else self._prepare(batch, known, force, stats)
                        ),
                    )
                )

        try:
            # An extractor that embeds is a second pipeline stage: one batch more is read and chunked
            # while it embeds the last, so neither process waits on the other.
            for _ in range(
                workers if pool is not None else 2 if extractor is not None and self._embeds_elsewhere else 1
            ):
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
            for ended in (pool, extractor):
                if ended is not None:
                    await asyncio.to_thread(ended.shutdown, True, cancel_futures=True)
            self._extractor = None
            if warming is not None:
                with contextlib.suppress(Exception):  # a provider that cannot load fails its embed calls
                    await warming

    async def _prepare(
        self, batch: list[SourceFile], known: dict[str, FileStat], force: bool, stats: SyncStats
    ) -> tuple[list[Work], Vectors, Vectors]:
        """Read, hash and chunk a batch of files (in a thread); embed the chunks that are new. With an
        extractor process, the ledger's statements are extracted there meanwhile."""
        mine = {sf.path: known[sf.path] for sf in batch if sf.path in known}
        extractor = self._extractor
        works = await asyncio.to_thread(read_and_chunk, batch, mine, force, self.s, extractor is None)
        changed = [w for w in works if w.chunks is not None]
        extracting = self._extract_elsewhere(extractor, changed) if extractor is not None and changed else None
        try:
            stored = await self.store.chunks.stored([w.sf.path for w in changed if w.sf.path in known])
            vecs, fresh = await self._embed_new(changed, stored, stats)
        except BaseException:
            if extracting is not None:
                extracting.cancel()
            raise
        if extractor is not None and changed:
            await self._statements_from(extractor, extracting, changed)
        return works, vecs, fresh

    def _extract_elsewhere(self, extractor: ProcessPoolExecutor, changed: list[Work]) -> asyncio.Future | None:
        """The statements of `changed` asked of the extractor process (None: it could not be asked)."""
        try:
            return asyncio.get_running_loop().run_in_executor(
                extractor, statements_in_worker, [(w.sf, for_ledger(w.chunks or [])) for w in changed]
            )
        except (BrokenProcessPool, RuntimeError, OSError) as exc:  # died before, or could not start
            self._lost_extractor(extractor, exc)
            return None

    async def _statements_from(
        self, extractor: ProcessPoolExecutor, extracting: asyncio.Future | None, changed: list[Work]
    ) -> None:
        """The extractor's statements set on `changed`; a dead extractor leaves them (and the rest of the
        sync's) to this process's threads."""
        if extracting is not None:
            try:
                for w, statements in zip(changed, await watched(extractor, extracting)):
                    w.statements = statements
                return
            except (BrokenProcessPool, OSError) as exc:
                self._lost_extractor(extractor, exc)
        await asyncio.to_thread(extract_statements, changed)

    async def _vectors(self, texts: list[str]) -> np.ndarray:
        """The provider's vectors of `texts`: from the extractor process when it embeds this sync's chunks
        (a dead one, or one whose copy of the provider fails, leaves them and the rest of the sync's to this
        process's threads: only their error is the sync's)."""
        extractor = self._extractor
        if extractor is not None and self._embeds_elsewhere:
            try:
                out, error = await watched(
                    extractor, asyncio.get_running_loop().run_in_executor(extractor, embed_in_worker, texts)
                )
            except (BrokenProcessPool, RuntimeError, OSError) as exc:
                self._lost_extractor(extractor, exc)
            else:
                if error is None:
                    return out
                self._cannot_embed_elsewhere(error)
        return await self.provider.embed(texts)

    def _cannot_embed_elsewhere(self, error: EmbeddingError) -> None:
        """A process of this sync (the extractor, or a worker) is alive but its copy of the provider fails
        (its model could not load: out of memory, a file missing): it goes on reading, chunking or
        extracting, and this process's threads embed the rest of the sync; only their error is the sync's
        (issue 46's review: the error ended the sync's embedding, and fill_missing was skipped)."""
        if self._embeds_elsewhere:
            self._embeds_elsewhere = False
            log.warning("memory_sync_process_cannot_embed", error=str(error), note="this sync embeds in threads")

    def _lost_extractor(self, extractor: ProcessPoolExecutor, exc: BaseException) -> None:
        if self._extractor is extractor:
            self._extractor = None
            log.warning(
                "memory_sync_worker_died", error=str(exc) or type(exc).__name__, note="this sync goes on in threads"
            )

    def _workers_for(self, files: int) -> int:
        """How many worker processes a sync of `files` files gets: none when it is small or when they
        could not embed (a provider that is not portable, or whose vectors go through the embedding
        cache, which is this process's; with no provider they only read and chunk)."""
        if files < PROCESS_MIN_FILES or (self.embeds and (not self.provider.portable or self.provider.cached)):
            return 0
        return min(self.s.processes, -(-files // BATCH_FILES))

    async def _prepare_elsewhere(
        self,
        pool: ProcessPoolExecutor,
        batch: list[SourceFile],
        known: dict[str, FileStat],
        force: bool,
        stats: SyncStats,
    ) -> tuple[list[Work], Vectors, Vectors]:
        """`_prepare` in a worker process: reading, chunking and embedding all happen there. (What is
        stored is looked up first, for every known file of the batch: which ones changed is only known
        after reading.) A worker that died (killed, out of memory) leaves the batch to a thread; one whose
        provider fails leaves the embedding of the batch, and of the rest of the sync, to threads."""
        mine = {sf.path: known[sf.path] for sf in batch if sf.path in known}
        stored = await self.store.chunks.stored(list(mine))
        embed = self._embeds_elsewhere and stats.embed_error is None
        try:
            works, hashes, out, error = await watched(
                pool,
                asyncio.get_running_loop().run_in_executor(
                    pool, prepare_in_worker, batch, mine, stored, force, self.s, embed
                ),
            )
        except (BrokenProcessPool, OSError) as exc:  # died, or could not start (processes start at submit)
            if not self._workers_died:
                self._workers_died = True
                log.warning(
                    "memory_sync_worker_died", error=str(exc) or type(exc).__name__, note="this sync goes on in threads"
                )
            return await self._prepare(batch, known, force, stats)
        if error is not None:
            self._cannot_embed_elsewhere(error)
        if out is not None:
            stats.chunks_embedded += len(hashes)
            return works, dict(zip(hashes, out)), {}
        # Not embedded there (its provider failed, or workers no longer embed this sync): threads embed.
        vecs, fresh = await self._embed_new([w for w in works if w.chunks is not None], stored, stats)
        return works, vecs, fresh

    async def _embed_new(
        self, changed: list[Work], stored: dict[str, set[ChunkKey]], stats: SyncStats
    ) -> tuple[Vectors, Vectors]:
        """Vectors for the chunks of `changed` files that are not stored already (same lines and hash
        keep theirs): (vectors by text hash, the fresh ones to cache). A failing provider is noted in
        `stats` and leaves the chunks without vectors (full text only) until a later sync."""
        vecs: Vectors = {}
        fresh: Vectors = {}
        if not self.embeds:
            return vecs, fresh
        need = new_texts(changed, stored)
        if need and stats.embed_error is None:
            try:
                vecs = await self._embed(need, stats, fresh)
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                stats.retry_after = exc.retry_after
                log.warning("memory_embedding_failed", error=str(exc), note="indexed full text; vectors retried later")
        return vecs, fresh

    async def _embed(
        self, texts_by_hash: dict[str, str], stats: SyncStats, fresh_out: Vectors | None = None
    ) -> Vectors:
        """Vectors for these texts: cache first, then the provider. Raises EmbeddingError.
        With `fresh_out`, new vectors are collected there for the caller to cache (in its transaction)."""
        cache = self.store.cache
        vecs = await cache.get_many(list(texts_by_hash))
        stats.cache_hits += len(vecs)
        todo = [h for h in texts_by_hash if h not in vecs]
        step = max(1, self.provider.max_batch) * (8 if not self.provider.remote else 1)
        for i in range(0, len(todo), step):
            part = todo[i : i + step]
            # Checked here for every provider (a third-party one too): nothing unusable is cached or stored.
            out = check_vectors(
                await self._vectors([texts_by_hash[h] for h in part]), provider_name(self.provider), len(part)
            )
            fresh = {h: out[j] for j, h in enumerate(part)}
            if fresh_out is not None:
                fresh_out.update(fresh)
            else:
                await cache.put_many(fresh)
            vecs.update(fresh)
            stats.chunks_embedded += len(part)
        return vecs
