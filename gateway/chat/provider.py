"""What a chat provider is: `ChatProvider`, the interface the runner, compaction and /v1 hold (its
capabilities as attributes, `stream`, `list_models`, `relay`, `respond`), and its errors (`UpstreamError`,
`ToolsRejected`). providers.py says how the providers behave and chooses one; each lives in its own module."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, AsyncGenerator

from ..errors import Unavailable
from .stream import Delta, ToolCalls, Usage


class ToolsRejected(Exception):
    """The provider refused a request because it offered tools (a local server without function calling)."""


class UpstreamError(Unavailable):
    """The upstream failed a relayed request: `status` is what the endpoint answers (the upstream's own
    4xx, 502 when it is down or failed, 504 when it is slow), `error` its OpenAI error object if any."""

    def __init__(
        self,
        message: str,
        status: int,
        *,
        retryable: bool,
        retry_after_ms: int | None = None,
        error: dict[str, Any] | None = None,
    ):
        super().__init__(message, retryable=retryable, retry_after_ms=retry_after_ms)
        self.status = status
        self.error = error
        self.unreachable = False  # nothing answered at the endpoint (refused, reset, no route)


class ChatProvider:
    name = "base"
    model = ""
    # False: the replies are not memory (they only echo the question and what was recalled); the runner
    # marks them `"remember": false` in the transcript and the memory index leaves them out.
    replies_are_memory = True
    # Function calling: offered when True, except to the models that refused `tools` (remembered by the
    # runner: a server may host models with and without function calling).
    tools_supported = False
    tools_refused: frozenset[str] = frozenset()
    # How a Responses API request (chat/responses.py) reaches it: "upstream" (its own /v1/responses, through
    # `respond`), "translate" (as chat completions, through `relay`), "auto" (upstream until it answers that
    # it has no such route). The offline responder and a provider without the wire format translate.
    responses_api = "translate"
    offline_now = False  # True while the offline responder answers (no model configured, or none found)

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        recalled: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        model: str | None = None,
    ) -> AsyncGenerator[Delta | ToolCalls | Usage, None]:
        raise NotImplementedError

    async def list_models(self) -> list[dict]:
        """The models this provider offers, as OpenAI model objects
        (`{"id", "object": "model", "created", "owned_by"}`); the configured one by default."""
        return [model_object(self.model, self.name)]

    async def relay(self, body: dict[str, Any], recalled: list[dict[str, Any]]) -> Any:
        """Answer an OpenAI chat completions request: an async iterator of chunk objects when
        `body["stream"]`, else one completion object. Built here on `stream()`, answering under the model
        name the client asked for (the offline responder has no other: a client configured for any model
        works out of the box); a provider that speaks the wire format forwards the request instead."""
        chunks = self._chunks(body, recalled)
        if body.get("stream"):
            return chunks
        text: list[str] = []
        usage = None
        async for chunk in chunks:
            for choice in chunk["choices"]:
                text.append(choice["delta"].get("content") or "")
            usage = chunk.get("usage") or usage
        return {
            "id": chunk["id"],
            "object": "chat.completion",
            "created": chunk["created"],
            "model": chunk["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(text)},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }

    async def respond(self, body: dict[str, Any]) -> AsyncGenerator[Any, None]:
        """Answer a Responses API request (streamed) with the upstream's own `response.*` events."""
        raise NotImplementedError

    async def _chunks(self, body: dict[str, Any], recalled: list[dict[str, Any]]) -> AsyncGenerator[dict, None]:
        """`stream()` as OpenAI's chunks: the role first, the text, `finish_reason`, then the usage (always;
        the endpoint drops it unless the client asked for it)."""
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "system_fingerprint": None,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        from .upstream import content_text  # upstream.py imports this module's Delta and Usage

        yield chunk({"role": "assistant", "content": ""})
        usage = None
        # stream() reads text contents, as chat.send makes them; a client may send a list of content parts
        messages = [{**m, "content": content_text(m.get("content")) or ""} for m in body["messages"]]
        async with contextlib.aclosing(self.stream(messages, recalled=recalled)) as items:
            async for item in items:
                if isinstance(item, Delta):
                    yield chunk({"content": item.text})
                elif isinstance(item, Usage):  # no tools are offered here: no ToolCalls come
                    usage = item
        yield chunk({}, "stop")
        if usage is not None:
            yield {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                },
            }

    async def close(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        """What chats, for system.health and the start-up line: provider, model, baseUrl, discovered."""
        return {"provider": self.name, "model": self.model, "baseUrl": None, "discovered": False}


def model_object(model_id: str, owned_by: str, created: int | None = 0) -> dict:
    """An OpenAI model object."""
    return {"id": model_id, "object": "model", "created": int(created or 0), "owned_by": owned_by}
