"""The seven memory tools a model can call, as data: name, the `memory.*` method each runs, the description a
model reads, and hints for MCP clients. No gateway imports: config/loader.py checks `chat.tools` against these
names; catalog.py derives each tool's parameters from its method's (the registry) and runs it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tool:
    name: str
    method: str
    description: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = True
    hide: tuple[str, ...] = ()
    emoji: str = "🔎"

    def annotations(self) -> dict[str, bool]:
        return {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": False,
        }


TOOLS = [
    Tool(
        "memory_search",
        "memory.search",
        "Search long-term memory: notes (MEMORY.md, memory/*.md, keyed memories) and past conversation "
        "transcripts, by meaning and by words together. Use it before answering anything about the user, "
        "their preferences, plans, people, or what was said before, and whenever you are unsure whether "
        "something was discussed. Give a short plain-language query; narrow with `sources` "
        '(["memory"] for notes only, ["sessions"] for conversations only). Each result cites '
        "path:lines (and for conversations the session's name and date); read more of one with memory_get.",
        read_only=True,
        hide=("mode",),
    ),
    Tool(
        "memory_get",
        "memory.get",
        "Read memory exactly: lines of a note or transcript by `path` (as memory_search cites it, e.g. "
        "MEMORY.md or sessions/<key>.jsonl; `from` is the first line, `lines` how many), or one keyed "
        "memory by its `key`. Give path or key, not both. Use it to read around a search hit or to fetch "
        "a memory whose key you know.",
        read_only=True,
        emoji="📖",
    ),
    Tool(
        "memory_set",
        "memory.set",
        "Store a fact to remember across conversations as a keyed memory, or replace the one with the "
        "same key. Use it when the user tells you something lasting about themselves or asks you to "
        "remember something: a short dotted key (`boat.colour`, `sister.birthday`), the fact as one or "
        "a few plain sentences, and optionally a category. It is searchable at once. Setting the same "
        "key again overwrites it, so read it first if you mean to add to it.",
        read_only=False,
        destructive=True,
        idempotent=True,
        emoji="💾",
    ),
    Tool(
        "memory_delete",
        "memory.delete",
        "Delete a keyed memory by its key, when the user asks you to forget it or it is wrong and "
        "should not be replaced. It leaves search at once and goes to the user's trash, from which they can "
        "restore it.",
        read_only=False,
        destructive=True,
        idempotent=True,
        emoji="🗑️",
    ),
    Tool(
        "memory_list",
        "memory.list",
        "List keyed memories, most recently updated first, with a preview of each (optionally one "
        "category; page with limit and offset). Use it to see what you have stored about the user, or "
        "to find a key to read, update or delete.",
        read_only=True,
        emoji="📋",
    ),
    Tool(
        "memory_recall",
        "memory.recall",
        "Recall what was remembered or said in a period of time: notes, keyed memories and conversation "
        "messages between `from` and `to` (ISO dates or datetimes, spans back from now like 24h, 7d, 2w, "
        "or today / yesterday), newest first, or ranked by `query` when given. Use it for questions "
        "about when, like 'what did we talk about yesterday' or 'what did I plan last week'.",
        read_only=True,
        emoji="🕰️",
    ),
    Tool(
        "memory_profile",
        "memory.profile",
        "What is known about the user now: their current facts (home, work, partner, pets, codes, health, "
        "…), each with since when it holds, where it was said, and its earlier values. Use it for an "
        "overview of the user, or to check what is current before answering about their life.",
        read_only=True,
        emoji="🪪",
    ),
]
CATALOG: dict[str, Tool] = {t.name: t for t in TOOLS}
