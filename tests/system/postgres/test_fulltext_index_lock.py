"""The full-text index deferred over a first bulk load (storage/postgres/memory/fts_index.py) and the
opens of other agents' indexes meanwhile, on a real PostgreSQL.

An open finds the index missing while another gateway holds the schema lock (building it, or any other
schema change) or is in the middle of a bulk load: it goes on without waiting (a wait would end in the
pool's command timeout, a failed open) and does not build the index itself (a plain CREATE INDEX, its
SHARE lock stopping every writer's COPY). A gateway that died during its load leaves the index missing:
the next open builds it. Whether an open waits is seen in `pg_locks` (a lock not granted), not timed."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from gateway.storage import open_storage
from gateway.storage.postgres.db import lock_key
from gateway.storage.postgres.memory.fts_index import (
    FTS_INDEX,
    LOAD_LOCK,
    build_fulltext_index_after_load,
    drop_fulltext_index_for_load,
    release_load_lock,
    take_load_lock,
)
from tests.contract.test_memory_index import Opened
from tests.helpers import make_config


@pytest.fixture
async def storage(postgres_url, tmp_path):
    engine = await open_storage(
        make_config(tmp_path / "state", **{"storage.url": postgres_url, "memory.embeddings.provider": "none"})
    )
    try:
        yield engine
    finally:
        await engine.close()


@pytest.fixture
async def other(postgres_url):
    """Another gateway's connection."""
    conn = await asyncpg.connect(postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


async def index_exists(conn) -> bool:
    return bool(await conn.fetchval(f"SELECT to_regclass('{FTS_INDEX}') IS NOT NULL"))


async def open_without_waiting(storage, postgres_url, agent: str) -> Opened:
    """Opens `agent`'s index, racing a watcher of `pg_locks` that sees it queue for a lock: fails if it does."""
    watch = await asyncpg.connect(postgres_url)
    opened = Opened(storage, agent)

    async def waiting() -> None:
        while not await watch.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"):
            await asyncio.sleep(0.02)

    opening, watcher = asyncio.create_task(opened.__aenter__()), asyncio.create_task(waiting())
    try:
        await asyncio.wait({opening, watcher}, return_when=asyncio.FIRST_COMPLETED)
        assert not watcher.done(), "the open queued for a lock that another gateway holds"
        await opening
    finally:
        for task in (watcher, opening):
            task.cancel()
        await watch.close()
    return opened


async def test_an_open_does_not_wait_for_the_schema_lock_held_over_a_build(storage, postgres_url, other):
    await other.execute(f"DROP INDEX {FTS_INDEX}")  # as a first bulk load leaves it
    async with other.transaction():  # another gateway building it (or changing the schema) holds the lock
        await other.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
        opened = await open_without_waiting(storage, postgres_url, "main")
        try:
            assert not await index_exists(other)  # left to the lock's holder
        finally:
            await opened.__aexit__(None, None, None)
    # Once the lock is free, the next open builds it.
    async with Opened(storage, "second"):
        assert await index_exists(other)


async def test_an_open_during_a_bulk_load_neither_waits_nor_builds_the_index(storage, postgres_url, other):
    assert await take_load_lock(other)  # as PgIndexStore.loading does
    assert await drop_fulltext_index_for_load(other)  # an empty table: the load defers the index
    second = await asyncpg.connect(postgres_url)
    try:  # another gateway's first load meanwhile defers nothing (the first one builds)
        assert not await take_load_lock(second)
    finally:
        await second.close()
    await other.execute(
        "INSERT INTO memory_chunks(agent_id, path, source, start_line, end_line, hash, text) "
        "SELECT 'loader', 'memory/n' || i || '.md', 'memory', 1, 1, md5(i::text), 'loaded note ' || i "
        "FROM generate_series(1, 500) i"
    )
    opened = await open_without_waiting(storage, postgres_url, "main")
    try:
        assert not await index_exists(other)  # no CREATE INDEX while the load copies rows in
    finally:
        await opened.__aexit__(None, None, None)
    await build_fulltext_index_after_load(other)
    assert await index_exists(other)
    await release_load_lock(other)
    probe = await asyncpg.connect(postgres_url)
    try:  # the load lock is free again: the next gateway's load may defer the index
        assert await probe.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(LOAD_LOCK))
    finally:
        await probe.close()


async def test_a_load_that_died_leaves_the_index_to_the_next_open(storage, postgres_url):
    loader = await asyncpg.connect(postgres_url)
    assert await take_load_lock(loader) and await drop_fulltext_index_for_load(loader)
    await loader.close()  # the gateway died before its build: its load lock goes with its connection
    async with Opened(storage, "main") as m:
        assert await index_exists(m.index.pool)  # type: ignore[attr-defined]
