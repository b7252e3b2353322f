"""Rebuilding the SQLite index (the files engine's): when it must happen, who may do it, and the files it leaves behind.

- **Signature** (memory/signature.py): a stored signature that differs from the settings' means the
  index must be rebuilt.
- **Users lock** (`IndexUsers`): every process with the index open holds a shared lock on
  `<db>.users`; a rebuild swaps a new file in only while its shared lock upgrades to exclusive at once,
  i.e. no other process (the gateway, a `jarvis memory` command) has the index open. An OFD lock, not
  a flock: a refused flock upgrade drops the shared lock, and the other process could then swap.
- **Fresh build** (`build_fresh`, `swap_in`): everything is indexed into `<db>.rebuild` (the embedding
  cache copied over first, so unchanged text is not embedded again), which one rename puts in place.
- **Damage** (`set_aside`): a corrupt index is derived data: it is moved to `<db>.corrupt-<stamp>`
  (the newest KEEP_CORRUPT are kept for a post-mortem) and an empty one is filled from the sources —
  only while no other process has it open (the users lock, exclusive): SQLite names a database's WAL
  by the path it opened, so another process closing the moved-aside file last would delete the WAL
  of the new index at that path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator, Awaitable, Callable, Iterator, Protocol

import structlog

from ....errors import Conflict
from ....fsutil import EXCLUSIVE, SHARED, ofd_lock
from ....memory.embeddings import EmbeddingProvider
from ....memory.index.pipeline import IndexPipeline
from ....memory.index.settings import IndexSettings, Progress, SyncStats
from .db import Database
from .migrations import SchemaParams, migrate, set_meta
from ....memory.index.sources import session_path
from .store import SqliteIndexStore

if TYPE_CHECKING:  # pragma: no cover
    from ....config import MemoryConfig
    from ....memory.index.lifecycle import IndexLifecycle
    from .gate import Gate

log = structlog.get_logger("gateway.memory")

KEEP_CORRUPT = 3  # damaged index files kept for a post-mortem; older ones are deleted
WAL_SUFFIXES = ("-wal", "-shm")


class IndexUsers:
    """The shared lock on `<db>.users` that this process holds while it has the index open (an OFD lock,
    fsutil.ofd_lock: taking it alone and giving it back never leaves the process without it)."""

    def __init__(self, db_path: Path, agent_id: str):
        self.path = Path(str(db_path) + ".users")
        self.agent_id = agent_id
        self._fd: int | None = None

    async def hold(self, wait_s: float = 10.0) -> None:
        """Take the shared lock. Another process rebuilding the index holds it exclusively: wait for it
        without blocking the event loop, then give up with Conflict."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if not await _within(wait_s, lambda: ofd_lock(fd, SHARED)):
            os.close(fd)
            raise Conflict(
                f"the memory index of agent {self.agent_id} is being rebuilt by another process "
                f"(a jarvis memory command); retry when it is done",
                {"agentId": self.agent_id},
            )
        self._fd = fd

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Exclusive for the duration, or Conflict at once when another process has the index open."""
        assert self._fd is not None
        if not ofd_lock(self._fd, EXCLUSIVE):
            raise Conflict(
                "the index must be rebuilt for new settings, but another process (the running "
                "gateway, or a jarvis memory command) has it open; it is rebuilt by whichever "
                "has it alone — e.g. the gateway on its next sync once this command ends"
            )
        try:
            yield
        finally:
            ofd_lock(self._fd, SHARED)

    @contextlib.asynccontextmanager
    async def alone_within(self, wait_s: float, doing: str) -> AsyncIterator[None]:
        """Exclusive for the duration, waiting up to `wait_s` (without blocking the event loop) for the
        other processes that have the index open to close it; Conflict after that, naming `doing`."""
        fd = self._fd
        assert fd is not None
        if not await _within(wait_s, lambda: ofd_lock(fd, EXCLUSIVE)):
            raise Conflict(
                f"{doing}, but another process (a jarvis memory command) still has the index "
                f"of agent {self.agent_id} open; retried when it is done",
                {"agentId": self.agent_id},
            )
        try:
            yield
        finally:
            ofd_lock(fd, SHARED)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


async def _within(wait_s: float, attempt: Callable[[], bool]) -> bool:
    """`attempt()` every 100 ms until it succeeds (True) or `wait_s` passed (False)."""
    deadline = time.monotonic() + wait_s
    while not attempt():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


async def build_fresh(
    db_path: Path,
    open_db: Callable[[Path], Awaitable[Database]],
    tokenizer: str,
    signature: str,
    provider: EmbeddingProvider,
    settings: IndexSettings,
    progress: Progress | None,
) -> tuple[Path, Database, SqliteIndexStore, SyncStats]:
    """Index every source into `<db>.rebuild`, seeded with the live index's embedding cache. Returns the
    new file, its open connection and store (for last changes before the swap) and the sync's stats."""
    tmp = db_path.with_name(db_path.name + ".rebuild")
    for suffix in ("",) + WAL_SUFFIXES:
        _remove(str(tmp) + suffix)
    tdb = await open_db(tmp)
    try:
        await migrate(tdb, SchemaParams(tokenizer=tokenizer))
        await tdb.execute("ATTACH DATABASE ? AS live", (str(db_path),))
        try:
            await tdb.execute(
                "INSERT OR IGNORE INTO embedding_cache(provider, model, hash, dims, embedding) "
                "SELECT provider, model, hash, dims, embedding FROM live.embedding_cache ORDER BY rowid"
            )
        finally:
            await tdb.execute("DETACH DATABASE live")
        await set_meta(tdb, "index_signature", signature)
        store = SqliteIndexStore(tdb, provider, settings)
        stats = await IndexPipeline(store, provider, settings).sync(
            force=True, memory=True, sessions=True, progress=progress
        )
    except BaseException:
        with contextlib.suppress(Exception):
            await tdb.close()
        raise
    return tmp, tdb, store, stats


def swap_in(tmp: Path, db_path: Path) -> None:
    """Blocking: put a checkpointed, closed rebuild in place of the (closed) live index."""
    os.replace(tmp, db_path)
    for suffix in (*WAL_SUFFIXES, ".ann.json", ".ann"):  # the old index's ANN graph goes with it
        _remove(str(db_path) + suffix)
        _remove(str(tmp) + suffix)


async def set_aside(db_path: Path) -> tuple[str, Path]:
    """Move a damaged index (and its WAL) to `<db>.corrupt-<stamp>`, keeping the newest KEEP_CORRUPT
    such copies. Returns (stamp, where it went)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    aside = db_path.with_name(f"{db_path.name}.corrupt-{stamp}")
    for suffix in ("",) + WAL_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.replace, str(db_path) + suffix, str(aside) + suffix)
    for suffix in (".ann.json", ".ann"):  # its ANN graph is derived from it: built again for the new one
        await asyncio.to_thread(_remove, str(db_path) + suffix)
    await asyncio.to_thread(_keep_newest_aside, db_path, KEEP_CORRUPT)
    return stamp, aside


def _keep_newest_aside(db_path: Path, keep: int) -> None:
    """Blocking: delete all but the newest `keep` set-aside copies of the index (and their WAL files)."""
    prefix = db_path.name + ".corrupt-"
    stamps = sorted({p.name[len(prefix) :].split("-", 1)[0] for p in db_path.parent.glob(prefix + "*")})
    for stamp in stamps[:-keep] if keep else stamps:
        for suffix in ("",) + WAL_SUFFIXES:
            _remove(str(db_path.with_name(prefix + stamp + suffix)))


class RebuiltIndex(Protocol):
    """What `rebuild_aside` uses of the files engine's index (index.py's FilesMemoryIndex)."""

    life: IndexLifecycle
    cfg: MemoryConfig
    db_path: Path
    writer: Database | None
    _forgotten: set[str]  # sessions forgotten while the rebuild ran: dropped from it before the swap
    _gate: Gate

    async def _open_db(self, path: Path) -> Database: ...
    async def _close_index(self) -> None: ...
    async def _open_live(self) -> None: ...
    async def _open_live_state(self) -> None: ...


async def rebuild_aside(ix: RebuiltIndex, progress: Progress | None) -> SyncStats:
    """The files index's rebuild (its `run_rebuild`, with no other process holding the file): everything
    indexed into a fresh database next to the live one (`build_fresh`), which is then swapped in (`swap_in`)
    and opened; sessions forgotten meanwhile are dropped from it first."""
    assert ix.life.provider is not None and ix.writer is not None
    ix.life.rebuild_running = True
    ix._forgotten.clear()
    ix.life.marks.clear()
    try:
        tmp, tdb, store, stats = await build_fresh(
            ix.db_path,
            ix._open_db,
            ix.cfg.search.fts_tokenizer,
            ix.life.signature(),
            ix.life.provider,
            ix.life.settings(),
            progress,
        )
        try:
            async with ix.life.write_lock:
                if ix._forgotten:
                    await store.files.remove([session_path(k) for k in ix._forgotten])
                await tdb.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                await tdb.close()
                async with ix._gate.exclusive():
                    await ix._close_index()
                    swap_in(tmp, ix.db_path)
                    ix.life.rebuild_due = False
                    await ix._open_live()
                    await ix._open_live_state()
        except BaseException:
            with contextlib.suppress(Exception):
                await tdb.close()
            raise
    finally:
        ix.life.rebuild_running = False
    log.info("memory_index_rebuilt", files=stats.indexed, duration_ms=stats.duration_ms)
    await ix.life.after_sync(stats)
    return stats
