"""One search, from whoever asks it down to the searcher: what is asked, in one value.

    SearchRequest(query="boat", k=6, sources=("memory",), mode="hybrid")

Its askers build it (memory.search's handler, a chat turn's recall, memory.similar) and pass it to
`MemoryService.search`, which fills in what they left to it (`mode` "": `memory.search.mode`; the pool's
`spare`; `min_score` kept for after the re-rank) and passes the resolved copy down. Every layer under it
takes it as it is or passes on a copy with one field changed (`dataclasses.replace`: the fallback backend
asks each backend for the sources it holds): the backends (backends.py, qmd.py), the engine's index
(ports.MemoryIndex, memory/index/lifecycle.py) and the searcher (searcher.py). A new parameter of a search
is a field here, not a keyword written out in each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..index.sources import SOURCES

if TYPE_CHECKING:  # pragma: no cover
    from .snippets import Exclude


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchRequest:
    query: str
    k: int = 6  # the results wanted
    sources: tuple[str, ...] = SOURCES  # "memory", "sessions": what is searched (asked of the service, (): both)
    mode: str = ""  # "hybrid", "fts" or "vector"; "" (asked of the memory service): memory.search.mode
    min_score: float = 0.0  # results scoring less are left out
    session_key: str | None = None  # of the transcripts, only this session's
    exclude: Exclude | None = None  # a transcript message to leave out (the one being answered)
    # Memory as it stood then (ISO 8601 UTC, as `parse_as_of` writes it): nothing said after it, the
    # ledger's value valid then first, relative dates in the query resolved against it (the memory service's).
    as_of: str | None = None
    spare: int = 0  # results asked beyond k, ranked as for k (the memory service's room to fold repeats)
