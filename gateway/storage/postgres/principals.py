"""The PostgreSQL engine's principals and audit log: rows every gateway on the database shares.

    principals  name → token hash (unique), agents (NULL: every agent), scopes, created, expires, revoked,
                last used, `changed` (from a sequence: moves on every change but a token's use)
    audit       one row an entry: when, whose, and the entry itself (JSON, its text storable: no NUL);
                read newest first by id (audit_by_principal: a principal's), rows past the retention deleted

A gateway polls `version()` (the count and max(changed)) to follow what another gateway or a `jarvis
token` command changed; a revoked principal's connections close on every gateway within a second.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg
import orjson
import structlog

from ...errors import Conflict, NotFound
from ...principals import Principal, storable_entry
from ...timeutil import to_iso

log = structlog.get_logger("gateway.principals")

_COLUMNS = "name, token_hash, agents, scopes, created, expires, revoked, last_used"


def _principal(row: Any) -> Principal | None:
    rec = {
        "name": row["name"],
        "tokenHash": row["token_hash"],
        "agents": ["*"] if row["agents"] is None else list(row["agents"]),
        "scopes": list(row["scopes"]),
        "created": row["created"],
        "expires": row["expires"],
        "revoked": row["revoked"],
        "lastUsed": row["last_used"],
    }
    try:
        return Principal.from_record(rec)
    except ValueError as exc:
        log.warning("principal_row_ignored", name=row["name"], reason=str(exc))
        return None


class PgPrincipalStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def all(self) -> list[Principal]:
        rows = await self.pool.fetch(f"SELECT {_COLUMNS} FROM principals ORDER BY name")
        return [p for p in map(_principal, rows) if p is not None]

    async def add(self, principal: Principal) -> None:
        try:
            done = await self.pool.fetchval(
                f"INSERT INTO principals ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL) "
                "ON CONFLICT (name) DO UPDATE SET token_hash = excluded.token_hash, agents = excluded.agents, "
                "scopes = excluded.scopes, created = excluded.created, expires = excluded.expires, revoked = NULL, "
                "last_used = NULL, changed = nextval('principal_changes') WHERE principals.revoked IS NOT NULL "
                "RETURNING name",
                principal.name,
                principal.token_hash,
                None if principal.agents is None else list(principal.agents),
                sorted(principal.scopes),
                principal.created,
                principal.expires,
            )
        except asyncpg.UniqueViolationError:  # the token's hash: 2^-256, but say it rather than crash
            raise Conflict("that token is taken; make another") from None
        if done is None:
            raise Conflict(f"a principal named {principal.name!r} exists; revoke it first")

    async def revoke(self, name: str, when: str) -> Principal:
        row = await self.pool.fetchrow(
            f"UPDATE principals SET revoked = $2, changed = nextval('principal_changes') "
            f"WHERE name = $1 AND revoked IS NULL RETURNING {_COLUMNS}",
            name,
            when,
        )
        p = _principal(row) if row is not None else None
        if p is None:
            raise NotFound(f"no principal named {name!r}")
        return p

    async def touch(self, name: str, when: str) -> None:
        await self.pool.execute("UPDATE principals SET last_used = $2 WHERE name = $1", name, when)

    async def version(self) -> str:
        row = await self.pool.fetchrow("SELECT count(*) AS n, coalesce(max(changed), 0) AS c FROM principals")
        return f"{row['n']}:{row['c']}"


class PgAuditLog:
    """The `audit` table: appended a row an entry; rows older than `retain` seconds are deleted (at most
    once an hour, on an append); read newest first by its id, with a LIMIT (the principal's index)."""

    def __init__(self, pool: asyncpg.Pool, retain: float = 0.0):
        self.pool = pool
        self.retain = retain  # 0: kept for ever
        self._pruned: float | None = None  # time.monotonic() of the last prune

    async def append(self, entry: dict[str, Any]) -> None:
        entry = storable_entry(entry)  # NUL: jsonb and text refuse it, and the row would be lost
        await self.pool.execute(
            "INSERT INTO audit (at, principal, entry) VALUES ($1, $2, $3::jsonb)",
            entry["at"],
            entry["principal"],
            orjson.dumps(entry).decode(),
        )
        if self.retain and (self._pruned is None or time.monotonic() - self._pruned > PRUNE_EVERY):
            self._pruned = time.monotonic()
            cut = to_iso(datetime.now(timezone.utc) - timedelta(seconds=self.retain))
            await self.pool.execute("DELETE FROM audit WHERE at < $1", cut)

    async def read(
        self,
        since: str | None,
        principal: str | None,
        limit: int,
        agents: tuple[str, ...] | None = None,
        own: str | None = None,
    ) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT entry FROM (SELECT id, entry FROM audit WHERE ($1::text IS NULL OR at >= $1) "
            "AND ($2::text IS NULL OR principal = $2) "
            "AND ($4::text[] IS NULL OR entry->>'agent' = ANY($4::text[]) OR principal = $5) "
            "ORDER BY id DESC LIMIT $3) AS newest ORDER BY id",
            since,
            principal,
            limit,
            None if agents is None else list(agents),
            own,
        )
        return [orjson.loads(r["entry"]) for r in rows]


PRUNE_EVERY = 3600.0  # seconds between deletions of old audit rows (by each gateway)
