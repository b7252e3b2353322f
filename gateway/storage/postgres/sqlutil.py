"""SQL helpers the PostgreSQL stores share: an advisory lock's key for a name, a purge's WHERE over a trash
table; and the database URL as messages may show it (`redact`), and a throwaway database for the
benchmarks and tests (`create_database`). The schema and its migrations are db.py's."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Sequence

import asyncpg


async def trash_filter(
    conn: asyncpg.Connection,
    columns: tuple[str, str, str],
    where: str,
    agent_id: str,
    keys: Sequence[str] | None,
    before: str | None,
    missing: Callable[[str], Exception],
) -> tuple[str, list[Any]]:
    """A purge's WHERE and its arguments ($1: `agent_id`): of the rows `where` of a trash (`columns`: its
    table, key column, deleted-at column), those of `keys` (each must be there, else `missing(key)` is
    raised) deleted before `before`."""
    table, key_column, at_column = columns
    args: list[Any] = [agent_id]
    if keys is not None:
        args.append(list(keys))
        where += f" AND {key_column} = ANY(${len(args)}::text[])"
        there = {r[0] for r in await conn.fetch(f"SELECT {key_column} FROM {table} WHERE {where}", *args)}
        absent = [k for k in keys if k not in there]
        if absent:
            raise missing(absent[0])
    if before is not None:
        args.append(before)
        where += f" AND {at_column} < ${len(args)}"
    return where, args


def lock_key(name: str) -> int:
    """A signed 64-bit advisory lock key for a name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def redact(url: str) -> str:
    """The URL without its password, for messages and logs: the one in the user info and a
    `password=` query parameter. Everything up to the last `@` before the path counts as user info, so
    a password typed with a raw `@` (which belongs percent-encoded) is still hidden whole."""
    scheme, sep, rest = url.partition("//")
    if sep:
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        userinfo, at, host = rest[:end].rpartition("@")
        if at and ":" in userinfo:
            rest = f"{userinfo.split(':', 1)[0]}:***@{host}{rest[end:]}"
        url = f"{scheme}//{rest}"
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url)


async def create_database(server_url: str, name: str, replace: bool = False) -> str:
    """Create database `name` on the server of `server_url` (the benchmarks' and tests' throwaway ones);
    returns its URL: `server_url` with the database name swapped. `replace`: drop one of that name first."""
    admin = await asyncpg.connect(server_url)
    try:
        if replace:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    head, _, query = server_url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
