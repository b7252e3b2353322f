"""The approximate nearest-neighbour index of a big vector table (usearch HNSW), derived data.

Above `memory.search.annMinVectors` stored vectors, a vector search asks this graph for a few times n
candidates (~1 ms at a million rows, where the int8 matrix's full pass takes tens of ms and reads
~300 MB) and re-scores them exactly from `chunks_vec`, the store of record, as the int8 shortlist is.

- Kept up to date by the sync: each vector the indexer writes is added (or replaced: SQLite reuses the
  ids of deleted tail rows) in the same batch. On PostgreSQL (`by_id`: chunk ids only grow, and other
  gateways write too) a generation the graph does not know adds the rows above the highest id it holds
  (`follow`), and a saved graph of another generation is opened and caught up the same way. Deleted rows stay in the graph until the next rebuild;
  the re-score drops them (they are no longer in the table), so the graph may hold more, never fewer.
  A rebuild starts when dead rows pass a quarter of the graph.
- Read from the engine's store of record through rows.py's port (either engine's; nothing here knows one).
- Persisted beside the index as `<index>.ann` (usearch's own file) and `<index>.ann.json` (the index
  generation, row count and CRC-32 it was saved at), written to temporary names and renamed, after a
  sync (at most every SAVE_EVERY_S) and on close. The SQLite file is never opened by anything else.
- Opened in the background: a file that is missing, damaged (CRC), or saved at another generation is
  rebuilt from `chunks_vec`; exact search (the in-memory matrix) answers until the graph is ready.

usearch over hnswlib and faiss-cpu: measured in docs/performance.md (recall@10, build time, size);
hnswlib has no wheel on PyPI (a C++ build on every install), faiss-cpu's HNSW cannot remove or replace
a row and its wheel is 19 MB against usearch's 2.3 MB.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from .rows import VectorRows

log = structlog.get_logger("gateway.memory")

CONNECTIVITY = 16  # graph degree (M)
EXPANSION_ADD = 64  # candidates while inserting (efConstruction)
EXPANSION_SEARCH = 128  # candidates while searching (ef)
CANDIDATES_FACTOR, CANDIDATES_MIN = 4, 40  # rows asked of the graph: max(4n, 40), re-scored exactly
BUILD_BATCH = 8_192
BUILD_THREADS = min(2, os.cpu_count() or 1)
SAVE_EVERY_S = 300.0
DEAD_SHARE = 0.25  # rebuild when rows no longer in the table pass this share of the graph


def _new_index(dims: int):
    from usearch.index import Index

    return Index(
        ndim=dims,
        metric="cos",
        dtype="i8",
        connectivity=CONNECTIVITY,
        expansion_add=EXPANSION_ADD,
        expansion_search=EXPANSION_SEARCH,
    )


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            crc = zlib.crc32(block, crc)
    return crc


class AnnIndex:
    """One index file's graph; `ready` once searches may use it."""

    def __init__(self, db_path: Path, dims: int, by_id: bool = False):
        self.path = Path(str(db_path) + ".ann")
        self.meta_path = Path(str(db_path) + ".ann.json")
        self.dims = dims
        self.by_id = by_id  # ids only grow (PostgreSQL): catch up on new rows instead of rebuilding
        self.max_id = 0  # by_id: the scan position (rows.py's VectorBatch.last) the graph holds rows up to
        self.store_id: str | None = None  # by_id: the database's identity, recorded in the saved file
        self.seq_ceiling: int | None = None  # by_id: the store's position now; a file past it is rebuilt
        self.saves = True  # False: a tool's process (the gateway beside it owns the file), which never writes it
        self.saved_generation: str | None = None  # the generation of the file it was opened from
        self.index: Any = None  # usearch's Index, once opened or built
        self._next: Any = None  # a graph being built: the sync's adds go to it as well
        self.ready = False
        self.dirty = False
        self.saved_at = time.monotonic()
        self._lock = threading.Lock()  # adds, removes and saves (searches run beside them)
        self._task: asyncio.Task | None = None
        self.started = False
        self._tried = asyncio.Event()  # the saved file was tried: opened, or a build begun
        self.origin: str | None = None  # "file" (opened) or "built" (from the table), once ready
        # Index generations whose every vector the graph holds: the one it was opened or built at, and
        # each one this process's syncs wrote since. Another generation is another process's sync
        # (`jarvis memory sync` beside the gateway), whose rows only a rebuild brings in.
        self.known: list[str] = []

    # ---- writes (from the sync) ------------------------------------------------------------------------
    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        """Add or replace these rows (in a thread). Before the graph exists (it is being built or opened)
        the rows are left to that build, which reads the table after them or is caught up by generation."""
        with self._lock:
            ids = np.ascontiguousarray(ids, dtype=np.uint64)
            vecs = np.ascontiguousarray(vecs, dtype=np.float32)
            if ids.size:
                self.max_id = max(self.max_id, int(ids.max())) if not self.by_id else self.max_id
            for ix in {id(x): x for x in (self.index, self._next) if x is not None}.values():
                there = np.asarray(ix.contains(ids), dtype=np.bool_)
                if there.any():
                    ix.remove(ids[there])
                ix.add(ids, vecs, threads=1)
                self.dirty = True

    def written(self, prev: str, new: str) -> None:
        """A sync of this process is about to commit generation `new` over `prev`."""
        if self.started:
            self.known = (self.known + [new])[-8:] if prev in self.known else self.known

    def follow(self, rows: VectorRows, generation: str, count: int) -> None:
        """Before a search at `generation`: a generation the graph does not know starts a rebuild, or
        (`by_id`) a catch-up on the rows above its highest id (the graph answers meanwhile, without the
        other process's new rows)."""
        if self.ready and generation not in self.known and (self._task is None or self._task.done()):
            if self.by_id and len(self.index) <= count * (1 + DEAD_SHARE) + 1_000:
                self._task = asyncio.create_task(self._catch_up(rows, generation))
                return
            log.info("memory_ann_rebuild", reason="the index changed in another process", generation=generation)
            self._task = asyncio.create_task(self._build(rows, generation, count))

    async def follow_now(self, rows: VectorRows, generation: str, count: int) -> None:
        """`by_id`: before a search at a generation the graph does not know, the first BUILD_BATCH rows
        above its highest id are added at once (a search right after a small write, by any gateway, finds
        it); more than that, the rest in the background (the graph answers meanwhile)."""
        if not self.ready or generation in self.known or (self._task is not None and not self._task.done()):
            return
        if not self.by_id or len(self.index) > count * (1 + DEAD_SHARE) + 1_000:
            self.follow(rows, generation, count)
            return
        more = False
        async with contextlib.aclosing(rows.scan(BUILD_BATCH, self.max_id)) as batches:
            async for batch in batches:
                await asyncio.to_thread(self._add_batch, self.index, batch.ids, batch.vecs, batch.last)
                self.dirty = True
                more = len(batch) >= BUILD_BATCH
                break
        if more:
            self._task = asyncio.create_task(self._catch_up(rows, generation))
        else:
            self.known = (self.known + [generation])[-8:]

    async def _catch_up(self, rows: VectorRows, generation: str) -> None:
        """Add the rows stored above the highest id the graph holds (another gateway's, or a graph saved
        at an older generation); deleted ones stay until a rebuild (the re-score passes over them)."""
        ix = self.index
        async for batch in rows.scan(BUILD_BATCH, self.max_id):
            await asyncio.to_thread(self._add_batch, ix, batch.ids, batch.vecs, batch.last)
        self.known = (self.known + [generation])[-8:]
        self.dirty = True

    # ---- search ----------------------------------------------------------------------------------------
    def search(self, q: np.ndarray, n: int) -> np.ndarray:
        """Candidate chunk ids for the n best, approximately best first (in a thread)."""
        ix = self.index
        if ix is None or len(ix) == 0:
            return np.empty(0, dtype=np.int64)
        count = min(max(CANDIDATES_FACTOR * n, CANDIDATES_MIN), len(ix))
        return np.asarray(ix.search(q, count, threads=1).keys, dtype=np.int64)

    def status(self) -> dict:
        return {"ready": self.ready, "rows": len(self.index) if self.index is not None else 0, "origin": self.origin}

    # ---- open, build, save -----------------------------------------------------------------------------
    def start(self, rows: VectorRows, generation: str, count: int) -> None:
        """Open the saved graph, or build it, in the background."""
        if not self.started:
            self.started = True
            self._task = asyncio.create_task(self._open(rows, generation, count))

    async def wait_tried(self) -> None:
        await self._tried.wait()

    async def wait(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    async def close(self, generation: str | None = None, count: int = 0) -> None:
        """Stop a build under way; save a graph that changed since its last save."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.ready and self.dirty and generation is not None:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self._save, generation, count)

    async def after_sync(self, rows: VectorRows, generation: str, count: int) -> None:
        """After a sync committed: rebuild when dead rows dominate; save now and then."""
        if not self.ready:
            return
        if len(self.index) > count * (1 + DEAD_SHARE) + 1_000 and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._build(rows, generation, count))  # the old graph answers meanwhile
        elif self.dirty and time.monotonic() - self.saved_at >= SAVE_EVERY_S:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self._save, generation, count)

    async def _open(self, rows: VectorRows, generation: str, count: int) -> None:
        try:
            try:
                ix = await asyncio.to_thread(self._restore, generation, count)
            except Exception as exc:  # damaged beyond the CRC's reach: built again
                log.warning("memory_ann_unreadable", path=str(self.path), error=str(exc))
                ix = None
            if ix is not None:
                with self._lock:
                    self.index = ix
                if self.by_id and self.saved_generation != generation:  # caught up before it answers
                    await self._catch_up(rows, generation)
                self.ready, self.origin, self.known = True, "file", [generation]
                log.info("memory_ann_opened", rows=len(ix))
                return
        finally:
            self._tried.set()
        await self._build(rows, generation, count)

    def _restore(self, generation: str, count: int):
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None
        if self.by_id and (
            meta.get("store") is None
            or meta.get("store") != self.store_id
            or not isinstance(meta.get("seq"), int)
            or (self.seq_ceiling is not None and meta["seq"] > self.seq_ceiling)
        ):
            log.info("memory_ann_stale", path=str(self.path), reason="another database, a restore, or an older file")
            return None
        if (
            (meta.get("generation") != generation and not self.by_id)
            or meta.get("dims") != self.dims
            or not self.path.exists()
            or self.path.stat().st_size != meta.get("bytes")
            or _crc(self.path) != meta.get("crc")
        ):
            log.info("memory_ann_stale", path=str(self.path))
            return None
        ix = _new_index(self.dims)
        ix.load(str(self.path))
        if ix.ndim != self.dims or (len(ix) < count and not self.by_id):
            return None
        self.max_id, self.saved_generation = int(meta.get("seq") or 0), meta.get("generation")
        return ix

    async def _build(self, rows: VectorRows, generation: str, count: int) -> None:
        """A new graph from every vector in the table; rows the sync adds meanwhile go in as well."""
        t = time.perf_counter()
        ix = _new_index(self.dims)
        with self._lock:  # from here the sync's adds go to the new graph too; an old one answers meanwhile
            self._next = ix
            self.known = [generation]
            if self.by_id:
                self.max_id = 0  # the new graph's position, from its own scan
        try:
            async for batch in rows.scan(BUILD_BATCH):
                await asyncio.to_thread(self._add_batch, ix, batch.ids, batch.vecs, batch.last)
        finally:
            with self._lock:
                self._next = None
        with self._lock:
            self.index = ix
        self.ready, self.origin = True, "built"
        log.info("memory_ann_built", rows=len(ix), seconds=round(time.perf_counter() - t, 1))
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self._save, generation, count)

    def _add_batch(self, ix, ids: np.ndarray, vecs: np.ndarray, last: int = 0) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.uint64)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        ok = np.isfinite(vecs).all(axis=1) & (np.abs(vecs).sum(axis=1) > 0)
        with self._lock:
            if ids.size:
                self.max_id = max(self.max_id, last or int(ids.max()))
            there = np.asarray(ix.contains(ids), dtype=bool)
            if self.by_id and there.any():  # stored again after the row the graph holds: the table's wins
                ix.remove(ids[there])
                there[:] = False
            new = ~there & ok  # (not by_id) the sync may have added a newer one
            if new.any():  # a build runs alone (the exact search answers): both cores of a small machine
                ix.add(ids[new], vecs[new], threads=BUILD_THREADS)

    def _save(self, generation: str, count: int) -> None:
        if not self.saves:
            return
        with self._lock:
            tag = f".{os.getpid()}.{threading.get_ident()}.tmp"  # another process may save beside this one
            tmp = self.path.with_name(self.path.name + tag)
            with contextlib.suppress(FileNotFoundError):
                self.meta_path.unlink()  # no meta: the file is not trusted until the new one is whole
            self.index.save(str(tmp))
            size, crc = tmp.stat().st_size, _crc(tmp)  # of the bytes written, before another can replace it
            os.replace(tmp, self.path)
            meta = {
                "generation": generation,
                "dims": self.dims,
                "rows": len(self.index),
                "bytes": size,
                "crc": crc,
            }
            if self.by_id:
                meta.update(seq=self.max_id, store=self.store_id)
            mtmp = self.meta_path.with_name(self.meta_path.name + tag)
            mtmp.write_text(json.dumps(meta))
            os.replace(mtmp, self.meta_path)
            self.dirty = False
            self.saved_at = time.monotonic()
