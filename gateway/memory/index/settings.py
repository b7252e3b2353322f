"""What a sync is given (IndexSettings, from the config) and what it reports (SyncStats)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable


if TYPE_CHECKING:  # pragma: no cover
    from ...config import MemoryConfig

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class IndexSettings:
    """What the pipeline needs, built from the config (`memory.chunking.*`, …) by `from_config`: no
    defaults of its own, so the config is the one place a default lives."""

    workspace: Path
    sessions_dir: Path
    tokens: int
    overlap: int
    session_tokens: int
    session_overlap: int
    session_context: int
    vector_backend: str  # "sqlite-vec", "numpy", "pgvector" or "none": the one the engine picked
    cache_max_entries: int
    processes: int  # worker processes for a large sync (`memory.sync.processes`, resolved: 0 = none)
    recheck_s: float  # the pause before a sync that would remove most of the index looks again
    max_file_bytes: int  # a memory file larger than this is skipped (`memory.maxFileBytes`)
    redact: bool  # secrets in transcript messages are masked before they are chunks (`memory.redactSecrets`)
    # A large sync that gets no worker processes (2-3 cores with `memory.sync.processes` -1, or a provider
    # that cannot go to them) extracts the ledger's statements in one process of its own, beside this
    # one's chunking and writing, which embeds there too with a portable provider (issue 46); never with
    # `memory.sync.processes` 0.
    extractor: bool

    @classmethod
    def from_config(
        cls, m: "MemoryConfig", workspace: Path, sessions_dir: Path, vector_backend: str
    ) -> "IndexSettings":
        c = m.chunking
        return cls(
            workspace=workspace,
            sessions_dir=sessions_dir,
            tokens=c.tokens,
            overlap=c.overlap,
            session_tokens=c.session_tokens,
            session_overlap=c.session_overlap,
            session_context=c.session_context,
            vector_backend=vector_backend,
            cache_max_entries=m.embeddings.cache_max_entries,
            processes=resolve_processes(m.sync.processes),
            recheck_s=m.sync.recheck_ms / 1000.0,
            max_file_bytes=m.max_file_bytes,
            redact=m.redact_secrets,
            extractor=lends_extractor(m.sync.processes, usable_cores()),
        )


def lends_extractor(setting: int, cores: int) -> bool:
    """Whether a large sync with no worker processes may extract the ledger in a process of its own:
    `memory.sync.processes` 0 says none; one set (≥ 1) says processes may run; -1 lends it where a
    second core runs it beside this process."""
    return setting > 0 or (setting < 0 and cores >= 2)


def resolve_processes(setting: int) -> int:
    """`memory.sync.processes`: -1 → one per core but one (this process writes), at most 4; none below
    4 cores, where one worker and this process share the CPU no better than threads do (measured on 2
    cores: 7.1k chunks/s with one worker, 7.3–8.1k without). Four: one worker prepares ~9.5k chunks/s
    (~105 µs a chunk), the one writer takes ~12–20k/s, and each worker holds ~280 MB (the model)."""
    if setting >= 0:
        return setting
    cores = usable_cores()
    return min(4, cores - 1) if cores >= 4 else 0


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, cut to a cgroup v2 CPU quota (a container
    limited to 2 CPUs on a 32-core host has 2)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


@dataclass
class SyncStats:
    indexed: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks_embedded: int = 0
    cache_hits: int = 0
    duration_ms: int = 0
    missing_vectors: int = 0
    embed_error: str | None = None
    retry_after: float | None = None
    changed: bool = False
    # Memory files left out for their size, by path: their bytes (None: the memory files were not scanned).
    skipped: dict[str, int] | None = None
    # Memory files and folders left out for their names (sources.Scan.unnamable): the name shown → why.
    unnamable: dict[str, str] | None = None
    bytes_read: int = 0  # of the files read (new or changed)
    compare_ms: int = 0  # of duration_ms: finding what changed (the scan and the index's signatures, at once)
    scan_ms: int = 0  # of compare_ms: the scan of the files on disk

    def result(self) -> dict[str, Any]:
        return {
            "indexed": self.indexed,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "chunksEmbedded": self.chunks_embedded,
            "cacheHits": self.cache_hits,
            "durationMs": self.duration_ms,
        }

    def merge(self, other: "SyncStats") -> None:
        for f in ("indexed", "removed", "unchanged", "chunks_embedded", "cache_hits"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.changed = self.changed or other.changed
        self.embed_error = other.embed_error or self.embed_error
