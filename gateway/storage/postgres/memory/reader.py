"""The chunk rows a search shows, and their stored vectors (memory/ports.py's ChunkReader), from PostgreSQL."""

from __future__ import annotations

from typing import Mapping

import asyncpg
import numpy as np

from ....memory.ports import ChunkRow
from .vectors import parse_vector


class PgChunkReader:
    def __init__(self, pool: asyncpg.Pool, agent_id: str):
        self.pool, self.agent_id = pool, agent_id

    async def chunk_rows(self, ids: list[int]) -> list[ChunkRow]:
        rows = await self.pool.fetch(
            "SELECT c.id, c.path, c.source, c.session_key, c.start_line, c.end_line, c.text, c.spans, c.context, "
            # (the file's mtime only where the chunk has no date, as on the files engine: ports.ChunkRow)
            "c.date, CASE WHEN c.date IS NULL OR c.date = '' THEN f.mtime_ns END FROM memory_chunks c "
            "LEFT JOIN memory_files f ON f.agent_id = c.agent_id "
            "AND f.path = c.path WHERE c.id = ANY($1::bigint[]) AND c.agent_id = $2",
            list(ids),
            self.agent_id,
        )
        return [ChunkRow(*r) for r in rows]

    async def vectors_of(self, ids: list[int], read: bool = True) -> dict[int, np.ndarray]:
        if not ids or not read:  # (none in hand: chunk_rows reads no vectors)
            return {}
        rows = await self.pool.fetch(
            "SELECT c.id, v.embedding::text FROM memory_chunks c JOIN memory_vectors v ON v.chunk_id = c.id "
            "WHERE c.agent_id = $1 AND c.id = ANY($2::bigint[])",
            self.agent_id,
            sorted(set(ids)),
        )
        return {int(r[0]): parse_vector(r[1]) for r in rows}

    async def vectors_at(
        self, keys: list[tuple[str, int, int]], ids: Mapping[tuple[str, int, int], int] | None = None
    ) -> dict[tuple[str, int, int], np.ndarray]:
        """By the keys' files (every chunk of them), or by the search's ids (`ids`: kept only where the
        chunk is still at its key)."""
        if not keys:
            return {}
        if ids is not None:
            rows = await self.pool.fetch(
                "SELECT c.path, c.start_line, c.end_line, v.embedding::text FROM memory_chunks c "
                "JOIN memory_vectors v ON v.chunk_id = c.id WHERE c.agent_id = $1 AND c.id = ANY($2::bigint[])",
                self.agent_id,
                sorted({ids[k] for k in keys}),
            )
        else:
            rows = await self.pool.fetch(
                "SELECT c.path, c.start_line, c.end_line, v.embedding::text FROM memory_chunks c "
                "JOIN memory_vectors v ON v.chunk_id = c.id WHERE c.agent_id = $1 AND c.path = ANY($2::text[])",
                self.agent_id,
                sorted({k[0] for k in keys}),
            )
        want = set(keys)
        found = {(r[0], int(r[1]), int(r[2])): r[3] for r in rows}
        return {k: parse_vector(text) for k, text in found.items() if k in want}
