"""Method name → handler + params schema, and at which doors it is offered; `system.methods`
introspection. Calls run through `dispatcher.Dispatcher`, the one path every door takes.

Handlers are declared in `gateway/methods/*` with the `method` decorator of a Registry:

    @registry.method("sessions.get", Obj(sessionKey=Str(pattern=SESSION_KEY)), "Get one session.")
    async def sessions_get(ctx: CallContext, p: dict) -> dict: ...

`p` is already validated with defaults filled in. Handlers raise JarvisError subclasses. A handler
that never waits (no I/O, nothing to await) is a plain function: the WebSocket door answers it as soon
as the request is read, without a task of its own. A method offered at some doors only names them
(`doors=`): elsewhere it does not exist (MethodNotFound), and `system.methods` does not list it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from .calls import CallContext, Door, ServiceAccess
from .schema import Obj

if TYPE_CHECKING:  # pragma: no cover
    from .principals import Principal

__all__ = ["CallContext", "Door", "Handler", "MethodSpec", "Registry", "ServiceAccess", "registry"]

Handler = Callable[[CallContext, dict[str, Any]], Awaitable[Any] | Any]


@dataclass
class MethodSpec:
    name: str
    params: Obj
    handler: Handler
    description: str = ""
    waits: bool = True  # an async handler; False for a plain function (answered without a task)
    doors: frozenset[Door] | None = None  # where it is offered; None: at every door

    def offered_at(self, door: Door) -> bool:
        return self.doors is None or door in self.doors


@dataclass
class Registry:
    methods: dict[str, MethodSpec] = field(default_factory=dict)

    def method(
        self,
        name: str,
        params: Obj | None = None,
        description: str = "",
        *,
        doors: frozenset[Door] | None = None,
    ) -> Callable[[Handler], Handler]:
        def deco(fn: Handler) -> Handler:
            if name in self.methods:
                raise ValueError(f"method {name} registered twice")
            self.methods[name] = MethodSpec(
                name,
                params or Obj(),
                fn,
                description or (fn.__doc__ or "").strip(),
                waits=inspect.iscoroutinefunction(fn),
                doors=doors,
            )
            return fn

        return deco

    def describe(self, door: Door = Door.WEBSOCKET, principal: "Principal | None" = None) -> list[dict[str, Any]]:
        """The methods offered at `door` (that `principal` may call, when given), each with the JSON Schema
        of its params."""
        return [
            {"name": s.name, "description": s.description, "params": s.params.json_schema()}
            for s in sorted(self.methods.values(), key=lambda s: s.name)
            if s.offered_at(door) and (principal is None or principal.may_call(s.name))
        ]


registry = Registry()
