"""memory.status and system.health's memory part, as the memory service (memory/service.py) reports them."""

from __future__ import annotations

from typing import Any

from ..config import MemoryConfig
from .embeddings import EmbeddingProvider
from .hit import Embeddings
from .index.sources import SOURCES
from .ledger.distill import Distiller
from .ports import MemoryIndex
from .search.backends import SearchBackend
from .sync import SyncOrchestrator

SKIPPED_SHOWN = 20  # memory.status `skipped`: the largest files left out for their size, at most this many


class MemoryStatus:
    """The memory service's report of itself; what it reads of the service is declared here."""

    cfg: MemoryConfig
    index: MemoryIndex
    provider: EmbeddingProvider | None
    provider_problem: str | None
    search_backend: SearchBackend
    orchestrator: SyncOrchestrator
    distiller: Distiller | None
    _skipped: dict[str, int]
    _unnamable: dict[str, str]
    _embed_error: str | None
    _index_open: bool

    @property
    def dirty(self) -> bool:
        raise NotImplementedError

    def _embeddings_brief(self) -> Embeddings:
        raise NotImplementedError

    async def status(self) -> dict:
        if self.cfg.enabled and self._index_open:
            files_by, chunks_by, cache, dims = await self.index.status_counts()
        else:
            files_by, chunks_by, cache, dims = {}, {}, 0, 0
        p = self.provider
        engine = self.index.status()
        vec: dict[str, Any] = {
            "backend": self.index.backend,
            "missing": self.index.counts["missing"],
            **engine["vector"],
        }
        out: dict[str, Any] = {
            "files": sum(files_by.values()),
            "chunks": sum(chunks_by.values()),
            "sources": {s: {"files": files_by.get(s, 0), "chunks": chunks_by.get(s, 0)} for s in SOURCES},
            "dirty": self.dirty,
            "lastSyncAt": self.index.last_sync_at,
            "embeddings": {**self._embeddings_brief(), "dims": dims or (p.dims if p else 0)},
            "vector": vec,
            "fts": engine["fts"],
            "cache": {"entries": cache},
            "backend": self.search_backend.status(),
            "ranking": {
                "mmr": self.cfg.search.mmr,
                "mmrLambda": self.cfg.search.mmr_lambda,
                "timeDecay": self.cfg.search.time_decay,
                "halfLifeDays": self.cfg.search.half_life_days,
            },
            "sync": self.orchestrator.status(),
        }
        if self.index.rebuilding:
            out["rebuilding"] = True
        if self.index.corrupt_events:
            out["corrupt"] = self.index.corrupt_events[-5:]
        if self._skipped:
            reason = f"larger than memory.maxFileBytes ({self.cfg.max_file_bytes} bytes)"
            big = sorted(self._skipped.items(), key=lambda kv: (-kv[1], kv[0]))[:SKIPPED_SHOWN]
            out["skipped"] = [{"path": p, "bytes": b, "reason": reason} for p, b in big]
        if self._unnamable:  # after the big ones: a name, no size (sources.Scan.unnamable)
            named = [{"path": p, "reason": why} for p, why in sorted(self._unnamable.items())[:SKIPPED_SHOWN]]
            out["skipped"] = out.get("skipped", []) + named
        problem = self._embed_error or self.provider_problem or engine.get("error")
        if problem:
            out["embeddings"]["error"] = problem
        if self.distiller is not None:  # the model's distillation (ledger/distill.py): what it did so far
            out["ledger"] = {"distill": dict(self.distiller.stats)}
        return out
