"""The chat model's memory tools: what is offered, how calls run, how tool history replays.

A run with tools goes round at most `chat.maxToolSteps` times (runner.py drives it):

    stream(messages, tools) → text deltas … then ToolCalls
    → transcript: {"role":"assistant","content":…,"tool_calls":[…]} and one {"role":"tool",…} per call
    → `chat.tool` events (status "running", then "ok" or "error" with a summary) → stream again

Past the last step the model is asked once more with tool_choice "none" (it must answer now) and the
reply says the limit was reached. Every failure of a call (unknown tool, arguments that are not JSON,
too large, the method's error, a denial of confirm.py) becomes the tool's result, so the model reads
why and the run goes on. One answer's calls are bounded before anything is stored (`bound_calls`).
Writes run to the end even when the run is aborted (shielded), so an abort never leaves a memory half
written.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson

from ..tools.catalog import (
    CATALOG,
    MAX_ARGUMENT_BYTES,
    Caller,
    ToolError,
    ToolOutcome,
    openai_tools,
    parse_arguments,
    run_tool,
)
from .providers import ChatProvider
from .stream import ToolCall

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Config

MAX_CALLS_PER_STEP = 16


class ChatTools:
    def __init__(self, config: "Config", caller: Caller):
        self.config = config
        self.caller = caller
        self.pending: set[asyncio.Task[Any]] = set()  # writes that outlive an abort

    def offer(self, provider: ChatProvider, model: str | None = None) -> list[dict[str, Any]] | None:
        """The tools for this provider and model (None: its configured one) in OpenAI's shape; None when
        it has no function calling, or the model refused tools before, or chat.tools is false."""
        chosen = self.config.chat.tools
        if chosen is False or not provider.tools_supported or (model or provider.model) in provider.tools_refused:
            return None
        return openai_tools(None if chosen is True else list(chosen)) or None

    def limit_note(self) -> str:
        steps = self.config.chat.max_tool_steps
        return (
            f"\n\n[Stopped using memory tools: the limit of {steps} tool step{'s' if steps != 1 else ''} "
            "for one reply was reached (chat.maxToolSteps).]"
        )

    async def call(self, call: ToolCall, offered: list[dict[str, Any]]) -> ToolOutcome:
        names = {t["function"]["name"] for t in offered}
        if call.name in CATALOG and call.name not in names:
            return ToolOutcome(
                f"Error: tool {call.name!r} is not enabled here (chat.tools); the tools are: "
                f"{', '.join(sorted(names))}",
                "not enabled",
                error=True,
            )
        task = asyncio.ensure_future(
            run_tool(call.name, call.arguments, self.caller, redact=self.config.memory.redact_secrets)
        )
        if call.name in CATALOG and not CATALOG[call.name].read_only:
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
            return await asyncio.shield(task)  # an abort does not cut a write in half
        return await task


def bound_calls(calls: list[ToolCall], max_bytes: int, max_id_chars: int) -> list[ToolOutcome | None]:
    """One answer's calls within bounds, whatever the model sent: an id longer than `max_id_chars` is
    dropped (tool_calls_message gives the call one of ours); a call whose arguments are over a tool's
    limit (MAX_ARGUMENT_BYTES), were cut by the provider, or go past `max_bytes` for the answer in all
    (chat.maxToolArgumentBytes) is refused: its arguments are replaced by a note with their head, so
    that the transcript and the next round's request hold a bounded copy. → per call, its refusal or None."""
    out: list[ToolOutcome | None] = []
    total = 0
    over = False  # past the answer's bytes: every later call is refused too
    for call in calls:
        if len(call.id) > max_id_chars:
            call.id = ""
        size = max(call.size, len(call.arguments.encode("utf-8", "replace")))
        if call.size > MAX_ARGUMENT_BYTES:  # too long for any tool: not counted in the answer's bytes
            why = f"arguments are {call.size} characters; the limit is {MAX_ARGUMENT_BYTES}"
        elif over or (total := total + size) > max_bytes or call.size > len(call.arguments):  # (cut: past it)
            over = True
            why = (
                f"this answer's tool-call arguments come to more than {max_bytes} bytes in all "
                "(chat.maxToolArgumentBytes); this call and the ones after it were not run"
            )
        else:
            out.append(None)
            continue
        note = {"refused": f"{why}; {size} bytes not kept", "head": call.arguments[:200]}
        call.arguments = orjson.dumps(note).decode()
        out.append(ToolOutcome(f"Error: {why}", "refused", error=True))
    return out


SHOWN_ARGUMENT_CHARS = 2000


def shown_arguments(raw: str) -> Any:
    """The arguments as a `chat.tool` event shows them: the object, or the text (cut) when it is not
    JSON or too long to show."""
    if len(raw) <= SHOWN_ARGUMENT_CHARS:
        try:
            return parse_arguments(raw)
        except ToolError:
            pass
    return raw[:200] + ("…" if len(raw) > 200 else "")


def tool_calls_message(calls: list[ToolCall], run_id: str) -> list[dict[str, Any]]:
    """OpenAI's `tool_calls` of an assistant message; calls without an id get one."""
    out = []
    for i, c in enumerate(calls):
        call_id = c.id or f"call_{run_id[:8]}_{i}"
        c.id = call_id
        out.append({"id": call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
    return out


def replay(history: list[dict[str, Any]], with_tools: bool) -> list[dict[str, Any]]:
    """Transcript messages (read_messages' shape) → OpenAI messages. With tools, tool calls and results
    replay exactly, except calls whose results are not there (a run aborted mid-tool, a window that cut
    them off): a provider refuses those. Without tools, only the text of messages is sent."""
    if not with_tools:
        return [
            {"role": m["role"], "content": m["content"]}
            for m in history
            if m["role"] in ("user", "assistant", "system") and m["content"]
        ]
    answered = {m.get("toolCallId") for m in history if m["role"] == "tool"}
    out: list[dict[str, Any]] = []
    open_ids: set[str] = set()
    for m in history:
        role = m["role"]
        if role == "tool":
            if m.get("toolCallId") in open_ids:
                out.append({"role": "tool", "tool_call_id": m["toolCallId"], "content": m["content"]})
            continue
        if role not in ("user", "assistant", "system"):
            continue
        calls = [c for c in m.get("toolCalls") or [] if isinstance(c, dict) and c.get("id") in answered]
        if role == "assistant" and calls:
            open_ids = {c["id"] for c in calls}
            out.append({"role": "assistant", "content": m["content"] or None, "tool_calls": calls})
        elif m["content"]:
            open_ids = set()
            out.append({"role": role, "content": m["content"]})
    return out


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages without tool calls and results, for a provider that refuses tools."""
    return [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "tool" and m.get("content")]
