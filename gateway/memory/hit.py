"""A memory hit and a search's answer, typed: the fields every reader of a hit may rely on, named as the
wire names them (memory.search's `results`; PROTOCOL.md). memory/answers.py answers with these, and
memory/present.py is the one place that shapes a hit for a reader.

    Hit        a passage found: where (`path`, `startLine`, `endLine`; `sessionKey` for a transcript's), how
               well it matched (`score`, 0..1), what it says (`snippet`), when it was said (`date`), and
               what the search found about it: `said` times (`firstSaid`, `lastSaid`), `supersededBy` a newer
               statement's date (search/timeline.py), the ledger's `fact` (ledger/recall.py);
               `session` is its conversation's label where a reader looked it up (present.py)
    Fact       the ledger's current value for the question's subject, on the hit that states it
    SearchAnswer   memory.search's answer: the hits, the mode used, the embeddings, why it is degraded
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations only.
from typing import Any, NotRequired, TypedDict, cast


class Fact(TypedDict):
    subject: str
    value: str | None  # None: the subject ended (ledger/recall.py)
    since: str
    until: NotRequired[str]  # asked about an earlier time: when that value stopped holding


class Hit(TypedDict):
    path: str
    source: str  # "memory" or "sessions"
    startLine: int
    endLine: int
    score: float
    snippet: str
    sessionKey: NotRequired[str]
    date: NotRequired[str]
    said: NotRequired[int]
    firstSaid: NotRequired[str]
    lastSaid: NotRequired[str]
    supersededBy: NotRequired[str]
    fact: NotRequired[Fact]
    session: NotRequired[str]


class Embeddings(TypedDict):
    provider: str
    model: str


class SearchAnswer(TypedDict):
    results: list[Hit]
    mode: str
    embeddings: Embeddings
    degraded: NotRequired[str]
    asOf: NotRequired[str]


def answer(res: dict[str, Any]) -> SearchAnswer:
    """The search's answer as the type says it is: its hits as present.py's `shape` left them. (Under the
    memory service a hit is still the dict the searcher, the timeline and the ledger build.)"""
    return cast(SearchAnswer, res)
