"""The embedding cache as a table shared by every gateway and agent (memory/ports.py's
EmbeddingCacheStore; the same contract as the files engine's EmbeddingCache)."""

from __future__ import annotations

from typing import Any

import asyncpg
import numpy as np

from ....memory.embeddings.base import drop_unusable


class PgEmbeddingCache:
    def __init__(self, pool: asyncpg.Pool, provider: str, model: str, max_entries: int, cached: bool = True):
        self.pool, self.provider, self.model, self.max_entries = pool, provider, model, max_entries
        self.cached = cached
        self.enabled = cached and max_entries > 0

    async def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]:
        if not self.enabled or not hashes:
            return {}
        rows = await self.pool.fetch(
            "SELECT hash, embedding FROM memory_embedding_cache WHERE provider = $1 AND model = $2 "
            "AND hash = ANY($3::text[])",
            self.provider,
            self.model,
            list(dict.fromkeys(hashes)),
        )
        return drop_unusable({r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows})

    async def put_many(self, items: dict[str, np.ndarray], conn: Any = None) -> None:
        if not self.enabled or not items:
            return
        hashes = list(items)
        vectors = [np.asarray(items[h], dtype=np.float32) for h in hashes]
        await (conn or self.pool).execute(  # one statement for the batch (the keys of a dict: no repeats)
            "INSERT INTO memory_embedding_cache(provider, model, hash, dims, embedding) SELECT $1, $2, u.* "
            "FROM unnest($3::text[], $4::int[], $5::bytea[]) AS u ON CONFLICT (provider, model, hash) "
            "DO UPDATE SET dims = excluded.dims, embedding = excluded.embedding",
            self.provider,
            self.model,
            hashes,
            [int(v.shape[0]) for v in vectors],
            [v.tobytes() for v in vectors],
        )

    async def purge_unusable(self, conn: Any) -> int:
        if not self.enabled:
            return 0
        bad: list[str] = []
        last = ""
        while rows := await conn.fetch(  # a batch at a time: the cache may hold gigabytes of vectors
            "SELECT hash, embedding FROM memory_embedding_cache WHERE provider = $1 AND model = $2 "
            "AND hash > $3 ORDER BY hash LIMIT 4096",
            self.provider,
            self.model,
            last,
        ):
            last = rows[-1][0]
            found = {r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows}
            bad.extend(set(found) - set(drop_unusable(found)))
        if bad:
            await conn.execute(
                "DELETE FROM memory_embedding_cache WHERE provider = $1 AND model = $2 AND hash = ANY($3::text[])",
                self.provider,
                self.model,
                bad,
            )
        return len(bad)

    async def count(self) -> int:
        return int(await self.pool.fetchval("SELECT count(*) FROM memory_embedding_cache"))

    async def prune(self, conn: Any = None) -> int:
        db = conn or self.pool
        gone = 0
        if not self.cached:
            r = await db.execute(
                "DELETE FROM memory_embedding_cache WHERE provider = $1 AND model = $2", self.provider, self.model
            )
            gone = int(r.split()[-1])
        excess = int(await db.fetchval("SELECT count(*) FROM memory_embedding_cache")) - max(self.max_entries, 0)
        if excess <= 0:
            return gone
        await db.execute(
            "DELETE FROM memory_embedding_cache WHERE ctid IN (SELECT ctid FROM memory_embedding_cache "
            "ORDER BY created_at LIMIT $1)",
            excess,
        )
        return gone + excess
