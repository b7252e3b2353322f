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
    memory = s.memory.health() if s.memory is not None else {"files": 0, "chunks": 0, "dirty": False}
    return {
        "status": "ok",
        "version": __version__,
        "uptimeS": round(time.monotonic() - s.started, 3),
        "connections": s.connection_count(),
        "chat": {"provider": s.chat.provider.name, "model": s.chat.provider.model},
        "memory": memory,
        "agents": {"open": len(s.agents), "maxOpen": s.config.agents.max_open},
        "storage": s.storage.status(),
    }


@registry.method("system.methods", description="Every method with the JSON Schema of its params.")
def methods(ctx: CallContext, p: dict) -> dict:
    return {"methods": registry.describe(ctx.door)}
