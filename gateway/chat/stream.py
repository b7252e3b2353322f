"""What a chat provider streams to the runner: text deltas, the tool calls of a turn, the token usage.
the providers (providers.py) produce them, upstream.py checks them at the boundary, the runner and the compactor
consume them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Delta:
    text: str


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it, whole, or a head of it when it was too long (size says)
    size: int  # characters the model sent for it (more than len(arguments) when cut)


@dataclass(slots=True)
class ToolCalls:
    calls: list[ToolCall]


MAX_TOOL_ARGUMENT_CHARS = 256 << 10  # a call's arguments kept whole (tools/catalog.MAX_ARGUMENT_BYTES); longer: a head


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def to_dict(self) -> dict[str, int]:
        return {
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "totalTokens": self.prompt_tokens + self.completion_tokens,
        }
