"""Which runs are active and which idempotency keys were used: in this process, or across gateways.

`RunLedger` keeps both in memory (one gateway on a state dir). `PgRunLedger` keeps them in PostgreSQL
(`storage.url`), so that several gateways on one database allow one run per session between them and
answer a repeated `idempotencyKey` with the first run wherever it was sent.

    seen(session, key)          the run a live idempotency key started, or None
    remember(session, key, run) record a key for `chat.idempotencyTtl` seconds
    claim(session, run)         None when the session is free (now held by `run`); else the holder's id
    release(session, run)       the run is over
    holder(session)             (runId, instanceId) of the session's active run anywhere, or None
    forget_session(session)     the session was deleted: its keys go (a new life starts with none)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..storage.postgres import Postgres


class RunLedger:
    """In memory. Runs are tracked by the chat service itself; only idempotency keys live here."""

    shared = False  # True: other gateways see these records

    def __init__(self, ttl: float, keys: dict[tuple[str, str], tuple[str, float]] | None = None):
        self.ttl = ttl
        # (sessionKey, idempotencyKey) → (runId, expiry); may be owned by the caller so that it outlives
        # a chat service closed with its idle agent.
        self._keys: dict[tuple[str, str], tuple[str, float]] = {} if keys is None else keys

    async def seen(self, session: str, key: str) -> str | None:
        now = time.monotonic()
        while self._keys:  # insertion order is expiry order (one TTL): drop from the front
            first = next(iter(self._keys))
            if self._keys[first][1] >= now:
                break
            del self._keys[first]
        hit = self._keys.get((session, key))
        return hit[0] if hit is not None else None

    async def remember(self, session: str, key: str, run_id: str) -> None:
        self._keys[(session, key)] = (run_id, time.monotonic() + self.ttl)

    async def claim(self, session: str, run_id: str) -> str | None:
        return None  # the chat service's own table of active runs is the whole truth here

    async def release(self, session: str, run_id: str) -> None:
        return None

    async def holder(self, session: str) -> tuple[str, str] | None:
        return None

    async def forget_session(self, session: str) -> None:
        for k in [k for k in self._keys if k[0] == session]:
            del self._keys[k]


class PgRunLedger(RunLedger):
    """In PostgreSQL: the `runs` and `idempotency` tables (storage/postgres.py)."""

    shared = True

    def __init__(self, pg: "Postgres", agent_id: str, ttl: float):
        super().__init__(ttl)
        self.pg = pg
        self.agent_id = agent_id

    async def seen(self, session: str, key: str) -> str | None:
        return await self.pg.pool.fetchval(
            "SELECT run_id FROM idempotency WHERE agent_id = $1 AND session_key = $2 AND idem_key = $3 "
            "AND expires_at > now()", self.agent_id, session, key)

    async def remember(self, session: str, key: str, run_id: str) -> None:
        await self.pg.pool.execute(
            "INSERT INTO idempotency(agent_id, session_key, idem_key, run_id, expires_at) "
            "VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) "
            "ON CONFLICT (agent_id, session_key, idem_key) DO UPDATE "
            "SET run_id = excluded.run_id, expires_at = excluded.expires_at",
            self.agent_id, session, key, run_id, float(self.ttl))

    async def claim(self, session: str, run_id: str) -> str | None:
        row: Any = await self.pg.pool.fetchrow(
            "INSERT INTO runs(agent_id, session_key, run_id, instance_id) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (agent_id, session_key) DO NOTHING RETURNING run_id",
            self.agent_id, session, run_id, self.pg.instance_id)
        if row is not None:
            return None
        held = await self.holder(session)
        if held is None:  # released between the two statements: try once more
            return await self.claim(session, run_id)
        return held[0]

    async def release(self, session: str, run_id: str) -> None:
        await self.pg.pool.execute("DELETE FROM runs WHERE agent_id = $1 AND session_key = $2 AND run_id = $3",
                                   self.agent_id, session, run_id)

    async def holder(self, session: str) -> tuple[str, str] | None:
        row = await self.pg.pool.fetchrow("SELECT run_id, instance_id FROM runs WHERE agent_id = $1 AND "
                                          "session_key = $2", self.agent_id, session)
        return (row["run_id"], row["instance_id"]) if row is not None else None

    async def forget_session(self, session: str) -> None:
        await self.pg.pool.execute("DELETE FROM idempotency WHERE agent_id = $1 AND session_key = $2",
                                   self.agent_id, session)
