"""What sits above the engines, put together: an agent's memory service over its engine's stores, and the
cluster that coordinates the gateways sharing an engine. Engines only store (storage/base.py's Storage
makes stores, never a service); services.py, the `jarvis` commands beside a gateway and the benchmarks
compose through here.

    memory = memory_service(config, storage, "main")     # not yet opened
    cluster = cluster_of(storage, services)              # None: one gateway alone on its files
    async with standalone_memory(config, "main") as mgr: …   # open, outside any gateway
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, AsyncIterator

from .config import Config
from .memory.service import MemoryService
from .storage import open_storage
from .storage.base import Storage

if TYPE_CHECKING:  # pragma: no cover
    from .cluster import Cluster, Host


def memory_service(config: Config, storage: Storage, agent_id: str) -> MemoryService:
    """The agent's memory service over the engine's index, keyed memories and notes, not yet opened.
    `storage.unreachable` says once for a whole outage that the store is gone (a sync failing for it is
    not logged again)."""
    return MemoryService(
        config,
        agent_id,
        storage.memory_index(agent_id),
        storage.keyed(agent_id),
        storage.notes(agent_id),
        unreachable=storage.unreachable,
    )


def cluster_of(storage: Storage, services: "Host") -> "Cluster | None":
    """The coordination of the gateways serving the same sessions (cluster.py), over a shared engine's
    database; None on an engine one gateway has to itself."""
    if not storage.shared:
        return None
    from .cluster import Cluster
    from .storage.postgres.engine import PostgresStorage

    assert isinstance(storage, PostgresStorage), f"no cluster over the {storage.name} engine"
    return Cluster(services, storage.pg)


@contextlib.asynccontextmanager
async def standalone_memory(config: Config, agent_id: str, *, serve: bool = False) -> AsyncIterator[MemoryService]:
    """An open MemoryService outside any gateway (scripts/bench_locomo.py, bench_scale.py), on the engine
    `storage.url` names; `serve`: opened as a gateway opens it (its derived files in the state dir made and
    kept: scripts/bench_memory.py times what a gateway searches)."""
    storage = await open_storage(config, serve=serve)
    try:
        mgr = memory_service(config, storage, agent_id)
        try:
            await mgr.open()
            yield mgr
        finally:
            await mgr.close()
    finally:
        await storage.close()
