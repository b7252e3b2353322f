"""memory.search, memory.get, memory.status, memory.sync — thin: validate, call the MemoryManager."""

from __future__ import annotations

from typing import Any

from ..errors import NotFound
from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Arr, Bool, Int, Num, Obj, Str


def _memory(ctx: CallContext) -> Any:
    mem = getattr(ctx.services, "memory", None)
    if mem is None:
        raise NotFound("memory is disabled (memory.enabled = false)")
    return mem


SEARCH = Obj(
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
    return await _memory(ctx).search(p["query"], k=p["k"], min_score=p["minScore"], sources=p["sources"],
                                     session_key=p["sessionKey"], mode=p["mode"])


@registry.method("memory.get",
                 Obj(path=Str(1, 1024, description="MEMORY.md, memory/….md or sessions/<sessionKey>.jsonl"),
                     **{"from": Int(1, default=1, description="first line, 1-based")},
                     lines=Int(1, 10_000, default=120, description="how many lines")),
                 "Read lines of a memory file or transcript the index may hold.")
async def get(ctx: CallContext, p: dict) -> dict:
    return await _memory(ctx).get(p["path"], from_=p["from"], lines=p["lines"])


@registry.method("memory.status", Obj(), "Index size, sources, embedding provider and vector backend.")
async def status(ctx: CallContext, p: dict) -> dict:
    return await _memory(ctx).status()


@registry.method("memory.sync", Obj(force=Bool(default=False, description="re-read every file")),
                 "Bring the index up to date now; returns what changed.")
async def sync(ctx: CallContext, p: dict) -> dict:
    return await _memory(ctx).sync(force=p["force"])
