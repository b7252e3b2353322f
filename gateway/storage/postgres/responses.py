"""The PostgreSQL engine's ResponseStore (storage/base.py): the /v1/responses responses kept, rows every
gateway on the database shares (`stored_responses`, db.py), so a response made through one gateway is
read and continued through another, and outlives a restart of either.

The body is JSON as text (not jsonb: a NUL in what was said, `\\u0000`, is refused by jsonb). A put
takes the principal's transaction-scoped advisory lock, so two gateways evicting for one principal at
once keep it within its limits.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from ..base import ResponseLimits
from .sqlutil import lock_key

EVICT = (
    "DELETE FROM stored_responses WHERE seq IN (SELECT seq FROM (SELECT seq, row_number() OVER w AS n, "
    "sum(size) OVER w AS total FROM stored_responses WHERE principal = $1 WINDOW w AS (ORDER BY seq DESC)) "
    "AS newest WHERE n > $2 OR total > $3)"
)


class PgResponseStore:
    def __init__(self, pool: asyncpg.Pool, limits: ResponseLimits):
        self.pool = pool
        self.limits = limits

    async def put(self, agent_id: str, principal: str, response_id: str, record: dict[str, Any]) -> bool:
        body = orjson.dumps(record, default=str).decode()
        size = len(body.encode())
        limits = self.limits
        if limits.count <= 0 or size > limits.bytes:
            return False
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(f"responses:{principal}"))
            await conn.execute(
                "INSERT INTO stored_responses (id, agent_id, principal, size, body) VALUES ($1, $2, $3, $4, $5) "
                "ON CONFLICT (id) DO UPDATE SET agent_id = excluded.agent_id, principal = excluded.principal, "
                "size = excluded.size, body = excluded.body, created_at = now(), "
                "seq = nextval('stored_responses_seq_seq')",
                response_id,
                agent_id,
                principal,
                size,
                body,
            )
            await conn.execute(EVICT, principal, limits.count, limits.bytes)
            await conn.execute(
                "DELETE FROM stored_responses WHERE created_at < now() - make_interval(secs => $1)", limits.keep_s
            )
        return True

    async def get(self, agent_id: str, principal: str, response_id: str) -> dict[str, Any] | None:
        body = await self.pool.fetchval(
            "SELECT body FROM stored_responses WHERE id = $1 AND agent_id = $2 AND principal = $3 "
            "AND created_at >= now() - make_interval(secs => $4)",
            response_id,
            agent_id,
            principal,
            self.limits.keep_s,
        )
        return orjson.loads(body) if body is not None else None

    async def purge(self) -> int:
        done = await self.pool.execute(
            "DELETE FROM stored_responses WHERE created_at < now() - make_interval(secs => $1)", self.limits.keep_s
        )
        return int(done.split()[-1])

    async def count_by_principal(self) -> dict[str, int]:
        rows = await self.pool.fetch(
            "SELECT principal, count(*) AS n FROM stored_responses "
            "WHERE created_at >= now() - make_interval(secs => $1) GROUP BY principal",
            self.limits.keep_s,
        )
        return {r["principal"]: int(r["n"]) for r in rows}

    async def close(self) -> None:
        """The pool is the engine's."""
