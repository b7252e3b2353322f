"""IndexLifecycle: the life of an agent's memory index, the same on both engines. Each engine's index
(storage/files/memory/index.py, storage/postgres/memory/index.py) holds one, made over itself as the
engine (composition: `IndexLifecycle(config, agent_id, engine)`, mypy holding the engine to the port);
no engine subclasses it.

What it decides: the settings an index is built with and their signature; whether a stored signature
means a rebuild (and whether the old vectors still answer meanwhile), and that a sync asked meanwhile
runs the rebuild; when stored vectors are bound for
search, or why not (`vector_problem`); the one searcher over the engine's ports; the step after each
sync; the state the memory service reads (`counts`, `needs_rebuild`, …).

What the engine gives (memory/ports.py's IndexEngine): where its vectors are kept (`backend`) and its
counts, why it keeps none (`backend_problem`), where its stored vectors stand (`stored_vector_layout`),
vector search over them (`bind_vectors`), its full text and rows for the searcher (`search_ports`), a
sync and a rebuild its way (`run_sync`, `run_rebuild`), its counts read again (`refresh_counts`) and what a
read holds (`reading`). What the engine reads and sets here: the provider, the tokenizer, the searcher,
the write lock, the dirty marks and hidden sessions, and the rebuild's flags (`rebuild_due`,
`rebuild_running`, `old_vectors_ok`).
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
        self._engine = engine
        self.cfg = config.memory
        self.workspace: Path = config.agent_workspace(agent_id)
        self.sessions_dir: Path = config.sessions_dir(agent_id)
        self.provider: EmbeddingProvider | None = None
        self.provider_problem: str | None = None
        self.tokenizer = self.cfg.search.fts_tokenizer  # the full text's, as the index was made with it
        self.searcher: Searcher | None = None
        self.write_lock = asyncio.Lock()  # the index's writes take turns (syncs, forgets, cache puts)
        self.marks = DirtyMarks()
        self.hidden: set[str] = set()
        self.rebuild_due = False  # the settings changed: the next sync rebuilds (`needs_rebuild`)
        self.rebuild_running = False
        self.old_vectors_ok = True  # while a rebuild is due: the stored vectors still answer the query's
        self._embed_error: str | None = None

    @property
    def needs_rebuild(self) -> bool:
        return self.rebuild_due

    def bind(self, ctx: IndexContext) -> None:
        self.provider, self.provider_problem = ctx.provider, ctx.provider_problem
        self.marks, self.hidden = ctx.marks, ctx.hidden

    def settings(self) -> IndexSettings:
        return IndexSettings.from_config(self.cfg, self.workspace, self.sessions_dir, self._engine.backend)

    def signature(self) -> str:
        assert self.provider is not None
        return index_signature(self.cfg, self.provider, self._engine.backend)

    def compare_signature(self, stored: str | None, has_chunks: bool, **log_fields: str) -> bool:
        """Whether a new (empty) index should store the current signature; a stored one that differs
        marks everything dirty and the index for a rebuild."""
        sig = self.signature()
        self.old_vectors_ok = True
        if stored is None and not has_chunks:
            return True
        if stored != sig:
            self.rebuild_due = True
            self.marks.mark_all()
            self.old_vectors_ok = same_embeddings(stored, sig)
            log.info("memory_index_rebuild_needed", reason="index settings changed", **log_fields)
        return False

    # ---- vector search bound, or why not; the one searcher ----------------------------------------------
    async def vector_problem(self) -> tuple[str | None, tuple[str, int] | None]:
        """Why vector search cannot answer now (None: it can), and the stored vectors it would bind. Stored
        vectors that do not fit the provider mark the index for a rebuild."""
        assert self.provider is not None
        backend = self._engine.backend
        if backend == "none":  # why there are no vectors: the engine's reason, the provider's, or none asked
            return self._engine.backend_problem() or self.provider_problem or DISABLED, None
        if self.rebuild_due and not self.old_vectors_ok:
            return NEW_MODEL, None
        stored = await self._engine.stored_vector_layout()
        if stored is None:
            return (
                f"embedding provider unavailable: {self._embed_error}" if self._embed_error else "no vectors stored yet"
            ), None
        if stored[0] != backend or (self.provider.dims and stored[1] != self.provider.dims):
            self.rebuild_due = True
            return MISMATCH, None
        return None, stored

    async def open_live_state(self) -> None:
        """Bind vector search to the live index (when its vectors fit the current provider); the searcher."""
        problem, stored = await self.vector_problem()
        vectors = await self._engine.bind_vectors(stored[1]) if stored is not None else None
        self.searcher = self.make_searcher(vectors, problem)

    def make_searcher(self, vectors: VectorSearch | None, problem: str | None) -> Searcher:
        assert self.provider is not None
        ports = self._engine.search_ports(vectors)
        opts = SearchOptions.from_config(self.cfg.search, self.tokenizer)
        searcher = Searcher(ports.text, ports.rows, self.provider, opts, vectors, problem, self.hidden)
        searcher.total_chunks = self._engine.counts.get("chunks", 0)  # a new searcher: the counts as read
        return searcher

    # ---- the writer: a rebuild when the settings changed, else the sync asked --------------------------
    async def sync(self, req: SyncRequest, progress: Any) -> SyncStats:
        """One sync request: while the index waits for a rebuild (new settings, vectors that no longer fit),
        the rebuild, which indexes everything whatever was asked; else what was asked."""
        if self.rebuild_due:
            return await self._engine.run_rebuild(progress)
        return await self._engine.run_sync(req, progress)

    async def bind_stored_vectors(self) -> None:
        """Vectors stored for the first time (by a sync here, or another gateway's) are bound for search."""
        if (
            self.searcher is not None
            and self.searcher.vectors is None
            and self._engine.backend != "none"
            and not self.rebuild_due
        ):
            await self.open_live_state()

    async def after_sync(self, stats: SyncStats, delta: dict[str, int] | None = None) -> None:
        """Vectors stored for the first time are bound for search; the counts are read again."""
        self._embed_error = stats.embed_error
        await self.bind_stored_vectors()
        await self._engine.refresh_counts(delta)

    # ---- the reader: the one searcher over the engine's ports, the same on both engines ------------------
    async def search(self, req: SearchRequest) -> Found:
        async with self._engine.reading() as generation:
            assert self.searcher is not None
            counts = self._engine.counts
            return await self.searcher.search(
                req, generation=generation, vector_count=counts["vectors"], missing_vectors=counts["missing"]
            )
