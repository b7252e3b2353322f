"""How a chat run ends: every line durable before it is told.

    finish = Finish(sessions, provider, memory, end)
    await finish.final(run, recalled, usage, truncated)    # the reply saved, then Final
    await finish.aborted(run)                              # the partial saved (marked aborted), then Aborted
    await finish.failed(run, exc)                          # Failed, carrying the domain error
    await finish.crashed(run, exc)                         # a bug or the disk: Failed, logged with an errorId

`end(run, event)` is the run's last event, typed (chat/events.py; the runner releases the run's claim
first, then tells the run's handle and the session's subscribers). The
reply keeps what was recalled and what the tools found (memory/present.py's references), so history
can show it later; a relayed request with capture off writes nothing.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import structlog

from ..errors import InternalError, JarvisError, Unavailable, out_of_descriptors
from ..memory.present import reference
from ..sessions import transcript as tx
from ..storage.base import SessionStore
from .events import Aborted, End, Failed, Final
from .providers import ChatProvider
from .runs import Run
from .stream import Usage

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryService

log = structlog.get_logger("gateway.chat")

EndOf = Callable[[Run, End], Awaitable[None]]  # end(run, event): the run's last event


def reply_marks(provider: ChatProvider) -> dict[str, Any]:
    """Fields of a reply's transcript record: which provider wrote it, and whether it is memory."""
    marks: dict[str, Any] = {"provider": provider.name}
    if not getattr(provider, "replies_are_memory", True):
        marks[tx.REMEMBER_FIELD] = False
    return marks


class Finish:
    def __init__(
        self,
        sessions: SessionStore,
        provider: ChatProvider,
        memory: "MemoryService | None",
        end: EndOf,
        unreachable: Callable[[BaseException], Unavailable | None] = lambda exc: None,
    ):
        self.sessions = sessions
        self.unreachable = unreachable  # the engine's "database cannot be reached" (Storage.unreachable)
        self.provider = provider
        self.memory = memory
        self.end = end

    async def final(self, run: Run, recalled: list[dict[str, Any]], usage: Usage | None, truncated: bool) -> None:
        content = "".join(run.parts)
        memory = _distinct([reference(r) for r in recalled] + run.found)
        # What was recalled is kept with the reply, so history can show it later.
        extra: dict[str, Any] = {"memory": memory} if memory else {}
        if truncated:
            extra["truncated"] = True
        if run.replaces is not None:
            extra["replaces"] = run.replaces
        rec = tx.message_record(
            str(uuid.uuid4()), "assistant", content, run.run_id, **extra, **reply_marks(self.provider)
        )
        # All of chat.final is made before the reply is saved: once saved, it is announced.
        final: dict[str, Any] = {
            "message": {"id": rec["id"], "role": "assistant", "content": content, "timestamp": rec["timestamp"]},
            "memory": memory,
        }
        if run.replaces is not None:
            final["message"]["replaces"] = run.replaces
        if usage is not None:
            final["usage"] = usage.to_dict()
        if truncated:
            final["truncated"] = True
        run.finalizing = True
        if run.capture:
            await self.sessions.append_messages(run.session_key, *run.pending, rec)
        await self.end(run, Final(final))
        self._sync(run)

    async def aborted(self, run: Run) -> None:
        key = run.session_key
        partial = "".join(run.parts)
        why = {"abortReason": run.abort_reason} if run.abort_reason else {}
        # a reply a restart stopped shows in history, even before its first word
        if (partial or why) and run.capture:
            rec = tx.message_record(
                str(uuid.uuid4()),
                "assistant",
                partial,
                run.run_id,
                aborted=True,
                **why,
                **({"replaces": run.replaces} if run.replaces else {}),
                **reply_marks(self.provider),
            )
            try:
                await self.sessions.append_messages(key, *run.pending, rec)
            except Exception as exc:
                log.error("could not keep partial reply", session=key, run=run.run_id, error=str(exc))
        await self.end(run, Aborted(partial, run.abort_reason))
        log.info("chat run aborted", session=key, run=run.run_id)
        self._sync(run)  # the user message is in the transcript, partial reply or not

    async def failed(self, run: Run, exc: JarvisError) -> None:
        retryable = bool((exc.data or {}).get("retryable", False))
        await self.end(run, Failed(exc, retryable))
        log.warning("chat run failed", session=run.session_key, run=run.run_id, error=exc.message)

    async def crashed(self, run: Run, exc: Exception) -> None:
        down = self.unreachable(exc)
        busy = down or out_of_descriptors("the transcript", exc)
        if busy is not None:  # the database is away, or every descriptor in use: retryable once back
            why = "the database cannot be reached" if down is not None else "out of file descriptors"
            log.warning(f"chat run failed: {why}", session=run.session_key, run=run.run_id, error=str(exc)[:200])
            await self.end(run, Failed(busy, True))
            return
        error_id = uuid.uuid4().hex[:12]
        log.error("chat run crashed", session=run.session_key, run=run.run_id, errorId=error_id, exc_info=exc)
        retryable = isinstance(exc, OSError)
        msg = f"could not save the reply: {exc.strerror}" if isinstance(exc, OSError) else "internal error"
        crash = InternalError(f"{msg} (errorId {error_id})")
        await self.end(run, Failed(crash, retryable))

    def _sync(self, run: Run) -> None:
        if self.memory is not None and run.capture:
            self.memory.schedule_session_sync(run.session_key)


def _distinct(refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Memory references without repeats (the same lines found by recall and by a tool)."""
    seen: set[tuple[Any, Any, Any]] = set()
    out = []
    for r in refs:
        mark = (r.get("path"), r.get("startLine"), r.get("endLine"))
        if mark not in seen:
            seen.add(mark)
            out.append(r)
    return out
