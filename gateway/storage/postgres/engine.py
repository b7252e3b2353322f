"""PostgresStorage: the PostgreSQL engine (storage/base.py's Storage), shared by several gateways."""

from __future__ import annotations

import os
from typing import Any

from ...config import Config
from ...errors import Unavailable
from .db import migrate, pending
from .instance import Postgres
from ...memory.notes.keyed import VersionLimits
from ..base import ResponseLimits
from .keyed import PgKeyedStore
from .ledger import PgRunLedger
from .memory import PgMemoryIndex
from .notes import PgNotes
from .principals import PgAuditLog, PgPrincipalStore
from .responses import PgResponseStore
from .sessions import PgSessionStore


class PostgresStorage:
    name = "postgresql"
    shared = True

    def __init__(self, config: Config, pg: Postgres):
        self.config = config
        self.pg = pg
        self._audit: PgAuditLog | None = None

    @classmethod
    async def open(cls, config: Config, *, serve: bool = True, schema: bool = True) -> "PostgresStorage":
        """`serve`: a gateway's (its liveness lock, listener and relay); else a tool's (`jarvis memory`):
        a small pool, the schema migrated as a gateway would, to query and to notify. `schema` False:
        the schema left as it is (`jarvis migrate` reads it, and migrates it with `schema(apply=True)`)."""
        url = config.storage.url
        assert url is not None
        if serve:
            pg = Postgres(url, config.storage.pool_size, config.storage.instance_id)
        else:
            pg = Postgres(url, 4, f"cli:{os.getpid()}")
        return cls(config, await pg.open(serve=serve, schema=schema))

    async def close(self) -> None:
        await self.pg.close()

    async def agents(self) -> list[str]:
        async with self.pg.pool.acquire() as conn:
            tables = [
                t
                for t in ("sessions", "keyed_memories", "notes")
                if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", t)
            ]
            if not tables:
                return []
            union = " UNION ".join(f"SELECT agent_id FROM {t}" for t in tables)
            return [r["agent_id"] for r in await conn.fetch(f"{union} ORDER BY 1")]

    async def schema(self, apply: bool) -> list[str]:
        async with self.pg.pool.acquire() as conn:
            return await migrate(conn) if apply else await pending(conn)

    async def has_agent(self, agent_id: str) -> bool:
        """Made through another gateway on the database (its folder here may not exist yet)."""
        return bool(await self.pg.pool.fetchval("SELECT 1 FROM sessions WHERE agent_id = $1 LIMIT 1", agent_id))

    def sessions(self, agent_id: str) -> PgSessionStore:
        return PgSessionStore(self.pg, self.config.sessions_dir(agent_id), agent_id, self.config.sessions.max)

    def ledger(self, agent_id: str) -> PgRunLedger:
        return PgRunLedger(self.pg, agent_id, self.config.chat.idempotency_ttl)

    def keyed(self, agent_id: str) -> PgKeyedStore:
        """Rows, with the workspace files a mirror."""
        return PgKeyedStore(self.pg, agent_id, self.config.agent_workspace(agent_id), VersionLimits.of(self.config))

    def memory_index(self, agent_id: str) -> PgMemoryIndex:
        """The index in PostgreSQL, shared with every gateway on it."""
        return PgMemoryIndex(self.config, agent_id, self.pg)

    def notes(self, agent_id: str) -> PgNotes:
        """Rows, with the workspace folder a mirror (what this gateway mirrored: its state dir's)."""
        return PgNotes(
            self.pg,
            agent_id,
            self.config.agent_workspace(agent_id),
            self.config.agent_dir(agent_id) / "notes-mirror.json",
            VersionLimits.of(self.config),
            self.config.memory.max_file_bytes,
        )

    def principals(self) -> PgPrincipalStore:
        assert self.pg.pool is not None
        return PgPrincipalStore(self.pg.pool)

    def audit(self) -> PgAuditLog:
        assert self.pg.pool is not None
        if self._audit is None:  # one, so its pruning of old rows runs at most once an hour
            a = self.config.audit
            self._audit = PgAuditLog(self.pg.pool, a.max_age_days * 86400 * (a.keep + 1))
        return self._audit

    def responses(self) -> PgResponseStore:
        return PgResponseStore(self.pg.pool, ResponseLimits.of(self.config))

    def status(self) -> dict[str, Any]:
        return {"engine": self.name, "instance": self.pg.instance_id, "eventsDropped": self.pg.dropped}

    def unreachable(self, exc: BaseException) -> Unavailable | None:
        """Counted into the database's outage, which is said when it begins and when it ends."""
        return self.pg.outage.failed(exc)
