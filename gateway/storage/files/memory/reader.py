"""The chunk rows a search shows, and their stored vectors (memory/ports.py's ChunkReader), from SQLite."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import orjson

from ....memory.ports import ChunkRow
from .db import Database
from .vectors import read_vectors


class SqliteChunkReader:
    """`vectors`: the index has stored vectors. Then `chunk_rows` keeps, of the rows' vectors, those the
    vector search just read (no second read), and `vectors_of` answers from them; the timeline reads the
    few more it compares by id (issue 46: the rows' trip read all twenty for at most five)."""

    def __init__(
        self,
        db: Database,
        vectors: bool = False,
        recent: Callable[[], tuple[str | None, dict[int, bytes]]] | None = None,
    ):
        self.db = db
        self.vectors = vectors
        # The vectors in hand with the last chunk_rows, by chunk id: an id is never given to another chunk
        # (store.SqliteChunks.write keeps the highest id ever given), so it names the same chunk for good.
        self._read: dict[int, bytes] = {}
        # The vectors the vector search just read (VectorStore.recent: its generation, the BLOBs by id):
        # those of the pool's rows are taken while the file's generation is still theirs.
        self._recent = recent

    async def chunk_rows(self, ids: list[int]) -> list[ChunkRow]:
        sql = (
            "SELECT c.id, c.path, c.source, c.session_key, c.start_line, c.end_line, c.text, c.spans, "
            # (the file's mtime only where the chunk has no date: the hit's date is the chunk's when it has
            # one, memory/search/searcher.py's `chunk_date`; issue 46, a files lookup a row less)
            "c.context, c.date, CASE WHEN c.date IS NULL OR c.date = '' THEN "
            "(SELECT f.mtime_ns FROM files f WHERE f.path = c.path) END FROM chunks c "
            f"WHERE c.id IN ({','.join('?' * len(ids))})"
        )
        generation, known = self._recent() if self.vectors and self._recent is not None else (None, {})
        if not known or generation is None or not any(cid in known for cid in ids):
            self._read = {}
            return [ChunkRow(*r) for r in await self.db.fetchall(sql, ids)]

        def both(conn: Any) -> tuple[list[tuple], dict[int, bytes]]:
            rows = conn.execute(sql, ids).fetchall()
            now = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
            if now is None or now[0] != generation:  # (a write since: the ids may not be the same chunks)
                return rows, {}
            return rows, {cid: known[cid] for cid in ids if cid in known}

        rows, self._read = await self.db.call(both)
        return [ChunkRow(*r) for r in rows]

    async def vectors_of(self, ids: list[int], read: bool = True) -> dict[int, np.ndarray]:
        got = self._read
        if read and not all(cid in got for cid in ids):  # not all in hand (another search's since, or none)
            got = await read_vectors(self.db, sorted(set(ids)))
        return {cid: np.frombuffer(got[cid], dtype=np.float32) for cid in sorted(set(ids)) if cid in got}

    async def vectors_at(
        self, keys: list[tuple[str, int, int]], ids: Mapping[tuple[str, int, int], int] | None = None
    ) -> dict[tuple[str, int, int], np.ndarray]:
        """One statement: each key's chunk through `chunks_identity` (or by its id, `ids`: the search's,
        kept only where the chunk is still at that key), its vector by a point lookup in vec0 (not every
        chunk of the keys' files, then their vectors in a second trip: issue 46)."""
        if not keys:
            return {}
        out: dict[tuple[str, int, int], np.ndarray] = {}
        want = dict.fromkeys(keys)
        if ids is not None:
            sql = (
                "SELECT c.path, c.start_line, c.end_line, v.embedding FROM json_each(?) AS j "
                "CROSS JOIN chunks AS c ON c.id = j.value CROSS JOIN chunks_vec AS v ON v.chunk_id = c.id"
            )
            arg = orjson.dumps(sorted({ids[k] for k in want})).decode()
        else:
            sql = (
                "SELECT c.path, c.start_line, c.end_line, v.embedding FROM json_each(?) AS j "
                "CROSS JOIN chunks AS c ON c.path = json_extract(j.value, '$[0]') "
                "AND c.start_line = json_extract(j.value, '$[1]') AND c.end_line = json_extract(j.value, '$[2]') "
                "CROSS JOIN chunks_vec AS v ON v.chunk_id = c.id"
            )
            arg = orjson.dumps([list(k) for k in want]).decode()
        for path, a, b, blob in await self.db.fetchall(sql, [arg]):
            key = (path, int(a), int(b))
            if key in want:
                out[key] = np.frombuffer(blob, dtype=np.float32)
        return out
