"""The offline responder: what answers with no chat model configured (or none found). It says plainly
that it is not a language model, shows what memory recalled, and streams in several deltas like a real
provider; its replies are not memory."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..memory.present import offline_line
from ..sessions.transcript import OFFLINE_PREAMBLE
from .provider import ChatProvider
from .stream import Delta, Usage


class OfflineResponder(ChatProvider):
    name = "offline"
    model = "offline-responder"
    replies_are_memory = False
    offline_now = True
    PREAMBLE = OFFLINE_PREAMBLE

    NOT_CONFIGURED = "no chat model is configured (set OPENAI_API_KEY or OPENAI_BASE_URL to use one)"

    def __init__(self, delta_delay: float = 0.01, why: Callable[[], str] | None = None):
        self.delta_delay = delta_delay
        self.why = why  # why there is no model now (discovery's reason); else none is configured

    @staticmethod
    def compose(user_text: str, recalled: list[dict[str, Any]], why: str = NOT_CONFIGURED) -> str:
        quoted = " ".join(user_text.split())
        if len(quoted) > 200:
            quoted = quoted[:199] + "…"
        lines = [
            f"{OfflineResponder.PREAMBLE}: {why}.",
            f"You wrote: “{quoted}”",
        ]
        if recalled:
            lines.append("")
            lines.append("From memory I recalled:")
            lines += [offline_line(r) for r in recalled]
        else:
            lines.append("Nothing in memory matched this message.")
        return "\n".join(lines)

    async def stream(self, messages, *, recalled=None, tools=None, tool_choice=None, model=None):
        user_text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        text = self.compose(user_text, recalled or [], self.why() if self.why else self.NOT_CONFIGURED)
        # Stream in word-sized groups so clients exercise real incremental rendering.
        words = text.split(" ")
        step = max(1, len(words) // 12)
        for i in range(0, len(words), step):
            piece = " ".join(words[i : i + step])
            yield Delta(piece if i + step >= len(words) else piece + " ")
            if self.delta_delay:
                await asyncio.sleep(self.delta_delay)
            else:
                await asyncio.sleep(0)
        prompt_chars = sum(len(m.get("content") or "") for m in messages)
        yield Usage(prompt_tokens=prompt_chars // 4, completion_tokens=len(text) // 4)
