"""Chat runs: one active run per session, streamed to subscribers, every line durable before it is told.

send():  validate → idempotency → durably append the user message → start the run → {runId, started}
run:     recall memory → prompt (system + recalled + last N messages) → stream deltas (`chat.delta`)
         → append the assistant message → `chat.final` (or `chat.error` / `chat.aborted`)
An aborted run keeps its partial reply in the transcript, marked `"aborted": true`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import structlog

from ..config import Config
from ..errors import Conflict, JarvisError, NotFound, Unavailable, out_of_descriptors
from ..protocol import code_of
from ..events import EventBus
from ..sessions import transcript as tx
from ..tasks import KeyedLocks, log_failure
from ..sessions.store import SessionStore
from .compaction import Compactor, read_state
from .ledger import RunLedger
from .providers import ChatProvider, Delta, Usage
from .upstream import checked

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryManager

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

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


class ChatService:
    def __init__(self, config: Config, sessions: SessionStore, bus: EventBus, provider: ChatProvider,
                 memory: "MemoryManager | None" = None, topic: Callable[[str], str] = lambda key: key,
                 compactor: Compactor | None = None,
                 ledger: RunLedger | None = None):
        self.config = config
        self.topic = topic
        self.compactor = compactor
        self._background: set[asyncio.Task[Any]] = set()
        self.sessions = sessions
        self.bus = bus
        self.provider = provider
        self.memory = memory
        self.active: dict[str, Run] = {}  # sessionKey → run
        # Idempotency keys, and active runs across gateways when several share a database (ledger.py).
        self.ledger = ledger or RunLedger(config.chat.idempotency_ttl)
        self._send_locks = KeyedLocks()
        self.closing = False
        # Several gateways on one database: asks the gateway running (session, runId) to abort it.
        self.request_abort: Callable[[str, str], Awaitable[None]] | None = None
        # Runs of this gateway that ended while the database was unreachable: sessionKey → runId. Their
        # claims are released as soon as the database answers again (_release_later).
        self.unreleased: dict[str, str] = {}

    # ---- public API ----------------------------------------------------------------------------
    async def send(self, session_key: str, message: str, idempotency_key: str | None) -> dict[str, Any]:
        if self.closing:
            raise Unavailable("gateway is shutting down", retryable=True, retry_after_ms=1000)
        async with self.session_lock(session_key):  # check-then-start is atomic per session
            if idempotency_key is not None:
                hit = await self.ledger.seen(session_key, idempotency_key)
                if hit is not None:
                    return {"runId": hit, "status": "duplicate"}
            if session_key in self.active:
                raise self._busy(session_key, self.active[session_key].run_id)
            if not await self.sessions.exists(session_key):
                raise NotFound(f"session not found: {session_key}", {"sessionKey": session_key})
            run = Run(run_id=str(uuid.uuid4()), session_key=session_key)
            other = await self.ledger.claim(session_key, run.run_id)  # another gateway's run, if any
            if other is not None and await self._release_dead(session_key, other):
                other = await self.ledger.claim(session_key, run.run_id)
            if other is not None:
                raise self._busy(session_key, other)
            try:
                # Durable before the answer: if this raises (disk full), nothing was started or promised.
                await self.sessions.append_messages(
                    session_key, tx.message_record(str(uuid.uuid4()), "user", message, run.run_id))
                if idempotency_key is not None:
                    await self.ledger.remember(session_key, idempotency_key, run.run_id)
            except BaseException:
                await asyncio.shield(self.ledger.release(session_key, run.run_id))
                raise
            self.active[session_key] = run
            run.task = asyncio.create_task(self._run(run, message), name=f"chat-run-{run.run_id}")
            run.task.add_done_callback(lambda task: self._finished(run, task))
            return {"runId": run.run_id, "status": "started"}

    def session_lock(self, session_key: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Serialises starting a run with deleting the session (see Agent.delete_session)."""
        return self._send_locks.hold(session_key)

    @staticmethod
    def _busy(session_key: str, run_id: str) -> Conflict:
        return Conflict(f"a run is already active in session {session_key}", {"sessionKey": session_key, "runId": run_id})

    async def forget(self, session_key: str) -> None:
        """The session is gone: drop its per-session state. Idempotency keys belong to one life of a
        session: a session created again under the same key starts with none."""
        await self.ledger.forget_session(session_key)
        if self.compactor is not None:
            self.compactor.forget(session_key)

    def _finished(self, run: Run, task: asyncio.Task[None]) -> None:
        # The one place a finished run frees its session. A task cancelled before its first step
        # never ran _run's handlers, so its abort is reported here too.
        if self.active.get(run.session_key) is run:
            del self.active[run.session_key]
        if task.cancelled():  # before its first step: _end never ran
            if self.ledger.shared:
                self._spawn(self.ledger.release(run.session_key, run.run_id))
            self._emit(run, "chat.aborted", partial="")
            if self.memory is not None:
                self.memory.schedule_session_sync(run.session_key)

    async def abort(self, session_key: str, run_id: str | None) -> bool:
        run = self.active.get(session_key)
        if run is None:
            return await self._abort_elsewhere(session_key, run_id)
        if run_id is not None and run.run_id != run_id:
            return False
        return await self._abort_run(run)

    async def _abort_elsewhere(self, session_key: str, run_id: str | None) -> bool:
        """The run is another gateway's (several on one database): ask it to abort; it reports
        chat.aborted to every subscriber as usual."""
        held = await self.ledger.holder(session_key)
        if (held is not None and (run_id is None or held[0] == run_id)
                and await self._release_dead(session_key, held[0])):
            return True  # this gateway's run, ended while the database was away: its claim goes now
        if held is None or (run_id is not None and held[0] != run_id) or self.request_abort is None:
            return False
        await self.request_abort(session_key, held[0])
        return True

    async def shutdown(self, grace: float) -> None:
        """Refuse new runs, abort the running ones and wait (up to `grace`) for them to persist."""
        self.closing = True
        tasks = [r.task for r in self.active.values() if r.task is not None] + list(self._background)
        for run in list(self.active.values()):
            self._cancel(run)
        if tasks:
            await asyncio.wait(tasks, timeout=max(grace, 0.1))
        if self._background:  # what the runs left behind (releasing a shared run) finishes too
            await asyncio.wait(list(self._background), timeout=max(grace, 0.1))

    @property
    def idle(self) -> bool:
        """No run, no background work (compaction) and no send in progress."""
        return not self.active and not self._background and not len(self._send_locks)

    # ---- internals -----------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(log_failure("chat_background_task_failed"))

    def _cancel(self, run: Run) -> bool:
        if run.aborted or run.finalizing or run.task is None or run.task.done():
            return False
        run.aborted = True
        run.task.cancel()
        return True

    async def _abort_run(self, run: Run) -> bool:
        if not self._cancel(run):
            return False
        # The task persists the partial reply and emits chat.aborted before this returns.
        await asyncio.wait([run.task])
        return True

    async def _compact_quietly(self, key: str) -> None:
        assert self.compactor is not None
        try:
            await self.compactor.maybe_compact(key)
        except Exception:  # the next turn tries again; the transcript is untouched
            log.exception("compaction failed", session=key)

    def _reply_marks(self) -> dict[str, Any]:
        """Fields of a reply's transcript record: which provider wrote it, and whether it is memory."""
        marks: dict[str, Any] = {"provider": self.provider.name}
        if not getattr(self.provider, "replies_are_memory", True):
            marks[tx.REMEMBER_FIELD] = False
        return marks

    async def _end(self, run: Run, method: str, **params: Any) -> None:
        """The run's last event. A run other gateways can see is released first, so that a client
        answering chat.final at once through another gateway finds the session free."""
        if self.ledger.shared:
            try:
                await asyncio.shield(self.ledger.release(run.session_key, run.run_id))
            except Exception as exc:  # the database is unreachable: released as soon as it is back
                log.warning("run not released", session=run.session_key, run=run.run_id, error=str(exc))
                self.unreleased[run.session_key] = run.run_id
                self._spawn(self._release_later(run.session_key, run.run_id))
        self._emit(run, method, **params)

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

    def _emit(self, run: Run, method: str, **params: Any) -> None:
        self.bus.publish(self.topic(run.session_key), method,
                         {"sessionKey": run.session_key, "runId": run.run_id, "seq": run.next_seq(), **params})

    async def _prompt(self, session_key: str, user_text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        recalled: list[dict[str, Any]] = []
        if self.memory is not None and self.config.memory.recall.enabled:
            try:
                recalled = await self.memory.recall(user_text, session_key)
            except Exception as exc:  # recall is best effort; the turn goes on without it
                log.warning("recall failed", error=type(exc).__name__, session=session_key)
        if self.compactor is not None:
            await self.compactor.settled(session_key)
        state = await asyncio.to_thread(read_state, await self.sessions.local_transcript(session_key))
        history = [m for m in state.pending if m["role"] in ("user", "assistant", "system") and m["content"]]
        history = history[-self.config.chat.history_messages :]
        system = self.config.chat.system_prompt
        if state.summary:
            system += "\n\n## Earlier in this conversation (summary)\n" + state.summary
        if recalled:
            system += "\n\n## Recalled memory\n" + "\n\n".join(
                f"[{r['path']}:{r['startLine']}-{r['endLine']}]\n{r['snippet']}" for r in recalled)
        messages = [{"role": "system", "content": system}]
        messages += [{"role": m["role"], "content": m["content"]} for m in history]
        return messages, recalled

    async def _run(self, run: Run, user_text: str) -> None:
        key = run.session_key
        started = time.monotonic()
        usage: Usage | None = None
        recalled: list[dict[str, Any]] = []
        try:
            messages, recalled = await self._prompt(key, user_text)
            room = self.config.chat.max_reply_chars  # a runaway upstream must not make frames no one can read
            truncated = False
            async with contextlib.aclosing(checked(self.provider.stream(messages, recalled=recalled))) as stream:
                async for item in stream:
                    # A provider's client parses a buffered stream without yielding: let the rest of
                    # the gateway run between chunks, or a fast upstream starves every other client.
                    await asyncio.sleep(0)
                    if isinstance(item, Delta):
                        text = item.text[:room]
                        room -= len(text)
                        if text:
                            run.parts.append(text)
                            self._emit(run, "chat.delta", delta=text)
                        if room <= 0:
                            truncated = True
                            log.warning("chat reply cut at chat.maxReplyChars", session=key, run=run.run_id,
                                        chars=self.config.chat.max_reply_chars)
                            break
                    else:
                        usage = item
            content = "".join(run.parts)
            memory = [{"path": r["path"], "startLine": r["startLine"], "endLine": r["endLine"],
                       "score": r["score"]} for r in recalled]
            # What was recalled is kept with the reply, so history can show it later.
            extra: dict[str, Any] = {"memory": memory} if memory else {}
            if truncated:
                extra["truncated"] = True
            rec = tx.message_record(str(uuid.uuid4()), "assistant", content, run.run_id, **extra,
                                    **self._reply_marks())
            # All of chat.final is made before the reply is saved: once saved, it is announced.
            final: dict[str, Any] = {
                "message": {"id": rec["id"], "role": "assistant", "content": content, "timestamp": rec["timestamp"]},
                "memory": memory,
            }
            if usage is not None:
                final["usage"] = usage.to_dict()
            if truncated:
                final["truncated"] = True
            run.finalizing = True
            await self.sessions.append_messages(key, rec)
            await self._end(run, "chat.final", **final)
            log.info("chat run done", session=key, run=run.run_id, ms=int((time.monotonic() - started) * 1000))
            if self.memory is not None:
                self.memory.schedule_session_sync(key)
            if self.compactor is not None:
                self._spawn(self._compact_quietly(key))
        except asyncio.CancelledError:
            partial = "".join(run.parts)
            if partial:
                rec = tx.message_record(str(uuid.uuid4()), "assistant", partial, run.run_id, aborted=True,
                                        **self._reply_marks())
                try:
                    await self.sessions.append_messages(key, rec)
                except Exception as exc:
                    log.error("could not keep partial reply", session=key, run=run.run_id, error=str(exc))
            await self._end(run, "chat.aborted", partial=partial)
            log.info("chat run aborted", session=key, run=run.run_id)
            if self.memory is not None:  # the user message is in the transcript, partial reply or not
                self.memory.schedule_session_sync(key)
        except JarvisError as exc:
            retryable = bool((exc.data or {}).get("retryable", False))
            code = code_of(exc)  # the event carries the JSON-RPC code of the error (PROTOCOL.md §4)
            await self._end(run, "chat.error", error={"code": code, "message": exc.message, "retryable": retryable})
            log.warning("chat run failed", session=key, run=run.run_id, code=code, error=exc.message)
        except Exception as exc:  # a bug or the disk: tell the client, keep the loop alive
            busy = out_of_descriptors("the transcript", exc)
            if busy is not None:  # every descriptor is in use: retryable once some close
                log.warning("chat run failed: out of file descriptors", session=key, run=run.run_id, error=str(exc))
                await self._end(run, "chat.error", error={"code": code_of(busy), "message": busy.message,
                                                          "retryable": True})
                return
            error_id = uuid.uuid4().hex[:12]
            log.exception("chat run crashed", session=key, run=run.run_id, errorId=error_id)
            retryable = isinstance(exc, OSError)
            msg = f"could not save the reply: {exc.strerror}" if isinstance(exc, OSError) else "internal error"
            await self._end(run, "chat.error", error={"code": -32603, "message": f"{msg} (errorId {error_id})",
                                                      "retryable": retryable})
