"""The memory tools: six names a model can call, each a registered `memory.*` method.

    catalog = CATALOG                                # name → Tool, in the order a model sees them
    tool = catalog["memory_search"]
    tool_schema(tool, agent=True)                    # JSON Schema, derived from the method's params
    out = await run_tool("memory_search", {"query": "boat"}, caller)   # → ToolOutcome (never raises)

A tool's parameters are its method's, from the registry (no second schema): some are left out
(`hide`), and `agentId` only where a caller may choose the agent (MCP; the chat model uses its own).
`caller(method, params)` runs the method through the one path of a call (dispatcher.py): in process as
the chat model's tool door or the /mcp door, or over the WebSocket (`jarvis mcp`), so validation and
errors are the method's own; this module only turns arguments into params (refusing the ones a tool
does not offer) and the result, or the one error value, into text a model reads: compact, with
citations (memory/present.py), bounded at `RESULT_CHARS`. Every failure — unknown tool, bad arguments,
an error of the method — becomes an outcome with `error=True` saying why (`tool_error`), never an
exception.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import orjson
import structlog

from ..errors import InternalError, Invalid, JarvisError
from ..methods import memory as _memory_methods  # noqa: F401  (registers the memory.* methods the tools run)
from ..memory.present import label_sessions, reference, span, tool_line
from ..memory.secrets import mask
from ..neterrors import short as _short
from ..registry import registry
from ..schema import Obj
from .specs import CATALOG, TOOLS, Tool

log = structlog.get_logger("gateway.tools")

Caller = Callable[[str, dict[str, Any]], Awaitable[Any]]

RESULT_CHARS = 8000  # a tool result's text; a model's context is precious
MAX_ARGUMENT_BYTES = 256 << 10  # a tool call's arguments, as JSON; memory_set's value is ≤ 100k chars


@dataclass
class ToolOutcome:
    text: str  # what the model reads
    summary: str  # a few words for people: "3 results", "stored boat.colour"
    error: bool = False
    memory: list[dict[str, Any]] = field(default_factory=list)  # {path, startLine, endLine, score?} it found
    denied: str | None = None  # not run because it was not allowed (chat/confirm.py): why, in a word


class ToolError(Exception):
    """A tool call that cannot run; its message is what the model reads, `summary` what people see."""

    def __init__(self, message: str, summary: str = "bad arguments"):
        super().__init__(message)
        self.summary = summary


def tool_params(tool: Tool, agent: bool) -> Obj:
    """A tool's parameters: its method's, less `hide`, and less `agentId` unless a caller may choose it."""
    spec = registry.methods[tool.method].params
    drop = set(tool.hide) | (set() if agent else {"agentId"})
    return Obj({k: f for k, f in spec.fields.items() if k not in drop})


def tool_schema(tool: Tool, agent: bool = False) -> dict[str, Any]:
    """A tool's parameters as JSON Schema."""
    return tool_params(tool, agent).json_schema()


def openai_tools(names: list[str] | None = None) -> list[dict[str, Any]]:
    """The tools in OpenAI's function-calling shape (the chat model's view: no agentId)."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": tool_schema(t, agent=False)},
        }
        for t in TOOLS
        if names is None or t.name in names
    ]


# ---- calling ----------------------------------------------------------------------------------------
def parse_arguments(raw: Any) -> dict[str, Any]:
    """A model's `arguments` (a JSON string, possibly empty) → an object; ToolError says what is wrong."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        raise ToolError(f"arguments must be a JSON object, got {type(raw).__name__}")
    if len(raw) > MAX_ARGUMENT_BYTES:
        raise ToolError(f"arguments are {len(raw)} characters; the limit is {MAX_ARGUMENT_BYTES}")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(value, dict):
        raise ToolError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


async def run_tool(
    name: str, arguments: Any, caller: Caller, *, agent: bool = False, redact: bool = True
) -> ToolOutcome:
    """Turn the arguments into params, call the method, render the result. Never raises (but
    CancelledError). `redact` (memory.redactSecrets): secrets in what the model or MCP client reads are
    masked."""
    out = await _run_tool(name, arguments, caller, agent)
    if redact:
        out.text = mask(out.text)
    return out


async def _run_tool(name: str, arguments: Any, caller: Caller, agent: bool) -> ToolOutcome:
    tool = CATALOG.get(name)
    if tool is None:
        return _failed(f"unknown tool {name[:100]!r}; the tools are: {', '.join(CATALOG)}", "unknown tool")
    try:
        args = parse_arguments(arguments)
        size = _json_size(args)
        if size > MAX_ARGUMENT_BYTES:
            raise ToolError(f"arguments are {size} bytes; the limit is {MAX_ARGUMENT_BYTES}")
        tool_params(tool, agent).refuse_unknown(args)  # what the tool does not offer (agentId, `hide`)
        result = await caller(tool.method, {k: v for k, v in args.items() if v is not None})
        return await RENDER[name](result, args, caller)
    except ToolError as exc:
        return _failed(str(exc), exc.summary)
    except JarvisError as exc:
        return tool_error(tool.method, exc)
    except Exception:  # a bug in rendering the result: logged; the model reads that it failed, the run goes on
        error_id = uuid.uuid4().hex[:12]
        log.exception("memory tool crashed", tool=name, errorId=error_id)
        return tool_error(tool.method, InternalError("internal error", {"errorId": error_id}))


def tool_error(method: str, err: JarvisError) -> ToolOutcome:
    """The one error value of a tool's call, as the model (or MCP client) reads it: an argument at fault
    by its name among the tool's arguments, any other failure as the method's."""
    if isinstance(err, Invalid):
        field = (err.field or "").removeprefix("params").lstrip(".")
        return _failed(
            f"invalid arguments: {field}: {err.rule}" if field else f"invalid arguments: {err.rule}", "bad arguments"
        )
    error_id = (err.data or {}).get("errorId")
    return _failed(f"{method} failed: {err.message}" + (f" (errorId {error_id})" if error_id else ""), "failed")


def _json_size(value: Any) -> int:
    """The size of `value` as JSON. Python's encoder for what orjson refuses (an integer past 64 bits):
    such a value must reach the method's validation, which says what is wrong with it."""
    try:
        return len(orjson.dumps(value))
    except TypeError:  # orjson.JSONEncodeError
        return len(json.dumps(value, ensure_ascii=False).encode())


def _failed(text: str, summary: str) -> ToolOutcome:
    return ToolOutcome(f"Error: {text}", summary, error=True)


# ---- rendering --------------------------------------------------------------------------------------
def _bounded(lines: list[str]) -> str:
    out: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        if used + len(line) + 1 > RESULT_CHARS:
            out.append(f"[… {len(lines) - i} more line(s) left out; ask for fewer or narrower results]")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


async def _render_hits(result: dict, params: dict, caller: Caller, what: str) -> ToolOutcome:
    results = result.get("results") or []
    agent = {"agentId": params["agentId"]} if params.get("agentId") else {}

    async def label_of(key: str) -> str | None:
        return (await caller("sessions.get", {"sessionKey": key, **agent})).get("label")

    await label_sessions(results, label_of)
    head = f"{_plural(len(results), 'result')} for {what}"
    lines = [
        head + (f" ({result['degraded']})" if result.get("degraded") else "") + ":"
        if results
        else f"No memory matched {what}." + (f" ({result['degraded']})" if result.get("degraded") else "")
    ]
    lines += [tool_line(i, r) for i, r in enumerate(results, 1)]
    return ToolOutcome(_bounded(lines), _plural(len(results), "result"), memory=[reference(r) for r in results])


async def _render_search(result: dict, params: dict, caller: Caller) -> ToolOutcome:
    return await _render_hits(result, params, caller, f"{params['query']!r}")


async def _render_recall(result: dict, params: dict, caller: Caller) -> ToolOutcome:
    span = f"{(result.get('from') or 'the beginning')[:16]} – {str(result.get('to'))[:16]}".replace("T", " ")
    what = f"{span}" + (f", query {params['query']!r}" if params.get("query") else "")
    out = await _render_hits(result, params, caller, what)
    if result.get("matched", 0) > len(result.get("results") or []):
        out.text += f"\n({result['matched']} in the period; raise k or narrow it to see more)"
    return out


async def _render_get(result: dict, params: dict, caller: Caller) -> ToolOutcome:
    if "key" in result and "value" in result:  # a keyed memory
        text = (
            f"{result['key']} ({result['category']}, updated {str(result.get('updated'))[:10]}, "
            f"{result['path']}):\n{result['value']}"
        )
        return ToolOutcome(
            _bounded(text.split("\n")),
            f"read {result['key']}",
            memory=[span(result["path"], 1, 1)],
        )
    first, n = result["from"], result["lines"]
    last = first + max(n, 1) - 1
    lines = [
        f"{result['path']}:{first}-{last}"
        + (" (more follows: from=" + str(result["nextFrom"]) + ")" if result.get("truncated") else "")
        + ":"
    ]
    lines += [f"{first + i}: {line}" for i, line in enumerate(str(result.get("text", "")).split("\n"))] if n else []
    return ToolOutcome(
        _bounded(lines),
        _plural(n, "line"),
        memory=[span(result["path"], first, last)] if n else [],
    )


async def _render_set(result: dict, params: dict, caller: Caller) -> ToolOutcome:
    verb = "Replaced" if result.get("replaced") else "Stored"
    moved = f" (moved from {result['movedFrom']})" if result.get("movedFrom") else ""
    return ToolOutcome(
        f"{verb} {result['key']} in {result['category']}{moved} at {result['path']}; searchable now.",
        f"{verb.lower()} {result['key']}",
    )


async def _render_delete(result: dict, params: dict, caller: Caller) -> ToolOutcome:
    return ToolOutcome(f"Deleted {result['key']} ({result['category']}, {result['path']}).", f"deleted {result['key']}")


async def _render_list(result: dict, params: dict, caller: Caller) -> ToolOutcome:
    items, total = result.get("memories") or [], result.get("total", 0)
    start = params.get("offset") or 0
    head = (
        f"{total} keyed memor{'y' if total == 1 else 'ies'}"
        + (f" in {params['category']}" if params.get("category") else "")
        + (f"; showing {start + 1}-{start + len(items)}" if items and len(items) < total else "")
        + (":" if items else ".")
    )
    lines = [head] + [
        f"- {m['key']} ({m['category']}, updated {str(m.get('updated'))[:10]}): {_short(m.get('preview', ''), 200)}"
        for m in items
    ]
    return ToolOutcome(_bounded(lines), f"{len(items)} of {total}")


async def _render_profile(result: dict, params: dict, caller: Caller) -> ToolOutcome:
    facts = result.get("facts") or []
    lines = [f"{len(facts)} current fact{'' if len(facts) == 1 else 's'} about the user" + (":" if facts else ".")]
    memory = []
    for f in facts:
        ev = f["evidence"]
        was = "; ".join(
            f"was {_short(h['value'] or '(ended)', 60)} until {str(h.get('until'))[:10]}" for h in f["history"]
        )
        lines.append(
            f"- {f['subject']}: {_short(f['value'], 200)} (since {f['since'][:10]}; "
            f"{ev['path']}:{ev['startLine']}-{ev['endLine']}){' — ' + was if was else ''}"
        )
        memory.append(span(ev["path"], ev["startLine"], ev["endLine"]))
    if result.get("nextCursor"):  # memory.profile answers a page at a time (ledger/profile.py)
        lines.append(f"(more facts: call again with cursor={result['nextCursor']})")
    return ToolOutcome(_bounded(lines), f"{len(facts)} facts", memory=memory)


RENDER: dict[str, Callable[[dict, dict, Caller], Awaitable[ToolOutcome]]] = {
    "memory_profile": _render_profile,
    "memory_search": _render_search,
    "memory_get": _render_get,
    "memory_set": _render_set,
    "memory_delete": _render_delete,
    "memory_list": _render_list,
    "memory_recall": _render_recall,
}


def one_line(name: str, arguments: Any, summary: str) -> str:
    """`🔎 memory_search "boat colour" → 3 results` — how people see a tool call."""
    tool = CATALOG.get(name)
    args = arguments if isinstance(arguments, dict) else {}
    main = next((args[k] for k in ("query", "key", "path", "from", "category") if args.get(k)), "")
    shown = f' "{_short(main, 60)}"' if main else ""
    return f"{tool.emoji if tool else '🔧'} {name}{shown} → {summary}"
