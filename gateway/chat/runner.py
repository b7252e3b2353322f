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

Shutdown: new sends are refused (retryable) at once, running replies get `server.shutdownGrace` to
finish, and the ones still running then are aborted: their partial (even an empty one) is kept, marked
`"abortReason": "shutdown"`, and `chat.aborted` says `reason: "shutdown"`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

import structlog

from ..config import Config
from ..errors import InternalError, RunActive, Invalid, JarvisError, NotFound, Unavailable, out_of_descriptors
from ..events import EventBus
from ..sessions import transcript as tx
from ..tasks import KeyedLocks, log_failure
from .compaction import Compactor, read_state
from ..storage.base import RunLedger, SessionStore
from .providers import ChatProvider, ToolsRejected
from ..memory.present import prompt_section, reference
from .recall import recall_for_turn
from .relay import RelayedTurn
from .stream import Delta, ToolCalls, Usage
from ..tools.catalog import ToolOutcome
from .tools import MAX_CALLS_PER_STEP, ChatTools, plain, replay, shown_arguments, tool_calls_message
from .upstream import checked

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryService

log = structlog.get_logger("gateway.chat")

SAVE_TIMEOUT_S = 5.0  # at shutdown, for aborted runs to save their partial replies


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

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


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
        error_code: Callable[[JarvisError], int],
        request_abort: Callable[[str, str], Awaitable[None]] | None = None,
    ):
        self.config = config
        # The JSON-RPC code a chat.error event carries for an error (PROTOCOL.md §4): the wire layer's
        # table (protocol.code_of), handed in so that the chat layer does not depend on the wire.
        self.error_code = error_code
        self.tools = tools
        self.topic = topic
        self.compactor = compactor
        self._background: set[asyncio.Task[Any]] = set()
        self.sessions = sessions
        self.bus = bus
        self.provider = provider
        self.memory = memory
        self.active: dict[str, Run] = {}  # sessionKey → run
        # Idempotency keys, and active runs across gateways when several share a database (storage/base.py).
        self.ledger = ledger
        self._send_locks = KeyedLocks()
        self.closing = False
        # Several gateways on one database: asks the gateway running (session, runId) to abort it
        # (cluster.Cluster.abort_requester).
        self.request_abort = request_abort
        # Runs of this gateway that ended while the database was unreachable: sessionKey → runId. Their
        # claims are released as soon as the database answers again (_release_later).
        self.unreleased: dict[str, str] = {}

    # ---- public API ----------------------------------------------------------------------------
    async def send(self, session_key: str, message: str, idempotency_key: str | None) -> dict[str, Any]:
        """Start a run answering `message`."""
        return await self._start(session_key, idempotency_key, message=message)

    async def relay(self, session_key: str, turn: RelayedTurn) -> dict[str, Any]:
        """Start a run relaying a request of the OpenAI-compatible door (chat/relay.py)."""
        return await self._start(session_key, None, message=turn.user_text, relay=turn)

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
        self._refuse_if_closing()
        async with self.session_lock(session_key):  # check-then-start is atomic per session
            self._refuse_if_closing()  # shutdown began while this send waited for the session
            if idempotency_key is not None:
                hit = await self.ledger.seen(session_key, idempotency_key)
                if hit is not None:
                    return {"runId": hit, "status": "duplicate"}
            if session_key in self.active:
                raise self._busy(session_key, self.active[session_key].run_id)
            run = Run(run_id=str(uuid.uuid4()), session_key=session_key)
            if relay is not None:
                run.capture = relay.capture
            if run.capture and not await self.sessions.exists(session_key):
                raise NotFound(f"session not found: {session_key}", {"sessionKey": session_key})
            if regenerate is not None:
                message, run.replaces = await self._question_of_last_reply(session_key, regenerate)
            other = await self.ledger.claim(session_key, run.run_id)  # another gateway's run, if any
            if other is not None and await self._release_dead(session_key, other):
                other = await self.ledger.claim(session_key, run.run_id)
            if other is not None:
                raise self._busy(session_key, other)
            try:
                # Durable before the answer: if this raises (disk full), nothing was started or promised.
                if run.capture and message is not None and regenerate is None:
                    record = tx.message_record(str(uuid.uuid4()), "user", message, run.run_id)
                    if relay is None:
                        await self.sessions.append_messages(session_key, record)
                    else:
                        run.pending.append(record)
                if idempotency_key is not None:
                    await self.ledger.remember(session_key, idempotency_key, run.run_id)
            except BaseException:
                await asyncio.shield(self.ledger.release(session_key, run.run_id))
                raise
            self.active[session_key] = run
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
        return self._send_locks.hold(session_key)

    @staticmethod
    def _busy(session_key: str, run_id: str) -> RunActive:
        return RunActive(session_key, run_id)

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

    async def shutdown(self, grace: float) -> None:
        """Refuse new runs; let the running ones finish for up to `grace` seconds, then abort those still
        running (partials kept) and wait up to SAVE_TIMEOUT_S for them to be saved."""
        self.closing = True
        tasks = [r.task for r in self.active.values() if r.task is not None]
        tasks += list(self.tools.pending) if self.tools is not None else []
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        stopped = []
        for run in list(self.active.values()):
            if self._cancel(run, "shutdown"):
                stopped.append(run.task)
        pending = [t for t in tasks + stopped if not t.done()]
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
            and not len(self._send_locks)
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
        event = {"sessionKey": run.session_key, "runId": run.run_id, "seq": run.next_seq(), **params}
        self.bus.publish(self.topic(run.session_key), method, event)

    async def recall_for_turn(self, session_key: str, user_text: str) -> list[dict[str, Any]]:
        """What memory recalls for a turn (memory.recall's budget); best effort, never raises."""
        if self.memory is None or not self.config.memory.recall.enabled:
            return []
        try:
            recalled = await recall_for_turn(self.memory, user_text, session_key)
            labels: dict[str, str] = {}
            for key in dict.fromkeys(r["sessionKey"] for r in recalled if r.get("sessionKey")):
                with contextlib.suppress(Exception):  # deleted meanwhile: the citation keeps its path
                    labels[key] = (await self.sessions.get(key)).get("label") or ""
            for r in recalled:
                if labels.get(r.get("sessionKey") or ""):
                    r["session"] = labels[r["sessionKey"]]
            return recalled
        except Exception as exc:  # recall is best effort; the turn goes on without it
            log.warning("recall failed", error=type(exc).__name__, session=session_key)
            return []

    async def _prompt(
        self,
        session_key: str,
        user_text: str,
        settings: dict[str, Any],
        replaces: str | None = None,
        with_tools: bool = False,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        recalled = await self.recall_for_turn(session_key, user_text)
        if self.compactor is not None:
            await self.compactor.settled(session_key)
        state = await asyncio.to_thread(read_state, await self.sessions.local_transcript(session_key))
        pending = state.pending
        if replaces is not None:  # regenerating: the conversation up to the reply being replaced
            cut = next((i for i, m in enumerate(pending) if m["id"] == replaces or m.get("replaces") == replaces), None)
            while cut and (pending[cut - 1]["role"] == "tool" or pending[cut - 1].get("toolCalls")):
                cut -= 1  # the replaced version's tool calls and results: the new one asks afresh
            pending = pending[:cut]
        history = [
            m
            for m in pending
            if m["role"] in ("user", "assistant", "system", "tool") and (m["content"] or m.get("toolCalls"))
        ]
        history = history[-self.config.chat.history_messages :]
        system = settings.get("systemPrompt") or self.config.chat.system_prompt
        if state.summary:
            system += "\n\n## Earlier in this conversation (summary)\n" + state.summary
        system += prompt_section(recalled)
        messages = [{"role": "system", "content": system}]
        messages += replay(history, with_tools)
        return messages, recalled

    async def _pump(
        self, run: Run, source: AsyncIterator[Any], room: int
    ) -> tuple[int, Usage | None, ToolCalls | None]:
        """Stream one answer of the provider (or a relay) into the run: deltas as `chat.delta`, at most
        `room` characters (a runaway upstream must not make frames no one can read).
        → (room left, its usage, the tool calls it ended with)."""
        usage: Usage | None = None
        calls: ToolCalls | None = None
        async with contextlib.aclosing(checked(source)) as stream:  # shapes checked, text repaired
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
                        log.warning(
                            "chat reply cut at chat.maxReplyChars",
                            session=run.session_key,
                            run=run.run_id,
                            chars=self.config.chat.max_reply_chars,
                        )
                        break
                elif isinstance(item, ToolCalls):
                    calls = item
                else:
                    usage = item
        return room, usage, calls

    async def _converse(
        self,
        run: Run,
        messages: list[dict[str, Any]],
        recalled: list[dict[str, Any]],
        offered: list[dict[str, Any]] | None,
        model: str | None = None,
    ) -> tuple[Usage | None, bool]:
        """Stream the reply; with tools, run the calls the model makes and stream again, at most
        chat.maxToolSteps times. → (usage of all requests, whether the reply was cut)."""
        room = self.config.chat.max_reply_chars
        usage: Usage | None = None
        steps = 0
        limited = False
        without_tools = False  # the provider refused tools: this run retries once without them
        while True:
            try:
                choice = "none" if limited else None  # past the step limit the model must answer
                room, used, calls = await self._pump(
                    run,
                    self.provider.stream(messages, recalled=recalled, tools=offered, tool_choice=choice, model=model),
                    room,
                )
                if used is not None:
                    usage = (
                        used
                        if usage is None
                        else Usage(
                            usage.prompt_tokens + used.prompt_tokens, usage.completion_tokens + used.completion_tokens
                        )
                    )
                if room <= 0:
                    return usage, True
            except ToolsRejected as exc:
                if without_tools or run.parts:
                    raise Unavailable(f"chat provider refused the request: {exc}", retryable=False) from None
                log.warning(
                    "chat provider refused tools; retrying without them", provider=self.provider.name, error=str(exc)
                )
                without_tools, offered, messages = True, None, plain(messages)
                continue
            if without_tools:  # it answered without tools: remember, and never offer them to this model again
                self.provider.tools_refused = self.provider.tools_refused | {model or self.provider.model}
            if calls is None or offered is None or limited or not calls.calls:
                break
            steps += 1
            await self._tool_step(run, messages, calls, offered)
            # One more round past the limit, the tools still described (the history holds their calls)
            # but tool_choice "none": the model must answer.
            limited = steps >= self.config.chat.max_tool_steps
        if limited:
            note = self.tools.limit_note() if self.tools is not None else ""
            note = note[:room]
            if note:
                run.parts.append(note)
                self._emit(run, "chat.delta", delta=note)
        return usage, False

    async def _tool_step(
        self, run: Run, messages: list[dict[str, Any]], calls: ToolCalls, offered: list[dict[str, Any]]
    ) -> None:
        """Record the model's calls, run each (a `chat.tool` event before and after), record the
        results, and add both to `messages` for the next round."""
        assert self.tools is not None
        text, run.parts = "".join(run.parts), []  # this step's text belongs to its tool-calls message
        wire = tool_calls_message(calls.calls, run.run_id)
        # A regeneration's steps name the reply they are for: they show (and replay) only with its new version.
        of = {"regenerates": run.replaces} if run.replaces is not None else {}
        rec = tx.message_record(str(uuid.uuid4()), "assistant", text, run.run_id, **of, **self._reply_marks())
        rec["message"]["tool_calls"] = wire
        await self.sessions.append_messages(run.session_key, rec)
        messages.append({"role": "assistant", "content": text or None, "tool_calls": wire})
        for i, call in enumerate(calls.calls):
            shown = shown_arguments(call.arguments)
            self._emit(
                run, "chat.tool", callId=call.id, name=call.name, arguments=shown, status="running", summary=None
            )
            if i < MAX_CALLS_PER_STEP:
                outcome = await self.tools.call(call, offered)
            else:
                outcome = ToolOutcome(
                    f"Error: at most {MAX_CALLS_PER_STEP} tool calls in one step", "skipped", error=True
                )
            run.found += outcome.memory
            self._emit(
                run,
                "chat.tool",
                callId=call.id,
                name=call.name,
                arguments=shown,
                status="error" if outcome.error else "ok",
                summary=outcome.summary,
            )
            result = tx.message_record(
                str(uuid.uuid4()),
                "tool",
                outcome.text,
                run.run_id,
                tool=call.name,
                summary=outcome.summary,
                **({"error": True} if outcome.error else {}),
                **of,
                **{tx.REMEMBER_FIELD: False},
            )
            result["message"]["tool_call_id"] = call.id
            await self.sessions.append_messages(run.session_key, result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.text})

    async def _run(self, run: Run, user_text: str, relay: RelayedTurn | None = None) -> None:
        key = run.session_key
        started = time.monotonic()
        usage: Usage | None = None
        recalled: list[dict[str, Any]] = []
        try:
            if relay is None:
                settings = await self.sessions.get(key)  # the session's own model and system prompt, if set
                offered = self.tools.offer(self.provider, settings.get("model")) if self.tools is not None else None
                messages, recalled = await self._prompt(
                    key, user_text, settings, run.replaces, with_tools=offered is not None
                )
                usage, truncated = await self._converse(run, messages, recalled, offered, settings.get("model") or None)
            else:
                recalled = await self.recall_for_turn(key, relay.query) if relay.memory else []
                room, usage, _ = await self._pump(
                    run, relay.stream(self.provider, recalled), self.config.chat.max_reply_chars
                )
                truncated = room <= 0
            content = "".join(run.parts)
            memory = _distinct([reference(r) for r in recalled] + run.found)
            # What was recalled is kept with the reply, so history can show it later.
            extra: dict[str, Any] = {"memory": memory} if memory else {}
            if truncated:
                extra["truncated"] = True
            if run.replaces is not None:
                extra["replaces"] = run.replaces
            rec = tx.message_record(str(uuid.uuid4()), "assistant", content, run.run_id, **extra, **self._reply_marks())
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
                await self.sessions.append_messages(key, *run.pending, rec)
            await self._end(run, "chat.final", **final)
            log.info("chat run done", session=key, run=run.run_id, ms=int((time.monotonic() - started) * 1000))
            if self.memory is not None and run.capture:
                self.memory.schedule_session_sync(key)
            if self.compactor is not None and relay is None:  # a relayed prompt is the client's, not ours
                self._spawn(self._compact_quietly(key))
        except asyncio.CancelledError:
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
                    **self._reply_marks(),
                )
                try:
                    await self.sessions.append_messages(key, *run.pending, rec)
                except Exception as exc:
                    log.error("could not keep partial reply", session=key, run=run.run_id, error=str(exc))
            await self._end(
                run, "chat.aborted", partial=partial, **({"reason": run.abort_reason} if run.abort_reason else {})
            )
            log.info("chat run aborted", session=key, run=run.run_id)
            if self.memory is not None and run.capture:  # the user message is in the transcript, partial reply or not
                self.memory.schedule_session_sync(key)
        except JarvisError as exc:
            retryable = bool((exc.data or {}).get("retryable", False))
            code = self.error_code(exc)  # the event carries the JSON-RPC code of the error (PROTOCOL.md §4)
            await self._end(run, "chat.error", error={"code": code, "message": exc.message, "retryable": retryable})
            log.warning("chat run failed", session=key, run=run.run_id, code=code, error=exc.message)
        except Exception as exc:  # a bug or the disk: tell the client, keep the loop alive
            busy = out_of_descriptors("the transcript", exc)
            if busy is not None:  # every descriptor is in use: retryable once some close
                log.warning("chat run failed: out of file descriptors", session=key, run=run.run_id, error=str(exc))
                await self._end(
                    run, "chat.error", error={"code": self.error_code(busy), "message": busy.message, "retryable": True}
                )
                return
            error_id = uuid.uuid4().hex[:12]
            log.exception("chat run crashed", session=key, run=run.run_id, errorId=error_id)
            retryable = isinstance(exc, OSError)
            msg = f"could not save the reply: {exc.strerror}" if isinstance(exc, OSError) else "internal error"
            crash = InternalError(f"{msg} (errorId {error_id})")
            await self._end(
                run,
                "chat.error",
                error={"code": self.error_code(crash), "message": crash.message, "retryable": retryable},
            )


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
