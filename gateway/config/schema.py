"""The schema: `Config`, its top-level settings and the smaller sections, the environment variables, and
`describe()` — every setting with its default and its documentation, for `jarvis config`, `--help` and docs.

The larger sections live beside it (server.py, chat.py, memory.py); each field's default and limits are
declared once, where the field is (fields.py's `setting()`), and nowhere else."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

from .chat import ChatConfig, OpenAIApiConfig
from .fields import camel, setting
from .memory import MemoryConfig
from .server import ServerConfig


@dataclass
class SessionsConfig:
    max: int = setting(
        10_000,
        ge=1,
        doc="sessions one agent may hold; sessions.create past it answers -32009 "
        "(delete some, or raise this); ephemeral ones are pruned by their own limits",
    )
    ephemeral_prefix: str = setting("hook:", doc="sessions whose key starts with this are pruned by age and count")
    ephemeral_max_age_hours: float = setting(48.0, ge=0.0, doc="ephemeral sessions idle longer are deleted")
    ephemeral_max_count: int = setting(500, ge=0, doc="at most this many ephemeral sessions are kept (newest)")
    prune_interval_minutes: float = setting(
        10.0, ge=0.0, on_from=0.001, doc="how often to prune; 0 = at start and by sessions.prune only"
    )
    history_max_bytes: int = setting(
        2 << 20,
        ge=4096,
        doc="about how much content one sessions.history page may hold; keep it well under server.maxSendBuffer",
    )


@dataclass
class AgentsConfig:
    max: int = setting(
        256, ge=1, doc="agents that may exist (folders under <stateDir>/agents); creating one more is refused"
    )
    max_open: int = setting(
        16,
        ge=1,
        doc="agents open at once (each holds its index, watcher and threads); opening "
        "one more closes the least recently used idle one, or is refused when none is idle",
    )
    idle_seconds: float = setting(
        300.0,
        ge=1.0,
        doc="an agent with no run, request or sync for this long is closed "
        "(reopened on its next use); the default agent stays open",
    )


@dataclass
class StorageConfig:
    url: str = setting(
        "",
        doc="JARVIS_DATABASE_URL. postgresql://user:pass@host/db puts session metadata, transcripts, "
        "idempotency keys and chat runs in PostgreSQL, so several gateways can serve the same "
        "sessions (docs/scaling.md); empty = files in the state dir",
    )
    pool_size: int = setting(10, ge=2, le=200, doc="PostgreSQL connections per gateway")
    instance_id: str = setting("", doc="this gateway's name among several on one database; default host:pid")


@dataclass
class AuditConfig:
    max_bytes: int = setting(
        16 << 20,
        ge=4096,
        doc="the files engine's audit.jsonl is rotated (to audit.1.jsonl, …) once it holds this many bytes",
    )
    max_age_days: float = setting(
        30.0,
        ge=0.0,
        on_from=0.0001,
        doc="…or once its first entry is this old; 0 = by size only. PostgreSQL: rows older than "
        "maxAgeDays × (keep + 1) are deleted",
    )
    keep: int = setting(4, ge=0, le=100, doc="rotated audit files kept (the oldest beyond them is deleted)")


@dataclass
class Config:
    state_dir: Path = setting(
        factory=lambda: Path("~/.jarvis").expanduser(),
        doc="JARVIS_STATE_DIR or --state-dir (never config.toml, which lives in it): sessions, indexes, the token",
    )
    workspace: Path | None = setting(None, doc="default <stateDir>/workspace")
    token: str = setting("", doc="JARVIS_GATEWAY_TOKEN; default: generated into <stateDir>/gateway.token")
    agent_id: str = setting("main", doc="the default agent: its memory is the workspace itself")
    log_level: str = setting("info", choices=("debug", "info", "warning", "error"), doc="the least level logged")
    log_format: str = setting(
        "auto", choices=("auto", "json", "console"), doc="auto: console lines on a terminal, JSON lines off one"
    )
    server: ServerConfig = setting(factory=ServerConfig)
    chat: ChatConfig = setting(factory=ChatConfig)
    openai_api: OpenAIApiConfig = setting(factory=OpenAIApiConfig)
    sessions: SessionsConfig = setting(factory=SessionsConfig)
    agents: AgentsConfig = setting(factory=AgentsConfig)
    memory: MemoryConfig = setting(factory=MemoryConfig)
    storage: StorageConfig = setting(factory=StorageConfig)
    audit: AuditConfig = setting(factory=AuditConfig)

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


def describe() -> list[tuple[str, Any, str]]:
    """(key, default, doc) for every setting, for docs and `--help`."""
    rows: list[tuple[str, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        hints = get_type_hints(type(obj))
        for f in dataclasses.fields(obj):
            key = prefix + camel(f.name)
            if dataclasses.is_dataclass(hints[f.name]):
                walk(getattr(obj, f.name), key + ".")
            else:
                rows.append((key, getattr(obj, f.name), f.metadata.get("doc", "")))

    walk(Config(), "")
    return rows
