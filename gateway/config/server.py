"""[server]: the WebSocket listener and the HTTP API beside it, and every limit they hold a client to."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import setting


@dataclass
class ServerConfig:
    host: str = setting("127.0.0.1", doc="bind address; loopback by default")
    port: int = setting(18789, ge=0, le=65535, doc="0 picks a free port")
    allowed_origins: list[str] = setting(factory=list, doc="extra browser Origins allowed to connect")
    max_connections: int = setting(
        256,
        ge=1,
        doc="WebSocket connections at once (after the upgrade); at it an "
        "unauthenticated one is closed to make room, else HTTP 503. On the HTTP API: requests in flight "
        "of all tokens together (503 past it)",
    )
    max_pending_sockets: int = setting(
        128,
        ge=1,
        doc="accepted TCP connections that have not finished the WebSocket "
        "upgrade (or their HTTP request), in total; past it the oldest that has not "
        "sent a byte (else the oldest) is dropped",
    )
    max_pending_per_address: int = setting(
        32, ge=1, doc="the same, per client address; past it that address's oldest (silent first) is dropped"
    )
    handshake_timeout: float = setting(
        3.0,
        ge=0.1,
        le=60.0,
        doc="seconds from accept to a finished upgrade (or HTTP answer) before the socket is dropped",
    )
    fd_reserve: int = setting(
        0,
        ge=0,
        doc="file descriptors kept for the gateway's own files (transcripts, "
        "sessions.json, SQLite, locks): sockets past RLIMIT_NOFILE minus these are refused "
        "with HTTP 503; 0 = an eighth of the limit, at least 64",
    )
    max_frame_bytes: int = setting(1 << 20, ge=1024, doc="largest frame after auth")
    preauth_frame_bytes: int = setting(64 << 10, ge=256, doc="largest frame before auth")
    max_inflight: int = setting(64, ge=1, doc="requests in flight per connection")
    max_send_buffer: int = setting(8 << 20, ge=64 << 10, doc="unsent bytes before a slow consumer is closed")
    slow_consumer_seconds: float = setting(
        30.0,
        ge=0.1,
        doc="a reply waits this long for a client to read what is "
        "queued (over half of maxSendBuffer) before the client is closed as slow",
    )
    max_reply_bytes: int = setting(
        8 << 20,
        ge=64 << 10,
        doc="largest reply frame (a batch's answer included); a "
        "bigger one is answered with an error saying to ask for less",
    )
    ping_interval: float = setting(
        20.0, ge=0.0, on_from=1.0, doc="seconds between keepalive pings (and to wait for the pong); 0 disables them"
    )
    auth_timeout: float = setting(10.0, ge=0.1, doc="seconds to authenticate after connecting")
    shutdown_grace: float = setting(
        5.0,
        ge=0.0,
        doc="seconds running chats get to finish on shutdown (new ones are refused); then they are aborted, partials kept",
    )
    auth_failures_per_minute: int = setting(
        10,
        ge=1,
        doc="wrong tokens per peer address and minute before further "
        "wrong ones are answered 'rate limited' (the right token always gets in)",
    )
    auth_failure_delay: float = setting(1.0, ge=0.0, le=30.0, doc="seconds each wrong token waits for its answer")
    http_port: int = setting(
        18790,
        ge=-1,
        le=65535,
        doc="the HTTP API listener (/mcp, /v1/...) on the same host; 0 turns it off, -1 picks a free port",
    )
    http_max_body_bytes: int = setting(8 << 20, ge=1024, doc="largest HTTP API request body (413 past it)")
    http_body_timeout: float = setting(
        30.0,
        ge=0.1,
        le=3600.0,
        doc="seconds an HTTP API request body may take to "
        "arrive, from its first read (408 past it: a trickled body holds nothing)",
    )
    http_body_bytes_in_flight: int = setting(
        32 << 20,
        ge=1024,
        le=1 << 40,
        doc="HTTP API request bodies held at once, in bytes, from their first byte to their answer (a parsed "
        "body takes several times its size in memory); a request that would pass it is answered 503 with "
        "Retry-After; at least server.httpMaxBodyBytes",
    )
    http_max_per_token: int = setting(
        64,
        ge=1,
        le=100_000,
        doc="HTTP API requests in flight per token (a streamed reply counts until it ends); past it 429 with "
        "Retry-After. All tokens together: server.maxConnections, past it 503",
    )
    http_max_streams: int = setting(
        32,
        ge=1,
        le=100_000,
        doc="event streams open at once on the HTTP API (GET /mcp, streamed /v1 replies); past it 503 with "
        "Retry-After; below server.httpMaxPerToken, so idle streams never take a token's last requests",
    )
    http_stream_idle_seconds: float = setting(
        120.0,
        ge=1.0,
        le=86400.0,
        doc="an HTTP API event stream that sent no event for this long (keep-alive comments do not count) "
        "is ended; an MCP client opens GET /mcp again when it needs to",
    )
