"""Embedding providers by name: the built-in ones and a plugin's register alike (llm's
`register_embedding_models` is the model).

A provider is a factory `Config → EmbeddingProvider` registered under a name, which
`memory.embeddings.provider` (and `.fallback`) then choose. The built-in providers register in this
package's `__init__.py` through `register_embedding_providers(register)`, the same hook a plugin
offers: a distribution that declares an entry point in the group `jarvis_gateway.embeddings` pointing
at such a function is loaded the first time the providers are listed::

    # pyproject.toml of a plugin
    [project.entry-points."jarvis_gateway.embeddings"]
    mine = "jarvis_mine:register_embedding_providers"

    # jarvis_mine.py
    def register_embedding_providers(register):
        register("mine", lambda config: MyEmbeddings(config.memory.embeddings.model), "my model, on my GPU")

The config names a provider; it does not list them (config/ knows nothing above it): `check_config`
holds a configured name to the registry, where the gateway starts and where a provider is made.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from typing import Callable

import structlog

from ...config import Config, ConfigError
from .base import EmbeddingProvider

log = structlog.get_logger("gateway.memory")

ENTRY_POINT_GROUP = "jarvis_gateway.embeddings"
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")

Factory = Callable[[Config], EmbeddingProvider]
Register = Callable[..., None]


@dataclass(frozen=True)
class Registered:
    name: str
    factory: Factory
    description: str


_registry: dict[str, Registered] = {}
_plugins_loaded = False


def register(name: str, factory: Factory, description: str = "") -> None:
    """Make `factory` the provider `name` (lowercase letters, digits, `-`, `_`). A name registered twice
    with another factory is a mistake of the plugins installed: ValueError, naming it."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"embedding provider name {name!r}: lowercase letters, digits, - and _ (at most 32)")
    held = _registry.get(name)
    if held is not None and held.factory is not factory:
        raise ValueError(f"embedding provider {name!r} is registered already")
    _registry[name] = Registered(name, factory, description)


def providers() -> dict[str, Registered]:
    """Every registered provider, the built-in ones first, then the plugins' (loaded once, here)."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()(register)
            except Exception as exc:  # a broken plugin leaves the others (and the built-in ones) usable
                log.warning("memory_embedding_plugin_failed", plugin=ep.value, error=str(exc) or type(exc).__name__)
    return dict(_registry)


def check_config(cfg: Config) -> None:
    """ConfigError for a `memory.embeddings.provider` or `.fallback` that names no registered provider."""
    names = list(providers())
    e = cfg.memory.embeddings
    for key, value in (("memory.embeddings.provider", e.provider), ("memory.embeddings.fallback", e.fallback)):
        if value not in names:
            raise ConfigError(f"{key}: must be one of {', '.join(names)}; got {value!r}")


def make(name: str, cfg: Config) -> EmbeddingProvider:
    return providers()[name].factory(cfg)
