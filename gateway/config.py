"""One Config, loaded once: defaults, then `<stateDir>/config.toml`, then environment, then CLI flags.

The TOML file uses camelCase keys in sections that mirror the dataclasses below, e.g.::

    [server]
    port = 18789
    allowedOrigins = ["http://myhost:18789"]

    [chat]
    model = "gpt-4o-mini"
    historyMessages = 20

    [memory.search]
    rrfK = 60

Every value is type-checked and range-checked in one place (`_coerce`); a bad one raises ConfigError
naming the key (`memory.search.rrfK: must be >= 1, got 0`), which the CLI prints and exits with code 2.
A number must be finite (NaN compares false with every bound, so it is refused before any bound is
looked at) and within its declared bounds, and never beyond `NUMBER_LIMIT` whatever they say; text
(strings, paths, list items) must be valid Unicode without NUL, which no path, socket or PostgreSQL
text can hold. The token follows the one token rule of auth.py.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, get_args, get_origin, get_type_hints

from .auth import token_problem
from .schema import AGENT_ID
from .tools.specs import CATALOG


TOOL_POLICIES = ("ask", "allow", "deny")  # chat.toolPolicy's values


class ConfigError(ValueError):
    """A configuration value is invalid. The message starts with the key; when several are, `errors`
    holds each one's message (the message joins them, one per line)."""

    def __init__(self, message: str, errors: list[str] | None = None):
        super().__init__(message)
        self.errors = errors or [message]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


# Validation rules, attached to fields via metadata: ge/le bounds, a set of allowed choices, and for a
# setting where 0 turns something off, the least value that turns it on (`on_from`: a period of 1e-300
# seconds would spin a loop); `registry`: the value names something registered above this layer (its
# registry checks it: see the field).
def _f(
    default: Any = dataclasses.MISSING,
    *,
    ge=None,
    le=None,
    choices=None,
    on_from=None,
    factory=None,
    doc="",
    registry="",
):
    meta = {"ge": ge, "le": le, "choices": choices, "on_from": on_from, "doc": doc, "registry": registry}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ServerConfig:
    host: str = _f("127.0.0.1", doc="bind address; loopback by default")
    port: int = _f(18789, ge=0, le=65535, doc="0 picks a free port")
    allowed_origins: list[str] = _f(factory=list, doc="extra browser Origins allowed to connect")
    max_connections: int = _f(
        256,
        ge=1,
        doc="WebSocket connections at once (after the upgrade); at it an "
        "unauthenticated one is closed to make room, else HTTP 503. On the HTTP API: requests in flight "
        "of all tokens together (503 past it)",
    )
    max_pending_sockets: int = _f(
        128,
        ge=1,
        doc="accepted TCP connections that have not finished the WebSocket "
        "upgrade (or their HTTP request), in total; past it the oldest that has not "
        "sent a byte (else the oldest) is dropped",
    )
    max_pending_per_address: int = _f(
        32, ge=1, doc="the same, per client address; past it that address's oldest (silent first) is dropped"
    )
    handshake_timeout: float = _f(
        3.0,
        ge=0.1,
        le=60.0,
        doc="seconds from accept to a finished upgrade (or HTTP answer) before the socket is dropped",
    )
    fd_reserve: int = _f(
        0,
        ge=0,
        doc="file descriptors kept for the gateway's own files (transcripts, "
        "sessions.json, SQLite, locks): sockets past RLIMIT_NOFILE minus these are refused "
        "with HTTP 503; 0 = an eighth of the limit, at least 64",
    )
    max_frame_bytes: int = _f(1 << 20, ge=1024, doc="largest frame after auth")
    preauth_frame_bytes: int = _f(64 << 10, ge=256, doc="largest frame before auth")
    max_inflight: int = _f(64, ge=1, doc="requests in flight per connection")
    max_send_buffer: int = _f(8 << 20, ge=64 << 10, doc="unsent bytes before a slow consumer is closed")
    slow_consumer_seconds: float = _f(
        30.0,
        ge=0.1,
        doc="a reply waits this long for a client to read what is "
        "queued (over half of maxSendBuffer) before the client is closed as slow",
    )
    max_reply_bytes: int = _f(
        8 << 20,
        ge=64 << 10,
        doc="largest reply frame (a batch's answer included); a "
        "bigger one is answered with an error saying to ask for less",
    )
    ping_interval: float = _f(
        20.0, ge=0.0, on_from=1.0, doc="seconds between keepalive pings (and to wait for the pong); 0 disables them"
    )
    auth_timeout: float = _f(10.0, ge=0.1, doc="seconds to authenticate after connecting")
    shutdown_grace: float = _f(
        5.0,
        ge=0.0,
        doc="seconds running chats get to finish on shutdown (new ones are refused); then they are aborted, partials kept",
    )
    auth_failures_per_minute: int = _f(
        10,
        ge=1,
        doc="wrong tokens per peer address and minute before further "
        "wrong ones are answered 'rate limited' (the right token always gets in)",
    )
    auth_failure_delay: float = _f(1.0, ge=0.0, le=30.0, doc="seconds each wrong token waits for its answer")
    http_port: int = _f(
        18790,
        ge=-1,
        le=65535,
        doc="the HTTP API listener (/mcp, /v1/...) on the same host; 0 turns it off, -1 picks a free port",
    )
    http_max_body_bytes: int = _f(8 << 20, ge=1024, doc="largest HTTP API request body (413 past it)")
    http_body_timeout: float = _f(
        30.0,
        ge=0.1,
        le=3600.0,
        doc="seconds an HTTP API request body may take to "
        "arrive, from its first read (408 past it: a trickled body holds nothing)",
    )
    http_body_bytes_in_flight: int = _f(
        32 << 20,
        ge=1024,
        le=1 << 40,
        doc="HTTP API request bodies held at once, in bytes, from their first byte to their answer (a parsed "
        "body takes several times its size in memory); a request that would pass it is answered 503 with "
        "Retry-After; at least server.httpMaxBodyBytes",
    )
    http_max_per_token: int = _f(
        64,
        ge=1,
        le=100_000,
        doc="HTTP API requests in flight per token (a streamed reply counts until it ends); past it 429 with "
        "Retry-After. All tokens together: server.maxConnections, past it 503",
    )
    http_max_streams: int = _f(
        32,
        ge=1,
        le=100_000,
        doc="event streams open at once on the HTTP API (GET /mcp, streamed /v1 replies); past it 503 with "
        "Retry-After; below server.httpMaxPerToken, so idle streams never take a token's last requests",
    )
    http_stream_idle_seconds: float = _f(
        120.0,
        ge=1.0,
        le=86400.0,
        doc="an HTTP API event stream that sent no event for this long (keep-alive comments do not count) "
        "is ended; an MCP client opens GET /mcp again when it needs to",
    )


@dataclass
class ChatConfig:
    provider: str = _f(
        "auto",
        choices=("auto", "openai", "offline"),
        doc="auto: openai when an API key or base URL is set, else offline",
    )
    api_key: str = _f("", doc="OPENAI_API_KEY")
    base_url: str = _f("", doc="OPENAI_BASE_URL, any OpenAI-compatible endpoint")
    model: str = _f("gpt-4o-mini")
    timeout: float = _f(
        60.0,
        ge=0.1,
        doc="seconds per provider request, and between streamed chunks with content (keep-alive comments do not count)",
    )
    max_retries: int = _f(2, ge=0, le=10)
    responses_api: str = _f(
        "auto",
        choices=("auto", "upstream", "translate"),
        doc="how /v1/responses reaches the upstream: its own /v1/responses (upstream), as chat completions "
        "(translate: Ollama, llama.cpp), or auto: its own until it answers 404/405/501 there, then translated",
    )
    history_messages: int = _f(20, ge=1, le=1000, doc="messages of the session sent with each turn")
    system_prompt: str = _f(
        "You are Jarvis, a helpful personal assistant with long-term memory. "
        "Use the recalled memory below when it is relevant; say so when you do not know."
    )
    max_reply_chars: int = _f(200_000, ge=1, doc="an assistant reply is cut here (chat.final says truncated)")
    idempotency_ttl: float = _f(600.0, ge=1.0, doc="seconds an idempotencyKey is remembered")
    offline_delta_delay: float = _f(0.01, ge=0.0, le=5.0, doc="seconds between the offline responder's deltas")
    compact_budget_tokens: int = _f(
        6000,
        ge=0,
        doc="history size (≈ chars/4) past which older messages are "
        "flushed into memory/YYYY-MM-DD.md; 0 = only by sessions.compact",
    )
    compact_keep_recent: int = _f(10, ge=1, le=1000, doc="messages kept verbatim when a session is compacted")
    tools: bool | list[str] = _f(
        True,
        doc="memory tools the chat model may call (OpenAI-compatible providers): true "
        "for all, false for none, or a list of names (memory_search, memory_get, "
        "memory_set, memory_delete, memory_list, memory_recall)",
    )
    max_tool_steps: int = _f(
        5,
        ge=1,
        le=50,
        doc="rounds of tool calls in one run; past it the model must answer and the reply says the limit was reached",
    )
    tool_policy: dict[str, str] = _f(
        factory=dict,
        doc="per destructive tool (memory_delete; memory_set where it would overwrite a key): "
        '"ask" (the default: the run pauses with chat.confirm until a client answers), "allow" or "deny"; '
        "where no client can answer (a /v1 relay, a run nobody watches) ask means deny",
    )
    confirm_seconds: float = _f(
        60.0, ge=0.1, le=3600.0, doc="seconds a chat.confirm waits for an answer; no answer is a denial"
    )
    max_destructive_per_run: int = _f(
        3, ge=0, le=1000, doc="destructive tool calls one run may make (asked or allowed); past it they are denied"
    )
    max_tool_argument_bytes: int = _f(
        1 << 20,
        ge=1024,
        le=64 << 20,
        doc="tool-call arguments one answer of the model may carry in all (UTF-8); calls past it are refused, "
        "their arguments stored cut with a note",
    )
    max_tool_call_id_chars: int = _f(
        128, ge=16, le=4096, doc="a tool call's id as the model sent it; a longer one is replaced by the gateway's own"
    )
    discover: bool = _f(
        True,
        doc="with no chat model configured (provider auto, no apiKey or baseUrl), look for a model server on "
        "this machine's loopback (127.0.0.1, ::1) at chat.discoverPorts, at start and when asked (jarvis models, "
        "chat.models), and chat with the first that answers with a model; false: the offline responder",
    )
    discover_ports: list[int] = _f(
        factory=lambda: [11434, 8080, 1234, 8000],
        doc="loopback ports discovery asks, in order: Ollama 11434, llama.cpp's server 8080, LM Studio 1234, vLLM 8000",
    )


@dataclass
class OpenAIApiConfig:
    memory: bool = _f(
        True,
        doc="/v1/chat/completions adds recalled memory to the system prompt (per request: header X-Jarvis-Memory: off)",
    )
    capture: bool = _f(
        True,
        doc="/v1/chat/completions keeps each user message and reply in a session's "
        "transcript, indexed as memory (per request: header X-Jarvis-Capture: off)",
    )
    stored_responses: int = _f(
        1000,
        ge=0,
        le=1_000_000,
        doc="/v1/responses kept per principal in the storage engine (every gateway on it reads them) for "
        "GET /v1/responses/{id} and previous_response_id, the oldest evicted past it; 0 keeps none",
    )
    stored_response_bytes: int = _f(
        64 << 20,
        ge=0,
        le=1 << 40,
        doc="bytes of /v1/responses kept per principal (their JSON), the oldest evicted past it; a response "
        "bigger than this alone is answered but not kept",
    )
    stored_response_days: float = _f(
        30.0,
        ge=0.0,
        le=36_500.0,
        doc="days a kept /v1/responses response is readable and continuable; older ones are purged",
    )
    max_messages: int = _f(
        4096,
        ge=1,
        le=1_000_000,
        doc="messages (or input items) in one /v1 request; past it 400 array_above_max_length (the body's "
        "bytes: server.httpMaxBodyBytes, 413)",
    )


@dataclass
class SessionsConfig:
    max: int = _f(
        10_000,
        ge=1,
        doc="sessions one agent may hold; sessions.create past it answers -32009 "
        "(delete some, or raise this); ephemeral ones are pruned by their own limits",
    )
    ephemeral_prefix: str = _f("hook:", doc="sessions whose key starts with this are pruned by age and count")
    ephemeral_max_age_hours: float = _f(48.0, ge=0.0, doc="ephemeral sessions idle longer are deleted")
    ephemeral_max_count: int = _f(500, ge=0, doc="at most this many ephemeral sessions are kept (newest)")
    prune_interval_minutes: float = _f(
        10.0, ge=0.0, on_from=0.001, doc="how often to prune; 0 = at start and by sessions.prune only"
    )
    history_max_bytes: int = _f(
        2 << 20,
        ge=4096,
        doc="about how much content one sessions.history page may hold; keep it well under server.maxSendBuffer",
    )


@dataclass
class AgentsConfig:
    max: int = _f(
        256, ge=1, doc="agents that may exist (folders under <stateDir>/agents); creating one more is refused"
    )
    max_open: int = _f(
        16,
        ge=1,
        doc="agents open at once (each holds its index, watcher and threads); opening "
        "one more closes the least recently used idle one, or is refused when none is idle",
    )
    idle_seconds: float = _f(
        300.0,
        ge=1.0,
        doc="an agent with no run, request or sync for this long is closed "
        "(reopened on its next use); the default agent stays open",
    )


@dataclass
class EmbeddingsConfig:
    # Embedding providers are registered by name (memory/embeddings/registry.py: the built-in local,
    # openai and none, and plugins'): the registry, not this file, holds the names to `check_config`.
    provider: str = _f("local", doc="a registered embedding provider", registry="embedding providers")
    model: str = _f("", doc="model name; default per provider")
    dims: int = _f(0, ge=0, doc="requested dimensions (openai); 0 = the model's own")
    batch_size: int = _f(64, ge=1, le=4096, doc="items per embedding request")
    api_key: str = _f("", doc="defaults to chat.apiKey")
    base_url: str = _f("", doc="defaults to chat.baseUrl")
    timeout: float = _f(30.0, ge=0.1)
    max_retries: int = _f(2, ge=0, le=10)
    fallback: str = _f(
        "none",
        doc="provider used when the configured one cannot be set up (no API key, …)",
        registry="embedding providers",
    )
    cache_max_entries: int = _f(200_000, ge=0)
    multimodal: bool = _f(
        False,
        doc="the openai endpoint's model embeds images too (e.g. llama.cpp serving "
        "Qwen3-VL-Embedding): enables memory.searchImage",
    )


@dataclass
class ChunkingConfig:
    tokens: int = _f(400, ge=16, le=8192)
    overlap: int = _f(80, ge=0, le=4096)
    session_tokens: int = _f(175, ge=16, le=8192, doc="target size of a transcript chunk (whole messages)")
    session_overlap: int = _f(0, ge=0, le=16, doc="messages repeated at the start of the next transcript chunk")
    session_context: int = _f(
        150,
        ge=0,
        le=2048,
        doc="tokens of whole neighbouring messages on each side that join a transcript chunk as context",
    )


@dataclass
class SearchConfig:
    mode: str = _f("hybrid", choices=("hybrid", "fts", "vector"))
    fusion: str = _f(
        "rrf",
        choices=("rrf", "weighted"),
        doc="rrf: weighted reciprocal rank fusion of the full-text, vector and re-rank lists; "
        "weighted: blend of relative BM25 and cosine (tuned with vectorWeight 0.7)",
    )
    rrf_k: int = _f(5, ge=1, doc="rrf: the k of weight / (k + rank); small k keeps the top ranks apart")
    rerank_weight: float = _f(
        1.0,
        ge=0.0,
        doc="rrf: weight of the re-rank's ranked list (query words together in "
        "one message, and the window's coverage of them)",
    )
    text_weight: float = _f(1.0, ge=0.0)
    vector_weight: float = _f(0.5, ge=0.0, doc="weight of the vector list (rrf) or of the cosine (weighted)")
    candidate_multiplier: int = _f(4, ge=1, le=50)
    snippet_chars: int = _f(700, ge=80, le=700)
    context_weight: float = _f(
        0.6, ge=0.0, le=1.0, doc="BM25 weight of a chunk's neighbouring context relative to its own text"
    )
    segment_weight: float = _f(
        0.3, ge=0.0, le=4.0, doc="re-rank: weight of the best single message/line match (query words together)"
    )
    coverage_weight: float = _f(
        0.3,
        ge=0.0,
        le=4.0,
        doc="re-rank: weight of the share of the query's words a whole window (core and neighbours) contains",
    )
    file_diversity: float = _f(
        0.9,
        ge=0.0,
        le=1.0,
        doc="re-rank: each result already picked from a file scales the score of "
        "that file's other candidates by this (1 = off)",
    )
    question_weight: float = _f(
        0.5,
        ge=0.0,
        le=1.0,
        doc="re-rank: how much a question (or a message of only the query's own words) "
        "counts as a match; a chunk of only such messages scores this much",
    )
    min_similarity: float = _f(
        0.25,
        ge=0.0,
        le=1.0,
        doc="a chunk that shares no word with the query is a hit only if its embedding's "
        "cosine similarity to the query's is at least this (0 = every vector neighbour)",
    )
    fts_tokenizer: str = _f(
        "porter", choices=("unicode61", "trigram", "porter"), doc="trigram for CJK text; porter stems English words"
    )
    vector_backend: str = _f(
        "auto",
        choices=("auto", "sqlite-vec", "numpy"),
        doc="auto: sqlite-vec when it loads, else numpy over stored vectors",
    )
    vector_matrix: str = _f(
        "auto",
        choices=("auto", "float32", "int8"),
        doc="the in-memory vector matrix of a big index: auto = int8 (a quarter of the memory, "
        "an exact float32 re-score of a shortlist) from 262,144 vectors, float32 below",
    )
    ann_min_vectors: int = _f(
        100_000,
        ge=0,
        doc="from this many stored vectors, vector search asks an approximate nearest-"
        "neighbour graph (usearch HNSW, `<index>.ann`, derived data) for candidates "
        "and re-scores them exactly; 0 = never (the exact matrix scan always)",
    )
    mmr: bool = _f(False, doc="re-rank by maximal marginal relevance to drop near-duplicate results")
    mmr_lambda: float = _f(0.7, ge=0.0, le=1.0, doc="MMR: 1 = relevance only, 0 = diversity only")
    time_decay: bool = _f(
        False,
        doc="scale scores by age: dated memory files and transcript messages; "
        "MEMORY.md and other undated files never decay",
    )
    half_life_days: float = _f(30.0, ge=0.01, doc="time decay: age at which a score is halved")


@dataclass
class SyncConfig:
    on_start: bool = _f(True)
    watch: bool = _f(True)
    watch_debounce_ms: int = _f(500, ge=0)
    watch_mode: str = _f(
        "auto",
        choices=("auto", "polling"),
        doc="auto: native file events, falling back to polling when they fail (inotify "
        "limits); polling: always poll (network filesystems)",
    )
    watch_poll_ms: int = _f(2000, ge=100, le=600_000, doc="how often polling looks at the memory files")
    session_debounce_ms: int = _f(2000, ge=0, doc="delay after chat.final before a session is re-indexed")
    on_search: bool = _f(True, doc="sync before a search when the index is dirty")
    on_session_start: bool = _f(True, doc="sync in the background when a session is created and the index is dirty")
    interval_minutes: float = _f(0.0, ge=0.0, on_from=0.001, doc="sync everything every N minutes; 0 = off")
    force_on_flush: bool = _f(True, doc="the sync after a compaction flush re-reads files even if size/mtime match")
    processes: int = _f(
        -1,
        ge=-1,
        le=64,
        doc="worker processes that read, chunk and embed (local model) a sync "
        "of 1024 files or more while this one writes; -1 = one per core "
        "but one, at most 4, none below 4 cores; 0 = none (threads only); "
        "each takes ~280 MB while the sync runs",
    )
    recheck_ms: int = _f(
        1000,
        ge=0,
        le=60_000,
        doc="a sync that would remove more than half of the index looks "
        "again after this pause, and removes only files that are "
        "still missing and whose absence a stat confirms",
    )


@dataclass
class QmdConfig:
    command: str = _f("qmd", doc="the qmd executable: a name looked up on PATH, or a path")
    collection: str = _f("", doc="QMD collection of the agent's workspace; default jarvis-<agentId>")
    timeout_ms: int = _f(10_000, ge=10, doc="per search; the process is killed after it")
    update_timeout_ms: int = _f(600_000, ge=10, doc="per `qmd collection add` / `update` / `embed`")
    embed: bool = _f(True, doc="run `qmd embed` after `qmd update` (needed for vsearch/query)")
    hybrid_command: str = _f(
        "query",
        choices=("query", "search", "vsearch"),
        doc="qmd subcommand for hybrid mode (fts → search, vector → vsearch)",
    )


@dataclass
class BackendConfig:
    kind: str = _f(
        "builtin",
        choices=("builtin", "qmd"),
        doc="builtin: the SQLite index; qmd: the qmd CLI, falling back to builtin",
    )
    retries: int = _f(2, ge=0, le=10, doc="qmd: retries of a failed search before falling back")
    retry_backoff_ms: int = _f(500, ge=0, doc="qmd: wait before retry n is n × this")
    breaker_failures: int = _f(3, ge=1, doc="qmd: consecutive failed searches that open the circuit")
    breaker_open_seconds: float = _f(30.0, ge=0.0, doc="qmd: how long an open circuit sends searches to builtin")
    qmd: QmdConfig = _f(factory=QmdConfig)


@dataclass
class LedgerConfig:
    distill: bool = _f(
        True,
        doc="with a chat model configured (chat.provider openai), the model also distils the statements of "
        "finished conversations into the ledger (memory/ledger/<session>.md); the offline extractor always runs",
    )
    distill_after_s: float = _f(120.0, ge=0.0, doc="a conversation quiet this long after its last turn is distilled")
    timeout_s: float = _f(30.0, ge=1.0, le=600.0, doc="seconds the model has to answer one distillation")
    max_calls_per_hour: int = _f(30, ge=0, le=10_000, doc="distillation requests per hour, at most (0: none)")
    max_input_chars: int = _f(12_000, ge=500, le=1_000_000, doc="of one conversation's messages sent, at most")


@dataclass
class RecallConfig:
    enabled: bool = _f(True)
    max_results: int = _f(5, ge=0, le=50)
    max_tokens: int = _f(500, ge=0)
    min_score: float = _f(0.3, ge=0.0, le=1.0)


@dataclass
class VersionsConfig:
    keep: int = _f(
        20,
        ge=1,
        le=1000,
        doc="versions kept of each keyed memory and of each note written by memory.write, the current one "
        "included (memory.history); the oldest go first",
    )
    max_bytes: int = _f(
        1 << 20,
        ge=1 << 18,
        le=1 << 30,
        doc="bytes of text (UTF-8) kept in one keyed memory's or one note's versions; the oldest go first "
        "(the current one always stays)",
    )


@dataclass
class MemoryConfig:
    enabled: bool = _f(True)
    image_max_bytes: int = _f(5 * 1024 * 1024, ge=1, doc="largest image memory.setImage accepts (decoded bytes)")
    max_file_bytes: int = _f(
        10 * 1024 * 1024,
        ge=1024,
        le=1 << 40,
        doc="a memory file (MEMORY.md, memory/**/*.md) larger than this is not indexed: it is "
        "skipped, logged and listed in memory.status `skipped` until it shrinks back under "
        "it (transcripts are not capped)",
    )
    embeddings: EmbeddingsConfig = _f(factory=EmbeddingsConfig)
    chunking: ChunkingConfig = _f(factory=ChunkingConfig)
    search: SearchConfig = _f(factory=SearchConfig)
    sync: SyncConfig = _f(factory=SyncConfig)
    backend: BackendConfig = _f(factory=BackendConfig)
    recall: RecallConfig = _f(factory=RecallConfig)
    ledger: LedgerConfig = _f(factory=LedgerConfig)
    versions: VersionsConfig = _f(factory=VersionsConfig)
    trash_days: float = _f(
        30.0,
        ge=0.01,
        le=36500.0,
        doc="days a deleted keyed memory (memory.delete) or session (sessions.delete) stays in the trash, "
        "restorable, before it is purged for good",
    )
    trash_max: int = _f(
        10_000,
        ge=1,
        doc="keyed memories, and sessions, one agent's trash holds; past it the longest deleted go first",
    )
    redact_secrets: bool = _f(
        True,
        doc="mask API keys, private keys, bearer tokens and passwords said in a conversation in what memory "
        "indexes, recalls into prompts and returns to memory tools and MCP clients (the transcript keeps "
        "the words); changing it rebuilds the index",
    )


@dataclass
class StorageConfig:
    url: str = _f(
        "",
        doc="JARVIS_DATABASE_URL. postgresql://user:pass@host/db puts session metadata, transcripts, "
        "idempotency keys and chat runs in PostgreSQL, so several gateways can serve the same "
        "sessions (docs/scaling.md); empty = files in the state dir",
    )
    pool_size: int = _f(10, ge=2, le=200, doc="PostgreSQL connections per gateway")
    instance_id: str = _f("", doc="this gateway's name among several on one database; default host:pid")


@dataclass
class AuditConfig:
    max_bytes: int = _f(
        16 << 20,
        ge=4096,
        doc="the files engine's audit.jsonl is rotated (to audit.1.jsonl, …) once it holds this many bytes",
    )
    max_age_days: float = _f(
        30.0,
        ge=0.0,
        on_from=0.0001,
        doc="…or once its first entry is this old; 0 = by size only. PostgreSQL: rows older than "
        "maxAgeDays × (keep + 1) are deleted",
    )
    keep: int = _f(4, ge=0, le=100, doc="rotated audit files kept (the oldest beyond them is deleted)")


@dataclass
class Config:
    state_dir: Path = _f(factory=lambda: Path("~/.jarvis").expanduser())
    workspace: Path | None = _f(None, doc="default <stateDir>/workspace")
    token: str = _f("", doc="JARVIS_GATEWAY_TOKEN; default: generated into <stateDir>/gateway.token")
    agent_id: str = _f("main")
    log_level: str = _f("info", choices=("debug", "info", "warning", "error"))
    log_format: str = _f("auto", choices=("auto", "json", "console"))
    server: ServerConfig = _f(factory=ServerConfig)
    chat: ChatConfig = _f(factory=ChatConfig)
    openai_api: OpenAIApiConfig = _f(factory=OpenAIApiConfig)
    sessions: SessionsConfig = _f(factory=SessionsConfig)
    agents: AgentsConfig = _f(factory=AgentsConfig)
    memory: MemoryConfig = _f(factory=MemoryConfig)
    storage: StorageConfig = _f(factory=StorageConfig)
    audit: AuditConfig = _f(factory=AuditConfig)

    # ---- derived paths -------------------------------------------------------------------------
    @property
    def workspace_dir(self) -> Path:
        return self.workspace if self.workspace is not None else self.state_dir / "workspace"

    @property
    def token_file(self) -> Path:
        return self.state_dir / "gateway.token"

    def agent_dir(self, agent_id: str | None = None) -> Path:
        return self.state_dir / "agents" / (agent_id or self.agent_id)

    def sessions_dir(self, agent_id: str | None = None) -> Path:
        return self.agent_dir(agent_id) / "sessions"

    def agent_workspace(self, agent_id: str | None = None) -> Path:
        """Where an agent's memory files live: the workspace itself for the default agent,
        `<workspace>/agents/<id>/` for any other (outside the default agent's MEMORY.md/memory/)."""
        agent_id = agent_id or self.agent_id
        return self.workspace_dir if agent_id == self.agent_id else self.workspace_dir / "agents" / agent_id

    def memory_db(self, agent_id: str | None = None) -> Path:
        return self.agent_dir(agent_id) / "memory.sqlite"

    def ws_url(self, port: int | None = None) -> str:
        """The URL a local client uses: a wildcard bind is reached on loopback; IPv6 in brackets."""
        host = self.server.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"ws://{host}:{self.server.port if port is None else port}/"

    @property
    def chat_provider(self) -> str:
        """The chat provider in effect: `auto` resolves by whether an endpoint is configured."""
        if self.chat.provider != "auto":
            return self.chat.provider
        return "openai" if (self.chat.api_key or self.chat.base_url) else "offline"

    @property
    def discovers(self) -> bool:
        """Whether the gateway looks for a model server on loopback: no chat model configured (provider auto,
        no apiKey, no baseUrl) and chat.discover on. A configured model always wins."""
        return self.chat.provider == "auto" and self.chat_provider == "offline" and self.chat.discover


ENV_VARS: dict[str, str] = {
    "JARVIS_STATE_DIR": "stateDir",
    "JARVIS_WORKSPACE": "workspace",
    "JARVIS_HOST": "server.host",
    "JARVIS_PORT": "server.port",
    "JARVIS_HTTP_PORT": "server.httpPort",
    "JARVIS_GATEWAY_TOKEN": "token",
    "OPENAI_API_KEY": "chat.apiKey",
    "OPENAI_BASE_URL": "chat.baseUrl",
    "JARVIS_CHAT_MODEL": "chat.model",
    "JARVIS_CHAT_DISCOVER": "chat.discover",
    "JARVIS_DATABASE_URL": "storage.url",
}


NUMBER_LIMIT = 2**53
"""No number setting goes beyond this (in absolute value), whatever its own bounds: every integer up to
it is exact as a float too, and it is far past any sensible count, size or duration."""


def _shown(value: Any, limit: int = 60) -> str:
    """`value` as an error message quotes it: repr, cut to `limit` characters (a huge integer by its size:
    repr() of one past 4,300 digits raises)."""
    if isinstance(value, int) and not -(10**30) < value < 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(key: str, value: str) -> str:
    """A string setting's one rule: text that a path, a socket and both storage engines can hold."""
    if "\x00" in value:
        raise ConfigError(f"{key}: must not contain NUL (U+0000) characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a byte of the environment that is not UTF-8
        raise ConfigError(f"{key}: must be valid Unicode text (UTF-8 in the environment and in files)") from None
    return value


def _number(key: str, value: Any, typ: type, meta: Mapping[str, Any], from_text: bool) -> int | float:
    """An int or float setting: its type, finite, inside its declared bounds and NUMBER_LIMIT."""
    kind = "an integer" if typ is int else "a number"
    if from_text and isinstance(value, str):
        try:
            value = int(value.strip()) if typ is int else float(value)
        except ValueError:
            raise ConfigError(f"{key}: must be {kind}, got {_shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (typ is int and not isinstance(value, int)):
        raise ConfigError(f"{key}: must be {kind}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {value}")
    low, high = meta.get("ge"), meta.get("le")
    high = NUMBER_LIMIT if high is None else min(high, NUMBER_LIMIT)
    low = -NUMBER_LIMIT if low is None else max(low, -NUMBER_LIMIT)
    if not value >= low:  # `not >=`: true for anything unordered, should one ever get here
        raise ConfigError(f"{key}: must be >= {low}, got {_shown(value)}")
    if not value <= high:
        raise ConfigError(f"{key}: must be <= {high}, got {_shown(value)}")
    if meta.get("on_from") is not None and value != 0 and not value >= meta["on_from"]:
        raise ConfigError(f"{key}: must be 0 (off) or at least {meta['on_from']}, got {_shown(value)}")
    return typ(value)


def _coerce(key: str, value: Any, typ: Any, meta: Mapping[str, Any], from_text: bool) -> Any:
    """Check (and for env/CLI text, convert) one value against its declared type and rules."""
    origin = get_origin(typ)
    if get_args(typ) == (bool, list[str]):  # true / false / a list of names
        if isinstance(value, bool) or (
            from_text
            and isinstance(value, str)
            and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off")
        ):
            return _coerce(key, value, bool, meta, from_text)
        if not isinstance(value, (list, str)):
            raise ConfigError(f"{key}: must be true, false or a list of tool names")
        return _coerce(key, value, list[str], meta, from_text)
    if origin is dict:  # a table of names to strings (chat.toolPolicy); _validate checks names and values
        if from_text and isinstance(value, str):  # "memory_delete=allow,memory_set=ask"
            pairs = [v.split("=", 1) for v in value.split(",") if v.strip()]
            if not all(len(p) == 2 for p in pairs):
                raise ConfigError(f"{key}: must be name=value pairs separated by commas, got {_shown(value)}")
            value = {n.strip(): v.strip() for n, v in pairs}
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{key}: must be a table of names to strings")
        return {_text(key, str(n)): _text(f"{key}.{n}", v) for n, v in value.items()}
    if typ == list[int]:  # ports: "11434, 8080" from the environment
        if from_text and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or len(value) > 64:
            raise ConfigError(f"{key}: must be a list of at most 64 port numbers")
        return [int(_number(f"{key}[{i}]", v, int, {"ge": 1, "le": 65535}, from_text)) for i, v in enumerate(value)]
    if origin is list:
        if from_text and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: must be a list of strings")
        return [_text(key, v) for v in value]
    if typ is Path or (origin is not None and Path in get_args(typ)):
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: must be a non-empty path string")
        return Path(_text(key, value)).expanduser()
    if typ is bool:
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: must be true or false")
        return value
    if typ is int or typ is float:
        return _number(key, value, typ, meta, from_text)
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: must be a string")
        if meta.get("choices") and value not in meta["choices"]:
            raise ConfigError(f"{key}: must be one of {', '.join(meta['choices'])}; got {_shown(value)}")
        return _text(key, value)
    raise ConfigError(f"{key}: unsupported type")  # pragma: no cover - declarations are ours


def _apply(obj: Any, data: Mapping[str, Any], prefix: str, from_text: bool, errors: list[str]) -> None:
    """Apply a nested mapping of camelCase keys onto dataclass `obj`, validating every value; each bad
    one is added to `errors` (and left at its default) so that all of them are reported at once."""
    hints = get_type_hints(type(obj))
    fields = {_camel(f.name): f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        full = f"{prefix}{key}"
        f = fields.get(key)
        if f is None:
            errors.append(f"{full}: unknown key{_did_you_mean(key, fields)} (known here: {', '.join(sorted(fields))})")
            continue
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            if not isinstance(value, Mapping):
                errors.append(f"{full}: must be a table")
                continue
            _apply(getattr(obj, f.name), value, f"{full}.", from_text, errors)
            continue
        try:
            coerced = _coerce(full, value, typ, f.metadata, from_text)
            if get_origin(typ) is dict:  # a table merges over what the file (or defaults) set
                coerced = {**getattr(obj, f.name), **coerced}
            setattr(obj, f.name, coerced)
        except ConfigError as exc:
            errors.append(str(exc))


def _did_you_mean(key: str, known: Mapping[str, Any]) -> str:
    """ ", did you mean 'historyMessages'?" for a key a letter or two from a known one (its case aside too)."""
    import difflib

    by_lower = {k.lower(): k for k in known}
    if str(key).lower() in by_lower:
        return f", did you mean {by_lower[str(key).lower()]!r}?"
    close = difflib.get_close_matches(str(key).lower(), list(by_lower), n=1, cutoff=0.75)
    return f", did you mean {by_lower[close[0]]!r}?" if close else ""


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cur = out
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _is_host(host: str) -> bool:
    """An address to bind: an IP address (IPv6 with a zone too), or a DNS name; "" binds every address."""
    import ipaddress

    if host == "":
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    return len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


HTTP_URL_SETTINGS = ("chat.baseUrl", "memory.embeddings.baseUrl")  # every setting that is an endpoint's URL


def _http_url_problem(url: str) -> str | None:
    """Why `url` is no http(s) endpoint a client can call (as far as one can tell without calling it)."""
    from urllib.parse import urlsplit

    example = "e.g. http://127.0.0.1:11434/v1"
    if not re.match(r"^https?://", url, re.I):
        return f"must be an http:// or https:// URL ({example}), got {_shown(url)}"
    if re.search(r"[\x00-\x20\x7f]", url):
        return "must not contain spaces or control characters (percent-encode them)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError when the port is not a number in 0..65535
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    host = parts.hostname or ""
    if not host or not (_is_host(host) or ":" in host):  # (":": an IPv6 address, as [::1])
        return f"must name a host ({example}), got {_shown(url)}"
    return None


def _database_url_problem(url: str) -> str | None:
    """Why `url` is no PostgreSQL URL the driver can use (as far as one can tell without connecting)."""
    from urllib.parse import parse_qs, urlsplit

    if not re.match(r"^postgres(ql)?://", url):
        return "must be a postgresql:// URL (or empty for files in the state dir)"
    if re.search(r"[\x00-\x20\x7f]", url):
        return "must not contain spaces or control characters (percent-encode them)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError when the port is not a number in 0..65535
        query = parse_qs(parts.query, strict_parsing=False)
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    for mode in query.get("sslmode", []):
        if mode not in _SSLMODES:
            return f"sslmode must be one of {', '.join(_SSLMODES)}, got {_shown(mode)}"
    return None


def _setting(cfg: Config, dotted: str) -> Any:
    """The value of a dotted camelCase key ("chat.baseUrl")."""
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), part))
    return obj


def _validate(cfg: Config) -> None:
    if not re.fullmatch(AGENT_ID, cfg.agent_id):
        raise ConfigError("agentId: must match [A-Za-z0-9._-]{1,64} and not be dots only")
    if cfg.memory.chunking.overlap >= cfg.memory.chunking.tokens:
        raise ConfigError("memory.chunking.overlap: must be smaller than memory.chunking.tokens")
    problem = token_problem(cfg.token) if cfg.token else None
    if problem:
        raise ConfigError(
            f"token: {problem} (--token, JARVIS_GATEWAY_TOKEN or config). Leave it unset to use the generated one (jarvis token)"
        )
    if cfg.sessions.history_max_bytes + (64 << 10) > cfg.server.max_reply_bytes:
        raise ConfigError(
            f"sessions.historyMaxBytes: a page of {cfg.sessions.history_max_bytes} bytes does not fit "
            f"server.maxReplyBytes ({cfg.server.max_reply_bytes}) with room to spare; lower it"
        )
    if isinstance(cfg.chat.tools, list):
        unknown = [t for t in cfg.chat.tools if t not in CATALOG]
        if unknown:
            raise ConfigError(f"chat.tools: unknown tool {unknown[0]!r} (known: {', '.join(CATALOG)}); or true / false")
    destructive = [t.name for t in CATALOG.values() if t.destructive]
    for name, policy in cfg.chat.tool_policy.items():
        if name not in destructive:
            raise ConfigError(
                f"chat.toolPolicy.{name}: only destructive tools take a policy ({', '.join(destructive)}); "
                "leave a tool out of chat.tools to switch it off"
            )
        if policy not in TOOL_POLICIES:
            raise ConfigError(
                f"chat.toolPolicy.{name}: must be one of {', '.join(TOOL_POLICIES)}; got {_shown(policy)}"
            )
    if cfg.chat.max_reply_chars * 6 + (64 << 10) > cfg.server.max_reply_bytes:
        raise ConfigError(
            f"chat.maxReplyChars: {cfg.chat.max_reply_chars} chars may encode to more than "
            f"server.maxReplyBytes ({cfg.server.max_reply_bytes}); lower it or raise maxReplyBytes"
        )
    for key in HTTP_URL_SETTINGS:
        url = _setting(cfg, key)
        if url:
            problem = _http_url_problem(url)
            if problem:
                raise ConfigError(f"{key}: {problem}")
    if cfg.storage.url:
        problem = _database_url_problem(cfg.storage.url)
        if problem:
            raise ConfigError(f"storage.url: {problem}")
    if not _is_host(cfg.server.host):
        raise ConfigError(
            f"server.host: must be an IP address or a host name (letters, digits, '-' and '.'), "
            f"got {_shown(cfg.server.host)}"
        )
    if cfg.server.max_pending_per_address > cfg.server.max_pending_sockets:
        raise ConfigError(
            f"server.maxPendingPerAddress: must be <= server.maxPendingSockets ({cfg.server.max_pending_sockets})"
        )
    if cfg.server.http_body_bytes_in_flight < cfg.server.http_max_body_bytes:
        raise ConfigError(
            f"server.httpBodyBytesInFlight: must be >= server.httpMaxBodyBytes ({cfg.server.http_max_body_bytes}), "
            "or no request of the largest size could ever be taken"
        )
    if cfg.server.http_max_streams >= cfg.server.http_max_per_token:
        raise ConfigError(
            f"server.httpMaxStreams: must be < server.httpMaxPerToken ({cfg.server.http_max_per_token}), "
            "so idle event streams never take a token's last requests"
        )
    for origin in cfg.server.allowed_origins:
        if not re.match(r"^https?://[^/\s]+$", origin):
            raise ConfigError(f"server.allowedOrigins: {origin!r} is not an origin like http://host:port")


def load_config(
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Config:
    """Build the Config: defaults → config.toml → environment → `overrides` (dotted camelCase keys).

    The state dir (which locates config.toml) is itself taken from overrides or the environment first.
    """
    env = os.environ if env is None else env
    overrides = dict(overrides or {})
    cfg = Config()
    errors: list[str] = []

    state_dir = overrides.get("stateDir") or env.get("JARVIS_STATE_DIR")
    if state_dir:
        cfg.state_dir = _coerce("stateDir", state_dir, Path, {}, True)
    path = config_file or cfg.state_dir / "config.toml"
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a 5,000-digit number
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        data.pop("stateDir", None)  # the file lives in the state dir; it cannot move it
        _apply(cfg, data, "", False, errors)

    for var, key in ENV_VARS.items():
        if key == "stateDir":
            continue
        value = env.get(var)
        if value:
            _apply(cfg, _nest(key, value), "", True, errors)
    for key, value in overrides.items():
        if key == "stateDir" or value is None:
            continue
        _apply(cfg, _nest(key, value), "", True, errors)
    if not errors:  # the cross-field rules only mean something once every value is valid
        try:
            _validate(cfg)
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("\n".join(errors), errors)
    return cfg


def describe() -> list[tuple[str, Any, str]]:
    """(key, default, doc) for every setting, for docs and `--help`."""
    rows: list[tuple[str, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        hints = get_type_hints(type(obj))
        for f in dataclasses.fields(obj):
            key = prefix + _camel(f.name)
            if dataclasses.is_dataclass(hints[f.name]):
                walk(getattr(obj, f.name), key + ".")
            else:
                rows.append((key, getattr(obj, f.name), f.metadata.get("doc", "")))

    walk(Config(), "")
    return rows
