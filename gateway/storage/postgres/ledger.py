"""The PostgreSQL engine's RunLedger (storage/base.py): active runs and idempotency keys in the
database (`storage.url`), so that several gateways on one database allow one run per session between
them and answer a repeated `idempotencyKey` with the first run wherever it was sent.
"""

from __future__ import annotations

from typing import Any

from .instance import Postgres


class PgRunLedger:
    """In PostgreSQL: the `runs` and `idempotency` tables (db.py)."""

    shared = True

    def __init__(self, pg: "Postgres", agent_id: str, ttl: float):
        self.ttl = ttl
        self.pg = pg
        self.agent_id = agent_id

    async def seen(self, session: str, key: str) -> str | None:
        return await self.pg.pool.fetchval(
            "SELECT run_id FROM idempotency WHERE agent_id = $1 AND session_key = $2 AND idem_key = $3 "
            "AND expires_at > now()",
            self.agent_id,
            session,
            key,
        )

    async def remember(self, session: str, key: str, run_id: str) -> None:
        await self.pg.pool.execute(
            "INSERT INTO idempotency(agent_id, session_key, idem_key, run_id, expires_at) "
            "VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) "
            "ON CONFLICT (agent_id, session_key, idem_key) DO UPDATE "
            "SET run_id = excluded.run_id, expires_at = excluded.expires_at",
            self.agent_id,
            session,
            key,
            run_id,
            float(self.ttl),
        )

    async def claim(self, session: str, run_id: str) -> str | None:
        row: Any = await self.pg.pool.fetchrow(
            "INSERT INTO runs(agent_id, session_key, run_id, instance_id) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (agent_id, session_key) DO NOTHING RETURNING run_id",
            self.agent_id,
            session,
            run_id,
            self.pg.instance_id,
        )
        if row is not None:
            return None
        held = await self.holder(session)
        if held is None:  # released between the two statements: try once more
            return await self.claim(session, run_id)
        return held[0]

    async def release(self, session: str, run_id: str) -> None:
        await drop_claim(self.pg, self.agent_id, session, run_id)

    async def holder(self, session: str) -> tuple[str, str] | None:
        row = await self.pg.pool.fetchrow(
            "SELECT run_id, instance_id FROM runs WHERE agent_id = $1 AND session_key = $2", self.agent_id, session
        )
        return (row["run_id"], row["instance_id"]) if row is not None else None

    async def forget_session(self, session: str) -> None:
        await self.pg.pool.execute(
            "DELETE FROM idempotency WHERE agent_id = $1 AND session_key = $2", self.agent_id, session
        )


# ---- every agent's runs, for the cluster's sweep (cluster.py) -----------------------------------------
async def claims(pg: Postgres, *, mine: bool, older_than_s: float = 0.0) -> list[tuple[str, str, str, str]]:
    """(agent, session, run, instance) of the runs claimed by this gateway (`mine`) at least
    `older_than_s` seconds ago, or of those claimed by the other gateways."""
    if mine:
        rows = await pg.pool.fetch(
            "SELECT agent_id, session_key, run_id, instance_id FROM runs WHERE instance_id = $1 "
            "AND started_at < now() - make_interval(secs => $2)",
            pg.instance_id,
            float(older_than_s),
        )
    else:
        rows = await pg.pool.fetch(
            "SELECT agent_id, session_key, run_id, instance_id FROM runs WHERE instance_id <> $1", pg.instance_id
        )
    return [(r["agent_id"], r["session_key"], r["run_id"], r["instance_id"]) for r in rows]


async def drop_claim(pg: Postgres, agent_id: str, session: str, run_id: str) -> bool:
    """Remove a run's claim whoever holds it; True when this call removed it (the sweeper that ends
    that run)."""
    return bool(
        await pg.pool.fetchval(
            "DELETE FROM runs WHERE agent_id = $1 AND session_key = $2 AND run_id = $3 RETURNING 1",
            agent_id,
            session,
            run_id,
        )
    )


async def run_holder(pg: Postgres, agent_id: str, run_id: str) -> str | None:
    """The instance that holds run `run_id` of the agent (a `chat.confirm` is answered there), else None."""
    return await pg.pool.fetchval(
        "SELECT instance_id FROM runs WHERE agent_id = $1 AND run_id = $2 LIMIT 1", agent_id, run_id
    )
