"""IndexLifecycle: the life of an agent's memory index, the same on both engines; each engine's index
(storage/files/memory/index.py, storage/postgres/memory/index.py) is one over its own storage.

What it decides: the settings an index is built with and their signature; whether a stored signature
means a rebuild (and whether the old vectors still answer meanwhile), and that a sync asked meanwhile
runs the rebuild; when stored vectors are bound for
search, or why not (`vector_problem`); the one searcher over the engine's ports; the step after each
sync; the state the memory service reads (`counts`, `needs_rebuild`, …).

What the engine gives (memory/ports.py's IndexEngine): where its stored vectors stand
(`_stored_vectors`), vector search over them (`_bind_vectors`), its full text and rows for the searcher
(`_search_ports`), a sync and a rebuild its way (`_sync`, `_rebuild`), its counts (`_refresh_counts`) and what a read holds (`_reading`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import structlog

from ...config import Config
from ..embeddings import EmbeddingProvider
from ..hit import Found
from ..ports import IndexContext, IndexEngine, VectorSearch
from ..search.request import SearchRequest
from ..search.searcher import SearchOptions, Searcher
from ..signature import index_signature, same_embeddings
from ..sync import DirtyMarks, SyncRequest
from .settings import IndexSettings, SyncStats

log = structlog.get_logger("gateway.memory")


NEW_MODEL = "index is being rebuilt for a new embedding model; full-text results until it is done"
MISMATCH = "stored vectors do not match the embedding provider; the index will be rebuilt"
DISABLED = "embeddings are disabled (memory.embeddings.provider = none)"


class IndexLifecycle:
    def __init__(self, config: Config, agent_id: str, engine: IndexEngine):
        """`engine`: the engine's index itself (a subclass passes `self`: mypy holds it to the port)."""
        self._engine = engine
        self.cfg = config.memory
        self.agent_id = agent_id
        self.workspace: Path = config.agent_workspace(agent_id)
        self.sessions_dir: Path = config.sessions_dir(agent_id)
        self.provider: EmbeddingProvider | None = None
        self.provider_problem: str | None = None
        self.backend = "none"
        self.tokenizer = self.cfg.search.fts_tokenizer  # the full text's, as the index was made with it
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

    # ---- vector search bound, or why not; the one searcher ----------------------------------------------
    def _backend_problem(self) -> str:
        """Why there are no vectors with no vector backend."""
        return self.provider_problem or DISABLED

    async def vector_problem(self) -> tuple[str | None, tuple[str, int] | None]:
        """Why vector search cannot answer now (None: it can), and the stored vectors it would bind. Stored
        vectors that do not fit the provider mark the index for a rebuild."""
        assert self.provider is not None
        if self.backend == "none":
            return self._backend_problem(), None
        if self._needs_rebuild and not self._old_vectors_ok:
            return NEW_MODEL, None
        stored = await self._engine._stored_vectors()
        if stored is None:
            return (
                f"embedding provider unavailable: {self._embed_error}" if self._embed_error else "no vectors stored yet"
            ), None
        if stored[0] != self.backend or (self.provider.dims and stored[1] != self.provider.dims):
            self._needs_rebuild = True
            return MISMATCH, None
        return None, stored

    async def _open_live_state(self) -> None:
        """Bind vector search to the live index (when its vectors fit the current provider); the searcher."""
        problem, stored = await self.vector_problem()
        vectors = await self._engine._bind_vectors(stored[1]) if stored is not None else None
        self.searcher = self._searcher(vectors, problem)

    def _searcher(self, vectors: VectorSearch | None, problem: str | None) -> Searcher:
        assert self.provider is not None
        ports = self._engine._search_ports(vectors)
        opts = SearchOptions.from_config(self.cfg.search, self.tokenizer)
        return Searcher(ports.text, ports.rows, self.provider, opts, vectors, problem, self._hidden)

    # ---- the writer: a rebuild when the settings changed, else the sync asked --------------------------
    async def sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        """One sync request: while the index waits for a rebuild (new settings, vectors that no longer fit),
        the rebuild, which indexes everything whatever was asked; else what was asked."""
        if self._needs_rebuild:
            return await self._engine._rebuild(progress)
        return await self._engine._sync(req, progress)

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
        await self._engine._refresh_counts(delta)

    # ---- the reader: the one searcher over the engine's ports, the same on both engines ------------------
    async def search(self, req: SearchRequest) -> Found:
        async with self._engine._reading() as generation:
            assert self.searcher is not None
            return await self.searcher.search(
                req, generation=generation, vector_count=self.counts["vectors"], missing_vectors=self.counts["missing"]
            )
