"""A chat run and the slots that keep one run per session, on this gateway and across gateways.

    slots = RunSlots(ledger, request_abort)
    async with slots.lock(key):             # starting a run, or deleting the session, one at a time
        slots.refuse_if_busy(key)           # RunActive when a run of this gateway holds it
        await slots.claim(key, run)         # … or of another gateway on the same database
        slots.started(run)
    slots.free(run)                         # its task has ended
    await slots.release(run, spawn)         # before its last event: other gateways see the session free

The engine's RunLedger keeps idempotency keys and, with several gateways on one database, which run
holds a session (storage/base.py). A run of this gateway whose release failed while the database was
away is remembered (`unreleased`) and released as soon as the database answers again, by a retry
in the background or by the next send to that session, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import structlog

from ..errors import RunActive
from ..principals import Principal
from ..storage.base import RunLedger
from ..tasks import KeyedLocks

if TYPE_CHECKING:  # pragma: no cover
    from .events import RunHandle

log = structlog.get_logger("gateway.chat")


@dataclass
class Run:
    run_id: str
    session_key: str
    task: asyncio.Task[None] | None = None
    seq: int = 0
    parts: list[str] = field(default_factory=list)
    aborted: bool = False
    finalizing: bool = False  # the reply is being saved: too late to abort
    capture: bool = True  # False: nothing goes to the transcript (a relayed request with capture off)
    # A relayed request's user message: written with the reply (or its partial), so that a request the
    # upstream refused leaves nothing behind for the client's retry to write again.
    pending: list[dict[str, Any]] = field(default_factory=list)
    abort_reason: str | None = None  # "shutdown" when the gateway stopped it
    found: list[dict[str, Any]] = field(default_factory=list)  # memory the tools found: {path, startLine, …}
    replaces: str | None = None  # regenerating: the first version's id of the reply it replaces
    destructive: int = 0  # destructive tool calls asked or allowed so far (chat.maxDestructivePerRun)
    principal: Principal | None = None  # who started it (chat.confirm: it, or a writer of its agent, answers)
    confirmed_by: str | None = None  # who allowed the destructive call about to run (its audit entry says)
    handle: "RunHandle | None" = None  # a relayed request's: the door reads the run's events from it

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


class RunSlots:
    def __init__(self, ledger: RunLedger, request_abort: Callable[[str, str], Awaitable[None]] | None = None):
        # Idempotency keys, and active runs across gateways when several share a database (storage/base.py).
        self.ledger = ledger
        # Several gateways on one database: asks the gateway running (session, runId) to abort it
        # (cluster.Cluster.abort_requester).
        self.request_abort = request_abort
        self.active: dict[str, Run] = {}  # sessionKey → this gateway's run
        # Runs of this gateway that ended while the database was unreachable: sessionKey → runId. Their
        # claims are released as soon as the database answers again (_release_later).
        self.unreleased: dict[str, str] = {}
        self.locks = KeyedLocks()
        self.closing = False

    def lock(self, session_key: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Serialises starting a run with deleting the session (see Agent.delete_session)."""
        return self.locks.hold(session_key)

    def refuse_if_busy(self, session_key: str) -> None:
        """RunActive when a run of this gateway holds the session."""
        if session_key in self.active:
            raise RunActive(session_key, self.active[session_key].run_id)

    async def claim(self, session_key: str, run: Run) -> None:
        """Make `run` the session's run for every gateway (under `lock`); RunActive when another holds it."""
        other = await self.ledger.claim(session_key, run.run_id)  # another gateway's run, if any
        if other is not None and await self._release_dead(session_key, other):
            other = await self.ledger.claim(session_key, run.run_id)
        if other is not None:
            raise RunActive(session_key, other)

    def started(self, run: Run) -> None:
        self.active[run.session_key] = run

    def free(self, run: Run) -> None:
        """The run's task ended: its session is free here."""
        if self.active.get(run.session_key) is run:
            del self.active[run.session_key]

    async def release(self, run: Run, spawn: Callable[[Any], None]) -> None:
        """Release the run's claim (several gateways), so that a client answering its last event at once
        through another gateway finds the session free; when the database is away, as soon as it is back."""
        if not self.ledger.shared:
            return
        try:
            await asyncio.shield(self.ledger.release(run.session_key, run.run_id))
        except Exception as exc:  # the database is unreachable: released as soon as it is back
            log.warning("run not released", session=run.session_key, run=run.run_id, error=str(exc))
            self.unreleased[run.session_key] = run.run_id
            spawn(self._release_later(run.session_key, run.run_id))

    async def abort_elsewhere(self, session_key: str, run_id: str | None) -> bool:
        """Abort the session's run (or that run only) when another gateway runs it: ask that gateway, which
        reports chat.aborted to every subscriber as usual. → whether there was one to abort."""
        held = await self.ledger.holder(session_key)
        if (
            held is not None
            and (run_id is None or held[0] == run_id)
            and await self._release_dead(session_key, held[0])
        ):
            return True  # this gateway's run, ended while the database was away: its claim goes now
        if held is None or (run_id is not None and held[0] != run_id) or self.request_abort is None:
            return False
        await self.request_abort(session_key, held[0])
        return True

    async def forget(self, session_key: str) -> None:
        """The session is gone. Idempotency keys belong to one life of a session: a session created
        again under the same key starts with none."""
        await self.ledger.forget_session(session_key)

    async def _release_dead(self, session_key: str, run_id: str) -> bool:
        """Release the claim of `run_id` if it is a run of this gateway that already ended (its release
        failed while the database was away); → whether it was one."""
        if self.unreleased.get(session_key) != run_id:
            return False
        await self.ledger.release(session_key, run_id)
        if self.unreleased.get(session_key) == run_id:
            del self.unreleased[session_key]
        log.info("claim of an ended run released", session=session_key, run=run_id)
        return True

    async def _release_later(self, session_key: str, run_id: str) -> None:
        """Retry a failed release until the database answers (every 0.5 s, up to 2 s apart), so the
        session is free for the next chat.send as soon as the database is back."""
        delay = 0.5
        while not self.closing and self.unreleased.get(session_key) == run_id:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
            with contextlib.suppress(Exception):  # still unreachable: try again
                await self._release_dead(session_key, run_id)
