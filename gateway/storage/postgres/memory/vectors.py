"""Vector search in PostgreSQL (memory/ports.py's VectorSearch): the nearest chunks by cosine distance
(pgvector's `<=>`) through the HNSW index of the provider's dimensions (db.py's `ensure_dims_index`)."""

from __future__ import annotations

import math

import asyncpg
import numpy as np
import orjson

from .agent import search_filter


def vector_text(v: np.ndarray) -> str:
    """A vector in pgvector's text form ('[1,2,3]'): sent as text and cast, so no codec is needed."""
    return "[" + ",".join(f"{x:.8g}" for x in np.asarray(v, dtype=np.float32).tolist()) + "]"


def parse_vector(text: str) -> np.ndarray:
    return np.array(orjson.loads(text), dtype=np.float32)


class PgVectorSearch:
    iterative: bool | None = None  # whether the server's pgvector has hnsw.iterative_scan (learnt once)

    def __init__(self, pool: asyncpg.Pool, agent_id: str, dims: int):
        self.pool, self.agent_id, self.dims = pool, agent_id, int(dims)
        self.unusable: set[int] = set()  # chunk ids whose stored vector is zero

    async def knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, generation: str, count: int
    ) -> list[tuple[int, float]]:
        d = self.dims
        where, params = ["agent_id = $2", f"dims = {d}"], [vector_text(q), self.agent_id]
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
