"""Method name → handler + params schema; dispatch; `system.methods` introspection.

Handlers are declared in `gateway/methods/*` with the `method` decorator of a Registry:

    @registry.method("sessions.get", Obj(sessionKey=Str(pattern=SESSION_KEY)), "Get one session.")
    async def sessions_get(ctx: CallContext, p: dict) -> dict: ...

`p` is already validated with defaults filled in. Handlers raise JarvisError subclasses. A handler
that never waits (no I/O, nothing to await) is a plain function: the server answers it as soon as the
request is read, without a task of its own.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from .errors import Invalid, MethodNotFound
from .schema import Obj

if TYPE_CHECKING:  # pragma: no cover
    from .access import Principals
    from .config import Config
    from .events import Event, EventBus
    from .storage.base import Storage


class ServiceAccess(Protocol):
    """What handlers and the server may use of the gateway's services (`services.Services` is the
    implementation; typing against this keeps registry and server free of imports of it)."""

    config: "Config"
    bus: "EventBus"
    storage: "Storage"
    principals: "Principals"
    started: float
    agents: dict[str, Any]
    connection_count: Callable[[], int]

    @property
    def stopping(self) -> bool:
        """The gateway is shutting down: long work (an import) stops at its next step."""

    async def agent(self, agent_id: str | None = None, create: bool = False) -> Any: ...

    def request_scope(self) -> contextlib.AbstractContextManager[None]: ...

    @property
    def memory(self) -> Any: ...

    @property
    def chat(self) -> Any: ...


class Connection(Protocol):
    """What a handler may know about the calling connection (implemented by the server; the CLI's
    in-process calls pass their own, cli/dispatch.py)."""

    connection_id: str
    subscriptions: set[str]
    peer: str  # the client's address ("local": the CLI in this process)
    closing: bool  # the client went away: long work for it (an import) may stop

    def deliver(self, event: "Event") -> None:
        """Send a notification to this caller (chat events, an import's progress); never blocks."""


@dataclass
class CallContext:
    services: "ServiceAccess"
    connection: Connection | None = None
    request_id: Any = None
    door: str = ""  # how the call came in: "model" (a chat model's tool call), "mcp", "cli"; "" : below

    @property
    def via(self) -> str:
        """The door a write is recorded as coming through (memory versions): `door`, else "websocket"
        for a connection's request, "internal" for the gateway's own calls."""
        return self.door or ("websocket" if self.connection is not None else "internal")


Handler = Callable[[CallContext, dict[str, Any]], Awaitable[Any] | Any]


@dataclass
class MethodSpec:
    name: str
    params: Obj
    handler: Handler
    description: str = ""
    waits: bool = True  # an async handler; False for a plain function (see call_now)


@dataclass
class Registry:
    methods: dict[str, MethodSpec] = field(default_factory=dict)

    def method(self, name: str, params: Obj | None = None, description: str = "") -> Callable[[Handler], Handler]:
        def deco(fn: Handler) -> Handler:
            if name in self.methods:
                raise ValueError(f"method {name} registered twice")
            self.methods[name] = MethodSpec(
                name,
                params or Obj(),
                fn,
                description or (fn.__doc__ or "").strip(),
                waits=inspect.iscoroutinefunction(fn),
            )
            return fn

        return deco

    async def dispatch(self, ctx: CallContext, name: str, params: Any) -> Any:
        spec = self.methods.get(name)
        if spec is None:
            raise MethodNotFound(f"method not found: {name[:100]}")
        if not spec.waits:
            return self.call_now(ctx, spec, params)
        try:
            return await spec.handler(ctx, spec.params.validate(params))
        except Invalid as exc:  # services name fields by what they were given; the client gave params
            raise exc.within("params") from None

    def call_now(self, ctx: CallContext, spec: MethodSpec, params: Any) -> Any:
        """Call a handler that never waits (`spec.waits` is False) and return its result."""
        try:
            return spec.handler(ctx, spec.params.validate(params))
        except Invalid as exc:
            raise exc.within("params") from None

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"name": s.name, "description": s.description, "params": s.params.json_schema()}
            for s in sorted(self.methods.values(), key=lambda s: s.name)
        ]


registry = Registry()
