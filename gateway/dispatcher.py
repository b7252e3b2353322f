"""The one path of a call: every door's requests, the chat model's tool calls and `jarvis` in process.

    calls = Dispatcher(services)                                 # services.calls
    result = await calls.perform(Call(Door.MCP, "memory.list", {}))   # raises JarvisError, only that
    call_method = calls.caller(Door.TOOL, agent_id="main")       # (method, params) → result

For every call, in this order:

1. find: the method, offered at the call's door (`registry.method(doors=…)`), else MethodNotFound;
2. admit: the call's principal holds the scope the method needs (principals.METHOD_SCOPES), else
   Forbidden naming that scope — decided here once, so every door refuses alike;
3. validate: the params against the method's schema, before anything else touches them; an Invalid
   (of the schema or of the handler) names its field under `params`;
   reach: a method that takes `agentId` acts on an agent the principal may reach: none given, its own
   (the first of its agents); one it may not reach is NotFound exactly as an agent that does not exist;
   a front-end's request for one of its users (`Call.for_user`, /v1) acts, for a principal with scope
   `proxy`, in that user's agent only (principals.acting_for), and its calls on the other doors in its
   anonymous agent, decided before anything else;
4. run: the handler, inside `services.request_scope()` (agents it opens count as in use meanwhile), with
   the principal as `calls.ACTING` (a chat run it starts runs the model's tool calls as it);
   audit: a write or delete of memory or sessions, and a principal change, is recorded — who, which
   method, on what (its key, session, path or name, as the schema took it), through which door, when,
   whether it was done — through the storage's AuditLog (never a body, a value or a token); a refusal
   repeated within a minute is counted into one entry (auditing.py);
5. one error value: whatever the handler raised comes out as a JarvisError of errors.py: itself;
   DiskFull for a write that found no space; a retryable Unavailable when the process is out of file
   descriptors or the database cannot be reached; else InternalError with an errorId, whose traceback
   goes only to the log. No door sees any other exception.

Limits that a door's callers share are taken here too: `reserve(origin, n)` takes n of a WebSocket
connection's `server.maxInflight` (RateLimited past it), `release(origin, n)` gives them back.

Each door renders the error value in its own shape, from the error's class (never a table of its own):

    WebSocket                    protocol.error_object: the JSON-RPC code (PROTOCOL.md §2), message, data
    /v1                          doors/openai.py `http_error`: HTTP status, OpenAI's JSON error, Retry-After
    /mcp, `jarvis mcp`, tools    tools/catalog.py `tool_error`: a tool result marked as an error
    `jarvis` in process          cli/: the message on stderr, exit code 2 for Invalid, else 1
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Awaitable, Callable, Protocol

from .timeutil import now_iso

import structlog

from .calls import ACTING, Call, CallContext, Door, ServiceAccess
from .auditing import AuditRecorder
from .principals import ALSO, AUDIT_TARGETS, AUDITED, CONFIRMED_BY, METHOD_SCOPES, OWNER, Principal, acting_for
from .errors import (
    Forbidden,
    InternalError,
    Invalid,
    JarvisError,
    MethodNotFound,
    NotFound,
    RateLimited,
    Unauthenticated,
    disk_full,
    out_of_descriptors,
)
from .registry import MethodSpec, Registry, registry

log = structlog.get_logger("gateway.calls")

MethodCaller = Callable[[str, dict[str, Any]], Awaitable[Any]]


class Origin(Protocol):
    """Where calls come from that share one budget of calls in flight (a WebSocket connection)."""

    inflight: int


class Dispatcher:
    def __init__(self, services: ServiceAccess, methods: Registry = registry):
        self.services = services
        self.methods = methods
        # The audit log's writer: refusals repeated within a minute are counted, not each written.
        self.auditor = AuditRecorder(lambda entry: self.services.storage.audit().append(entry))

    # ---- the path ------------------------------------------------------------------------------------
    def find(self, call: Call) -> MethodSpec:
        """The method of `call`, if offered at its door and the principal may call it."""
        spec = self.methods.methods.get(call.method)
        if spec is None or not spec.offered_at(call.door):
            raise MethodNotFound(f"method not found: {call.method[:100]}")
        self.admit(call.principal, spec)
        return spec

    @staticmethod
    def admit(principal: Principal, spec: MethodSpec) -> None:
        """Whether `principal` may call `spec`, decided here once for every door: Forbidden, naming the
        scope the method needs, when it does not hold it (METHOD_SCOPES; a method missing there: the owner's
        alone)."""
        if principal.may_call(spec.name):
            return
        refused = Forbidden(spec.name, METHOD_SCOPES.get(spec.name) or OWNER, principal.name)
        if spec.name in ALSO:  # say both scopes that open it
            refused.message = (
                f"{spec.name} needs the {METHOD_SCOPES[spec.name]!r} or the {ALSO[spec.name]!r} scope, which "
                f"principal {principal.name!r} does not have"
            )
            refused.args = (refused.message,)
        raise refused

    @staticmethod
    def reach(principal: Principal, spec: MethodSpec, params: Any) -> Any:
        """The validated params with the agent the principal acts on: a method that takes `agentId` and was
        given none acts on the principal's own agent (the first of its agents; every agent: the configured
        one); an agent it may not reach answers exactly as an agent that does not exist (no oracle)."""
        if principal.agents is None or not isinstance(params, dict) or "agentId" not in spec.params.fields:
            return params
        agent = params.get("agentId")
        if agent is None:
            return {**params, "agentId": principal.agents[0]}
        if not principal.reaches(agent):
            raise NotFound(f"agent not found: {agent}", {"agentId": agent})
        return params

    @staticmethod
    def acting(call: Call) -> Call:
        """`call` as the principal it acts as: a front-end's key (scope `proxy`) acts for one of its users
        on every door — a /v1 request sent for one (`Call.for_user`: the user named, or none) in that
        user's agent or the front-end's anonymous one; a call of the WebSocket or MCP, which name no user,
        in the anonymous agent too, never the agent the key was made on. /v1's other calls (GET
        /v1/models) and any other principal act as they came (principals.acting_for)."""
        if call.for_user is not None:
            user = call.for_user.user
        elif call.door is Door.OPENAI:
            return call
        else:
            user = None
        acting = acting_for(call.principal, user)
        return call if acting is call.principal else replace(call, principal=acting)

    def _validated(self, call: Call, spec: MethodSpec) -> Any:
        return self.reach(call.principal, spec, spec.params.validate(call.params))

    async def perform(self, call: Call) -> Any:
        """Run `call` to its result; every failure raises as a JarvisError."""
        call = self.acting(call)
        acting = ACTING.set(call.principal)
        checked: Any = None  # the params as the schema took them (what the audit may name)
        ok = False
        context = self._context(call)
        try:
            self.refuse_if_ended(call.principal)
            spec = self.find(call)
            if not spec.waits:
                return spec.handler(context, self._validated(call, spec))
            checked = spec.params.validate(call.params)
            params = checked = self.reach(call.principal, spec, checked)
            with self.services.request_scope():
                result = await spec.handler(context, params)
            ok = True
            return result
        except Exception as exc:
            raise self.failure(call, exc) from None
        finally:
            ACTING.reset(acting)
            if call.method in AUDITED and call.audited:
                await self.audit(call, checked, ok, context.noted)

    async def audit(self, call: Call, params: Any, ok: bool, noted: dict[str, Any] | None = None) -> None:
        """Record the call in the audit log (AUDITED methods, done or refused; auditing.py collapses a
        refusal repeated within a minute). `params`: as the method's schema took them, or None (refused
        before): an entry names only what was valid. A log that cannot be written is logged, never the
        call's failure: what was done is done. `noted`: what the handler added (chat.confirm: who started
        the run)."""
        entry: dict[str, Any] = {
            "at": now_iso(),
            "principal": call.principal.name,
            "method": call.method,
            "door": call.door.value,
            "ok": ok,
        }
        if isinstance(params, dict):
            agent = params.get("agentId")
            if isinstance(agent, str):
                entry["agent"] = agent[:64]
            target = next((params[k] for k in AUDIT_TARGETS if isinstance(params.get(k), str)), None)
            if target is not None:
                entry["target"] = target[:200]
        entry.update(noted or {})
        confirmed = CONFIRMED_BY.get()
        if confirmed is not None and call.door is Door.TOOL:  # a destructive tool call someone allowed
            entry["confirmedBy"] = confirmed
        await self.auditor.record(entry)

    def perform_now(self, call: Call, spec: MethodSpec) -> Any:
        """`perform` for a method that never waits (`spec.waits` False, found with `find`): no task, no
        request scope (such a handler cannot open an agent)."""
        call = self.acting(call)
        try:
            self.refuse_if_ended(call.principal)
            return spec.handler(self._context(call), self._validated(call, spec))
        except Exception as exc:
            raise self.failure(call, exc) from None

    def refuse_if_ended(self, principal: Principal) -> None:
        """Unauthenticated when `principal` is no longer the live one it was (revoked, expired, or its name
        given to another), by identity: a chat run's later tool call, or a call in flight when the revoke
        came, never acts with the rights of a principal that ended (access.Principals.still_live)."""
        if principal.name != OWNER and not self.services.principals.still_live(principal):
            raise Unauthenticated(f"principal {principal.name!r} is no longer live (revoked or expired)")

    def failure(self, call: Call, exc: Exception) -> JarvisError:
        """The one error value of a call that raised `exc`."""
        if isinstance(exc, Invalid):  # services name fields by what they were given; the caller gave params
            return exc.within("params")
        if isinstance(exc, JarvisError):
            return exc
        said = log.bind(method=call.method, door=str(call.door))
        if call.connection is not None:
            said = said.bind(conn=call.connection.connection_id)
        full = disk_full(f"the changes of {call.method}", exc)
        if full is not None:  # a cause the caller can act on, not a bare "internal error"
            said.warning("disk full", error=str(exc))
            return full
        busy = out_of_descriptors(f"what {call.method} needs", exc)
        if busy is not None:  # sockets hold every descriptor: retry once some close
            said.warning("out of file descriptors", error=str(exc))
            return busy
        down = self.services.storage.unreachable(exc)
        if down is not None:  # the engine says the outage once when it begins and once when it ends
            said.debug("database unreachable", error=str(exc)[:200])
            return down
        error_id = uuid.uuid4().hex[:12]
        said.error("internal error", errorId=error_id, exc_info=exc)
        return InternalError("internal error", {"errorId": error_id})

    def _context(self, call: Call) -> CallContext:
        return CallContext(self.services, call.connection, call.door, call.principal)

    # ---- for the callers in process -------------------------------------------------------------------
    def caller(self, door: Door, agent_id: str | None = None) -> MethodCaller:
        """`(method, params) → result` through this path, as `door` (`agent_id`: always that agent), as the
        principal acting where it is called (`calls.ACTING`: a chat run's, an MCP request's)."""

        async def call(method: str, params: dict[str, Any]) -> Any:
            if agent_id is not None:
                params = {**params, "agentId": agent_id}
            return await self.perform(Call(door, method, params, ACTING.get()))

        return call

    # ---- limits ---------------------------------------------------------------------------------------
    def reserve(self, origin: Origin, n: int = 1) -> None:
        """Take `n` of the origin's calls in flight (server.maxInflight); RateLimited when they would
        pass it."""
        limit = self.services.config.server.max_inflight
        if origin.inflight + n > limit:
            raise RateLimited(f"too many requests in flight on this connection (max {limit})", 50)
        origin.inflight += n

    @staticmethod
    def release(origin: Origin, n: int = 1) -> None:
        origin.inflight -= n
