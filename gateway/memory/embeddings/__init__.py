"""Embedding providers: `local` (WordLlama, default), `openai` (any compatible endpoint), `none`.

`create_provider(config)` builds the configured provider; when it cannot be built (no API key, model
unavailable) the configured `fallback` is used instead, and the reason is kept for `memory.status`.
Providers are found by name in registry.py; the built-in ones register through
`register_embedding_providers(register)`, the hook a plugin offers too.
"""

from __future__ import annotations

from ...config import Config
from .base import EmbeddingError, EmbeddingProvider, normalise
from .local import LocalEmbeddings, load_wordllama
from .none import NoEmbeddings
from .openai import OpenAIEmbeddings
from .registry import Register, check_config, make, register

__all__ = [
    "EmbeddingError",
    "EmbeddingProvider",
    "create_provider",
    "normalise",
    "load_wordllama",
    "LocalEmbeddings",
    "NoEmbeddings",
    "OpenAIEmbeddings",
]


def _local(cfg: Config) -> EmbeddingProvider:
    return LocalEmbeddings(cfg.memory.embeddings.model)


def _openai(cfg: Config) -> EmbeddingProvider:
    e = cfg.memory.embeddings
    return OpenAIEmbeddings(
        model=e.model,
        dims=e.dims,
        api_key=e.api_key or cfg.chat.api_key,
        base_url=e.base_url or cfg.chat.base_url,
        timeout=e.timeout,
        max_retries=e.max_retries,
        batch_size=e.batch_size,
        multimodal=e.multimodal,
    )


def _none(cfg: Config) -> EmbeddingProvider:
    return NoEmbeddings()


def register_embedding_providers(register: Register) -> None:
    """The built-in providers, registered as a plugin registers its own."""
    register("local", _local, "WordLlama on this machine's CPU (256-d, bundled; the default)")
    register("openai", _openai, "any OpenAI-compatible embeddings endpoint (memory.embeddings.baseUrl)")
    register("none", _none, "no vectors: full-text search only")


register_embedding_providers(register)


def create_provider(cfg: Config) -> tuple[EmbeddingProvider, str | None]:
    """(provider, problem): the configured provider, else the fallback, else `none`; `problem` says why.
    A name no provider is registered under is a ConfigError (check_config), not a fallback."""
    check_config(cfg)
    e = cfg.memory.embeddings
    try:
        return make(e.provider, cfg), None
    except Exception as exc:
        problem = f"embedding provider {e.provider!r} unusable: {exc}"
    if e.fallback != "none" and e.fallback != e.provider:
        try:
            return make(e.fallback, cfg), problem + f"; using fallback {e.fallback!r}"
        except Exception as exc:
            problem += f"; fallback {e.fallback!r} unusable: {exc}"
    return NoEmbeddings(), problem
