"""Retrieval backends behind `MemoryService.search`, chosen by `memory.backend.kind`.

- `builtin` (default): the engine's index (full text + vectors, see searcher.py).
- `qmd`: the `qmd` command-line search tool (qmd.py) for the memory files, composed as
  `FallbackBackend(primary=qmd, fallback=builtin)`: bounded retries with linear backoff, and a circuit
  breaker — after `breakerFailures` consecutive failed searches the circuit opens for
  `breakerOpenSeconds` and searches go straight to the built-in index; then one trial search is let
  through (half-open): success closes the circuit, failure opens it again. Transcripts are JSONL, which
  QMD does not index, so results from `sessions` always come from the built-in index and are merged with
  QMD's by score, then spread over files (`fileDiversity`) as the built-in index spreads its own.

A backend answers `search(SearchRequest)` with its hits (memory/hit.py's Found) and raises `BackendError` when it
cannot answer (the fallback then does).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any, Awaitable, Callable, Protocol

import structlog

from ..hit import Found, Hit
from .fusion import spread_over_files
from .request import SearchRequest

log = structlog.get_logger("gateway.memory")


class BackendError(Exception):
    """A backend could not answer a search (the message says why)."""


class SearchBackend(Protocol):
    """What the manager searches through: the built-in index, or QMD with it as the fallback."""

    name: str
    sources: tuple[str, ...]  # the sources this backend can search

    async def search(self, req: SearchRequest) -> Found: ...

    async def after_sync(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


SearchFn = Callable[[SearchRequest], Awaitable[Found]]


class BuiltinBackend:
    """The built-in index (the engine's); `search_fn` is the memory service's own index search."""

    name = "builtin"
    sources: tuple[str, ...] = ("memory", "sessions")

    def __init__(self, search_fn: SearchFn):
        self._search = search_fn

    async def search(self, req: SearchRequest) -> Found:
        return await self._search(req)

    async def after_sync(self) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"kind": "builtin"}


class CircuitBreaker:
    """closed → (N consecutive failures) → open for `open_seconds` → half-open (one trial) → closed/open."""

    def __init__(self, failures: int = 3, open_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic):
        if failures < 1 or open_seconds < 0:
            raise ValueError("failures must be >= 1 and open_seconds >= 0")
        self.threshold, self.open_seconds, self.clock = failures, open_seconds, clock
        self.failures = 0
        self.opened_at: float | None = None
        self._trial = False  # a half-open trial is in flight

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "open" if self.clock() - self.opened_at < self.open_seconds else "half-open"

    def allow(self) -> bool:
        """May a call go to the protected backend now? In half-open, only one trial at a time."""
        st = self.state
        if st == "closed":
            return True
        if st == "half-open" and not self._trial:
            self._trial = True
            return True
        return False

    def success(self) -> None:
        self.failures, self.opened_at, self._trial = 0, None, False

    def failure(self) -> None:
        self.failures += 1
        was_trial, self._trial = self._trial, False
        if was_trial or self.failures >= self.threshold:
            self.opened_at = self.clock()

    def release(self) -> None:
        """A trial that ended without a verdict (cancelled): let the next call try."""
        self._trial = False

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "failures": self.failures}
        if self.opened_at is not None:
            out["openForS"] = round(max(0.0, self.opened_at + self.open_seconds - self.clock()), 3)
        return out


class FallbackBackend:
    """`primary` with bounded retries behind a circuit breaker; `fallback` answers when it cannot."""

    def __init__(
        self,
        primary: Any,
        fallback: Any,
        *,
        retries: int = 2,
        backoff_ms: int = 500,
        breaker: CircuitBreaker | None = None,
        file_diversity: float = 1.0,
    ):
        self.primary, self.fallback = primary, fallback
        self.file_diversity = file_diversity
        self.retries, self.backoff_s = retries, backoff_ms / 1000.0
        self.breaker = breaker or CircuitBreaker()
        self.name = primary.name
        self.sources = fallback.sources
        self.last_error: str | None = None
        self.fallbacks = 0  # searches the fallback answered instead of the primary

    async def _primary(self, req: SearchRequest) -> Found:
        """The primary's answer, trying up to 1 + retries times (backoff × attempt between tries)."""
        err: BackendError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * attempt)
            try:
                return await self.primary.search(req)
            except BackendError as exc:
                err = exc
                log.warning("memory_backend_failed", backend=self.primary.name, attempt=attempt + 1, error=str(exc))
        assert err is not None
        raise err

    async def search(self, req: SearchRequest) -> Found:
        """`exclude` (a transcript message to leave out) concerns the built-in index only: QMD never
        holds transcripts."""
        mine = tuple(s for s in req.sources if s in self.primary.sources)
        rest = tuple(s for s in req.sources if s not in self.primary.sources)
        answers: list[Found] = []
        degraded: list[str] = []
        if mine:
            res = None
            if self.breaker.allow():
                try:
                    res = await self._primary(replace(req, sources=mine))
                except BackendError as exc:
                    self.breaker.failure()
                    self.last_error = str(exc)
                    degraded.append(f"{self.primary.name} failed ({exc}); answered by the built-in index")
                except BaseException:
                    self.breaker.release()
                    raise
                else:
                    self.breaker.success()
            else:
                degraded.append(
                    f"{self.primary.name} circuit open after {self.breaker.failures} failures "
                    f"(last: {self.last_error}); answered by the built-in index"
                )
            if res is None:
                self.fallbacks += 1
                res = await self.fallback.search(replace(req, sources=mine))
            answers.append(res)
        if rest:
            answers.append(await self.fallback.search(replace(req, sources=rest)))
        return merge(answers, req.k + req.spare, degraded, self.file_diversity)

    async def after_sync(self) -> None:
        await self.primary.after_sync()

    def status(self) -> dict[str, Any]:
        out = {
            **self.primary.status(),
            "fallback": self.fallback.name,
            "circuit": self.breaker.snapshot(),
            "fallbacks": self.fallbacks,
        }
        if self.last_error:
            out["lastError"] = self.last_error
        return out


def merge(answers: list[Found], k: int, degraded: list[str], file_diversity: float = 1.0) -> Found:
    """One answer from several: hits by score, the best k spread over files (`spread_over_files`);
    `degraded` reasons joined; the stored vectors each read, together."""
    if not answers:
        return Found([], "fts", {"provider": "none", "model": ""})
    ranked = sorted((h for a in answers for h in a.hits), key=lambda h: -h.score)
    hits = spread_over_files(ranked, k, file_diversity, score=_score, path=_path)
    reasons = degraded + [a.degraded for a in answers if a.degraded]
    vectors = {key: v for a in answers if a.vectors for key, v in a.vectors.items()}
    return Found(hits, answers[0].mode, answers[0].embeddings, "; ".join(reasons) or None, vectors or None)


def _score(h: Hit) -> float:
    return h.score


def _path(h: Hit) -> str:
    return h.path
