"""The gate between searches and a swap of the index file, and the embedding cache read through it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Callable

import numpy as np

from ....errors import Unavailable
from .cache import EmbeddingCache
from .db import Database


class Gate:
    """Many searches at once, or one index swap. Every read of the file is under `shared`, so whatever it
    raises passes `damaged` first: the index's one place that tells damage (db.is_corruption) from other
    errors, starts the recovery and answers Unavailable instead — for every door that reads the index
    (searches of each mode, their stored vectors, memory.status's counts, the embedding cache, statements).
    Only a raised exception is classified: the happy path costs nothing."""

    def __init__(self, damaged: Callable[[BaseException], BaseException | None] = lambda exc: None) -> None:
        self._readers = 0
        self._swapping = False
        self._cond = asyncio.Condition()
        self._damaged = damaged

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._swapping)
            self._readers += 1
        try:
            yield
        except Exception as exc:
            instead = self._damaged(exc)
            if instead is None:
                raise
            raise instead from None
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    def instead(self, exc: BaseException) -> BaseException | None:
        """What a read or write of the file outside `shared` raises instead of `exc` (None: `exc` itself)."""
        return self._damaged(exc)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._swapping)
            self._swapping = True
            await self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._swapping = False
                self._cond.notify_all()


class GatedCache:
    """The embedding cache read through the reader under the gate (never on a reader a swap is closing),
    written through the writer under the write lock (never inside a sync's transaction, never on a
    writer a rebuild has closed). `reader` and `writer` give the index's connections of the moment."""

    def __init__(
        self,
        gate: Gate,
        write_lock: asyncio.Lock,
        reader: Callable[[], Database | None],
        writer: Callable[[], Database | None],
        provider: str,
        model: str,
        max_entries: int,
    ):
        self.gate, self.write_lock, self.reader, self.writer = gate, write_lock, reader, writer
        self.args = (provider, model, max_entries)

    async def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]:
        # A damaged index set aside has no reader until it is open again (which may wait for another
        # process to close it): say so at once rather than fail on the missing one.
        if self.reader() is None:
            raise being_rebuilt()
        async with self.gate.shared():  # not on a reader a swap is closing
            reader = self.reader()
            if reader is None:
                raise being_rebuilt()
            return await EmbeddingCache(reader, *self.args).get_many(hashes)

    async def put_many(self, items: dict[str, np.ndarray]) -> None:
        async with self.write_lock:
            writer = self.writer()
            if writer is None:
                raise being_rebuilt()
            try:  # (a write under the write lock, never under `shared`: a recovery takes both, that one first)
                await EmbeddingCache(writer, *self.args).put_many(items)
            except Exception as exc:
                instead = self.gate.instead(exc)
                if instead is None:
                    raise
                raise instead from None


def being_rebuilt() -> Unavailable:
    return Unavailable(
        "the memory index was damaged and is being rebuilt from the memory files and transcripts; retry shortly",
        retryable=True,
        retry_after_ms=2000,
    )
