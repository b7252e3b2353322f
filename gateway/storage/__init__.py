"""Where the gateway keeps sessions, transcripts, runs, keyed memories and the memory index: one
interface, two engines.

    base.py       the Protocols: SessionStore, RunLedger, KeyedStore, MemoryIndex, and Storage (an engine)
    index_base.py what both engines' memory indexes share (settings, signature check, after a sync)
    files/        no `storage.url`: everything in the state dir (sessions.json, JSONL transcripts, one
                  SQLite index per agent), for one gateway
    postgres/     a postgresql:// `storage.url`: everything several gateways share, in one database;
                  any number of gateways serve the same sessions (gateway/cluster.py; docs/scaling.md)
    migrate.py    `jarvis migrate`: copies sessions between the two

`open_storage(config)` is the only place that chooses the engine; everything else asks the engine.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, AsyncIterator

from ..config import Config
from .base import Storage

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryService


async def open_storage(config: Config, *, serve: bool = True, schema: bool = True) -> Storage:
    """The engine `storage.url` names, open. `serve`: for a gateway; False: for a tool beside it (the
    `jarvis memory` commands), which takes no part in coordinating gateways. `schema` False: its schema
    is left as it is (`jarvis migrate`, whose dry run writes nothing, migrates it with `Storage.schema`)."""
    if config.storage.url:
        from .postgres.engine import PostgresStorage

        return await PostgresStorage.open(config, serve=serve, schema=schema)
    from .files.engine import FilesStorage

    return FilesStorage(config)


@contextlib.asynccontextmanager
async def standalone_manager(config: Config, agent_id: str) -> AsyncIterator["MemoryService"]:
    """An open MemoryService outside any gateway (scripts/bench_locomo.py, bench_scale.py), on the engine
    `storage.url` names (its MemoryIndex and KeyedStore)."""
    storage = await open_storage(config, serve=False)
    try:
        mgr = storage.memory(agent_id)
        try:
            await mgr.open()
            yield mgr
        finally:
            await mgr.close()
    finally:
        await storage.close()
