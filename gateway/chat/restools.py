"""The tools of a Responses API request said in chat completions (an upstream without /v1/responses, the
offline responder), and the model's calls of them said back in the Responses API's items.

    offered = chat_tools(request, items, strict=True)   # ChatTools: the chat `tools`, names both ways
    offered.tools                                       # [{type: function, function: {…}}, …]
    offered.chat_name("custom", None, "apply_patch")    # the name the upstream knows it by
    offered.item(chat_name, call_id, arguments)         # the call as the client's item

What each tool becomes:

| the client offers | through chat completions | the model's call comes back as |
|---|---|---|
| `function` | itself | `function_call` |
| `namespace` (function tools inside) | each function, its name kept where unique (else `<namespace>__<name>`) | `function_call` with `namespace` |
| `custom` (freeform text, a grammar) | a function of one string argument `input`, the grammar in its description | `custom_tool_call` with that `input` |
| `tool_search` (`execution: client`) | a function with its parameters | `tool_search_call` with `arguments` |
| a hosted tool (`web_search`, `file_search`, …) | dropped, with a note (the upstream cannot run it) | — |

Tools may also come in the input: an `additional_tools` item (Codex's tools for a turn) and a
`tool_search_output` (the tools a search loaded), offered from then on. A tool of a type none of this
knows cannot be carried: `strict` (an upstream) refuses it, naming it; the offline responder, which
calls no tool, takes any tool list. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .providers import UpstreamError

# Tools the Responses API's host runs itself: a chat completions upstream cannot, so they are left out.
HOSTED = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "mcp",
    }
)
# Records of what a hosted tool did, in a conversation's input: nothing a chat upstream can read.
HOSTED_ITEMS = frozenset(
    {"web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_call"}
)
FREEFORM_ARGUMENT = "input"
_CHAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Offered:
    """A tool as the client knows it: its kind (function, custom, tool_search), name and namespace."""

    kind: str
    name: str
    namespace: str | None = None


@dataclass
class ChatTools:
    tools: list[dict[str, Any]] = field(default_factory=list)  # the chat completions `tools`
    by_chat: dict[str, Offered] = field(default_factory=dict)  # the upstream's name → the client's tool
    notes: list[str] = field(default_factory=list)  # what was left out, and why

    def chat_name(self, kind: str, namespace: str | None, name: str) -> str:
        """The name the upstream knows a client's tool by (its own name when it was not offered)."""
        for chat, offered in self.by_chat.items():
            if offered == Offered(kind, name, namespace):
                return chat
        return name

    def item(self, chat_name: str, call_id: str, arguments: str) -> dict[str, Any]:
        """The model's call of `chat_name` as the Responses item the client executes."""
        offered = self.by_chat.get(chat_name)
        item: dict[str, Any]
        if offered is not None and offered.kind == "tool_search":
            return {
                "type": "tool_search_call",
                "call_id": call_id,
                "execution": "client",
                "arguments": _object(arguments),
            }
        if offered is not None and offered.kind == "custom":
            item = {"type": "custom_tool_call", "call_id": call_id, "name": offered.name, "input": freeform(arguments)}
        else:
            item = {
                "type": "function_call",
                "call_id": call_id,
                "name": offered.name if offered else chat_name,
                "arguments": arguments,
            }
        if offered is not None and offered.namespace is not None:
            item["namespace"] = offered.namespace
        return item


def freeform(arguments: str) -> str:
    """A custom tool's raw input from its function's arguments: `{"input": "…"}`; a model that wrote the
    text itself instead of JSON is taken at its word."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get(FREEFORM_ARGUMENT), str):
        return parsed[FREEFORM_ARGUMENT]
    return arguments


def _object(arguments: str) -> Any:
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return {"query": arguments}
    return parsed if isinstance(parsed, dict) else {"query": arguments}


def _custom_function(tool: dict[str, Any]) -> dict[str, Any]:
    described = tool.get("description")
    text: str = described if isinstance(described, str) else ""
    given = tool.get("format")
    fmt: dict[str, Any] = given if isinstance(given, dict) else {}
    how = (
        f"\n\nThis tool takes freeform text, not JSON: put the whole text in `{FREEFORM_ARGUMENT}`, exactly as "
        "it is to be used."
    )
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        how += f" The text must follow this grammar ({fmt.get('syntax') or 'lark'}):\n{fmt['definition']}"
    return {
        "name": tool["name"],
        "description": (text + how).lstrip(),
        "parameters": {
            "type": "object",
            "properties": {FREEFORM_ARGUMENT: {"type": "string", "description": "the tool's raw input"}},
            "required": [FREEFORM_ARGUMENT],
            "additionalProperties": False,
        },
    }


def _search_function(tool: dict[str, Any]) -> dict[str, Any]:
    parameters = tool.get("parameters")
    if not isinstance(parameters, dict):
        parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    fn = {"name": "tool_search", "parameters": parameters}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    return fn


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}


def _refuse(where: str, kind: Any) -> UpstreamError:
    return UpstreamError(
        f"{where}.type: {kind!r} cannot be said in chat completions (an upstream without /v1/responses, "
        "chat.responsesApi): function, namespace, custom and tool_search tools are translated, hosted tools "
        "(web_search …) left out; this one is neither",
        400,
        retryable=False,
        error={"type": "invalid_request_error", "param": f"{where}.type", "code": "unsupported_value"},
    )


def offered_tools(request: dict[str, Any], items: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every tool the request offers, with where it is: its `tools`, then those its input brings (an
    `additional_tools` item, the tools a `tool_search_output` loaded), a previous response's included
    (`items`: previous_response_id's input and output, then the request's own input)."""
    found = [(f"tools[{i}]", t) for i, t in enumerate(request.get("tools") or [])]
    own = len(request["input"]) if isinstance(request.get("input"), list) else 1
    offset = len(items) - own
    for j, item in enumerate(items):
        if item.get("type") in ("additional_tools", "tool_search_output"):
            where = f"input[{j - offset}]" if j >= offset else "previous_response_id"
            found += [(f"{where}.tools[{k}]", t) for k, t in enumerate(item.get("tools") or [])]
    return found


def chat_tools(request: dict[str, Any], items: list[dict[str, Any]], *, strict: bool = True) -> ChatTools:
    """The request's tools as chat completions tools (the table above). `strict`: a tool that cannot be
    carried is an UpstreamError 400 naming it; otherwise it is left out with a note."""
    out = ChatTools()
    wanted: list[tuple[Offered, dict[str, Any]]] = []  # (the client's tool, its chat function less the name)
    for where, tool in offered_tools(request, items):
        kind = tool.get("type")
        if kind == "function":
            wanted.append((Offered("function", tool["name"]), _function(tool)))
        elif kind == "namespace":
            for k, inner in enumerate(tool.get("tools") or []):
                if inner.get("type") == "function":
                    wanted.append((Offered("function", inner["name"], tool["name"]), _function(inner)))
                elif inner.get("type") == "custom":
                    wanted.append((Offered("custom", inner["name"], tool["name"]), _custom_function(inner)))
                elif strict:  # a namespace's functions and custom tools are what chat completions can say
                    raise _refuse(f"{where}.tools[{k}]", inner.get("type"))
                else:
                    out.notes.append(
                        f"{where}.tools[{k}] ({inner.get('type')}) left out: it cannot be said in chat completions"
                    )
        elif kind == "custom":
            wanted.append((Offered("custom", tool["name"]), _custom_function(tool)))
        elif kind == "tool_search" and tool.get("execution", "client") == "client":
            wanted.append((Offered("tool_search", "tool_search"), _search_function(tool)))
        elif kind in HOSTED or kind == "tool_search":
            out.notes.append(
                f"{where} ({kind}) left out: a tool the Responses API's host runs, which a chat "
                "completions upstream cannot"
            )
        elif strict:
            raise _refuse(where, kind)
        else:
            out.notes.append(f"{where} ({kind}) left out: it cannot be said in chat completions")
    seen: set[Offered] = set()
    unique = [(o, fn) for o, fn in wanted if not (o in seen or seen.add(o))]  # type: ignore[func-returns-value]
    plain: dict[str, int] = {}
    for offered, _ in unique:
        plain[offered.name] = plain.get(offered.name, 0) + 1
    for offered, fn in unique:
        name = offered.name
        if plain[name] > 1 or not _CHAT_NAME.fullmatch(name):
            name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{offered.namespace}__{name}" if offered.namespace else name)[:64]
        base, n = name, 1
        while name in out.by_chat:
            n += 1
            name = f"{base[: 64 - len(str(n)) - 1]}_{n}"
        out.by_chat[name] = offered
        out.tools.append({"type": "function", "function": {**fn, "name": name}})
    return out


def tool_choice(choice: Any, offered: ChatTools) -> Any:
    """The request's `tool_choice` for chat completions: a named function or custom tool by its chat
    name; auto, none, required as they are; anything else (a hosted tool, allowed_tools) left to auto."""
    if isinstance(choice, str):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") in ("function", "custom")
        and isinstance(choice.get("name"), str)
    ):
        name = offered.chat_name(choice["type"], choice.get("namespace"), choice["name"])
        return {"type": "function", "function": {"name": name}}
    return None
