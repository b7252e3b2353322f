"""One search as it goes down from `MemoryService.search` to the searcher: what is asked, in one value.

    SearchRequest(query="boat", k=6, sources=("memory",), mode="hybrid")

Every layer under the memory service takes it as it is or passes on a copy with one field changed
(`dataclasses.replace`: the fallback backend asks each backend for the sources it holds): the
backends (backends.py, qmd.py), the engine's index (ports.MemoryIndex, memory/index/lifecycle.py) and the
searcher (searcher.py). A new parameter of a search is a field here, not a keyword written out in each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .snippets import Exclude


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchRequest:
    query: str
    k: int  # the results wanted
    sources: tuple[str, ...]  # "memory", "sessions": what is searched
    mode: str  # "hybrid", "fts" or "vector"
    min_score: float = 0.0  # results scoring less are left out
    session_key: str | None = None  # of the transcripts, only this session's
    exclude: Exclude | None = None  # a transcript message to leave out (the one being answered)
    spare: int = 0  # results asked beyond k, ranked as for k (the memory service's room to fold repeats)
