"""The index signature: what, when it changes, makes an index be built anew.

The embedding provider, model and dims, the FTS tokenizer, the vector backend, the chunking
settings and whether secrets in transcripts are masked (`memory.redactSecrets`, memory/secrets.py). A stored signature that differs from the settings' means the index must be rebuilt (each
engine in its own way); when only its non-embedding part differs (`same_embeddings`), the old vectors
still answer meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from .embeddings import EmbeddingProvider
from .index.chunking import CHUNKER_VERSION
from .ledger import LEDGER_VERSION
from .secrets import VERSION as SECRETS_VERSION

if TYPE_CHECKING:  # pragma: no cover
    from ..config import MemoryConfig


def index_signature(cfg: "MemoryConfig", provider: EmbeddingProvider, vector_backend: str) -> str:
    c = cfg.chunking
    return orjson.dumps(
        {
            "provider": provider.name,
            "model": provider.model,
            "dims": provider.signature_dims,
            "tokenizer": cfg.search.fts_tokenizer,
            "vectorBackend": vector_backend,
            "chunking": [c.tokens, c.overlap, c.session_tokens, c.session_overlap, c.session_context, CHUNKER_VERSION],
            "redact": SECRETS_VERSION if cfg.redact_secrets else 0,
            "ledger": LEDGER_VERSION,
        },
        option=orjson.OPT_SORT_KEYS,
    ).decode()


def same_embeddings(a: str | None, b: str | None) -> bool:
    """Whether two signatures embed alike (same provider, model, dims, vector backend)."""
    return _embedding_part(a) == _embedding_part(b)


def _embedding_part(signature: str | None) -> tuple:
    try:
        d = orjson.loads(signature or "{}")
    except orjson.JSONDecodeError:
        return ()
    return (d.get("provider"), d.get("model"), d.get("dims"), d.get("vectorBackend"))
