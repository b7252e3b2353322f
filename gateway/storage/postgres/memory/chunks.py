"""`memory_chunks` and `memory_vectors` of an agent (memory/ports.py's ChunkStore): written a batch at a
time through the sync's connection, read beside it through the pool."""

from __future__ import annotations

from typing import Any, Callable


from ....memory.ports import ChunkKey, Unembedded, VectorRow, WriteBatch
from .agent import SyncSession, bump_generation, pg_text
from .cache import PgEmbeddingCache
from .vectors import binary_vectors

CHUNK_COLUMNS = (
    "id",
    "agent_id",
    "path",
    "source",
    "session_key",
    "start_line",
    "end_line",
    "hash",
    "text",
    "spans",
    "context",
    "date",
    "embedded",
)
VECTOR_COLUMNS = ("chunk_id", "agent_id", "source", "session_key", "dims", "embedding")


def _last_by_path(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """One row a path (the first column), the last one named: an upsert over `unnest` refuses to touch a
    row twice ("ON CONFLICT DO UPDATE command cannot affect row a second time")."""
    return list({r[0]: r for r in rows}.values())


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as columns, for a statement over `unnest` of arrays: one round trip, one plan, for a batch."""
    return [list(c) for c in zip(*rows)] if rows else [[] for _ in range(width)]


class PgChunks:
    """The agent's chunk rows and their vectors."""

    def __init__(self, session: SyncSession, cache: PgEmbeddingCache):
        self.s, self.cache = session, cache

    async def stored(self, paths: list[str]) -> dict[str, set[ChunkKey]]:
        """Through the pool: the sync's own connection is writing the previous batch meanwhile (other
        files; the agent's lock keeps other gateways' syncs out)."""
        stored: dict[str, set[ChunkKey]] = {}
        if paths:
            for path, a, b, h in await self.s.pool.fetch(
                "SELECT path, start_line, end_line, hash FROM memory_chunks WHERE agent_id = $1 "
                "AND path = ANY($2::text[])",
                self.s.agent_id,
                paths,
            ):
                stored.setdefault(path, set()).add((a, b, h))
        return stored

    async def write(self, paths: list[str], plan: Callable[[dict[str, dict[ChunkKey, int]]], WriteBatch]) -> None:
        agent = self.s.agent_id
        async with self.s.connection() as conn:
            async with conn.transaction():
                current: dict[str, dict[ChunkKey, int]] = {}
                if paths:
                    for path, cid, a, b, h in await conn.fetch(
                        "SELECT path, id, start_line, end_line, hash FROM memory_chunks WHERE agent_id = $1 "
                        "AND path = ANY($2::text[])",
                        agent,
                        paths,
                    ):
                        current.setdefault(path, {})[(a, b, h)] = cid
                batch = plan(current)
                n_new = len(batch.chunks)
                ids = [
                    r[0]
                    for r in (
                        await conn.fetch("SELECT nextval('memory_chunks_id_seq') FROM generate_series(1, $1)", n_new)
                        if n_new
                        else []
                    )
                ]
                inserts: list[tuple[Any, ...]] = []
                vec_rows: list[VectorRow] = []
                for cid, new in zip(ids, batch.chunks):
                    inserts.append((cid, agent, *new.columns(pg_text), new.vector is not None))
                    if new.vector is not None:
                        vec_rows.append(VectorRow(cid, new.file.source, new.file.session_key, new.vector))
                if batch.touched:
                    await conn.execute(
                        "UPDATE memory_files f SET size = u.size, mtime_ns = u.mtime_ns FROM unnest($2::text[], "
                        "$3::bigint[], $4::bigint[]) AS u(path, size, mtime_ns) WHERE f.agent_id = $1 AND f.path = u.path",
                        agent,
                        *_columns(_last_by_path([(sf.path, sf.size, sf.mtime_ns) for sf in batch.touched]), 3),
                    )
                if batch.stale:
                    await conn.execute("DELETE FROM memory_chunks WHERE id = ANY($1::bigint[])", batch.stale)
                if inserts:  # new ids, so COPY (no conflict to handle): the fastest way into PostgreSQL
                    await conn.copy_records_to_table("memory_chunks", records=inserts, columns=CHUNK_COLUMNS)
                if vec_rows:
                    await binary_vectors(conn)
                    await conn.copy_records_to_table(
                        "memory_vectors", records=self._vector_records(vec_rows), columns=VECTOR_COLUMNS
                    )
                if batch.files:  # one statement, one row a path
                    await conn.execute(
                        "INSERT INTO memory_files(agent_id, path, source, session_key, size, mtime_ns, hash, chunks, "
                        "indexed_at) SELECT $1, u.*, $9 FROM unnest($2::text[], $3::text[], $4::text[], "
                        "$5::bigint[], $6::bigint[], $7::text[], $8::int[]) AS u ON CONFLICT (agent_id, path) DO "
                        "UPDATE SET source = excluded.source, session_key = excluded.session_key, "
                        "size = excluded.size, mtime_ns = excluded.mtime_ns, hash = excluded.hash, "
                        "chunks = excluded.chunks, indexed_at = excluded.indexed_at",
                        agent,
                        *_columns(
                            _last_by_path(
                                [
                                    (sf.path, sf.source, sf.session_key, sf.size, sf.mtime_ns, h, n)
                                    for sf, h, n in batch.files
                                ]
                            ),
                            7,
                        ),
                        batch.now,
                    )
                if batch.fresh:
                    await self.cache.put_many(batch.fresh, conn)
                if batch.stale or inserts or batch.files:
                    await bump_generation(conn, agent)
            self.s.deleted.extend(batch.stale)  # committed: this gateway's FTS5 mirror drops them

    async def ready_vectors(self, dims: int) -> None:
        """Nothing: the vector column holds any size, and has no index (the gateway searches in memory)."""

    def _vector_records(self, rows: list[VectorRow]) -> list[tuple[Any, ...]]:
        agent = self.s.agent_id
        return [(r.id, agent, r.source, r.session_key, int(r.vector.shape[0]), r.vector) for r in rows]

    async def _insert_vectors(self, conn: Any, rows: list[VectorRow]) -> None:
        """Vectors of chunks that had none: another gateway may have stored one meanwhile (no COPY)."""
        if rows:
            await binary_vectors(conn)
            await conn.executemany(
                "INSERT INTO memory_vectors(chunk_id, agent_id, source, session_key, dims, embedding) "
                "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (chunk_id) DO NOTHING",
                self._vector_records(rows),
            )

    async def unembedded(self, after: int, limit: int) -> list[Unembedded]:
        return [
            Unembedded(*r)
            for r in await self.s.db.fetch(
                "SELECT id, source, session_key, text FROM memory_chunks WHERE agent_id = $1 AND NOT embedded "
                "AND id > $2 ORDER BY id LIMIT $3",
                self.s.agent_id,
                after,
                limit,
            )
        ]

    async def add_vectors(self, rows: list[VectorRow]) -> int:
        async with self.s.connection() as conn:
            async with conn.transaction():
                # Only rows still present and still without a vector (a `forget` may have run between).
                live = {
                    r[0]
                    for r in await conn.fetch(
                        "SELECT id FROM memory_chunks WHERE agent_id = $1 AND NOT embedded AND id = ANY($2::bigint[])",
                        self.s.agent_id,
                        [r.id for r in rows],
                    )
                }
                todo = [r for r in rows if r.id in live]
                await self._insert_vectors(conn, todo)
                await conn.execute(
                    "UPDATE memory_chunks SET embedded = true WHERE id = ANY($1::bigint[])", [r.id for r in todo]
                )
                if todo:
                    await bump_generation(conn, self.s.agent_id)
        return len(todo)

    async def count_unembedded(self) -> int:
        return int(
            await self.s.db.fetchval(
                "SELECT count(*) FROM memory_chunks WHERE agent_id = $1 AND NOT embedded", self.s.agent_id
            )
        )

    async def drop_unusable(self) -> int:
        """pgvector refuses NaN, so only zero vectors can be stored."""
        async with self.s.connection() as conn:
            await self.cache.purge_unusable(conn)
            async with conn.transaction():
                ids = [
                    r[0]
                    for r in await conn.fetch(
                        "DELETE FROM memory_vectors WHERE agent_id = $1 AND vector_norm(embedding) = 0 "
                        "RETURNING chunk_id",
                        self.s.agent_id,
                    )
                ]
                if ids:
                    await conn.execute("UPDATE memory_chunks SET embedded = false WHERE id = ANY($1::bigint[])", ids)
                    await bump_generation(conn, self.s.agent_id)
        return len(ids)
