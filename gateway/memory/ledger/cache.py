"""The ledger's facts kept between searches (issue 46: the ledger may cost a search at most 1 ms of p50
at 100k chunks; reading a subject family's statements and building its facts took 14–19 ms there).

Per agent (one MemoryService, one cache), keyed by the index's generation (`MemoryIndex.generation`:
every sync that writes chunks, statements or files moves it — on PostgreSQL any gateway's sync, read
from the database before each use, as the searcher follows it): a family's statements are read and its
facts built once per generation, then every search reads them from here. The generation is read BEFORE
the statements, so what is kept under a generation is that generation's or newer — never older.

Bounded: at most MAX_STATEMENTS statements in all (with their facts; ~1 KB each, so some 20 MB at
most). Past it the least recently used families go; a family larger than the bound alone is not kept
(read each time, as without the cache). An index that cannot say its generation keeps nothing.

`asOf` and a chat turn's own message (`exclude`) filter the kept statements and build facts from them
(no read; the CPU of building only).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Awaitable, Callable, Collection, Sequence

from ..ports import Statement
from .facts import Fact, facts

MAX_STATEMENTS = 20_000
ALL = "*"  # the family key of every statement (memory.profile without a subject)

Read = Callable[[Sequence[str] | None], Awaitable[list[Statement]]]


@dataclass
class Family:
    statements: list[Statement]
    facts: dict[str, Fact]
    by_path: dict[str, list[Statement]]


class FactsCache:
    def __init__(self, max_statements: int = MAX_STATEMENTS):
        self.max_statements = max_statements
        self._generation: str | None = None
        self._families: OrderedDict[str, Family] = OrderedDict()
        self._held = 0
        self.reads = 0  # statement reads made (what the cache saves is what this does not count)

    @property
    def held(self) -> int:
        """Statements kept now."""
        return self._held

    async def _family(self, name: str, generation: str | None, read: Read) -> Family:
        if generation is None or generation != self._generation:
            self._families.clear()
            self._held = 0
            self._generation = generation
        kept = self._families.get(name)
        if kept is not None:
            self._families.move_to_end(name)
            return kept
        self.reads += 1
        statements = await read(None if name == ALL else [name])
        by_path: dict[str, list[Statement]] = {}
        for s in statements:
            by_path.setdefault(s.path, []).append(s)
        fam = Family(statements, facts(statements), by_path)
        # (another search may have moved the generation while this one read: keep it only under its own)
        if generation is not None and generation == self._generation and len(statements) <= self.max_statements:
            while self._families and self._held + len(statements) > self.max_statements:
                _, gone = self._families.popitem(last=False)
                self._held -= len(gone.statements)
            self._families[name] = fam
            self._held += len(statements)
        return fam

    async def facts(
        self,
        names: Sequence[str] | None,
        generation: str | None,
        read: Read,
        as_of: str | None = None,
        drop: tuple[str, Callable[[Statement], bool]] | None = None,
        hidden: Collection[str] = (),
    ) -> dict[str, Fact]:
        """Subject → Fact of these subject families (None: all), as the index holds them at `generation`:
        only what was said at or before `as_of`; without the statements of `drop`'s path it rejects, nor
        any of the `hidden` paths (sessions deleted while the index was busy: gone before the sync)."""
        fams = [await self._family(n, generation, read) for n in (names if names is not None else [ALL])]
        rejected = (
            {id(s) for f in fams for s in f.by_path.get(drop[0], ()) if drop[1](s)} if drop is not None else set()
        )
        rejected |= {id(s) for f in fams for p in hidden for s in f.by_path.get(p, ())}
        if as_of is None and not rejected:
            if len(fams) == 1:
                return fams[0].facts
            out: dict[str, Fact] = {}
            for f in fams:
                out.update(f.facts)
            return out
        statements = [s for f in fams for s in f.statements]
        if rejected:
            statements = [s for s in statements if id(s) not in rejected]
        return facts(statements, as_of)
