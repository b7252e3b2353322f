"""Vector search in PostgreSQL (memory/ports.py's VectorSearch): the nearest chunks by cosine distance
(pgvector's `<=>`) through the HNSW index of the provider's dimensions, the one schema object made per
dimension count (`ensure_dims_index`; the vector table itself is db.py's VECTOR_MIGRATIONS)."""

from __future__ import annotations

import math
import struct
import weakref
from typing import Any

import asyncpg
import numpy as np
import orjson

from ..db import lock_key
from .agent import search_filter
from .fts_index import try_schema_locks

HNSW_MAX_DIMS = 2000  # HNSW's limit for `vector`; larger ones are searched exactly
# Building the HNSW index over a bulk load takes minutes (100k 256-d vectors: ~1.5 min on a loaded 2-core
# machine; a million, over ten): past the pool's command timeout (60 s), which cancelled every build there
# and left the vectors unindexed (searched exactly, a scan of them all).
INDEX_BUILD_TIMEOUT_S = 6 * 3600.0


def vector_text(v: np.ndarray) -> str:
    """A vector in pgvector's text form ('[1,2,3]'): sent as text and cast, so no codec is needed."""
    return "[" + ",".join(f"{x:.8g}" for x in np.asarray(v, dtype=np.float32).tolist()) + "]"


def parse_vector(text: str) -> np.ndarray:
    return np.array(orjson.loads(text), dtype=np.float32)


_VECTOR_HEAD = struct.Struct(">HH")  # pgvector's binary form: dims, an unused word, then big-endian float4s


def vector_binary(v: np.ndarray) -> bytes:
    """A vector in pgvector's binary form (`vector_recv`): what a sync's COPY sends, ~1 µs a vector where
    the text form took ~100 µs of formatting in Python and as much parsing in the server."""
    a = np.asarray(v, dtype=">f4")
    return _VECTOR_HEAD.pack(a.shape[0], 0) + a.tobytes()


def vector_unbinary(data: bytes) -> np.ndarray:
    dims, _ = _VECTOR_HEAD.unpack_from(data)
    return np.frombuffer(data, dtype=">f4", count=dims, offset=_VECTOR_HEAD.size).astype(np.float32)


_BINARY_VECTORS: "weakref.WeakSet[Any]" = weakref.WeakSet()  # connections that have the codec


async def binary_vectors(conn: Any) -> None:
    """pgvector's `vector` exchanged in binary on this connection (once per connection: a codec is the
    connection's, and setting one drops its prepared statements). Every query of ours that reads a vector
    casts it to text first, so only what is written this way changes."""
    raw = getattr(conn, "_con", conn)  # a pool's connection proxy: the codec belongs to the connection
    if raw in _BINARY_VECTORS:
        return
    schema = await conn.fetchval("SELECT typnamespace::regnamespace::text FROM pg_type WHERE oid = 'vector'::regtype")
    await conn.set_type_codec("vector", schema=schema, encoder=vector_binary, decoder=vector_unbinary, format="binary")
    _BINARY_VECTORS.add(raw)


def dims_index(dims: int) -> str:
    return f"memory_vectors_hnsw_{int(dims)}"


async def ensure_dims_index(conn: asyncpg.Connection, dims: int, bulk: bool = False, wait: bool = True) -> bool:
    """The HNSW cosine index for vectors of `dims` dimensions, the one schema object made per dimension
    count, when such vectors are first stored (an expression index: a `vector` column without a fixed size
    cannot have one). `bulk`: built over many rows, with more memory for the build (a million 256-d vectors fit, no
    spilling). `wait=False` (an index's open): made only if no other gateway holds the bulk-load or schema
    lock (fts_index.py), else False, the index missing still (its holder builds it; searches are exact)."""
    if not 0 < dims <= HNSW_MAX_DIMS:
        return True
    # Already there (the usual case, at every agent's open): no wait on the schema lock, which another
    # gateway's index build may hold for minutes.
    if await conn.fetchval(f"SELECT to_regclass('{dims_index(dims)}') IS NOT NULL"):
        return True
    async with conn.transaction():
        if not wait:
            if not await try_schema_locks(conn):
                return False
        else:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
        if bulk:
            await conn.execute("SET LOCAL maintenance_work_mem = '2GB'")
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS {dims_index(dims)} ON memory_vectors "
            f"USING hnsw ((embedding::vector({int(dims)})) vector_cosine_ops) WHERE dims = {int(dims)}",
            timeout=INDEX_BUILD_TIMEOUT_S,
        )
    return True


async def drop_dims_index_for_load(conn: asyncpg.Connection, dims: int) -> bool:
    """Before a first bulk load of `dims`-d vectors (none stored yet, by any agent): drop their HNSW index,
    for `ensure_dims_index(bulk=True)` to build over the loaded rows. False (nothing dropped) when such
    vectors are stored already."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
        if await conn.fetchval("SELECT 1 FROM memory_vectors WHERE dims = $1 LIMIT 1", dims):
            return False
        await conn.execute(f"DROP INDEX IF EXISTS {dims_index(dims)}")
    return True


class PgVectorSearch:
    iterative: bool | None = None  # whether the server's pgvector has hnsw.iterative_scan (learnt once)

    def __init__(self, pool: asyncpg.Pool, agent_id: str, dims: int):
        self.pool, self.agent_id, self.dims = pool, agent_id, int(dims)
        self.unusable: set[int] = set()  # chunk ids whose stored vector is zero

    async def knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, generation: str, count: int
    ) -> list[tuple[int, float]]:
        d = self.dims
        where = ["agent_id = $2", f"dims = {d}"]
        params: list[Any] = [vector_text(q), self.agent_id]
        search_filter(where, params, sources, session_key, "")
        params.append(int(n))
        sql = (
            f"SELECT chunk_id, embedding::vector({d}) <=> $1::text::vector({d}) AS dist FROM memory_vectors "
            f"WHERE {' AND '.join(where)} ORDER BY dist LIMIT ${len(params)}"
        )
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(40, 2 * int(n)))}")
                if PgVectorSearch.iterative is not False:
                    # Other agents' vectors share the HNSW graph: keep scanning until n of this agent's
                    # pass the filter (pgvector 0.8; an older one returns what ef_search finds).
                    try:
                        async with conn.transaction():
                            await conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                        PgVectorSearch.iterative = True
                    except asyncpg.PostgresError:
                        PgVectorSearch.iterative = False
                rows = await conn.fetch(sql, *params)
        # A zero vector stored before providers' answers were checked has a NaN distance: passed over.
        self.unusable = {int(r[0]) for r in rows if r[1] is None or not math.isfinite(r[1])}
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows if r[1] is not None and math.isfinite(r[1])]
