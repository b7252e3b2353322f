"""Where the gateway keeps sessions, transcripts, runs, keyed memories and the memory index: one
interface, two engines.

    base.py       the Protocols: SessionStore, RunLedger, KeyedStore, MemoryIndex, and Storage (an engine)
    files/        no `storage.url`: everything in the state dir (sessions.json, JSONL transcripts, one
                  SQLite index per agent), for one gateway
    postgres/     a postgresql:// `storage.url`: everything several gateways share, in one database;
                  any number of gateways serve the same sessions (gateway/cluster.py; docs/scaling.md)
    migrate.py    `jarvis migrate`: copies sessions between the two

`open_storage(config)` is the only place that chooses the engine; everything else asks the engine.
Engines only store: gateway/compose.py puts the memory service and the cluster together over them.
"""

from __future__ import annotations


from ..config import Config
from .base import Storage


async def open_storage(config: Config, *, serve: bool = True, schema: bool = True) -> Storage:
    """The engine `storage.url` names, open. `serve`: for a gateway; False: for a tool beside it (the
    `jarvis memory` commands), which takes no part in coordinating gateways. `schema` False: its schema
    is left as it is (`jarvis migrate`, whose dry run writes nothing, migrates it with `Storage.schema`)."""
    if config.storage.url:
        from .postgres.engine import PostgresStorage

        return await PostgresStorage.open(config, serve=serve, schema=schema)
    from .files.engine import FilesStorage

    return FilesStorage(config)
