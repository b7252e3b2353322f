"""A memory hit, typed: one value from where a backend's row becomes a hit (search/searcher.py, qmd.py)
through fusion, the timeline, the re-rank and the ledger's placement to the presenter (present.py), which
alone writes it as the wire names it (memory.search's `results`; PROTOCOL.md).

    Hit        a passage found: where (`path`, `start_line`, `end_line`; `session_key` for a transcript's),
               how well it matched (`score`, 0..1), what it says (`snippet`), when it was said (`date`), and
               what the search found about it: `said` times (`first_said`, `last_said`),
               `superseded_by` a newer statement's date (search/timeline.py), the ledger's `fact`
               (ledger/placement.py). Immutable: a step that changes a hit makes a new one (`_replace`).
               A NamedTuple, not a frozen dataclass: as cheap to make and copy as the dicts it replaced
               (a frozen dataclass's __init__ and `dataclasses.replace` cost ~5-10x a dict's, ~0.3 ms a
               search over the pool's hits), and mypy checks it alike.
    HitFact    the ledger's current value for the question's subject, on the hit that states it
    Found      a backend's answer: the hits, the mode used, the embeddings, why it is degraded, and the
               stored vectors the search read of its hits (for the timeline; never on the wire)

The wire's shapes (what present.py writes, camelCase): `WireHit`, `WireFact`, `SearchAnswer`.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations only.
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, NotRequired, TypedDict

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    Vectors = dict[tuple[str, int, int], np.ndarray]  # by (path, start line, end line)


@dataclass(frozen=True, slots=True)
class HitFact:
    subject: str
    value: str | None  # None: the subject ended (ledger/recall.py)
    since: str
    until: str | None = None  # asked about an earlier time: when that value stopped holding


class Hit(NamedTuple):
    path: str
    source: str  # "memory" or "sessions"
    start_line: int
    end_line: int
    score: float
    snippet: str
    session_key: str | None = None
    date: str | None = None
    said: int | None = None  # how often the statement was said (repeats folded into this hit), when > 1
    first_said: str | None = None
    last_said: str | None = None
    superseded_by: str | None = None
    fact: HitFact | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        """Where it is: (path, start line, end line), as stored vectors are found by."""
        return (self.path, self.start_line, self.end_line)


class Embeddings(TypedDict):
    provider: str
    model: str


@dataclass(slots=True)
class Found:
    hits: list[Hit]
    mode: str
    embeddings: Embeddings
    degraded: str | None = None
    vectors: "Vectors | None" = field(default=None, repr=False)  # those the search has in hand (not all)
    ids: "dict[tuple[str, int, int], int] | None" = field(default=None, repr=False)  # chunk id by hit key


class WireFact(TypedDict):
    subject: str
    value: str | None
    since: str
    until: NotRequired[str]


class WireHit(TypedDict):
    path: str
    source: str
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
    fact: NotRequired[WireFact]
    session: NotRequired[str]  # its conversation's label, where a reader looked it up (present.py)


class SearchAnswer(TypedDict):
    results: list[WireHit]
    mode: str
    embeddings: Embeddings
    degraded: NotRequired[str]
    asOf: NotRequired[str]
