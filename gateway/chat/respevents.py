"""The Responses API's stream as state: the `response.*` events OpenAI sends, made from chat completion
chunks (an upstream without /v1/responses, the offline responder), or followed as an upstream sent them.

    events = ResponseEvents(response_id, model, echo)   # echo: the request's fields the response repeats
    events.start()                                  # [response.created, response.in_progress]
    events.chunk(chat_chunk)                        # the events one chat completions chunk makes
    events.finish()                                 # the open items closed, then response.completed
    events.observe(event)                           # an upstream's own event: followed, renumbered
    events.response                                 # the response object as it stands

A message's text is `response.output_item.added` (a `message` item), `response.content_part.added`,
`response.output_text.delta` …, `response.output_text.done`, `response.content_part.done`,
`response.output_item.done`; a function call is `response.output_item.added` (a `function_call` item),
`response.function_call_arguments.delta` …, `.done`, `response.output_item.done`. Every event carries
`sequence_number`, from 0, in the order sent. Pure: no I/O.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .restools import ChatTools

DONE = ("response.completed", "response.incomplete", "response.failed")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage_object(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


class ResponseEvents:
    def __init__(self, response_id: str, model: str, echo: dict[str, Any]):
        self.response: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "error": None,
            "incomplete_details": None,
            "instructions": echo.get("instructions"),
            "max_output_tokens": echo.get("max_output_tokens"),
            "model": model,
            "output": [],
            "parallel_tool_calls": echo.get("parallel_tool_calls", True),
            "previous_response_id": echo.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "store": echo.get("store", True),
            "temperature": echo.get("temperature", 1.0),
            "text": echo.get("text") or {"format": {"type": "text"}},
            "tool_choice": echo.get("tool_choice", "auto"),
            "tools": echo.get("tools") or [],
            "top_p": echo.get("top_p", 1.0),
            "truncation": echo.get("truncation", "disabled"),
            "usage": None,
            "user": echo.get("user"),
            "metadata": echo.get("metadata") or {},
        }
        self.sequence = 0
        self._text: dict[str, Any] | None = None  # the message item being written
        self._calls: dict[int, dict[str, Any]] = {}  # a chat chunk's tool call index → its function_call item
        self._open: list[dict[str, Any]] = []  # items added and not done, in order
        # translated (an upstream's chat completions): the tools' names there → the client's tools, so a
        # call comes back as the client's item (function_call with its namespace, custom_tool_call …)
        self.offered: ChatTools | None = None
        self._whole: dict[str, list[str]] = {}  # a custom or tool_search call's [upstream name, arguments]

    # ---- events ---------------------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": [dict(item) for item in self.response["output"]]}

    def start(self) -> list[dict[str, Any]]:
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self.response["output"].append(item)
        self._open.append(item)
        index = len(self.response["output"]) - 1
        return [self._event("response.output_item.added", output_index=index, item=dict(item))]

    def _index(self, item: dict[str, Any]) -> int:
        return next(i for i, it in enumerate(self.response["output"]) if it is item)

    def text(self, delta: str) -> list[dict[str, Any]]:
        """A piece of the reply's text."""
        out: list[dict[str, Any]] = []
        if self._text is None:
            self._text = {
                "id": new_id("msg"),
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            out += self._add(self._text)
            self._text["content"].append({"type": "output_text", "text": "", "annotations": [], "logprobs": []})
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=self._text["id"],
                    output_index=self._index(self._text),
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                )
            )
        self._text["content"][0]["text"] += delta
        out.append(
            self._event(
                "response.output_text.delta",
                item_id=self._text["id"],
                output_index=self._index(self._text),
                content_index=0,
                delta=delta,
                logprobs=[],
            )
        )
        return out

    def call(self, index: int, call_id: str | None, name: str | None, arguments: str | None) -> list[dict[str, Any]]:
        """A piece of a tool call (a chat chunk's `tool_calls[index]`). A function's arguments stream as
        they come; a custom tool's input and a tool search's arguments are said whole at the call's end
        (they are inside the JSON the upstream writes)."""
        out: list[dict[str, Any]] = []
        item = self._calls.get(index)
        if item is None:
            said = (self.offered.item if self.offered else _plain)(name or "", call_id or new_id("call"), "")
            prefix = {"function_call": "fc", "custom_tool_call": "ctc", "tool_search_call": "ts"}[said["type"]]
            item = self._calls[index] = {"id": new_id(prefix), "status": "in_progress", **said}
            if said["type"] != "function_call":
                self._whole[item["id"]] = [name or "", ""]
            out += self._add(item)
        elif name and item["type"] == "function_call" and not item["name"]:
            item["name"] = name
        if arguments:
            if item["id"] in self._whole:
                self._whole[item["id"]][1] += arguments
                return out
            item["arguments"] += arguments
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=self._index(item),
                    delta=arguments,
                )
            )
        return out

    def usage(self, input_tokens: int, output_tokens: int) -> None:
        self.response["usage"] = usage_object(input_tokens, output_tokens)

    def _close(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        index = self._index(item)
        out = []
        if item["type"] == "message":
            part = item["content"][0]
            out.append(
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=part["text"],
                    logprobs=[],
                )
            )
            out.append(
                self._event(
                    "response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part
                )
            )
        elif item["id"] in self._whole:  # a custom tool's input, a tool search's arguments: whole now
            assert self.offered is not None
            upstream_name, arguments = self._whole.pop(item["id"])
            item.update(self.offered.item(upstream_name, item["call_id"], arguments))
            if item["type"] == "custom_tool_call":
                ids = {"item_id": item["id"], "output_index": index}
                out.append(self._event("response.custom_tool_call_input.delta", **ids, delta=item["input"]))
                out.append(self._event("response.custom_tool_call_input.done", **ids, input=item["input"]))
        else:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        item["status"] = "completed"
        out.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return out

    def finish(self, status: str = "completed") -> list[dict[str, Any]]:
        """The open items closed, then `response.completed` (or `response.incomplete`: the reply was cut)."""
        out = []
        for item in self._open:
            out += self._close(item)
        self._open.clear()
        self._text = None
        self._calls.clear()
        self.response["status"] = status
        if status == "incomplete":
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        out.append(self._event(f"response.{status}", response=self._snapshot()))
        return out

    @property
    def done(self) -> bool:
        return self.response["status"] != "in_progress"

    # ---- from a chat completions stream ---------------------------------------------------------------
    def chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events one chat completion chunk makes (its first choice; usage kept for the end)."""
        out: list[dict[str, Any]] = []
        found = chunk.get("choices")
        for choice in found if isinstance(found, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0 or not isinstance(choice.get("delta"), dict):
                continue
            delta = choice["delta"]
            content = delta.get("content")
            if isinstance(content, str) and content:
                out += self.text(content)
            for part in delta.get("tool_calls") or []:
                if not isinstance(part, dict):
                    continue
                fn, index, call_id = part.get("function"), part.get("index"), part.get("id")
                fn = fn if isinstance(fn, dict) else {}
                name, arguments = fn.get("name"), fn.get("arguments")
                out += self.call(
                    index if isinstance(index, int) else len(self._calls),
                    call_id if isinstance(call_id, str) else None,
                    name if isinstance(name, str) else None,
                    arguments if isinstance(arguments, str) else None,
                )
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            try:
                self.usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
            except (TypeError, ValueError, OverflowError):
                pass
        return out

    # ---- an upstream's own stream -----------------------------------------------------------------------
    def observe(self, event: dict[str, Any]) -> dict[str, Any]:
        """An event an upstream's /v1/responses sent: followed (the response it tells of becomes this
        one's, under this one's id) and numbered in this stream's order."""
        kind = event.get("type")
        if isinstance(event.get("response"), dict):
            upstream = event["response"]
            self.response = {**self.response, **upstream, "id": self.response["id"]}
            event = {**event, "response": self._snapshot()}
        elif kind == "response.output_item.added" and isinstance(event.get("item"), dict):
            self.response["output"].append(dict(event["item"]))
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            index = event.get("output_index")
            output = self.response["output"]
            if isinstance(index, int) and 0 <= index < len(output):
                output[index] = dict(event["item"])
        elif kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            index = event.get("output_index")
            output = self.response["output"]
            if isinstance(index, int) and 0 <= index < len(output):
                item = output[index]
                content = item.setdefault("content", [])
                if not content:
                    content.append({"type": "output_text", "text": "", "annotations": []})
                if isinstance(content[-1], dict):
                    content[-1]["text"] = str(content[-1].get("text", "")) + event["delta"]
        event = {**event, "sequence_number": self.sequence}
        self.sequence += 1
        return event

    def close_open(self, status: str) -> list[dict[str, Any]]:
        """The end of a stream that stopped before its own end (cut at chat.maxReplyChars): the items
        still in progress marked so, and `response.<status>`."""
        for item in self.response["output"]:
            if item.get("status") == "in_progress":
                item["status"] = "incomplete"
        self.response["status"] = status
        if status == "incomplete":
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        return [self._event(f"response.{status}", response=self._snapshot())]


def _plain(name: str, call_id: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output_text(response: dict[str, Any]) -> str:
    """The text of a response's message items, as the SDKs' `output_text` joins it."""
    texts = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "".join(texts)
