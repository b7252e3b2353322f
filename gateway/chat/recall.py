"""What memory recalls for a chat turn: the best few search results within `memory.recall`'s budget.

Chat policy, not storage: the memory service answers the search; this decides how much of it a turn
gets (`maxResults`, `minScore`, `maxTokens`) and that a turn never recalls its own question. Beside the
search's hits, up to `facts` of the ledger's current facts the message is about (memory/ledger/relevant.py)
come first in the budget, after the hits in the list: the block the model sees starts with them.
"""

from __future__ import annotations

import asyncio
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
    exclude = Exclude(session_path(session_key), query) if session_key else None
    # The ledger's current facts the message is about are looked up while the search runs (one more
    # than wanted: the search may lead with one of them).
    about = asyncio.ensure_future(memory.relevant_facts(query[:2000], exclude, rc.facts + 1)) if rc.facts > 0 else None
    try:
        res = await memory.search(
            SearchRequest(query=query[:2000], k=rc.max_results, min_score=rc.min_score, exclude=exclude)
        )
    except BaseException as exc:
        if about is not None:
            about.cancel()
        if not isinstance(exc, Exception):
            raise
        log.warning("memory_recall_failed", exc_info=True)
        return []
    budget = rc.max_tokens * CHARS_PER_TOKEN
    hits: Sequence[Mapping[str, Any]] = res["results"]  # memory/hit.py's WireHit, read field by field below
    # The ledger's other current facts the message is about (the search put at most one first): their
    # statements, short, go in first — what is true now leads the block the model sees.
    facts: list[Mapping[str, Any]] = []  # memory/hit.py's WireHit, each with its `fact`
    told: dict[int, Mapping[str, Any]] = {}  # a hit that shows an added fact's statement: index → its fact
    if about is not None:
        with_fact = {r["fact"]["subject"] for r in hits if r.get("fact")}
        for f in await about:
            if f["fact"]["subject"] in with_fact or len(facts) + len(told) >= rc.facts:
                continue
            shown = next((i for i, r in enumerate(hits) if _shows(r, f) and not r.get("fact")), None)
            if shown is not None:
                told.setdefault(shown, f["fact"])  # the hit says it: it carries the fact, nothing is added
            else:
                facts.append(f)
    out: list[dict[str, Any]] = []
    tail: list[dict[str, Any]] = []
    items = [(f, FACT_SNIPPET_CHARS, tail) for f in facts] + [(r, budget, out) for r in hits]
    for i, (r, cap, into) in enumerate(items):
        if budget <= 0:
            break
        if into is out and (fact := told.get(i - len(facts))) is not None:
            r = {**r, "fact": fact}
        snip = (mask(r["snippet"]) if memory.cfg.redact_secrets else r["snippet"])[: min(cap, budget)]
        budget -= len(snip)
        into.append({**{f: r[f] for f in RECALLED if f in r}, "snippet": snip})
    return out + tail  # the search's order first (chat.final's `memory`), then the facts'


def _shows(hit: Mapping[str, Any], fact_hit: Mapping[str, Any]) -> bool:
    """Whether a hit's lines hold a fact's statement."""
    return hit["path"] == fact_hit["path"] and hit["startLine"] <= fact_hit["startLine"] <= hit["endLine"]


FACT_SNIPPET_CHARS = 200  # of each added fact's statement


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
