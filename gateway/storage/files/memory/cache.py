"""The embedding cache: (provider, model, sha256 of the text) → vector, in the index database.

Unchanged text is never embedded twice by a provider that is `cached` (a remote one), also across
restarts and index rebuilds (a rebuild copies the cache into the new database). It is pruned to
`cacheMaxEntries`, oldest entries first.
"""

from __future__ import annotations

import numpy as np

from ....memory.embeddings.base import drop_unusable
from .db import Database, batches

_IN_BATCH = 500


class EmbeddingCache:
    def __init__(self, db: Database, provider: str, model: str, max_entries: int, cached: bool = True):
        """`cached`: False for a provider whose vectors are not worth keeping (the local model)."""
        self.db, self.provider, self.model, self.max_entries = db, provider, model, max_entries
        self.cached = cached
        self.enabled = cached and max_entries > 0  # else nothing is looked up or stored
        self.reader: Database | None = None  # another connection to the same file that lookups read through

    async def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]:
        """Cached vectors by text hash."""
        db = self.reader or self.db
        out: dict[str, np.ndarray] = {}
        if not self.enabled:
            return out
        uniq = list(dict.fromkeys(hashes))
        for i in range(0, len(uniq), _IN_BATCH):
            part = uniq[i : i + _IN_BATCH]
            marks = ",".join("?" * len(part))
            rows = await db.fetchall(
                f"SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? AND hash IN ({marks})",
                (self.provider, self.model, *part),
            )
            for h, blob in rows:
                out[h] = np.frombuffer(blob, dtype=np.float32)
        return drop_unusable(out)

    async def put_many(self, items: dict[str, np.ndarray]) -> None:
        if not self.enabled or not items:
            return
        by_dims: dict[int, list[tuple[str, np.ndarray]]] = {}
        for h, v in items.items():
            by_dims.setdefault(int(v.shape[0]), []).append((h, v))
        for dims, part in by_dims.items():
            await self.db.insert_rows(
                # REPLACE: a fresh vector takes the place of an unusable one (drop_unusable) of the same text.
                "INSERT OR REPLACE INTO embedding_cache(provider, model, hash, dims, embedding)",
                [(self.provider, self.model, h, dims) for h, _ in part],
                np.stack([v for _, v in part]),
            )

    async def purge_unusable(self) -> int:
        """Delete this provider's entries that are NaN, infinite or all zeros (a forced sync's check of
        what was cached before providers' answers were checked); returns how many."""
        if not self.enabled:
            return 0
        bad: list[tuple[int]] = []
        async with self.db.c.execute(
            "SELECT rowid, embedding FROM embedding_cache WHERE provider = ? AND model = ?", (self.provider, self.model)
        ) as cur:
            async for rows in batches(cur, 4096):
                bad.extend((r[0],) for r in rows if not drop_unusable({"": np.frombuffer(r[1], dtype=np.float32)}))
        if bad:
            await self.db.executemany("DELETE FROM embedding_cache WHERE rowid = ?", bad)
        return len(bad)

    async def count(self) -> int:
        return int(await self.db.scalar("SELECT count(*) FROM embedding_cache", default=0))

    async def prune(self) -> int:
        """Delete the oldest entries beyond max_entries, and any of this provider's when it is not
        cached (an index from before it was so); returns how many."""
        gone = 0
        if not self.cached:
            gone = await self.db.execute(
                "DELETE FROM embedding_cache WHERE provider = ? AND model = ?", (self.provider, self.model)
            )
        n = await self.count()
        excess = n - max(self.max_entries, 0)
        if excess <= 0:
            return gone
        await self.db.execute(
            "DELETE FROM embedding_cache WHERE rowid IN (SELECT rowid FROM embedding_cache ORDER BY rowid LIMIT ?)",
            (excess,),
        )
        return excess + gone
