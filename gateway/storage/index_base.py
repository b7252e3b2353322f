"""IndexBase: what both engines' memory indexes (files/memory/index.py, postgres/memory/index.py) share.

The settings an index is built with and their signature, the check of a stored signature, the state
the memory service reads (`counts`, `needs_rebuild`, …) and the step after each sync. Each engine gives
`_open_live_state` (bind vector search, when the stored vectors fit the provider) and `_refresh_counts`.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import structlog

from ..config import Config
from ..memory.embeddings import EmbeddingProvider
from ..memory.index.settings import IndexSettings, SyncStats
from ..memory.ports import IndexContext
from ..memory.search.request import SearchRequest
from ..memory.search.searcher import Searcher
from ..memory.signature import index_signature, same_embeddings
from ..memory.sync import DirtyMarks

log = structlog.get_logger("gateway.memory")


class IndexBase:
    def __init__(self, config: Config, agent_id: str):
        self.cfg = config.memory
        self.agent_id = agent_id
        self.workspace: Path = config.agent_workspace(agent_id)
        self.sessions_dir: Path = config.sessions_dir(agent_id)
        self.provider: EmbeddingProvider | None = None
        self.provider_problem: str | None = None
        self.backend = "none"
        self.searcher: Searcher | None = None
        self.write_lock = asyncio.Lock()  # the index's writes take turns (syncs, forgets, cache puts)
        self._marks = DirtyMarks()
        self._hidden: set[str] = set()
        self._needs_rebuild = False
        self._rebuilding = False
        self._old_vectors_ok = True
        self._embed_error: str | None = None
        self._generation = "0"
        self.counts: dict[str, int] = {"files": 0, "chunks": 0, "vectors": 0, "missing": 0}
        self.last_sync_at: str | None = None
        self.corrupt_events: list[dict[str, str]] = []

    @property
    def needs_rebuild(self) -> bool:
        return self._needs_rebuild

    def _bind(self, ctx: IndexContext) -> None:
        self.provider, self.provider_problem = ctx.provider, ctx.provider_problem
        self._marks, self._hidden = ctx.marks, ctx.hidden

    def _settings(self) -> IndexSettings:
        return IndexSettings.from_config(self.cfg, self.workspace, self.sessions_dir, self.backend)

    def _signature(self) -> str:
        assert self.provider is not None
        return index_signature(self.cfg, self.provider, self.backend)

    def _compare_signature(self, stored: str | None, has_chunks: bool, **log_fields: str) -> bool:
        """Whether a new (empty) index should store the current signature; a stored one that differs
        marks everything dirty and the index for a rebuild."""
        sig = self._signature()
        self._old_vectors_ok = True
        if stored is None and not has_chunks:
            return True
        if stored != sig:
            self._needs_rebuild = True
            self._marks.mark_all()
            self._old_vectors_ok = same_embeddings(stored, sig)
            log.info("memory_index_rebuild_needed", reason="index settings changed", **log_fields)
        return False

    async def _open_live_state(self) -> None:
        raise NotImplementedError

    async def _refresh_counts(self, delta: dict[str, int] | None = None) -> None:
        """Read the counts again; `delta` (files, chunks, missing) is what the sync just done changed,
        for an engine that may add it instead of counting everything."""
        raise NotImplementedError

    async def _bind_stored_vectors(self) -> None:
        """Vectors stored for the first time (by a sync here, or another gateway's) are bound for search."""
        if (
            self.searcher is not None
            and self.searcher.vectors is None
            and self.backend != "none"
            and not self._needs_rebuild
        ):
            await self._open_live_state()

    async def _after_sync(self, stats: SyncStats, delta: dict[str, int] | None = None) -> None:
        """Vectors stored for the first time are bound for search; the counts are read again."""
        self._embed_error = stats.embed_error
        await self._bind_stored_vectors()
        await self._refresh_counts(delta)

    def _reading(self) -> AbstractAsyncContextManager[str]:
        """What a search holds while it reads the index; it gives the index's generation."""
        raise NotImplementedError

    # ---- the reader: the one searcher over the engine's ports, the same on both engines ------------------
    async def search(self, req: SearchRequest) -> dict[str, Any]:
        async with self._reading() as generation:
            assert self.searcher is not None
            return await self.searcher.search(
                req, generation=generation, vector_count=self.counts["vectors"], missing_vectors=self.counts["missing"]
            )
