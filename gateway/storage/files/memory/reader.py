"""The chunk rows a search shows, and their stored vectors (memory/ports.py's ChunkReader), from SQLite."""

from __future__ import annotations

import numpy as np
import orjson

from ....memory.ports import ChunkRow
from .db import Database
from .vectors import read_vectors


class SqliteChunkReader:
    def __init__(self, db: Database):
        self.db = db

    async def chunk_rows(self, ids: list[int]) -> list[ChunkRow]:
        return [
            ChunkRow(*r)
            for r in await self.db.fetchall(
                "SELECT c.id, c.path, c.source, c.session_key, c.start_line, c.end_line, c.text, c.spans, "
                "c.context, c.date, f.mtime_ns FROM chunks c LEFT JOIN files f ON f.path = c.path "
                f"WHERE c.id IN ({','.join('?' * len(ids))})",
                ids,
            )
        ]

    async def vectors_at(self, keys: list[tuple[str, int, int]]) -> dict[tuple[str, int, int], np.ndarray]:
        if not keys:
            return {}
        ids: dict[tuple[str, int, int], int] = {}
        for cid, path, a, b in await self.db.fetchall(
            "SELECT c.id, c.path, c.start_line, c.end_line FROM json_each(?) AS j "
            "CROSS JOIN chunks AS c ON c.path = j.value",
            [orjson.dumps(sorted({k[0] for k in keys})).decode()],
        ):
            ids[(path, int(a), int(b))] = int(cid)
        want = {k: ids[k] for k in keys if k in ids}
        blobs = await read_vectors(self.db, sorted(set(want.values())))
        return {k: np.frombuffer(blobs[c], dtype=np.float32) for k, c in want.items() if c in blobs}
