"""What memory recalls for a chat turn: the best few search results within `memory.recall`'s budget.

Chat policy, not storage: the memory service answers the search; this decides how much of it a turn
gets (`maxResults`, `minScore`, `maxTokens`) and that a turn never recalls its own question.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import structlog

from ..memory.index.chunking import CHARS_PER_TOKEN
from ..memory.index.sources import session_path
from ..memory.search.request import SearchRequest
from ..memory.search.snippets import Exclude
from ..memory.secrets import mask

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryService

log = structlog.get_logger("gateway.chat")


async def recall_for_turn(memory: "MemoryService", query: str, session_key: str | None = None) -> list[dict[str, Any]]:
    """The best few results for a chat turn, within the recall budget. Never raises.
    `session_key`: the session of the turn; its message `query` (the one being answered, already in
    the transcript) is never recalled as its own answer."""
    rc = memory.cfg.recall
    if not (rc.enabled and memory.cfg.enabled) or rc.max_results == 0 or not query.strip():
        return []
    try:
        exclude = Exclude(session_path(session_key), query) if session_key else None
        res = await memory.search(
            SearchRequest(query=query[:2000], k=rc.max_results, min_score=rc.min_score, exclude=exclude)
        )
    except Exception:
        log.warning("memory_recall_failed", exc_info=True)
        return []
    budget = rc.max_tokens * CHARS_PER_TOKEN
    out = []
    hits: Sequence[Mapping[str, Any]] = res["results"]  # memory/hit.py's WireHit, read field by field below
    for r in hits:
        if budget <= 0:
            break
        snip = (mask(r["snippet"]) if memory.cfg.redact_secrets else r["snippet"])[:budget]
        budget -= len(snip)
        out.append({**{f: r[f] for f in RECALLED if f in r}, "snippet": snip})
    return out


# What a recalled hit keeps of a search result: where it is, when it was said and how it stands.
RECALLED = (
    "path",
    "startLine",
    "endLine",
    "score",
    "date",
    "sessionKey",
    "said",
    "firstSaid",
    "lastSaid",
    "supersededBy",
    "fact",
)
