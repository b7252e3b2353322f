"""memory.search, memory.get, memory.status, memory.sync — thin: validate, call the MemoryManager."""

from __future__ import annotations

from typing import Any

from ..errors import Invalid, NotFound
from ..memory.notes.keyed import KEY_PATTERN
from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Arr, Bool, Int, Num, Str
from .notes import notes_for
from .sessions import with_agent


async def _memory(ctx: CallContext, p: dict) -> Any:
    """The memory of the agent named by params.agentId (default: the configured agent)."""
    mem = getattr(ctx.services, "memory", None) if p.get("agentId") is None \
        else (await ctx.services.agent(p["agentId"])).memory
    if mem is None:
        raise NotFound("memory is disabled (memory.enabled = false)")
    return mem


SEARCH = with_agent(
    query=Str(1, 2000, description="what to look for, in plain words"),
    k=Int(1, 50, default=6, description="how many results"),
    minScore=Num(0, 1, default=0, description="drop results scoring below this (scores are in [0,1])"),
    sources=Arr(Str(choices=("memory", "sessions")), 1, 2, unique=True, optional=True,
                description="default: both"),
    sessionKey=Str(pattern=SESSION_KEY, optional=True,
                   description="restrict transcript results to this session (memory files still count)"),
    mode=Str(choices=("hybrid", "fts", "vector"), optional=True, description="default: memory.search.mode"),
)


@registry.method("memory.search", SEARCH,
                 "Search memory files and transcripts (BM25 + vectors, fused); results with line ranges and snippets.")
async def search(ctx: CallContext, p: dict) -> dict:
    return await (await _memory(ctx, p)).search(p["query"], k=p["k"], min_score=p["minScore"], sources=p["sources"],
                                     session_key=p["sessionKey"], mode=p["mode"])


@registry.method("memory.get",
                 with_agent(path=Str(1, 1024, optional=True,
                                     description="MEMORY.md, LEARNINGS.md, memory/….md or sessions/<sessionKey>.jsonl"),
                            key=Str(1, 128, pattern=KEY_PATTERN, optional=True,
                                    description="a keyed memory's key (give path or key, not both)"),
                            **{"from": Int(1, default=1, description="first line, 1-based (path reads)")},
                            lines=Int(1, 10_000, default=120, description="how many lines (path reads)")),
                 "Read lines of a memory file or transcript the index may hold (path), or a keyed memory (key) "
                 "→ {key, category, value, path, created, updated}.")
async def get(ctx: CallContext, p: dict) -> dict:
    if (p["path"] is None) == (p["key"] is None):
        raise Invalid(f"give exactly one of path or key, not {'both' if p['key'] else 'neither'}",
                      field="key" if p["key"] is not None else "path")
    if p["key"] is not None:
        return await (await notes_for(ctx, p["agentId"])).get(p["key"])
    return await (await _memory(ctx, p)).get(p["path"], from_=p["from"], lines=p["lines"])


@registry.method("memory.status", with_agent(), "Index size, sources, embedding provider and vector backend.")
async def status(ctx: CallContext, p: dict) -> dict:
    return await (await _memory(ctx, p)).status()


@registry.method("memory.sync", with_agent(force=Bool(default=False, description="re-read every file")),
                 "Bring the index up to date now; returns what changed.")
async def sync(ctx: CallContext, p: dict) -> dict:
    return await (await _memory(ctx, p)).sync(force=p["force"])
