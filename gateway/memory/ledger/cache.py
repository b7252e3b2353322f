"""The ledger's facts kept between searches (issue 46: the ledger may cost a search at most 1 ms of p50
at 100k chunks; reading a subject family's statements and building its facts took 14–19 ms there).

Per agent (one MemoryService, one cache), keyed by the index's generation (`MemoryIndex.generation`:
every sync that writes chunks, statements or files moves it — on PostgreSQL any gateway's sync, read
from the database before each use, as the searcher follows it): a family's statements are read and its
facts built once per generation, then every search reads them from here. The generation is read BEFORE
the statements, so what is kept under a generation is that generation's or newer — never older.

Bounded: at most MAX_STATEMENTS statements in the subject families (with their facts; ~1 KB each, so
some 20 MB at most). Past it the least recently used families go; a family larger than the bound alone
is not kept (read each time, as without the cache). Every statement (ALL: memory.profile without a
subject, and every chat turn's relevant facts) is kept apart, up to MAX_ALL_STATEMENTS (some 100 MB), so
asking for it neither evicts the subject families nor, past their bound, reads the whole ledger each
turn. An index that cannot say its generation keeps nothing.

`asOf` and a chat turn's own message (`exclude`) filter the kept statements and build facts from them
(no read; the CPU of building only — for a dropped or hidden path, only the subjects it said). Building
facts of more than OFFLOAD statements runs in a worker thread (asyncio.to_thread): the event loop never
works a big ledger (0.165 s at 50k statements).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Awaitable, Callable, Collection, Sequence

from ..ports import Statement
from .facts import Fact, facts

MAX_STATEMENTS = 20_000
MAX_ALL_STATEMENTS = 100_000  # ALL, kept apart from the subject families
OFFLOAD = 2_000  # facts of more statements than this are built in a worker thread
ALL = "*"  # the family key of every statement (memory.profile without a subject)

Read = Callable[[Sequence[str] | None], Awaitable[list[Statement]]]


@dataclass
class Family:
    statements: list[Statement]
    facts: dict[str, Fact]
    by_path: dict[str, list[Statement]]
    by_subject: dict[str, list[Statement]]


def _family_of(statements: list[Statement]) -> Family:
    by_path: dict[str, list[Statement]] = {}
    by_subject: dict[str, list[Statement]] = {}
    for s in statements:
        by_path.setdefault(s.path, []).append(s)
        by_subject.setdefault(s.subject, []).append(s)
    return Family(statements, facts(statements), by_path, by_subject)


def _rebuilt(fams: list[Family], rejected: set[int], subjects: set[str] | None, as_of: str | None) -> dict[str, Fact]:
    """The facts of `fams` without the `rejected` statements: with `subjects` (what they said), only
    those subjects built again, the rest as kept; else all of them (as of `as_of`)."""
    if subjects is None:
        return facts((s for f in fams for s in f.statements if id(s) not in rejected), as_of)
    out: dict[str, Fact] = {}
    for f in fams:
        out.update(f.facts)
    for subject in subjects:
        out.pop(subject, None)
    again = [s for f in fams for subject in subjects for s in f.by_subject.get(subject, ()) if id(s) not in rejected]
    out.update(facts(again))
    return out


class FactsCache:
    def __init__(self, max_statements: int = MAX_STATEMENTS, max_all: int = MAX_ALL_STATEMENTS):
        self.max_statements = max_statements
        self.max_all = max_all
        self._generation: str | None = None
        self._families: OrderedDict[str, Family] = OrderedDict()
        self._all: Family | None = None
        self._held = 0
        self.reads = 0  # statement reads made (what the cache saves is what this does not count)

    @property
    def held(self) -> int:
        """Statements kept now in the subject families (ALL apart: `held_all`)."""
        return self._held

    @property
    def held_all(self) -> int:
        return len(self._all.statements) if self._all is not None else 0

    async def _family(self, name: str, generation: str | None, read: Read) -> Family:
        if generation is None or generation != self._generation:
            self._families.clear()
            self._all = None
            self._held = 0
            self._generation = generation
        kept = self._all if name == ALL else self._families.get(name)
        if kept is not None:
            if name != ALL:
                self._families.move_to_end(name)
            return kept
        self.reads += 1
        statements = await read(None if name == ALL else [name])
        fam = await asyncio.to_thread(_family_of, statements) if len(statements) > OFFLOAD else _family_of(statements)
        # (another search may have moved the generation while this one read: keep it only under its own)
        if generation is None or generation != self._generation:
            return fam
        if name == ALL:
            if len(statements) <= self.max_all:
                self._all = fam
        elif len(statements) <= self.max_statements:
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
        gone = [s for f in fams for s in f.by_path.get(drop[0], ()) if drop[1](s)] if drop is not None else []
        gone += [s for f in fams for p in hidden for s in f.by_path.get(p, ())]
        if as_of is None and not gone:
            if len(fams) == 1:
                return fams[0].facts
            out: dict[str, Fact] = {}
            for f in fams:
                out.update(f.facts)
            return out
        rejected = {id(s) for s in gone}
        subjects = {s.subject for s in gone} if as_of is None else None
        size = sum(
            len(f.statements)
            if subjects is None
            else len(f.facts) + sum(len(f.by_subject.get(x, ())) for x in subjects)
            for f in fams
        )
        if size > OFFLOAD:
            return await asyncio.to_thread(_rebuilt, fams, rejected, subjects, as_of)
        return _rebuilt(fams, rejected, subjects, as_of)
