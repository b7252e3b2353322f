"""Chat runs: one active run per session, streamed to subscribers, every line durable before it is told.

send():  validate → idempotency → durably append the user message → start the run → {runId, started}
regenerate(): the same for the session's last reply, without a new user message: the run answers the
         message that reply answered, and its reply is appended with `"replaces": <the first version's
         id>` (transcripts stay append-only; history and prompts show the latest version)
run:     recall memory → prompt (system + recalled + last N messages) → stream deltas (`chat.delta`)
         [→ tool calls: `chat.tool` events, calls and results in the transcript, stream again (tools.py)]
         → append the assistant message → `chat.final` (or `chat.error` / `chat.aborted`)
An aborted run keeps its partial reply in the transcript, marked `"aborted": true`.

A run may also relay a request of the OpenAI-compatible door (`relay(key, turn)`, chat/relay.py): the
same recall, events and transcript, but the prompt is the client's and the reply comes from
`turn.stream(provider, recalled)`; `turn.capture` false writes nothing.

The concerns live beside it: runs.py (a run; one per session, claims across gateways), prompt.py (the
prompt and what memory recalls for it), loop.py (the provider/tool loop), finish.py (how a run ends),
relay.py (a relayed request). This module starts, stops and sequences runs.

Shutdown: new sends are refused (retryable) at once, running replies get `server.shutdownGrace` to
finish, and the ones still running then are aborted: their partial (even an empty one) is kept, marked
`"abortReason": "shutdown"`, and `chat.aborted` says `reason: "shutdown"`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import structlog

from ..config import Config
from ..errors import Beyond, Invalid, JarvisError, NotFound, Unavailable
from ..events import EventBus
from ..principals import Principal, same
from ..sessions import transcript as tx
from ..storage.base import RunLedger, SessionStore
from ..tasks import log_failure
from .compaction import Compactor
from .confirm import Guard
from .events import Aborted, End, Notice, RunHandle, Told
from .finish import Finish
from .loop import TurnLoop
from .prompt import Prompts
from .providers import ChatProvider
from .relay import RelayedTurn, Threads
from .runs import Run, RunSlots
from .tools import ChatTools

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryService
    from ..storage.base import ResponseStore

log = structlog.get_logger("gateway.chat")

SAVE_TIMEOUT_S = 5.0  # at shutdown, for aborted runs to save their partial replies


class ChatService:
    def __init__(
        self,
        config: Config,
        sessions: SessionStore,
        bus: EventBus,
        provider: ChatProvider,
        ledger: RunLedger,
        memory: "MemoryService | None" = None,
        topic: Callable[[str], str] = lambda key: key,
        compactor: Compactor | None = None,
        tools: ChatTools | None = None,
        *,
        request_abort: Callable[[str, str], Awaitable[None]] | None = None,
        unreachable: Callable[[BaseException], Unavailable | None] = lambda exc: None,
        acting: Callable[[], Principal | None] = lambda: None,
        responses: "ResponseStore | None" = None,
        answer_elsewhere: Callable[[str, str, bool, Any, str], Awaitable[str | None]] | None = None,
        watched_elsewhere: Callable[[str], Awaitable[bool]] | None = None,
    ):
        self.config = config
        self.acting = acting  # the principal of the call that starts a run (calls.ACTING, wired by services.py)
        self.tools = tools
        self.topic = topic
        self.compactor = compactor
        self.sessions = sessions
        self.bus = bus
        self.provider = provider
        self.memory = memory
        self.slots = RunSlots(ledger, request_abort)
        self.prompts = Prompts(config, sessions, memory, compactor)
        self.guard = (
            Guard(
                config,
                tools.caller,
                self._emit,
                lambda run: bus.answerers(topic(run.session_key)),
                (lambda run: watched_elsewhere(topic(run.session_key))) if watched_elsewhere is not None else None,
            )
            if tools is not None
            else None
        )
        self.loop = TurnLoop(config, provider, tools, sessions, self._emit, self.guard)
        self.finish = Finish(sessions, provider, memory, self._end, unreachable)
        self._background: set[asyncio.Task[Any]] = set()
        self.threads = Threads(shared=ledger.shared)  # which session a /v1 conversation is in, by its history
        self.responses = responses  # /v1/responses kept: the storage engine's (None: none kept)
        self.answer_elsewhere = answer_elsewhere  # a chat.confirm for another gateway's run (cluster.py)

    @property
    def active(self) -> dict[str, Run]:
        """sessionKey → this gateway's run in it."""
        return self.slots.active

    @property
    def closing(self) -> bool:
        return self.slots.closing

    # ---- public API ----------------------------------------------------------------------------
    async def send(self, session_key: str, message: str, idempotency_key: str | None) -> dict[str, Any]:
        """Start a run answering `message`."""
        return await self._start(session_key, idempotency_key, message=message)

    async def relay(self, session_key: str, turn: RelayedTurn) -> RunHandle:
        """Start a run relaying a request of the OpenAI-compatible door (chat/relay.py) → its handle, whose
        events (chat/events.py) the door renders."""
        turn.events = RunHandle(self.config.server.slow_consumer_seconds)
        started = await self._start(session_key, None, message=turn.user_text, relay=turn)
        turn.events.run_id, turn.events.session_key, turn.events.captured = started["runId"], session_key, turn.capture
        return turn.events

    async def regenerate(self, session_key: str, message_id: str, idempotency_key: str | None) -> dict[str, Any]:
        """A new version of the session's last reply (`message_id`: any version of it)."""
        return await self._start(session_key, idempotency_key, regenerate=message_id)

    async def _start(
        self,
        session_key: str,
        idempotency_key: str | None,
        *,
        message: str | None = None,
        regenerate: str | None = None,
        relay: RelayedTurn | None = None,
    ) -> dict[str, Any]:
        slots = self.slots
        self._refuse_if_closing()
        async with slots.lock(session_key):  # check-then-start is atomic per session
            self._refuse_if_closing()  # shutdown began while this send waited for the session
            if idempotency_key is not None:
                hit = await slots.ledger.seen(session_key, idempotency_key)
                if hit is not None:
                    return {"runId": hit, "status": "duplicate"}
            slots.refuse_if_busy(session_key)
            run = Run(run_id=str(uuid.uuid4()), session_key=session_key, principal=self.acting())
            if relay is not None:
                run.capture, run.handle = relay.capture, relay.events
            if run.capture and not await self.sessions.exists(session_key):
                raise NotFound(f"session not found: {session_key}", {"sessionKey": session_key})
            if regenerate is not None:
                message, run.replaces = await self._question_of_last_reply(session_key, regenerate)
            await slots.claim(session_key, run)
            try:
                # Durable before the answer: if this raises (disk full), nothing was started or promised.
                if run.capture and message is not None and regenerate is None:
                    record = tx.message_record(str(uuid.uuid4()), "user", message, run.run_id)
                    if relay is None:
                        await self.sessions.append_messages(session_key, record)
                    else:
                        run.pending.append(record)
                if idempotency_key is not None:
                    await slots.ledger.remember(session_key, idempotency_key, run.run_id)
            except BaseException:
                await asyncio.shield(slots.ledger.release(session_key, run.run_id))
                raise
            slots.started(run)
            run.task = asyncio.create_task(self._run(run, message or "", relay), name=f"chat-run-{run.run_id}")
            run.task.add_done_callback(lambda task: self._finished(run, task))
            return {"runId": run.run_id, "status": "started"}

    def _refuse_if_closing(self) -> None:
        if self.closing:
            raise Unavailable(
                "the gateway is shutting down (restarting); send again once it is back",
                retryable=True,
                retry_after_ms=1000,
            )

    async def _question_of_last_reply(self, session_key: str, message_id: str) -> tuple[str, str]:
        """(the user message the session's last reply answered, that reply's first version's id)."""
        path = await self.sessions.local_transcript(session_key)
        messages = tx.chosen_versions(await asyncio.to_thread(tx.read_messages, path))
        last = messages[-1] if messages else None
        ids = {v["id"] for v in last.get("versions", [])} | {last["id"]} if last else set()
        if last is None or last["role"] != "assistant" or message_id not in ids:
            raise Invalid("only the session's last reply can be regenerated", field="messageId")
        question = next((m for m in reversed(messages[:-1]) if m["role"] == "user"), None)
        if question is None:
            raise Invalid("the reply answers no message of this session", field="messageId")
        return question["content"], last.get("replaces") or last["id"]

    def session_lock(self, session_key: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Serialises starting a run with deleting the session (see Agent.delete_session)."""
        return self.slots.lock(session_key)

    async def forget(self, session_key: str) -> None:
        """The session is gone: drop its per-session state."""
        await self.slots.forget(session_key)
        if self.compactor is not None:
            self.compactor.forget(session_key)

    def _finished(self, run: Run, task: asyncio.Task[None]) -> None:
        # The one place a finished run frees its session. A task cancelled before its first step
        # never ran _run's handlers, so its abort is reported here too.
        self.slots.free(run)
        if task.cancelled():  # before its first step: _end never ran
            if self.slots.ledger.shared:
                self._spawn(self.slots.ledger.release(run.session_key, run.run_id))
            self._emit(run, Aborted(""))
            if self.memory is not None:
                self.memory.schedule_session_sync(run.session_key)

    async def abort(self, session_key: str, run_id: str | None) -> bool:
        run = self.active.get(session_key)
        if run is None:
            return await self.slots.abort_elsewhere(session_key, run_id)
        if run_id is not None and run.run_id != run_id:
            return False
        return await self._abort_run(run)

    def confirm(self, run_id: str, call_id: str, allow: bool, by: Principal | None = None) -> Principal | None:
        """A client's answer to a run's `chat.confirm` → the run's principal; NotFound when no such call
        waits for one. Only the principal that started the run, or one that may `write` its agent (the
        dispatcher checked that `by` reaches it), answers: Beyond for anyone else (a bystander that only
        reads and chats), and its answer is not taken."""
        run = next((r for r in self.active.values() if r.run_id == run_id), None)
        if (
            by is not None
            and run is not None
            and self.guard is not None
            and (run_id, call_id) in self.guard.waiting
            and not (run.principal is not None and same(run.principal, by))
            and not by.may("write")
        ):
            raise Beyond(
                f"principal {by.name!r} cannot answer this run's confirmation: only the principal that started "
                f"the run ({run.principal.name if run.principal else 'owner'!r}) or one with the 'write' scope "
                "on its agent may",
                {"runId": run_id, "callId": call_id, "scope": "write"},
            )
        if self.guard is None or not self.guard.answer(run_id, call_id, allow, by.name if by else None):
            raise NotFound(
                f"no tool call {call_id[:100]!r} of run {run_id} waits for an answer (answered already, "
                "timed out, or the run ended)",
                {"runId": run_id, "callId": call_id},
            )
        return run.principal if run is not None else None

    async def answer(self, run_id: str, call_id: str, allow: bool, principal: Any, door: str) -> str | None:
        """`chat.confirm`: the answer to a call waiting here, else to one of a run of another gateway on the
        same storage (`answer_elsewhere`), given there as `principal` under the same rules → the name of
        the principal that started the run (None: not known); NotFound when none waits."""
        try:
            started = self.confirm(run_id, call_id, allow, by=principal)
        except NotFound:
            there = (
                None
                if self.answer_elsewhere is None
                else await self.answer_elsewhere(run_id, call_id, allow, principal, door)
            )
            if there is None:
                raise
            return there or None
        return started.name if started is not None else None

    def revoked(self, digests: set[str]) -> None:
        """The principals of these token digests ended (access.py's `on_revoked`: revoked or expired, on
        any gateway): their runs here are aborted now (partial kept, `reason: "revoked"`), so that a run
        never acts for a principal that no longer is; a tool call already writing finishes (tools.py)."""
        for run in list(self.active.values()):
            if run.principal is not None and run.principal.token_hash in digests and self._cancel(run, "revoked"):
                log.info("chat run aborted: principal revoked", session=run.session_key, run=run.run_id)

    async def shutdown(self, grace: float) -> None:
        """Refuse new runs; let the running ones finish for up to `grace` seconds, then abort those still
        running (partials kept) and wait up to SAVE_TIMEOUT_S for them to be saved."""
        self.slots.closing = True
        tasks = [r.task for r in self.active.values() if r.task is not None]
        tasks += list(self.tools.pending) if self.tools is not None else []
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        stopped = []
        for run in list(self.active.values()):
            if self._cancel(run, "shutdown"):
                stopped.append(run.task)
        pending = [t for t in tasks + stopped if t is not None and not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=SAVE_TIMEOUT_S)
        if self._background:  # what the runs left behind (releasing a shared run) finishes too
            await asyncio.wait(list(self._background), timeout=SAVE_TIMEOUT_S)

    @property
    def idle(self) -> bool:
        """No run, no background work (compaction) and no send in progress."""
        return (
            not self.active
            and not self._background
            and not len(self.slots.locks)
            and (self.tools is None or not self.tools.pending)
        )

    # ---- internals -----------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(log_failure("chat_background_task_failed"))

    def _cancel(self, run: Run, reason: str | None = None) -> bool:
        if run.aborted or run.finalizing or run.task is None or run.task.done():
            return False
        run.aborted = True
        run.abort_reason = reason
        run.task.cancel()
        return True

    async def _abort_run(self, run: Run) -> bool:
        if not self._cancel(run):
            return False
        # The task persists the partial reply and emits chat.aborted before this returns.
        assert run.task is not None
        await asyncio.wait([run.task])
        return True

    async def _compact_quietly(self, key: str) -> None:
        assert self.compactor is not None
        try:
            await self.compactor.maybe_compact(key)
        except Exception:  # the next turn tries again; the transcript is untouched
            log.exception("compaction failed", session=key)

    async def _end(self, run: Run, event: End) -> None:
        """The run's last event. A run other gateways can see is released first, so that a client
        answering chat.final at once through another gateway finds the session free."""
        await self.slots.release(run, self._spawn)
        self._emit(run, event)

    def _emit(self, run: Run, event: Told) -> None:
        """One event of the run: to the session's subscribers on every gateway (its notification, numbered
        by `seq`), and to the run's handle when its starter reads one (a relayed request)."""
        self.bus.publish(self.topic(run.session_key), Notice(run.session_key, run.run_id, run.next_seq(), event))
        if run.handle is not None:
            run.handle.tell(event)

    async def _run(self, run: Run, user_text: str, relay: RelayedTurn | None = None) -> None:
        key = run.session_key
        started = time.monotonic()
        try:
            if relay is None:
                settings = await self.sessions.get(key)  # the session's own model and system prompt, if set
                offered = self.tools.offer(self.provider, settings.get("model")) if self.tools is not None else None
                messages, recalled = await self.prompts.build(
                    key, user_text, settings, run.replaces, with_tools=offered is not None
                )
                usage, truncated = await self.loop.converse(
                    run, messages, recalled, offered, settings.get("model") or None
                )
            else:
                recalled = await self.prompts.recall(key, relay.query) if relay.memory else []
                room, usage, _ = await self.loop.pump(
                    run, relay.stream(self.provider, recalled), self.config.chat.max_reply_chars
                )
                truncated = room <= 0
                if relay.remember and relay.reply is not None:  # the upstream said it all
                    self.threads.remember(relay.request["messages"], relay.reply, key)
            await self.finish.final(run, recalled, usage, truncated)
            log.info("chat run done", session=key, run=run.run_id, ms=int((time.monotonic() - started) * 1000))
            if self.compactor is not None and relay is None:  # a relayed prompt is the client's, not ours
                self._spawn(self._compact_quietly(key))
        except asyncio.CancelledError:
            await self.finish.aborted(run)
        except JarvisError as exc:
            await self.finish.failed(run, exc)
        except Exception as exc:  # a bug or the disk: tell the client, keep the loop alive
            await self.finish.crashed(run, exc)
