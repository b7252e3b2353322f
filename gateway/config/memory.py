"""[memory] and its subsections: embeddings, chunking, search, sync, backend, recall, ledger, versions."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import setting


@dataclass
class EmbeddingsConfig:
    # Embedding providers are registered by name (memory/embeddings/registry.py: the built-in local,
    # openai and none, and plugins'): the registry, not this file, holds the names to `check_config`.
    provider: str = setting("local", doc="a registered embedding provider", registry="embedding providers")
    model: str = setting("", doc="model name; default per provider")
    dims: int = setting(0, ge=0, doc="requested dimensions (openai); 0 = the model's own")
    batch_size: int = setting(64, ge=1, le=4096, doc="items per embedding request")
    api_key: str = setting("", doc="defaults to chat.apiKey")
    base_url: str = setting("", doc="defaults to chat.baseUrl")
    timeout: float = setting(30.0, ge=0.1, doc="seconds per embedding request")
    max_retries: int = setting(2, ge=0, le=10, doc="retries of a failed embedding request, with backoff")
    fallback: str = setting(
        "none",
        doc="provider used when the configured one cannot be set up (no API key, …)",
        registry="embedding providers",
    )
    cache_max_entries: int = setting(
        200_000,
        ge=0,
        doc="vectors kept by text hash, so no text is embedded twice; the oldest go past it; 0 = no cache",
    )
    multimodal: bool = setting(
        False,
        doc="the openai endpoint's model embeds images too (e.g. llama.cpp serving "
        "Qwen3-VL-Embedding): enables memory.searchImage",
    )


@dataclass
class ChunkingConfig:
    tokens: int = setting(400, ge=16, le=8192, doc="target size of a note's chunk (≈ chars/4), cut at lines")
    overlap: int = setting(
        80,
        ge=0,
        le=4096,
        doc="tokens of a note's chunk repeated at the start of the next; below memory.chunking.tokens",
    )
    session_tokens: int = setting(175, ge=16, le=8192, doc="target size of a transcript chunk (whole messages)")
    session_overlap: int = setting(0, ge=0, le=16, doc="messages repeated at the start of the next transcript chunk")
    session_context: int = setting(
        150,
        ge=0,
        le=2048,
        doc="tokens of whole neighbouring messages on each side that join a transcript chunk as context",
    )


@dataclass
class SearchConfig:
    mode: str = setting(
        "hybrid",
        choices=("hybrid", "fts", "vector"),
        doc="a search's lists: full text and vectors fused, full text only, or vectors only (memory.search may ask)",
    )
    fusion: str = setting(
        "rrf",
        choices=("rrf", "weighted"),
        doc="rrf: weighted reciprocal rank fusion of the full-text, vector and re-rank lists; "
        "weighted: blend of relative BM25 and cosine (tuned with vectorWeight 0.7)",
    )
    rrf_k: int = setting(5, ge=1, doc="rrf: the k of weight / (k + rank); small k keeps the top ranks apart")
    rerank_weight: float = setting(
        1.0,
        ge=0.0,
        doc="rrf: weight of the re-rank's ranked list (query words together in "
        "one message, and the window's coverage of them)",
    )
    text_weight: float = setting(1.0, ge=0.0, doc="weight of the full-text list (rrf) or of the BM25 score (weighted)")
    vector_weight: float = setting(0.5, ge=0.0, doc="weight of the vector list (rrf) or of the cosine (weighted)")
    candidate_multiplier: int = setting(
        4, ge=1, le=50, doc="each list is asked for this many times the results wanted, before fusion and re-ranking"
    )
    snippet_chars: int = setting(700, ge=80, le=700, doc="characters of a result's snippet from the qmd backend")
    context_weight: float = setting(
        0.6, ge=0.0, le=1.0, doc="BM25 weight of a chunk's neighbouring context relative to its own text"
    )
    segment_weight: float = setting(
        0.3, ge=0.0, le=4.0, doc="re-rank: weight of the best single message/line match (query words together)"
    )
    coverage_weight: float = setting(
        0.3,
        ge=0.0,
        le=4.0,
        doc="re-rank: weight of the share of the query's words a whole window (core and neighbours) contains",
    )
    file_diversity: float = setting(
        0.9,
        ge=0.0,
        le=1.0,
        doc="re-rank: each result already picked from a file scales the score of "
        "that file's other candidates by this (1 = off)",
    )
    question_weight: float = setting(
        0.5,
        ge=0.0,
        le=1.0,
        doc="re-rank: how much a question (or a message of only the query's own words) "
        "counts as a match; a chunk of only such messages scores this much",
    )
    min_similarity: float = setting(
        0.25,
        ge=0.0,
        le=1.0,
        doc="a chunk that shares no word with the query is a hit only if its embedding's "
        "cosine similarity to the query's is at least this (0 = every vector neighbour)",
    )
    fts_tokenizer: str = setting(
        "porter", choices=("unicode61", "trigram", "porter"), doc="trigram for CJK text; porter stems English words"
    )
    vector_backend: str = setting(
        "auto",
        choices=("auto", "sqlite-vec", "numpy"),
        doc="auto: sqlite-vec when it loads, else numpy over stored vectors",
    )
    vector_matrix: str = setting(
        "auto",
        choices=("auto", "float32", "int8"),
        doc="the in-memory vector matrix of a big index: auto = int8 (a quarter of the memory, "
        "an exact float32 re-score of a shortlist) from 256 MiB of float32 (262,144 256-d vectors), float32 below",
    )
    ann_min_vectors: int = setting(
        100_000,
        ge=0,
        doc="from this many stored vectors, vector search asks an approximate nearest-"
        "neighbour graph (usearch HNSW, `<index>.ann`; on PostgreSQL `<stateDir>/memory/<agent>.pg.ann`; "
        "derived data) for candidates "
        "and re-scores them exactly; 0 = never (the exact matrix scan always)",
    )
    mmr: bool = setting(False, doc="re-rank by maximal marginal relevance to drop near-duplicate results")
    mmr_lambda: float = setting(0.7, ge=0.0, le=1.0, doc="MMR: 1 = relevance only, 0 = diversity only")
    time_decay: bool = setting(
        False,
        doc="scale scores by age: dated memory files and transcript messages; "
        "MEMORY.md and other undated files never decay",
    )
    half_life_days: float = setting(30.0, ge=0.01, doc="time decay: age at which a score is halved")


@dataclass
class SyncConfig:
    on_start: bool = setting(
        True, doc="sync at start (searches wait for it, so the first turn recalls what is on disk)"
    )
    watch: bool = setting(True, doc="watch the memory files and sync when they change")
    watch_debounce_ms: int = setting(500, ge=0, doc="milliseconds over which file changes are gathered into one sync")
    watch_mode: str = setting(
        "auto",
        choices=("auto", "polling"),
        doc="auto: native file events, falling back to polling when they fail (inotify "
        "limits); polling: always poll (network filesystems)",
    )
    watch_poll_ms: int = setting(2000, ge=100, le=600_000, doc="how often polling looks at the memory files")
    session_debounce_ms: int = setting(2000, ge=0, doc="delay after chat.final before a session is re-indexed")
    on_search: bool = setting(True, doc="sync before a search when the index is dirty")
    on_session_start: bool = setting(
        True, doc="sync in the background when a session is created and the index is dirty"
    )
    interval_minutes: float = setting(0.0, ge=0.0, on_from=0.001, doc="sync everything every N minutes; 0 = off")
    force_on_flush: bool = setting(
        True, doc="the sync after a compaction flush re-reads files even if size/mtime match"
    )
    processes: int = setting(
        -1,
        ge=-1,
        le=64,
        doc="worker processes that read, chunk and embed (local model) a sync "
        "of 1024 files or more while this one writes; -1 = one per core "
        "but one, at most 4, none below 4 cores; a sync that gets none (2-3 "
        "cores, or a provider that cannot go to them) has one that "
        "extracts the ledger's statements (and embeds, local model, from 8192 files); 0 = none (threads only); "
        "each takes ~280 MB while the sync runs",
    )
    recheck_ms: int = setting(
        1000,
        ge=0,
        le=60_000,
        doc="a sync that would remove more than half of the index looks "
        "again after this pause, and removes only files that are "
        "still missing and whose absence a stat confirms",
    )


@dataclass
class QmdConfig:
    command: str = setting("qmd", doc="the qmd executable: a name looked up on PATH, or a path")
    collection: str = setting("", doc="QMD collection of the agent's workspace; default jarvis-<agentId>")
    timeout_ms: int = setting(10_000, ge=10, doc="per search; the process is killed after it")
    update_timeout_ms: int = setting(600_000, ge=10, doc="per `qmd collection add` / `update` / `embed`")
    embed: bool = setting(True, doc="run `qmd embed` after `qmd update` (needed for vsearch/query)")
    hybrid_command: str = setting(
        "query",
        choices=("query", "search", "vsearch"),
        doc="qmd subcommand for hybrid mode (fts → search, vector → vsearch)",
    )


@dataclass
class BackendConfig:
    kind: str = setting(
        "builtin",
        choices=("builtin", "qmd"),
        doc="builtin: the SQLite index; qmd: the qmd CLI, falling back to builtin",
    )
    retries: int = setting(2, ge=0, le=10, doc="qmd: retries of a failed search before falling back")
    retry_backoff_ms: int = setting(500, ge=0, doc="qmd: wait before retry n is n × this")
    breaker_failures: int = setting(3, ge=1, doc="qmd: consecutive failed searches that open the circuit")
    breaker_open_seconds: float = setting(30.0, ge=0.0, doc="qmd: how long an open circuit sends searches to builtin")
    qmd: QmdConfig = setting(factory=QmdConfig)


@dataclass
class LedgerConfig:
    distill: bool = setting(
        True,
        doc="with a chat model configured (chat.provider openai), the model also distils the statements of "
        "finished conversations into the ledger (memory/ledger/<session>.md); the offline extractor always runs",
    )
    distill_after_s: float = setting(
        120.0, ge=0.0, doc="a conversation quiet this long after its last turn is distilled"
    )
    timeout_s: float = setting(30.0, ge=1.0, le=600.0, doc="seconds the model has to answer one distillation")
    max_calls_per_hour: int = setting(30, ge=0, le=10_000, doc="distillation requests per hour, at most (0: none)")
    max_input_chars: int = setting(12_000, ge=500, le=1_000_000, doc="of one conversation's messages sent, at most")


@dataclass
class RecallConfig:
    enabled: bool = setting(True, doc="each chat turn recalls memory for its prompt")
    max_results: int = setting(5, ge=0, le=50, doc="results recalled into a turn's prompt at most; 0 = none")
    max_tokens: int = setting(500, ge=0, doc="size of the recalled snippets in a prompt, all together (≈ chars/4)")
    min_score: float = setting(0.3, ge=0.0, le=1.0, doc="a result scoring below this is not recalled")
    facts: int = setting(
        3, ge=0, le=20, doc="the ledger's current facts the message is about, added to the results at most; 0 = none"
    )


@dataclass
class VersionsConfig:
    keep: int = setting(
        20,
        ge=1,
        le=1000,
        doc="versions kept of each keyed memory and of each note written by memory.write, the current one "
        "included (memory.history); the oldest go first",
    )
    max_bytes: int = setting(
        1 << 20,
        ge=1 << 18,
        le=1 << 30,
        doc="bytes of text (UTF-8) kept in one keyed memory's or one note's versions; the oldest go first "
        "(the current one always stays)",
    )


@dataclass
class MemoryConfig:
    enabled: bool = setting(
        True, doc="the memory index, its search and recall; false: memory.* methods answer that memory is disabled"
    )
    image_max_bytes: int = setting(5 * 1024 * 1024, ge=1, doc="largest image memory.setImage accepts (decoded bytes)")
    max_file_bytes: int = setting(
        10 * 1024 * 1024,
        ge=1024,
        le=1 << 40,
        doc="a memory file (MEMORY.md, memory/**/*.md) larger than this is not indexed: it is "
        "skipped, logged and listed in memory.status `skipped` until it shrinks back under "
        "it (transcripts are not capped)",
    )
    embeddings: EmbeddingsConfig = setting(factory=EmbeddingsConfig)
    chunking: ChunkingConfig = setting(factory=ChunkingConfig)
    search: SearchConfig = setting(factory=SearchConfig)
    sync: SyncConfig = setting(factory=SyncConfig)
    backend: BackendConfig = setting(factory=BackendConfig)
    recall: RecallConfig = setting(factory=RecallConfig)
    ledger: LedgerConfig = setting(factory=LedgerConfig)
    versions: VersionsConfig = setting(factory=VersionsConfig)
    trash_days: float = setting(
        30.0,
        ge=0.01,
        le=36500.0,
        doc="days a deleted keyed memory (memory.delete) or session (sessions.delete) stays in the trash, "
        "restorable, before it is purged for good",
    )
    trash_max: int = setting(
        10_000,
        ge=1,
        doc="keyed memories, and sessions, one agent's trash holds; past it the longest deleted go first",
    )
    redact_secrets: bool = setting(
        True,
        doc="mask API keys, private keys, bearer tokens and passwords said in a conversation in what memory "
        "indexes, recalls into prompts and returns to memory tools and MCP clients (the transcript keeps "
        "the words); changing it rebuilds the index",
    )
