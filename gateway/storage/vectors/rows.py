"""The narrow port through which the in-memory vector machinery (matrix.py, ann.py) reads an engine's
store of record of the vectors: SQLite's `chunks_vec` (storage/files/memory/vectors.py) or PostgreSQL's
`memory_vectors` (storage/postgres/memory/vectors.py). The engines implement it; neither is a subclass of
the other, and nothing here knows either database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncGenerator, Protocol

import numpy as np


@dataclass
class VectorBatch:
    ids: np.ndarray  # int64 chunk ids
    sources: list[str]  # "memory" or "sessions", a row each
    keys: list[str | None]  # the session key of a sessions row ("" or None for memory rows)
    vecs: np.ndarray  # float32 (len(ids), dims): the stored vectors
    pos: int = 0  # the engine's insertion position of the batch's last row (0: its highest chunk id)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def last(self) -> int:
        """Where a scan after this batch goes on (`scan`'s `after`)."""
        return self.pos if self.pos else (int(self.ids.max()) if len(self) else 0)


class VectorRows(Protocol):
    """The stored vectors of one index (one agent's, of one dimension count)."""

    async def count(self) -> int:
        """How many vectors are stored."""
        ...

    def scan(self, size: int, after: int = 0) -> AsyncGenerator[VectorBatch, None]:
        """Every stored vector after position `after`, `size` rows at a time. The position is the batch's
        `last`: an insertion order that every write advances (PostgreSQL's `seq`, so a vector stored later
        for an older chunk id, or stored again, comes after), or the chunk id (SQLite, never caught up)."""
        ...

    async def fetch(self, ids: list[int]) -> VectorBatch:
        """The stored vectors of these chunk ids (those still stored; in any order)."""
        ...
