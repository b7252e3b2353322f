"""A chat turn's prompt: the system prompt (the session's own, or chat.systemPrompt), the summary of
what compaction flushed, the memory recalled for the turn (memory/present.py's prompt section), then the
last `chat.historyMessages` messages of the transcript (with their tool calls when tools are offered).

    prompts = Prompts(config, sessions, memory, compactor)
    messages, recalled = await prompts.build(key, user_text, settings, replaces=None, with_tools=True)
    recalled = await prompts.recall(key, query)      # a relayed request's recall: the prompt is its own
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from ..config import Config
from ..memory.present import label_sessions, prompt_section
from ..storage.base import SessionStore
from .compaction import Compactor, read_state
from .recall import recall_for_turn
from .tools import replay

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.service import MemoryService

log = structlog.get_logger("gateway.chat")


class Prompts:
    def __init__(
        self,
        config: Config,
        sessions: SessionStore,
        memory: "MemoryService | None",
        compactor: Compactor | None,
    ):
        self.config = config
        self.sessions = sessions
        self.memory = memory
        self.compactor = compactor

    async def recall(self, session_key: str, user_text: str) -> list[dict[str, Any]]:
        """What memory recalls for a turn (memory.recall's budget), each transcript hit with its
        conversation's label; best effort, never raises."""
        if self.memory is None or not self.config.memory.recall.enabled:
            return []
        try:
            recalled = await recall_for_turn(self.memory, user_text, session_key)
            await label_sessions(recalled, self._label)
            return recalled
        except Exception as exc:  # recall is best effort; the turn goes on without it
            log.warning("recall failed", error=type(exc).__name__, session=session_key)
            return []

    async def _label(self, session_key: str) -> str | None:
        return (await self.sessions.get(session_key)).get("label")

    async def build(
        self,
        session_key: str,
        user_text: str,
        settings: dict[str, Any],
        replaces: str | None = None,
        with_tools: bool = False,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(the messages for the provider, what was recalled). `replaces`: regenerating that reply, the
        conversation up to it."""
        recalled = await self.recall(session_key, user_text)
        if self.compactor is not None:
            await self.compactor.settled(session_key)
        state = await asyncio.to_thread(read_state, await self.sessions.local_transcript(session_key))
        pending = state.pending
        if replaces is not None:  # regenerating: the conversation up to the reply being replaced
            cut = next((i for i, m in enumerate(pending) if m["id"] == replaces or m.get("replaces") == replaces), None)
            while cut and (pending[cut - 1]["role"] == "tool" or pending[cut - 1].get("toolCalls")):
                cut -= 1  # the replaced version's tool calls and results: the new one asks afresh
            pending = pending[:cut]
        history = [
            m
            for m in pending
            if m["role"] in ("user", "assistant", "system", "tool") and (m["content"] or m.get("toolCalls"))
        ]
        history = history[-self.config.chat.history_messages :]
        system = settings.get("systemPrompt") or self.config.chat.system_prompt
        if state.summary:
            system += "\n\n## Earlier in this conversation (summary)\n" + state.summary
        system += prompt_section(recalled)
        messages = [{"role": "system", "content": system}]
        messages += replay(history, with_tools)
        return messages, recalled
