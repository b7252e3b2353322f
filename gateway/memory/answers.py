"""What the memory service answers a reader (memory/service.py's MemoryService is one): memory.search,
memory.profile and memory.get, and the search backend that answers first.

A search waits for the sync that covers what was dirty (read your writes), asks the configured backend
(search/backends.py: the built-in index, or QMD with the built-in index as fallback) for a pool a few
times k, arranges it by what was said when (search/timeline.py), re-ranks it (rerank.py: MMR, time
decay) and puts the ledger's statement for the question first (ledger/recall.py). The hits travel as
memory/hit.py's Hit and leave here as the wire has them (present.py's `answer`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import structlog

from ..config import Config, MemoryConfig
from ..errors import Invalid
from .embeddings import EmbeddingProvider
from .index.lines import read_lines
from .index.sources import SOURCES, resolve_readable, session_path
from .ledger.cache import FactsCache
from .ledger.placement import lead, newer_first, newer_hit, prefer_statements, statement_hit
from .ledger.relevant import RELEVANT_FACTS, relevant
from .ledger.profile import HISTORY_LIMIT, PROFILE_LIMIT, subject_family
from .ledger.profile import page as ledger_page
from .ledger.asking import event_subjects
from .ledger.recall import LedgerRecall, as_of_time, embed_with
from .hit import Embeddings, Hit, SearchAnswer, WireHit
from .ports import MemoryIndex, Statement
from .present import answer, shape, wire
from .rerank import apply_time_decay, decay_dates, mmr_rerank
from .search.asked import Asked
from .search.backends import BuiltinBackend, CircuitBreaker, FallbackBackend, SearchBackend
from .search.qmd import QmdBackend
from .search.request import SearchRequest
from .search.snippets import Exclude
from .search.timeline import prepare
from .sync import DirtyMarks, SyncRequest

if TYPE_CHECKING:  # pragma: no cover
    from .hit import Vectors

log = structlog.get_logger("gateway.memory")

# A search waits at most this long for a sync already under way to index what was dirty when it began.
READ_YOUR_WRITES_S = 10.0
# A search asks its backend for this many results beyond k, ranked as for k: room for the arrangement
# (repeats folded into one leave places to fill) and the optional re-ranking.
POOL_SPARE = 5
AS_OF_SPARE = 20  # and this many more with asOf: the hits said after it are dropped from them


class MemoryAnswers:
    """The answers of the memory service; what they read of it is declared here."""

    config: Config
    cfg: MemoryConfig
    agent_id: str
    workspace: Path
    sessions_dir: Path
    index: MemoryIndex
    provider: EmbeddingProvider | None
    search_backend: SearchBackend
    decay_now: datetime | None  # time decay's "now"; None = the current time
    _ledger: LedgerRecall | None
    facts: FactsCache  # the ledger's facts, per index generation (ledger/cache.py)
    _hidden_sessions: set[str]  # sessions deleted while the index was busy (the searcher leaves them out)
    _startup: asyncio.Future | None
    _covering: asyncio.Future | None
    _dirty: DirtyMarks
    _unreachable: Callable[[BaseException], object]

    @property
    def dirty(self) -> bool:
        raise NotImplementedError

    def _request(
        self, *, force: bool, memory: bool, sessions: bool | set[str], progress=None, reason: str = "explicit"
    ) -> SyncRequest:
        raise NotImplementedError

    def _embeddings_brief(self) -> Embeddings:
        p = self.provider
        return {"provider": p.name if p else self.cfg.embeddings.provider, "model": p.model if p else ""}

    def _make_backend(self) -> SearchBackend:
        builtin = BuiltinBackend(self.index.search)
        b = self.cfg.backend
        if b.kind == "builtin":
            return builtin
        q = b.qmd
        qmd = QmdBackend(
            command=q.command,
            collection=q.collection or f"jarvis-{self.agent_id}",
            workspace=self.workspace,
            timeout_s=q.timeout_ms / 1000.0,
            update_timeout_s=q.update_timeout_ms / 1000.0,
            embed=q.embed,
            hybrid_command=q.hybrid_command,
            snippet_chars=self.cfg.search.snippet_chars,
        )
        return FallbackBackend(
            qmd,
            builtin,
            retries=b.retries,
            backoff_ms=b.retry_backoff_ms,
            breaker=CircuitBreaker(b.breaker_failures, b.breaker_open_seconds),
            file_diversity=self.cfg.search.file_diversity,
        )

    async def _sync_if_dirty(self) -> None:
        if not self.cfg.sync.on_search:
            return
        if self._startup is not None:
            # Not for a rebuild: the old index answers meanwhile.
            if not self._startup.done() and not self.index.needs_rebuild:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._startup)
            self._startup = None
        if not self.dirty:
            # Nothing left to mark — but a sync that started with marks (a turn just said, a note just
            # written) may still be writing them: what was written before this search is what it finds.
            covering = self._covering
            if covering is not None and not covering.done():
                with contextlib.suppress(Exception, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(covering), READ_YOUR_WRITES_S)
            return
        if self.index.needs_rebuild:
            self._request(force=False, memory=True, sessions=True, reason="search")  # in the background
            return
        req = self._request(force=False, reason="search", **self._dirty.pending())
        try:
            await asyncio.shield(req.future)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._unreachable(exc) is None:  # an outage is said once, by the engine
                log.warning("memory_search_presync_failed", exc_info=True)

    async def search(self, asked: SearchRequest) -> SearchAnswer:
        """memory.search's answer to a request (search/request.py: `as_of`, memory as it stood then)."""
        # The params were validated by the method's schema (memory.search, and the CLI through it).
        query, k, min_score, as_of, exclude = asked.query, asked.k, asked.min_score, asked.as_of, asked.exclude
        mode = asked.mode or self.cfg.search.mode
        why = "memory is disabled" if not self.cfg.enabled else self.index.degraded
        if why:
            return {"results": [], "mode": mode, "embeddings": self._embeddings_brief(), "degraded": why}
        await self._sync_if_dirty()
        recovering = self.index.recovering
        req = replace(
            asked,
            mode=mode,
            sources=tuple(sorted(set(asked.sources))) if asked.sources else SOURCES,
            spare=(0 if recovering else self._spare(k)) + (AS_OF_SPARE if as_of else 0),
            min_score=min_score if recovering else 0.0,
        )
        # A pool a few times k, arranged by what was said when (search/timeline.py), re-ranked if so
        # configured, then cut to k and minScore.
        # The question's subjects (ledger/recall.py: an embedding when no cue word names one) are found
        # while the backend searches.
        subjects = asyncio.ensure_future(self._ledger_subjects(query))
        try:
            found = await self.search_backend.search(req)
        except BaseException:
            subjects.cancel()
            raise
        hits = found.hits
        if as_of:  # nothing said after it (an undated hit is the file's: its time is known)
            hits = [r for r in hits if (r.date or "") <= as_of]
        hits = [shape(r) for r in hits]  # as every reader gets a hit (present.py: a keyed memory's value)
        if recovering:  # no re-ranking either: results are incomplete
            subjects.cancel()
            found.hits, found.degraded = (
                hits,
                (
                    "the memory index was damaged and is being rebuilt from the memory files and "
                    "transcripts; results are incomplete until it is done"
                ),
            )
            return answer(found)
        question = Asked(query)  # read once: the steps below take it (search/asked.py)
        try:
            # (the stored vectors of the hits, when the search read them)
            hits = await self._rerank(question, hits, k, min_score, found.vectors, found.ids)
        except BaseException:
            subjects.cancel()  # (it embeds in the background otherwise)
            raise
        hits = prefer_statements(question, hits)  # ties: who states beats who mentions
        found.hits = await self._ledger_first(query, hits, k, as_of, exclude, await subjects)
        return answer(found, as_of)

    def _ledger_recall(self) -> LedgerRecall:
        if self._ledger is None:
            # A local model only: the subjects' descriptions and statements are never sent to an API.
            local = self.provider is not None and not self.provider.remote and self.index.backend != "none"
            embed = embed_with(self.provider) if local else None
            self._ledger = LedgerRecall(embed)
        return self._ledger

    async def _ledger_subjects(self, query: str) -> list[str]:
        """The subjects of the person's life a query asks about ([] when the ledger cannot tell)."""
        try:
            return await self._ledger_recall().subjects(query)
        except Exception:
            log.warning("memory_ledger_recall_failed", exc_info=True)
            return []

    async def _ledger_first(
        self,
        query: str,
        results: list[Hit],
        k: int,
        as_of: str | None,
        exclude: Exclude | None = None,
        subjects: list[str] | None = None,
    ) -> list[Hit]:
        """The ledger's statement for the question first (ledger/recall.py); the results as they were when
        the question names no subject or the ledger cannot be read (derived data never fails a search)."""
        try:
            recall = self._ledger_recall()
            if subjects is None:
                subjects = await recall.subjects(query)
            if not subjects:
                return results
            drop = _own_statements(exclude)
            families = list(dict.fromkeys([*subjects, *event_subjects(query)]))  # "before I moved": home too
            known = await self.facts.facts(
                families, await self.index.generation(), self.index.statements, as_of, drop, self._hidden_paths()
            )
            picked = await recall.pick(query, known, as_of_time(as_of), subjects)
        except Exception:
            log.warning("memory_ledger_recall_failed", exc_info=True)
            return results
        if picked is None:
            return results
        fact, period, q = picked
        if q.asked == "present" and period.sayings:
            try:
                vectors = await self.index.stored_vectors(results) if results else None
                newer = newer_hit(results, vectors, await recall.vector(period.statement.text), fact, period)
                if newer is not None:  # a change the ledger did not see: that statement first, if it says it
                    return newer_first(results, newer[0], fact)[:k] if newer[1] else results
            except Exception:
                log.warning("memory_ledger_recall_failed", exc_info=True)
                return results
        return lead(results, fact, period, q, k)

    async def relevant_facts(
        self, message: str, exclude: Exclude | None = None, limit: int = RELEVANT_FACTS
    ) -> list[WireHit]:
        """The ledger's current facts a chat message is about (ledger/relevant.py), each as the hit of its
        statement (dated, with `fact`), as the wire has it (present.py's `wire`); [] when memory is off or the ledger cannot be read (a chat turn
        never fails for it). The message's own statements are not its facts."""
        if not self.cfg.enabled or self.index.degraded or limit <= 0:
            return []
        try:
            recall = self._ledger_recall()
            subjects = await recall.subjects(message)
            drop = _own_statements(exclude)
            known = await self.facts.facts(
                None, await self.index.generation(), self.index.statements, None, drop, self._hidden_paths()
            )
            return [wire(statement_hit(f, p, 0.0)) for f, p in await relevant(recall, message, known, subjects, limit)]
        except Exception:
            log.warning("memory_ledger_recall_failed", exc_info=True)
            return []

    async def profile(
        self,
        limit: int = PROFILE_LIMIT,
        cursor: str | None = None,
        subject: str | None = None,
        history: int = HISTORY_LIMIT,
    ) -> dict:
        """memory.profile: what the ledger holds now — each subject's current value with its evidence and
        history, the most recently changed first, a page at a time (ledger/profile.py)."""
        family = [subject_family(subject)] if subject is not None else None  # (checked before any sync)
        await self._sync_if_dirty()
        generation = await self.index.generation()
        known = await self.facts.facts(family, generation, self.index.statements, hidden=self._hidden_paths())
        return ledger_page(known, limit, cursor, subject, history)

    def _hidden_paths(self) -> list[str]:
        """The transcripts of sessions deleted while the index was busy: not in any answer until the sync."""
        return [session_path(k) for k in self._hidden_sessions]

    def _spare(self, k: int) -> int:
        """Results asked beyond k: POOL_SPARE, or the pool MMR and time decay choose from (3k, at least 20)."""
        s = self.cfg.search
        return min(100, max(3 * k, 20)) - k if (s.mmr or s.time_decay) else POOL_SPARE

    async def _rerank(
        self,
        question: Asked,
        results: list[Hit],
        k: int,
        min_score: float,
        known: Vectors | None = None,
        ids: dict[tuple[str, int, int], int] | None = None,
    ) -> list[Hit]:
        s = self.cfg.search
        if s.time_decay and results:
            now = self.decay_now or datetime.now(timezone.utc)
            results = apply_time_decay(results, decay_dates(results), now, s.half_life_days)
        plan = prepare(results, question)
        vectors = None
        if len(results) > 1 and plan.wanted:  # (the timeline compares the stored vectors of these few)
            keys = [results[i].key for i in plan.wanted]
            if known is not None and all(key in known for key in keys):
                vectors = {i: known[key] for i, key in zip(plan.wanted, keys)}  # (the search had them)
            else:
                got = await self.index.stored_vectors([results[i] for i in plan.wanted], ids)
                vectors = {plan.wanted[j]: v for j, v in got.items()} if got else None
        results = [r for r in plan.finish(vectors) if r.score >= min_score]
        if s.mmr:
            return mmr_rerank(results, k, s.mmr_lambda, await self.index.stored_vectors(results))
        return results[:k]

    async def get(self, path: str, from_: int = 1, lines: int = 120) -> dict:
        if from_ < 1:
            raise Invalid("must be >= 1", field="from")
        if lines < 1:
            raise Invalid("must be >= 1", field="lines")
        target = await asyncio.to_thread(resolve_readable, path, self.workspace, self.sessions_dir)
        got, more = await asyncio.to_thread(read_lines, target, from_, lines)
        out: dict[str, Any] = {
            "path": path,
            "text": "\n".join(got),
            "from": from_,
            "lines": len(got),
            "truncated": more,
        }
        if more:
            out["nextFrom"] = from_ + max(1, len(got))
        return out


def _own_statements(exclude: Exclude | None) -> tuple[str, Callable[[Statement], bool]] | None:
    """A chat turn's own message, as the facts cache leaves it out: its transcript and whether a
    statement is one of its own (a turn is never recalled as its answer)."""
    if exclude is None:
        return None
    said = " ".join(exclude.text.split())
    return (exclude.path, lambda s: " ".join(s.text.split()) in said)
