"""One Config, loaded once: defaults, then `<stateDir>/config.toml`, then environment, then CLI flags.

The TOML file uses camelCase keys in sections that mirror the schema's dataclasses, e.g.::

    [server]
    port = 18789
    allowedOrigins = ["http://myhost:18789"]

    [chat]
    model = "gpt-4o-mini"
    historyMessages = 20

    [memory.search]
    rrfK = 60

The settings, their defaults, limits and documentation are declared once, in the schema (schema.py with
server.py, chat.py and memory.py; fields.py's `setting()`); loader.py reads them in. Every value is
type-checked and range-checked in one place (loader.py's `_coerce`, against the limits its setting
declares); a bad one raises ConfigError naming the key (`memory.search.rrfK: must be >= 1, got 0`),
which the CLI prints and exits with code 2. A number must be finite (NaN compares false with every bound,
so it is refused before any bound is looked at) and within its declared bounds, and never beyond
`NUMBER_LIMIT` whatever they say; text (strings, paths, list items) must be valid Unicode without NUL,
which no path, socket or PostgreSQL text can hold. The token follows the one token rule of auth.py.
"""

from .chat import TOOL_POLICIES, ChatConfig, OpenAIApiConfig
from .fields import NUMBER_LIMIT, camel, limits, setting
from .loader import HTTP_URL_SETTINGS, ConfigError, load_config
from .memory import (
    BackendConfig,
    ChunkingConfig,
    EmbeddingsConfig,
    LedgerConfig,
    MemoryConfig,
    QmdConfig,
    RecallConfig,
    SearchConfig,
    SyncConfig,
    VersionsConfig,
)
from .schema import ENV_VARS, AgentsConfig, AuditConfig, Config, SessionsConfig, StorageConfig, describe
from .server import ServerConfig

__all__ = [
    "ENV_VARS",
    "HTTP_URL_SETTINGS",
    "NUMBER_LIMIT",
    "TOOL_POLICIES",
    "AgentsConfig",
    "AuditConfig",
    "BackendConfig",
    "ChatConfig",
    "ChunkingConfig",
    "Config",
    "ConfigError",
    "EmbeddingsConfig",
    "LedgerConfig",
    "MemoryConfig",
    "OpenAIApiConfig",
    "QmdConfig",
    "RecallConfig",
    "SearchConfig",
    "ServerConfig",
    "SessionsConfig",
    "StorageConfig",
    "SyncConfig",
    "VersionsConfig",
    "camel",
    "describe",
    "limits",
    "load_config",
    "setting",
]
