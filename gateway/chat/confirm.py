"""The model asks before it destroys: a destructive memory tool call runs only when `chat.toolPolicy`
allows it or a person says yes.

    guard = Guard(config, caller, ask, answerers)      # one per chat service; answerers(run): who can answer
    denied = await guard.check(run, call)              # None: run it; else the denial, as the tool's result
    guard.answer(run_id, call_id, allow)               # a chat.confirm request → whether a call was waiting

A call destroys when it is `memory_delete` of a key that exists, or `memory_set` of a key that exists
with another value (creating a key, or deleting one that is not there, destroys nothing: the method
answers as it would), or any other tool the catalog marks destructive (tools/specs.py), whatever its
arguments. For each such call, in order:

    past chat.maxDestructivePerRun of them in this run   → denied ("limit")
    chat.toolPolicy.<tool> = "deny"                      → denied ("policy")
    "allow"                                              → runs
    "ask" (the default), no subscriber that can answer   → denied ("unanswered"): a /v1 relay, a run
                                                           nobody watches (here, nor on another gateway
                                                           of the same database: `elsewhere`)
    "ask": `chat.confirm {callId, name, arguments, summary, timeoutSeconds}`, then the first answer:
        allow → runs; deny → denied ("user"); none in chat.confirmSeconds → denied ("timeout")

A denial is the tool's result (`Error: …`, so the model reads that it was denied and why) and is in the
transcript with `denied: <reason>`. An abort while a call waits cancels the wait: the run ends as
aborted and the call never ran.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import structlog

from ..config import Config
from ..errors import JarvisError
from ..memory.secrets import mask
from ..neterrors import short
from ..tools.catalog import CATALOG, Caller, ToolError, ToolOutcome, parse_arguments
from .events import ConfirmAsked
from .runs import Run
from .stream import ToolCall
from .tools import shown_arguments

log = structlog.get_logger("gateway.chat")

Ask = Callable[[Run, ConfirmAsked], None]  # tell the run's chat.confirm


def policy_of(config: Config, tool: str) -> str:
    """The policy of a tool's destructive calls: chat.toolPolicy's, else "ask"."""
    return config.chat.tool_policy.get(tool, "ask")


class Guard:
    def __init__(
        self,
        config: Config,
        caller: Caller,
        ask: Ask,
        answerers: Callable[[Run], int],
        elsewhere: Callable[[Run], Awaitable[bool]] | None = None,
    ):
        self.config = config
        self.caller = caller
        self.ask = ask
        self.answerers = answerers
        self.elsewhere = elsewhere  # whether a client of another gateway can answer (cluster.py)
        self.waiting: dict[tuple[str, str], asyncio.Future[bool]] = {}  # (runId, callId) → its answer
        self.answered_by: dict[tuple[str, str], str | None] = {}  # (runId, callId) → who answered

    def answer(self, run_id: str, call_id: str, allow: bool, by: str | None = None) -> bool:
        """A client's answer (`by`: the principal that gave it); False when no such call waits (answered,
        timed out, its run ended)."""
        fut = self.waiting.get((run_id, call_id))
        if fut is None or fut.done():
            return False
        fut.set_result(allow)
        self.answered_by[(run_id, call_id)] = by
        return True

    async def check(self, run: Run, call: ToolCall) -> ToolOutcome | None:
        """None when the call may run; else its denial."""
        summary = await self._destroys(call)
        if summary is None:
            return None
        chat = self.config.chat
        if run.destructive >= chat.max_destructive_per_run:
            return _denied(
                "limit",
                f"at most {chat.max_destructive_per_run} destructive memory call"
                f"{'' if chat.max_destructive_per_run == 1 else 's'} in one run (chat.maxDestructivePerRun)",
            )
        policy = policy_of(self.config, call.name)
        if policy == "deny":
            return _denied("policy", f"{call.name} is not allowed to change memory here (chat.toolPolicy: deny)")
        run.destructive += 1
        if policy == "allow":
            return None
        if not self.answerers(run) and not (self.elsewhere is not None and await self.elsewhere(run)):
            return _denied(
                "unanswered",
                "it needs the user's confirmation and no one can answer here (no client is watching this conversation)",
            )
        key = (run.run_id, call.id)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting[key] = fut
        try:
            self.ask(
                run, ConfirmAsked(call.id, call.name, shown_arguments(call.arguments), summary, chat.confirm_seconds)
            )
            allowed = await asyncio.wait_for(fut, chat.confirm_seconds)
        except TimeoutError:
            return _denied("timeout", f"the user did not confirm it within {chat.confirm_seconds:g} s")
        finally:
            del self.waiting[key]
            by = self.answered_by.pop(key, None)
        log.info("destructive tool call answered", run=run.run_id, tool=call.name, allowed=allowed)
        run.confirmed_by = by if allowed else None
        return None if allowed else _denied("user", "the user said no")

    async def _destroys(self, call: ToolCall) -> str | None:
        """What the call would destroy, in a line for people to judge; None when it destroys nothing."""
        tool = CATALOG.get(call.name)
        if tool is None or not tool.destructive:
            return None
        try:
            args = parse_arguments(call.arguments)
        except ToolError:
            return None  # it cannot run: the tool says why
        key = args.get("key")
        if call.name not in ("memory_set", "memory_delete"):  # a destructive tool this does not know: ask
            line = f"call {call.name} with {short(call.arguments, 300)}"
            return mask(line) if self.config.memory.redact_secrets else line
        if not isinstance(key, str):
            return None
        try:
            current = await self.caller("memory.get", {"key": key})
        except JarvisError:  # no such key (or not a key): nothing to lose, the method answers
            return None
        old = f'{key} ({current.get("category")}): "{short(current.get("value", ""), 160)}"'
        if call.name == "memory_set":
            new = args.get("value")
            if new == current.get("value") and args.get("category") in (None, current.get("category")):
                return None  # the same again: nothing changes
            line = f'replace {old} with "{short(new, 160)}"'
        else:
            line = f"delete {old}"
        return mask(line) if self.config.memory.redact_secrets else line


def _denied(reason: str, why: str) -> ToolOutcome:
    return ToolOutcome(
        f"Error: denied: {why}. Nothing was changed; do not try it again unless the user asks.",
        "denied" if reason == "user" else f"denied ({_WORDS[reason]})",
        error=True,
        denied=reason,
    )


_WORDS = {"limit": "limit", "policy": "policy", "unanswered": "no one to ask", "timeout": "no answer"}
