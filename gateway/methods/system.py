"""system.health, system.methods."""

from __future__ import annotations

import time

from .. import __version__
from ..registry import CallContext, registry


@registry.method("system.health", description="Liveness and a summary of the gateway's state.")
def health(ctx: CallContext, p: dict) -> dict:
    """A plain function, answered as the request is read: it never waits (a shared index's counts are
    refreshed in the background, for the next call)."""
    s = ctx.services
    memory = _memory_health(ctx)
    return {
        "status": "ok",
        "version": __version__,
        "uptimeS": round(time.monotonic() - s.started, 3),
        "connections": s.connection_count(),
        # provider, model, baseUrl, discovered (a model server found on loopback: its server; else the reason)
        "chat": s.chat.provider.describe(),
        "memory": memory,
        "agents": {"open": len(s.agents), "maxOpen": s.config.agents.max_open},
        "storage": s.storage.status(),
    }


def _memory_health(ctx: CallContext) -> dict:
    """The memory summary of the caller's agent: the configured one's, or — for a principal that may not
    reach it — its own agent's when open (an agent it may not reach is never counted for it)."""
    s = ctx.services
    none = {"files": 0, "chunks": 0, "dirty": False}
    principal = ctx.principal
    if principal.reaches(s.config.agent_id):
        return s.memory.health() if s.memory is not None else none
    own = s.agents.get(principal.agents[0]) if principal.agents else None
    memory = getattr(own, "memory", None)
    return memory.health() if memory is not None else none


@registry.method(
    "system.methods", description="Every method the caller may call (its scopes), with the JSON Schema of its params."
)
def methods(ctx: CallContext, p: dict) -> dict:
    return {"methods": registry.describe(ctx.door, ctx.principal)}
