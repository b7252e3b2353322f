"""Embedding providers: `local` (WordLlama, default), `openai` (any compatible endpoint), `none`.

`create_provider(config)` builds the configured provider; when it cannot be built (no API key, model
unavailable) the configured `fallback` is used instead, and the reason is kept for `memory.status`.
Third-party providers register the same way the built-in ones do: `PROVIDERS[name] = factory`.
"""

from __future__ import annotations

from typing import Callable

from ...config import Config
from .base import EmbeddingError, EmbeddingProvider, normalise
from .local import LocalEmbeddings, load_wordllama
from .none import NoEmbeddings
from .openai import OpenAIEmbeddings

__all__ = [
    "EmbeddingError",
    "EmbeddingProvider",
    "create_provider",
    "normalise",
    "load_wordllama",
    "LocalEmbeddings",
    "NoEmbeddings",
    "OpenAIEmbeddings",
    "PROVIDERS",
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


PROVIDERS: dict[str, Callable[[Config], EmbeddingProvider]] = {"local": _local, "openai": _openai, "none": _none}


def create_provider(cfg: Config) -> tuple[EmbeddingProvider, str | None]:
    """(provider, problem): the configured provider, else the fallback, else `none`; `problem` says why."""
    e = cfg.memory.embeddings
    try:
        return PROVIDERS[e.provider](cfg), None
    except Exception as exc:
        problem = f"embedding provider {e.provider!r} unusable: {exc}"
    if e.fallback != "none" and e.fallback != e.provider:
        try:
            return PROVIDERS[e.fallback](cfg), problem + f"; using fallback {e.fallback!r}"
        except Exception as exc:
            problem += f"; fallback {e.fallback!r} unusable: {exc}"
    return NoEmbeddings(), problem
