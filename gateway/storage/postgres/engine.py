"""PostgresStorage: the PostgreSQL engine (storage/base.py's Storage), shared by several gateways."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ...config import Config
from ...errors import Unavailable, storage_unreachable
from .db import Postgres, migrate, pending
from ...memory.notes.keyed import VersionLimits
from ..base import ResponseLimits
from .keyed import PgKeyedStore
from .ledger import PgRunLedger
from .memory import PgMemoryIndex
from .notes import PgNotes
from .principals import PgAuditLog, PgPrincipalStore
from .responses import PgResponseStore
from .sessions import PgSessionStore

if TYPE_CHECKING:  # pragma: no cover
    from ...cluster import Cluster
    from ...memory.service import MemoryService
    from ...services import Services


class PostgresStorage:
    name = "postgresql"
    shared = True

    def __init__(self, config: Config, pg: Postgres):
        self.config = config
        self.pg = pg

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

    def memory(self, agent_id: str) -> "MemoryService":
        from ...memory.service import MemoryService

        return MemoryService(
            self.config, agent_id, self.memory_index(agent_id), self.keyed(agent_id), self.notes(agent_id)
        )

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

    def cluster(self, services: "Services") -> "Cluster":
        from ...cluster import Cluster

        return Cluster(services, self.pg)

    def principals(self) -> PgPrincipalStore:
        assert self.pg.pool is not None
        return PgPrincipalStore(self.pg.pool)

    def audit(self) -> PgAuditLog:
        assert self.pg.pool is not None
        return PgAuditLog(self.pg.pool)

    def responses(self) -> PgResponseStore:
        return PgResponseStore(self.pg.pool, ResponseLimits.of(self.config))

    def status(self) -> dict[str, Any]:
        return {"engine": self.name, "instance": self.pg.instance_id, "eventsDropped": self.pg.dropped}

    def unreachable(self, exc: BaseException) -> Unavailable | None:
        return storage_unreachable(exc)
