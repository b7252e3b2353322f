"""The provider/tool loop of a chat run: the provider's answer streamed into the run, the tool calls
the model makes run between rounds, at most `chat.maxToolSteps` rounds (chat/tools.py says how a call
runs and replays).

    loop = TurnLoop(config, provider, tools, sessions, emit)
    usage, truncated = await loop.converse(run, messages, recalled, offered, model)
    room, usage, calls = await loop.pump(run, source, room)      # one answer (a relayed one too)

Deltas go out as `chat.delta` (at most `chat.maxReplyChars` in all); one answer's calls are bounded
first (tools.bound_calls), each is told as `chat.tool` before and after it runs, a destructive one
passes the guard between (confirm.py: `chat.confirm`, or a denial), and it and its result are in the
transcript before the next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any, AsyncGenerator, Callable

import structlog

from ..config import Config
from ..errors import Unavailable
from ..principals import CONFIRMED_BY
from ..sessions import transcript as tx
from ..storage.base import SessionStore
from ..tools.catalog import ToolOutcome
from .finish import reply_marks
from .providers import ChatProvider, ToolsRejected
from .runs import Run
from .stream import Delta, ToolCalls, Usage
from .confirm import Guard
from .events import Said, ToolCalled, Told
from .tools import MAX_CALLS_PER_STEP, ChatTools, bound_calls, plain, shown_arguments, tool_calls_message
from .upstream import checked

log = structlog.get_logger("gateway.chat")

Emit = Callable[[Run, Told], None]  # emit(run, event): one event of the run (chat/events.py)


class TurnLoop:
    def __init__(
        self,
        config: Config,
        provider: ChatProvider,
        tools: ChatTools | None,
        sessions: SessionStore,
        emit: Emit,
        guard: Guard | None = None,
    ):
        self.config = config
        self.provider = provider
        self.tools = tools
        self.guard = guard  # destructive calls asked, allowed or denied (confirm.py)
        self.sessions = sessions
        self.emit = emit

    async def pump(
        self, run: Run, source: AsyncGenerator[Any, None], room: int
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
                        self.emit(run, Said(text))
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

    async def converse(
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
                room, used, calls = await self.pump(
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
                self.emit(run, Said(note))
        return usage, False

    async def _tool_step(
        self, run: Run, messages: list[dict[str, Any]], calls: ToolCalls, offered: list[dict[str, Any]]
    ) -> None:
        """Record the model's calls, run each (a `chat.tool` event before and after), record the
        results, and add both to `messages` for the next round."""
        assert self.tools is not None
        text, run.parts = "".join(run.parts), []  # this step's text belongs to its tool-calls message
        chat = self.config.chat
        refused = bound_calls(calls.calls, chat.max_tool_argument_bytes, chat.max_tool_call_id_chars)
        wire = tool_calls_message(calls.calls, run.run_id)
        # A regeneration's steps name the reply they are for: they show (and replay) only with its new version.
        of = {"regenerates": run.replaces} if run.replaces is not None else {}
        rec = tx.message_record(str(uuid.uuid4()), "assistant", text, run.run_id, **of, **reply_marks(self.provider))
        rec["message"]["tool_calls"] = wire
        await self.sessions.append_messages(run.session_key, rec)
        messages.append({"role": "assistant", "content": text or None, "tool_calls": wire})
        for i, call in enumerate(calls.calls):
            shown = shown_arguments(call.arguments)
            self.emit(run, ToolCalled(call.id, call.name, shown, "running"))
            outcome = refused[i]
            if outcome is None and i >= MAX_CALLS_PER_STEP:
                outcome = ToolOutcome(
                    f"Error: at most {MAX_CALLS_PER_STEP} tool calls in one step", "skipped", error=True
                )
            if outcome is None and self.guard is not None and call.name in {t["function"]["name"] for t in offered}:
                outcome = await self.guard.check(run, call)
            if outcome is None:
                said = CONFIRMED_BY.set(run.confirmed_by)  # the audit of this call names who allowed it
                try:
                    outcome = await self.tools.call(call, offered)
                finally:
                    CONFIRMED_BY.reset(said)
                    run.confirmed_by = None
            run.found += outcome.memory
            self.emit(run, ToolCalled(call.id, call.name, shown, "error" if outcome.error else "ok", outcome.summary))
            marks: dict[str, Any] = {tx.REMEMBER_FIELD: False}
            if outcome.error:
                marks["error"] = True
            if outcome.denied:
                marks["denied"] = outcome.denied  # why it did not run (chat/confirm.py)
            result = tx.message_record(
                str(uuid.uuid4()),
                "tool",
                outcome.text,
                run.run_id,
                tool=call.name,
                summary=outcome.summary,
                **of,
                **marks,
            )
            result["message"]["tool_call_id"] = call.id
            await self.sessions.append_messages(run.session_key, result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.text})
