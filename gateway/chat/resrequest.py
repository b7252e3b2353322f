"""The schema of a Responses API request (`POST /v1/responses`): `RESPONSES_REQUEST`, checked as far as
the gateway relies on it (the rest is the upstream's to judge), so that the dispatcher validates the body
before chat/responses.py reads it.

    request = RESPONSES_REQUEST.validate(body)      # input (a string or items), instructions, tools …
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import Invalid
from ..schema import SESSION_KEY, Field, text_problem
from .relay import check_model
from .responses import parts_text
from .restools import HOSTED_ITEMS

ITEM_TYPES = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "tool_search_call",
    "tool_search_output",
    "additional_tools",
    "reasoning",
    *sorted(HOSTED_ITEMS),
)
MESSAGE_ROLES = ("user", "assistant", "system", "developer")
TOOL_CHOICES = ("auto", "none", "required")
_KEY = re.compile(SESSION_KEY)


class ResponsesRequest(Field):
    """A Responses API request body, checked as far as the gateway relies on it (the rest is the upstream's
    to judge): `model`, `input`, `instructions`, `tools`, `tool_choice`, `previous_response_id`,
    `conversation`, `store`, `stream`, `user`."""

    json_type = "object"

    def validate(self, value: Any, path: str) -> Any:
        def at(name: str) -> str:
            return f"{path}.{name}" if path else name

        check_model(value, path)
        given = value.get("input")
        if given is None:
            raise Invalid("required, a string or a list of input items", field=at("input"))
        if isinstance(given, str):
            if not given:
                raise Invalid("must not be empty", field=at("input"))
        elif isinstance(given, list) and given:
            for i, item in enumerate(given):
                _check_item(item, at(f"input[{i}]"))
        else:
            raise Invalid("must be a string or a non-empty list of input items", field=at("input"))
        for name in ("instructions", "previous_response_id", "user"):
            if value.get(name) is not None and not isinstance(value[name], str):
                raise Invalid("must be a string", field=at(name))
        for name in ("stream", "store"):
            if not isinstance(value.get(name, False), bool):
                raise Invalid("must be true or false", field=at(name))
        conversation = value.get("conversation")
        if conversation is not None:
            cid = conversation.get("id") if isinstance(conversation, dict) else conversation
            where = at("conversation.id") if isinstance(conversation, dict) else at("conversation")
            if not isinstance(cid, str) or not _KEY.fullmatch(cid):
                raise Invalid("must be a conversation id, [A-Za-z0-9._:-]{1,128} (it names the session)", field=where)
        tools = value.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                raise Invalid("must be a list of tools", field=at("tools"))
            for i, tool in enumerate(tools):
                _check_tool(tool, at(f"tools[{i}]"))
        choice = value.get("tool_choice")
        if choice is not None:
            if isinstance(choice, str):
                if choice not in TOOL_CHOICES:
                    raise Invalid(f"must be one of {', '.join(TOOL_CHOICES)}, or an object", field=at("tool_choice"))
            elif not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
                raise Invalid("must be auto, none, required, or an object with a `type`", field=at("tool_choice"))
            elif choice["type"] in ("function", "custom") and not isinstance(choice.get("name"), str):
                raise Invalid("required, the function's name", field=at("tool_choice.name"))
        # What the gateway keeps follows the text rule of every method's params (schema.py): the user's
        # messages (the transcript, the session's label), the model and user names.
        for where, text in _kept_texts(value):
            problem = text_problem(text)
            if problem:
                raise Invalid(problem, field=at(where))
        return value


def _name(item: dict[str, Any], key: str, what: str, where: str) -> None:
    """`item[key]` a non-empty string: missing is "required", another type "must be a string", "" empty."""
    value = item.get(key)
    if value is None:
        raise Invalid(f"required, {what} (a non-empty string)", field=f"{where}.{key}")
    if not isinstance(value, str):
        raise Invalid(f"must be a string, {what}", field=f"{where}.{key}")
    if not value:
        raise Invalid(f"must not be empty, {what}", field=f"{where}.{key}")


def _check_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise Invalid("must be an object", field=where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind not in ITEM_TYPES:
        raise Invalid(f"type must be one of {', '.join(ITEM_TYPES)}", field=f"{where}.type")
    if kind == "message":
        if item.get("role") not in MESSAGE_ROLES:
            raise Invalid(f"must be one of {', '.join(MESSAGE_ROLES)}", field=f"{where}.role")
        content = item.get("content")
        if not (isinstance(content, str) or (isinstance(content, list) and all(isinstance(p, dict) for p in content))):
            raise Invalid("must be a string or a list of content parts", field=f"{where}.content")
    elif kind in ("function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"):
        _name(item, "call_id", "the call's id", where)
        if kind in ("function_call", "custom_tool_call"):
            _name(item, "name", "the tool's name", where)
            if item.get("namespace") is not None and not isinstance(item["namespace"], str):
                raise Invalid("must be a string (the namespace tool's name)", field=f"{where}.namespace")
            argument = "arguments" if kind == "function_call" else "input"
            if not isinstance(item.get(argument), str):
                rule = "the arguments as JSON" if kind == "function_call" else "the tool's raw input"
                raise Invalid(f"must be a string ({rule})", field=f"{where}.{argument}")
        else:
            output = item.get("output")
            if not (isinstance(output, str) or (isinstance(output, list) and all(isinstance(p, dict) for p in output))):
                raise Invalid("must be a string or a list of content parts", field=f"{where}.output")
    elif kind in ("tool_search_call", "tool_search_output"):
        if item.get("call_id") is not None and not isinstance(item["call_id"], str):
            raise Invalid("must be a string, the call's id", field=f"{where}.call_id")
    if kind in ("tool_search_output", "additional_tools"):
        tools = item.get("tools")
        if not isinstance(tools, list):
            raise Invalid("must be a list of tools", field=f"{where}.tools")
        for k, tool in enumerate(tools):
            _check_tool(tool, f"{where}.tools[{k}]")


def _check_tool(tool: Any, where: str) -> None:
    """A tool as far as the gateway reads it: a type; a function's or custom tool's name (and a function's
    parameters, an object); a namespace's name and its tools (each checked alike)."""
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise Invalid("must be an object with a `type`", field=where)
    kind = tool["type"]
    if kind in ("function", "custom", "namespace") and (not isinstance(tool.get("name"), str) or not tool["name"]):
        raise Invalid(f"required, the {kind}'s name", field=f"{where}.name")
    if kind == "function" and tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
        raise Invalid("must be a JSON Schema object", field=f"{where}.parameters")
    if kind == "custom" and tool.get("format") is not None and not isinstance(tool["format"], dict):
        raise Invalid(
            "must be an object ({type: text} or {type: grammar, syntax, definition})", field=f"{where}.format"
        )
    if kind == "namespace":
        tools = tool.get("tools")
        if not isinstance(tools, list) or not tools:
            raise Invalid("must be a non-empty list of the namespace's tools", field=f"{where}.tools")
        for k, each in enumerate(tools):
            _check_tool(each, f"{where}.tools[{k}]")


def _kept_texts(value: dict[str, Any]) -> list[tuple[str, str]]:
    out = [(name, value[name]) for name in ("model", "user", "instructions") if isinstance(value.get(name), str)]
    given = value["input"]
    if isinstance(given, str):
        return [*out, ("input", given)]
    for i, item in enumerate(given):
        if item.get("role") == "user":
            content = item.get("content")
            out.append((f"input[{i}].content", content if isinstance(content, str) else parts_text(content)))
    return out


RESPONSES_REQUEST = ResponsesRequest(description="an OpenAI Responses API request body")
