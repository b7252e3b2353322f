"""principals.* and audit.list: who may call the gateway, and what was written by whom (admin scope).

A token is shown once, by principals.create; afterwards only its hash is kept. See gateway/principals.py
for the scopes and gateway/access.py for how a gateway follows the principals of its storage.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import Invalid, NotFound
from ..principals import SCOPES, beyond, check_name, parse_agents, parse_expires, parse_scopes
from ..registry import CallContext, registry
from ..schema import Bool, Int, Obj, Str
from ..timeutil import parse_iso, to_iso

NAME = Str(1, 64, description="letters, digits, '.', '_' or '-'")


@registry.method(
    "principals.create",
    Obj(
        name=NAME,
        agents=Str(1, 2000, description="agent ids, comma-separated, or '*' for every agent"),
        scopes=Str(1, 200, description="comma-separated: " + ", ".join(SCOPES)),
        expires=Str(1, 40, optional=True, description="a span (30d, 12h) or an ISO 8601 time; none: never"),
        createAgents=Bool(default=False, description="make the agents that do not exist yet (else: not found)"),
    ),
    "Make a principal: a name with a token (shown once, in this answer only), the agents it may reach "
    "(comma-separated, or '*') and its scopes (comma-separated: " + ", ".join(SCOPES) + "); `expires` is a "
    "span (30d, 12h) or an ISO 8601 time. Never more than the caller holds: its agents, its scopes, its "
    "life; `proxy` only from the owner. An agent that does not exist is made only with `createAgents`. "
    "→ {principal, token}",
)
async def principals_create(ctx: CallContext, p: dict) -> dict[str, Any]:
    check_name(p["name"])
    agents = parse_agents(p["agents"])
    beyond(ctx.principal, agents, parse_scopes(p["scopes"]), parse_expires(p.get("expires")))
    # Its agents exist from now on, so a token that may only read and chat has an agent to read and chat
    # in; one that does not exist yet is made only when asked (a typo must not make an empty agent).
    for agent in agents or ():
        try:
            await ctx.services.agent(agent, create=p["createAgents"])
        except NotFound:
            raise NotFound(
                f"agent not found: {agent} (to make it, pass createAgents: true; `jarvis token create --new-agent`)",
                {"agentId": agent, "field": "agents"},
            ) from None
    principal, token = await ctx.services.principals.create(
        p["name"], p["agents"], p["scopes"], p.get("expires"), by=ctx.principal
    )
    return {"principal": principal.public(), "token": token}


@registry.method(
    "principals.list",
    Obj(),
    "Every principal, the owner first, revoked ones marked; never a token. A principal other than the owner "
    "sees itself and the principals it could have made (nothing beyond its agents and scopes).",
)
async def principals_list(ctx: CallContext, p: dict) -> dict[str, Any]:
    return {"principals": await ctx.services.principals.list(ctx.principal)}


@registry.method(
    "principals.revoke",
    Obj(name=NAME),
    "Revoke a principal: its token stops working on every door and its open connections close, on every "
    "gateway of the storage, within a second. The owner cannot be revoked (rotate its token); a principal "
    "revokes only those it could have made (any other answers as a name that does not exist).",
)
async def principals_revoke(ctx: CallContext, p: dict) -> dict[str, Any]:
    done = await ctx.services.principals.revoke(p["name"], by=ctx.principal)
    return {"revoked": True, "principal": done.public()}


@registry.method(
    "audit.list",
    Obj(
        since=Str(1, 40, optional=True),
        principal=Str(1, 64, optional=True),
        limit=Int(1, 10_000, default=200),
    ),
    "The audit log: every write and delete of memory and sessions and every principal change — who, "
    "which method, on what, through which door, when (never a message, a value or a token); oldest first, "
    "the newest `limit`. `since`: an ISO 8601 time or a span back from now (1d, 12h). A principal of some "
    "agents sees the entries of those agents and its own, nothing of other agents.",
)
async def audit_list(ctx: CallContext, p: dict) -> dict[str, Any]:
    since = p.get("since")
    if since is not None:
        since = since_time(since)
    me = ctx.principal
    audit = ctx.services.storage.audit()
    if me.agents is None:  # every agent: every entry (the owner, a principal of '*')
        return {"entries": await audit.read(since, p.get("principal"), p["limit"])}
    return {"entries": await audit.read(since, p.get("principal"), p["limit"], agents=me.agents, own=me.name)}


def since_time(value: str) -> str:
    """An ISO 8601 time, or a span back from now ("1d", "12h", "30m", "2w")."""
    if m := re.fullmatch(r"(\d{1,6})([mhdw])", value.strip()):
        seconds = int(m.group(1)) * {"m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return to_iso(datetime.now(timezone.utc) - timedelta(seconds=seconds))
    when = parse_iso(value)
    if when is None:
        raise Invalid("an ISO 8601 time or a span back from now (30m, 12h, 1d, 2w)", field="since")
    return to_iso(when)
