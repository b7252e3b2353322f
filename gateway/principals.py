"""Who may call what: principals — a name with a token, the agents it may reach, and scopes.

    read    search, get, list, history, status, subscribe
    write   memory set/delete/write/learn/images; session create/rename/delete
    chat    send, regenerate, abort
    admin   principals, agents, sync, backup, config, import/export — and everything above
    proxy   /v1 only: act for a front-end's users, each with an agent of their own

The owner is the gateway's own token (`<stateDir>/gateway.token` or `JARVIS_GATEWAY_TOKEN`): every
scope, every agent; a single user never meets the rest. Every other principal's token is shown once,
when it is made, and kept only as its SHA-256 (a 256-bit random secret needs no slow hash: nothing can
be guessed from it). A token is looked up by its hash; the comparison that decides is constant-time.

This module is engine-neutral: the records live in the engine's `PrincipalStore` (storage/base.py), a
file of the state dir or a table of PostgreSQL; `Principals` keeps them in memory for the doors and
follows the store's changes (another process's `jarvis token revoke`, another gateway's).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from .errors import Beyond, Invalid
from .timeutil import parse_iso, to_iso

SCOPES = ("read", "write", "chat", "admin", "proxy")
# The scope each method needs: the one table of who may call what (docs/protocol.md §3 shows it).
# "" — any principal (what the gateway is and which methods it has). A method missing here is refused to
# everyone but the owner (tests/unit/test_principals.py checks that every registered method is here).
METHOD_SCOPES: dict[str, str] = {
    "system.health": "",
    "system.methods": "",
    "sessions.list": "read",
    "sessions.get": "read",
    "sessions.history": "read",
    "sessions.subscribe": "read",
    "sessions.unsubscribe": "read",
    "sessions.create": "write",
    "sessions.update": "write",
    "sessions.delete": "write",
    "sessions.compact": "write",
    "sessions.prune": "admin",
    "sessions.trash": "read",
    "sessions.restore": "write",
    "sessions.purge": "admin",  # gone for good: a principal that may delete may not also empty the trash
    "chat.send": "chat",
    "chat.regenerate": "chat",
    "chat.abort": "chat",
    "chat.confirm": "chat",  # yes or no to the model's destructive tool call
    "chat.relay": "chat",  # /v1/chat/completions (the OpenAI door's call)
    "chat.respond": "chat",  # /v1/responses
    "chat.response": "read",  # GET /v1/responses/{id}
    "chat.models": "read",
    "memory.search": "read",
    "memory.profile": "read",
    "memory.get": "read",
    "memory.list": "read",
    "memory.similar": "read",
    "memory.recall": "read",
    "memory.files": "read",
    "memory.status": "read",
    "memory.getImage": "read",
    "memory.searchImage": "read",
    "memory.set": "write",
    "memory.delete": "write",
    "memory.write": "write",
    "memory.learn": "write",
    "memory.setImage": "write",
    "memory.history": "read",
    "memory.trash": "read",
    "memory.restore": "write",
    "memory.purge": "admin",
    "memory.sync": "admin",
    "principals.create": "admin",
    "principals.list": "admin",
    "principals.revoke": "admin",
    "audit.list": "admin",
    "admin.import": "admin",
    "admin.upload": "admin",
    "admin.export": "admin",
}
# A second scope that also opens a method: the narrowest rule that lets a key do what its scope is for. A
# chat key creates the sessions it chats in (not rename, delete or restore them: those stay write), and
# lists the models it chats with (GET /v1/models, which a front-end's chat,proxy key needs), and reads back
# the responses it made (GET /v1/responses/{id}: kept per principal, so only its own).
ALSO: dict[str, str] = {"sessions.create": "chat", "chat.models": "chat", "chat.response": "chat"}
# What the audit log records (AuditLog, storage/base.py): every write and delete of memory and sessions
# (scope write, and the admin ones that delete or bring in) and every principal change.
AUDITED: frozenset[str] = frozenset(m for m, s in METHOD_SCOPES.items() if s == "write") | {
    "sessions.prune",
    "sessions.purge",
    "memory.purge",
    "admin.import",
    "principals.create",
    "principals.revoke",
    "chat.confirm",  # who answered a run's destructive tool call (and the run's principal: `runPrincipal`)
    "chat.relay",  # /v1: a front-end's request in a user's agent (the session it writes)
    "chat.respond",
}
# The param an audit entry names as the call's target (never a body, a value or a token), first found.
AUDIT_TARGETS = ("sessionKey", "key", "path", "name", "category", "source", "session", "runId")
# What no engine can store in an entry's text: NUL (PostgreSQL's text and jsonb refuse it) and a lone
# surrogate (no UTF-8 holds one). Each becomes U+FFFD, so the entry is kept, saying something was there.
# An entry names things, never holds a body: each text is cut at AUDIT_TEXT characters.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
AUDIT_TEXT = 1000


def storable_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An audit entry whose text every engine can store (both engines' AuditLog.append)."""
    return {k: _UNSTORABLE.sub("\ufffd", v[:AUDIT_TEXT]) if isinstance(v, str) else v for k, v in entry.items()}


# What a scope brings with it: admin is every scope but proxy (acting for others is asked for by name).
IMPLIES = {"admin": frozenset({"read", "write", "chat", "admin"})}
OWNER = "owner"
# Who said yes to the destructive tool call being run (chat.confirm), while it runs: the audit entry of
# that call (door tool, principal: the run's) names the answerer as `confirmedBy`.
CONFIRMED_BY: ContextVar[str | None] = ContextVar("jarvis_confirmed_by", default=None)
NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
EVERY_AGENT = "*"


@dataclass(frozen=True)
class Principal:
    name: str
    agents: tuple[str, ...] | None  # None: every agent ("*")
    scopes: frozenset[str]
    token_hash: str  # hex SHA-256 of the token; "" for the owner, whose token is the gateway's
    created: str
    expires: str | None = None
    revoked: str | None = None
    last_used: str | None = None
    granted: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        granted = set(self.scopes)
        for s in self.scopes:
            granted |= IMPLIES.get(s, frozenset())
        object.__setattr__(self, "granted", frozenset(granted))

    def may(self, scope: str) -> bool:
        """Whether this principal holds `scope` ("" — anything any principal may do — always)."""
        return not scope or scope in self.granted

    def may_call(self, method: str) -> bool:
        """Whether this principal may call `method` (METHOD_SCOPES or ALSO; one not listed: the owner only)."""
        scope = METHOD_SCOPES.get(method)
        if scope is None:
            return self.name == OWNER
        return self.may(scope) or (method in ALSO and self.may(ALSO[method]))

    def reaches(self, agent_id: str) -> bool:
        return self.agents is None or agent_id in self.agents

    def live(self, now: datetime | None = None) -> bool:
        """Not revoked and not expired."""
        if self.revoked:
            return False
        if self.expires:
            ends = parse_iso(self.expires)
            return ends is None or (now or datetime.now(timezone.utc)) < ends
        return True

    def public(self) -> dict[str, Any]:
        """What `principals.list` and `jarvis token list` show: never the token, never its hash."""
        out: dict[str, Any] = {
            "name": self.name,
            "agents": [EVERY_AGENT] if self.agents is None else list(self.agents),
            "scopes": sorted(self.scopes, key=SCOPES.index),
            "created": None if self.name == OWNER else self.created,
            "expires": self.expires,
            "lastUsed": self.last_used,
        }
        if self.revoked:
            out["revoked"] = self.revoked
        return out

    def record(self) -> dict[str, Any]:
        """The stored form (what the store keeps, hash included)."""
        return {**self.public(), "tokenHash": self.token_hash}

    @classmethod
    def from_record(cls, rec: Any) -> "Principal":
        """A stored principal; ValueError naming what is wrong with a record that is not one."""
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        name = rec.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"name: must be {NAME_RULE}")
        token_hash = rec.get("tokenHash")
        if not isinstance(token_hash, str) or not re.fullmatch(r"[0-9a-f]{64}", token_hash):
            raise ValueError("tokenHash: must be 64 hex digits")
        created = rec.get("created")
        if not isinstance(created, str) or parse_iso(created) is None:
            raise ValueError("created: must be an ISO 8601 time")
        return cls(
            name,
            parse_agents(rec.get("agents"), "agents"),
            parse_scopes(rec.get("scopes"), "scopes"),
            token_hash,
            created,
            _time_or_none(rec.get("expires"), "expires"),
            _time_or_none(rec.get("revoked"), "revoked"),
            _time_or_none(rec.get("lastUsed"), "lastUsed"),
        )


def same(a: Principal, b: Principal) -> bool:
    """Whether `a` and `b` are one principal: its name and its token's digest (the owner: its name and no
    digest). A name revoked and made anew is another principal, whose rights are not the old one's."""
    return a.name == b.name and hmac.compare_digest(a.token_hash, b.token_hash)


def owner() -> Principal:
    """The gateway token's principal: admin (every scope but proxy: acting for a front-end's users is a
    token of its own, so a single user's `user` field picks a session, as before), every agent."""
    return Principal(OWNER, None, IMPLIES["admin"], "", "1970-01-01T00:00:00.000Z")


# ---- a front-end acting for its users (scope `proxy`, /v1) ---------------------------------------------
_USER_AGENT = re.compile(r"[A-Za-z0-9._-]{1,59}")
_OLD_DIGEST = re.compile(r"[0-9A-Fa-f]{24}")


def _digest24(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def agent_for_user(user: str) -> str:
    """The agent of a front-end's user. Two name spaces that never meet: a name of `[A-Za-z0-9._-]` (up to
    59) is `user.<name>`; any other name is `user_<sha256[:24]>` — a literal's agent always starts
    `user.`, a digest's `user_`, so no user can name themselves into another's agent. A literal shaped
    like 24 hex digits is digested too: before, digests were `user.<hex>`, and such a name would land in
    the agent of whoever's name digested to it (those agents stay on disk, the owner's to reach)."""
    if _USER_AGENT.fullmatch(user) and not _OLD_DIGEST.fullmatch(user):
        return "user." + user
    return "user_" + _digest24(user)


def anonymous_agent(principal: str) -> str:
    """The agent of a front-end's requests that name no user (Open WebUI's title and tag tasks): one of
    the front-end's own, `anon.<principal>` (`anon_<sha256[:24]>` for a name past 59 characters) —
    never a person's memory, nor the agent the key was made on."""
    return "anon." + principal if len(principal) <= 59 else "anon_" + _digest24(principal)


def acting_for(principal: Principal, user: str | None) -> Principal:
    """Who a front-end's request for its `user` acts as. A principal with scope `proxy` acts for that user
    only: in the user's own agent (made on first use, within agents.max), and nothing else; a request that
    names no user (a front-end's own title and tag tasks) acts in the front-end's anonymous agent, never a
    person's memory nor the agent the key was made on. Without the scope, and for the owner: itself (the
    `user` then picks a session only)."""
    if principal.name == OWNER or not principal.may("proxy"):
        return principal
    return replace(principal, agents=(anonymous_agent(principal.name) if user is None else agent_for_user(user),))


def granted_by(scopes: Iterable[str]) -> frozenset[str]:
    """Every scope `scopes` bring with them (admin: read, write, chat and admin)."""
    out = set(scopes)
    for s in scopes:
        out |= IMPLIES.get(s, frozenset())
    return frozenset(out)


def beyond(holder: Principal, agents: tuple[str, ...] | None, scopes: frozenset[str], expires: str | None) -> None:
    """Beyond (naming the param and the rule) when a principal of `agents`, `scopes` and `expires` would
    hold more than `holder`: a principal hands out only a subset of what it holds — its agents (every
    agent, "*", only from a principal of every agent), its scopes (counting what admin brings), never a
    longer life than its own — and `proxy` (acting for a front-end's users) only from the owner, who
    holds every agent and every other scope. The message is the same whether an agent exists or not."""
    if "proxy" in scopes and holder.name != OWNER:
        raise Beyond(
            "scopes: 'proxy' (acting for a front-end's users, each in an agent of their own) is given by the "
            f"owner only, not by principal {holder.name!r}",
            {"field": "scopes", "scope": "proxy"},
        )
    if holder.name == OWNER:
        return
    extra = sorted(granted_by(scopes - {"proxy"}) - holder.granted, key=SCOPES.index)
    if extra:
        raise Beyond(
            f"scopes: principal {holder.name!r} cannot give {', '.join(map(repr, extra))}: a principal gives "
            f"only scopes it holds ({', '.join(sorted(holder.granted, key=SCOPES.index))})",
            {"field": "scopes", "scope": extra[0]},
        )
    if holder.agents is not None:
        outside = [EVERY_AGENT] if agents is None else [a for a in agents if a not in holder.agents]
        if outside:
            raise Beyond(
                f"agents: principal {holder.name!r} cannot give {', '.join(map(repr, outside))}: a principal "
                f"gives only agents it reaches ({', '.join(holder.agents)})",
                {"field": "agents"},
            )
    if holder.expires is not None and (expires is None or _later(expires, holder.expires)):
        raise Beyond(
            f"expires: principal {holder.name!r} expires at {holder.expires}; a principal it makes expires "
            "no later (give `expires`)",
            {"field": "expires"},
        )


def _later(a: str, b: str) -> bool:
    ta, tb = parse_iso(a), parse_iso(b)
    return ta is None or tb is None or ta > tb


def covers(holder: Principal, other: Principal) -> bool:
    """Whether `other` holds nothing beyond `holder` (what `holder` could have made: it may revoke it,
    list it, and read its audit entries)."""
    try:
        beyond(holder, other.agents, other.scopes, other.expires)
    except Beyond:
        return False
    return True


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_name(name: Any, field_name: str = "name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise Invalid(f"must be {NAME_RULE}", field=field_name)
    if name == OWNER:
        raise Invalid(f"{OWNER!r} is the gateway token's principal; choose another name", field=field_name)
    return name


def parse_scopes(value: Any, field_name: str = "scopes") -> frozenset[str]:
    """Scopes from a list or a comma-separated string; Invalid naming an unknown one."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise Invalid(f"at least one of {', '.join(SCOPES)}", field=field_name)
    out = set()
    for item in items:
        s = item.strip() if isinstance(item, str) else item
        if s not in SCOPES:
            raise Invalid(f"unknown scope {s!r}; known: {', '.join(SCOPES)}", field=field_name)
        out.add(s)
    return frozenset(out)


def parse_agents(value: Any, field_name: str = "agents") -> tuple[str, ...] | None:
    """Agent ids from a list ("*" alone: every agent); Invalid naming a bad one."""
    from .schema import AGENT_ID  # (schema imports nothing of ours)

    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise Invalid("at least one agent id, or '*' for every agent", field=field_name)
    if list(items) == [EVERY_AGENT]:
        return None
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not re.fullmatch(AGENT_ID, item):
            raise Invalid(f"{item!r} is no agent id ([A-Za-z0-9._-]{{1,64}}), or '*' alone", field=field_name)
        if item not in out:
            out.append(item)
    return tuple(out)


_SPAN = re.compile(r"(\d{1,6})\s*([mhdw])")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_expires(value: Any, now: datetime | None = None, field_name: str = "expires") -> str | None:
    """When a token stops working: None (never), a span from now ("90m", "12h", "30d", "4w") or an ISO
    8601 time in the future."""
    if value is None:
        return None
    now = now or datetime.now(timezone.utc)
    if isinstance(value, str):
        if m := _SPAN.fullmatch(value.strip()):
            seconds = int(m.group(1)) * _UNITS[m.group(2)]
            if seconds <= 0:
                raise Invalid("must be a positive span", field=field_name)
            return to_iso(now + timedelta(seconds=seconds))
        when = parse_iso(value.strip())
        if when is not None:
            if when <= now:
                raise Invalid("is in the past", field=field_name)
            return to_iso(when)
    raise Invalid("a span (90m, 12h, 30d, 4w) or an ISO 8601 time", field=field_name)


def _time_or_none(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or parse_iso(value) is None:
        raise ValueError(f"{name}: must be an ISO 8601 time or null")
    return value


def make(name: str, agents: Any, scopes: Any, expires: Any, token: str, now: datetime | None = None) -> Principal:
    """A new principal for `token` (shown once; only its hash is kept)."""
    now = now or datetime.now(timezone.utc)
    return Principal(
        check_name(name),
        parse_agents(agents),
        parse_scopes(scopes),
        hash_token(token),
        to_iso(now),
        parse_expires(expires, now),
    )


class Directory:
    """The principals a gateway knows, by token hash, for the doors: `find(token)` is one dict lookup
    and one constant-time comparison."""

    def __init__(self, principals: Iterable[Principal] = ()):
        self.by_hash: dict[str, Principal] = {}
        self.by_name: dict[str, Principal] = {}
        self.replace(principals)

    def replace(self, principals: Iterable[Principal]) -> None:
        by_hash, by_name = {}, {}
        for p in principals:
            by_name[p.name] = p
            if p.token_hash:
                by_hash[p.token_hash] = p
        self.by_hash, self.by_name = by_hash, by_name

    def find(self, token: str, now: datetime | None = None) -> Principal | None:
        """The live principal whose token this is, else None."""
        digest = hash_token(token)
        p = self.by_hash.get(digest)
        if p is None or not hmac.compare_digest(p.token_hash, digest) or not p.live(now):
            return None
        return p

    def touched(self, name: str, when: str) -> None:
        p = self.by_name.get(name)
        if p is not None:
            q = replace(p, last_used=when)
            self.by_name[name] = q
            self.by_hash[q.token_hash] = q
