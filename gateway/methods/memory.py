"""The `memory.*` methods — thin: validate, then call the agent's memory.

    memory.search, memory.get {path}, memory.status, memory.sync      → the MemoryService (memory/service.py)
    memory.get {key}, memory.set/delete/list/similar/recall/learn,
    memory.history/restore/trash/purge,
    memory.setImage/getImage/searchImage, memory.files/write          → MemoryNotes (memory/notes/service.py)

of the agent named by `agentId` (default: main).
"""

from __future__ import annotations

from typing import Any

from ..errors import Invalid, NotFound
from ..memory.ledger.profile import HISTORY_LIMIT, HISTORY_MAX, PROFILE_LIMIT, PROFILE_MAX
from ..memory.ledger.recall import parse_as_of
from ..memory.notes.files import MAX_NOTE_BYTES
from ..memory.notes.keyed import CATEGORIES, KEY_PATTERN, MAX_VALUE_CHARS
from ..memory.notes.learnings import SECTIONS
from ..memory.notes.service import MemoryNotes
from ..memory.search.request import SearchRequest
from ..registry import CallContext, registry
from ..schema import SESSION_KEY, Arr, Bool, Int, Num, Str
from .sessions import purge_target, with_agent


async def _memory(ctx: CallContext, p: dict) -> Any:
    """The memory of the agent named by params.agentId (default: the configured agent)."""
    mem = (
        getattr(ctx.services, "memory", None)
        if p.get("agentId") is None
        else (await ctx.services.agent(p["agentId"])).memory
    )
    if mem is None:
        raise NotFound("memory is disabled (memory.enabled = false)")
    return mem


async def notes_for(ctx: CallContext, agent_id: str | None) -> MemoryNotes:
    agent = await ctx.services.agent(agent_id)
    if agent.memory is None:
        raise NotFound("memory is disabled (memory.enabled = false)")
    cfg = ctx.services.config
    return MemoryNotes(agent.memory, cfg.agent_workspace(agent.id), cfg.agent_dir(agent.id) / "history")


def key_param(description: str = "the memory's key", optional: bool = False) -> Str:
    return Str(1, 128, pattern=KEY_PATTERN, optional=optional, description=description)


def category_param(description: str) -> Str:
    return Str(choices=CATEGORIES, optional=True, description=description)


SOURCES = Arr(Str(choices=("memory", "sessions")), 1, 2, unique=True, optional=True, description="default: both")


SEARCH = with_agent(
    query=Str(1, 2000, description="what to look for, in plain words"),
    k=Int(1, 50, default=6, description="how many results"),
    minScore=Num(0, 1, default=0, description="drop results scoring below this (scores are in [0,1])"),
    sources=Arr(Str(choices=("memory", "sessions")), 1, 2, unique=True, optional=True, description="default: both"),
    sessionKey=Str(
        pattern=SESSION_KEY,
        optional=True,
        description="restrict transcript results to this session (memory files still count)",
    ),
    mode=Str(choices=("hybrid", "fts", "vector"), optional=True, description="default: memory.search.mode"),
    asOf=Str(
        1,
        64,
        optional=True,
        description="memory as it stood then (ISO 8601 date or datetime; a date is the end of that day): nothing "
        "said after it, the value valid then first, relative dates in the query resolved against it",
    ),
)


@registry.method(
    "memory.search",
    SEARCH,
    "Search memory files and transcripts (BM25 + vectors, fused); results with line ranges and snippets.",
)
async def search_memory(ctx: CallContext, p: dict) -> dict:
    """memory.search: the memory service's search (re-ranked); not memory.similar's nor memory.recall's."""
    as_of = None
    if p.get("asOf") is not None:
        as_of = parse_as_of(p["asOf"])
        if as_of is None:
            raise Invalid("must be an ISO 8601 date (2025-06-01) or datetime (2025-06-01T12:00:00Z)", field="asOf")
    req = SearchRequest(
        query=p["query"],
        k=p["k"],
        min_score=p["minScore"],
        sources=tuple(p["sources"] or ()),  # (): every source
        session_key=p["sessionKey"],
        mode=p["mode"] or "",
        as_of=as_of,
    )
    return await (await _memory(ctx, p)).search(req)


@registry.method(
    "memory.profile",
    with_agent(
        limit=Int(
            1, PROFILE_MAX, default=PROFILE_LIMIT, description="how many facts (the most recently changed first)"
        ),
        cursor=Str(1, 512, optional=True, description="the page after the one that returned this nextCursor"),
        subject=Str(
            1,
            128,
            optional=True,
            description="only this subject ('home', 'code:shed') or family of subjects ('code': every code)",
        ),
        history=Int(0, HISTORY_MAX, default=HISTORY_LIMIT, description="earlier values per fact, the newest of them"),
    ),
    "What Jarvis believes about you now: the ledger's current facts, each with its value, since when, its "
    "evidence and its history → {facts:[{subject, value, since, source, evidence:{path, startLine, endLine, "
    "text}, history:[{value, from, until, evidence}], historyOmitted?}], nextCursor?}, a page of `limit` at a time. "
    "Correct one with memory.set {key: profile.<subject>}.",
)
async def profile(ctx: CallContext, p: dict) -> dict:
    return await (await _memory(ctx, p)).profile(p["limit"], p["cursor"], p["subject"], p["history"])


@registry.method(
    "memory.get",
    with_agent(
        path=Str(
            1, 1024, optional=True, description="MEMORY.md, LEARNINGS.md, memory/….md or sessions/<sessionKey>.jsonl"
        ),
        key=Str(
            1, 128, pattern=KEY_PATTERN, optional=True, description="a keyed memory's key (give path or key, not both)"
        ),
        **{"from": Int(1, default=1, description="first line, 1-based (path reads)")},
        lines=Int(1, 10_000, default=120, description="how many lines (path reads)"),
    ),
    "Read lines of a memory file or transcript the index may hold (path), or a keyed memory (key) "
    "→ {key, category, value, path, created, updated}.",
)
async def get(ctx: CallContext, p: dict) -> dict:
    if (p["path"] is None) == (p["key"] is None):
        raise Invalid(
            f"give exactly one of path or key, not {'both' if p['key'] else 'neither'}",
            field="key" if p["key"] is not None else "path",
        )
    if p["key"] is not None:
        return await (await notes_for(ctx, p["agentId"])).get(p["key"])
    return await (await _memory(ctx, p)).get(p["path"], from_=p["from"], lines=p["lines"])


@registry.method("memory.status", with_agent(), "Index size, sources, embedding provider and vector backend.")
async def status(ctx: CallContext, p: dict) -> dict:
    return await (await _memory(ctx, p)).status()


@registry.method(
    "memory.sync",
    with_agent(force=Bool(default=False, description="re-read every file")),
    "Bring the index up to date now; returns what changed.",
)
async def sync(ctx: CallContext, p: dict) -> dict:
    return await (await _memory(ctx, p)).sync(force=p["force"])


@registry.method(
    "memory.set",
    with_agent(
        key=key_param("the memory's key (letters, digits, '.', '_', '-'; ≤128)"),
        value=Str(1, MAX_VALUE_CHARS, description="the text to remember"),
        category=category_param("default: the entry's current category, else general"),
    ),
    "Create or replace a keyed memory (memory/keyed/<category>/<key>.md); searchable at once. "
    "→ {key, category, value, path, created, updated, replaced, movedFrom?}",
)
async def set_(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).set(
        p["key"], p["value"], p["category"], ctx.via, ctx.principal.name
    )


@registry.method(
    "memory.delete",
    with_agent(key=key_param()),
    "Delete a keyed memory: it leaves search at once and goes to the trash for memory.trashDays, whole "
    "with its versions (memory.restore {key} brings it back). → {deleted, key, category, path, trashed, expiresAt}",
)
async def delete(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).delete(p["key"], ctx.via)


def _key_or_path(p: dict) -> None:
    if (p["path"] is None) == (p["key"] is None):
        raise Invalid(
            f"give exactly one of key or path, not {'both' if p['key'] else 'neither'}",
            field="key" if p["key"] is not None else "path",
        )


NOTE_PATH = Str(
    1, 1024, optional=True, description="a note, live or deleted: MEMORY.md, memory.md, LEARNINGS.md or memory/….md"
)


@registry.method(
    "memory.history",
    with_agent(
        key=key_param("a keyed memory's key (live or in the trash)", optional=True),
        path=NOTE_PATH,
        version=Int(1, optional=True, description="with path: that version whole, with its content"),
    ),
    "The kept versions of a keyed memory (each write: value, category, at, by — the door it came "
    "through — and principal), or of a note (current: its text now; none once deleted), newest first. → {key, trashed, "
    "versions:[{version, value, category, at, by, principal, current}]} | {path, versions:[{version, at, by, "
    "principal, bytes, preview, current}]} | {path, version:{…, content}}",
)
async def history(ctx: CallContext, p: dict) -> dict:
    _key_or_path(p)
    notes = await notes_for(ctx, p["agentId"])
    if p["key"] is not None:
        if p["version"] is not None:
            raise Invalid("only with path: a keyed memory's history holds every value whole", field="version")
        return await notes.history(p["key"])
    return await notes.note_versions(p["path"], p["version"])


@registry.method(
    "memory.restore",
    with_agent(
        key=key_param("a keyed memory's key", optional=True),
        path=NOTE_PATH,
        version=Int(
            1,
            optional=True,
            description="the version to write again (memory.history lists them); without it, a keyed memory "
            "comes back from the trash",
        ),
    ),
    "Bring back a version of a keyed memory or a note as a new write (its value and category; a note's "
    "text), or — key without version — a keyed memory from the trash whole. → memory.set's answer with "
    "restoredFrom | the entry with restored: true | memory.write's answer with restoredFrom",
)
async def restore(ctx: CallContext, p: dict) -> dict:
    _key_or_path(p)
    notes = await notes_for(ctx, p["agentId"])
    if p["key"] is not None:
        return await notes.restore(p["key"], p["version"], ctx.via, ctx.principal.name)
    if p["version"] is None:
        raise Invalid(
            "required with path: which version of the note (memory.history {path} lists them)", field="version"
        )
    return await notes.restore_note(p["path"], p["version"], ctx.via, ctx.principal.name)


@registry.method(
    "memory.trash",
    with_agent(limit=Int(1, 500, default=50), offset=Int(0, default=0)),
    "Keyed memories memory.delete put in the trash, the most recently deleted first; each is purged "
    "memory.trashDays after its delete. → {memories:[{key, category, path, preview, created, updated, "
    "deletedAt, deletedBy, expiresAt}], total}",
)
async def trash(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).trash(p["limit"], p["offset"])


@registry.method(
    "memory.purge",
    with_agent(
        key=key_param("the trashed memory to remove for good", optional=True),
        all=Bool(default=False, description="empty the whole trash"),
    ),
    "Remove keyed memories from the trash for good: one (key) or all (all: true). → {purged:[keys]}",
)
async def purge(ctx: CallContext, p: dict) -> dict:
    keys = purge_target(p, "key")
    return await (await notes_for(ctx, p["agentId"])).purge(keys)


@registry.method(
    "memory.list",
    with_agent(category=category_param("only this category"), limit=Int(1, 500, default=50), offset=Int(0, default=0)),
    "Keyed memories, most recently updated first, with previews. "
    "→ {memories:[{key, category, path, preview, created, updated}], total}",
)
async def list_(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).list(p["category"], p["limit"], p["offset"])


@registry.method(
    "memory.similar",
    with_agent(
        key=key_param("the stored memory to compare with"),
        k=Int(1, 50, default=5),
        minScore=Num(0, 1, default=0),
        sources=Arr(
            Str(choices=("memory", "sessions")), 1, 2, unique=True, optional=True, description="default: memory"
        ),
    ),
    "Memories similar to a stored keyed memory (vector search on its text when vectors are "
    "available, else hybrid), the entry itself left out. → {key, path, results, mode, embeddings, degraded?}",
)
async def similar(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).similar(p["key"], p["k"], p["minScore"], p["sources"])


@registry.method(
    "memory.recall",
    with_agent(
        **{
            "from": Str(
                1,
                64,
                optional=True,
                description="start: ISO date/datetime, 7d / 24h / 2w / 30m back, "
                "today, yesterday (default: the beginning)",
            )
        },
        to=Str(1, 64, optional=True, description="end, same forms (default: now)"),
        category=category_param("only keyed memories of this category"),
        query=Str(0, 2000, optional=True, description="rank by relevance to this"),
        k=Int(1, 100, default=10),
        minScore=Num(0, 1, default=0),
        sources=SOURCES,
    ),
    "Memories and transcript messages from a period, newest first or ranked by a query. "
    "→ {results:[{path, source, kind, startLine, endLine, timestamp, snippet, score?, "
    "sessionKey?, role?, key?, category?}], from, to, matched, degraded?}",
)
async def recall(ctx: CallContext, p: dict) -> dict:
    f = await notes_for(ctx, p["agentId"])
    return await f.recall_period(p["from"], p["to"], p["category"], p["query"], p["k"], p["minScore"], p["sources"])


@registry.method(
    "memory.learn",
    with_agent(
        category=Str(
            1,
            64,
            description="preferences, corrections, patterns or tools (or "
            "the section names: " + ", ".join(SECTIONS.values()) + ")",
        ),
        text=Str(1, 1000, description="what was learned, one line"),
    ),
    "Record a learning in LEARNINGS.md; a near-duplicate (word Jaccard ≥ 0.8) in the same section "
    'refreshes its date instead. → {status:"added"|"refreshed", entry:{category, section, date, '
    "text, line, path}, similarity?}",
)
async def learn(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).learn(p["category"], p["text"])


@registry.method(
    "memory.setImage",
    with_agent(
        key=key_param("the image's key"),
        image=Str(1, description="base64 PNG or JPEG (a data: URL prefix is allowed)"),
        description=Str(0, 4000, optional=True, description="indexed, so the image is searchable by it"),
    ),
    "Store an image (memory/images/<key>.png|jpg) with a searchable markdown sidecar "
    "(memory/images/<key>.md). → {key, mimeType, bytes, path, imagePath, description, created, updated, replaced}",
)
async def set_image(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).set_image(p["key"], p["image"], p["description"])


@registry.method(
    "memory.getImage",
    with_agent(key=key_param("the image's key")),
    "A stored image. → {key, mimeType, image (base64), description, bytes, path, imagePath, created, updated}",
)
async def get_image(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).get_image(p["key"])


@registry.method(
    "memory.searchImage",
    with_agent(image=Str(1, description="base64 PNG or JPEG"), k=Int(1, 50, default=6)),
    "Find memories similar to an image. Needs a multimodal embedding provider; otherwise "
    "-32050 with data.retryable = false.",
)
async def search_image(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).search_image(p["image"], p["k"])


@registry.method(
    "memory.files",
    with_agent(),
    "The workspace's memory files (MEMORY.md, LEARNINGS.md, memory/**/*.md), sorted by path → "
    "{files: [{path, size, modified, writable}]}; read one with memory.get {path}.",
)
async def files(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).files()


@registry.method(
    "memory.write",
    with_agent(
        path=Str(
            1,
            1024,
            description="MEMORY.md or memory/….md (not memory/keyed/ or "
            "memory/images/: memory.set and memory.setImage own those)",
        ),
        content=Str(0, MAX_NOTE_BYTES, description=f"the whole new text (at most {MAX_NOTE_BYTES} bytes of UTF-8)"),
    ),
    "Replace (or create) a note, atomically; the index holds the new text when this answers, and the text "
    "it replaced is kept as a version (memory.history {path}) → {path, size, created}.",
)
async def write(ctx: CallContext, p: dict) -> dict:
    return await (await notes_for(ctx, p["agentId"])).write(p["path"], p["content"], ctx.via, ctx.principal.name)
