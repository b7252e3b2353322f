"""What a call of the gateway is, whichever door it came in by: who calls, through which door, which
method, with which params. Data only; `dispatcher.py` runs it.

    Call(Door.WEBSOCKET, "memory.search", {"query": "boat"}, connection=conn)
    Call(Door.TOOL, "memory.get", {"key": "boat.colour", "agentId": "main"})

Every door (gateway/doors/), the chat model's tool calls and `jarvis` in process make one of these and
hand it to the one dispatcher; a handler sees its call through `CallContext`.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .principals import Principal, owner

if TYPE_CHECKING:  # pragma: no cover
    from .access import Principals
    from .config import Config
    from .events import Event, EventBus
    from .storage.base import Storage


class Door(StrEnum):
    """Where a call came in. `jarvis call`, `jarvis mcp` (stdio) and the web page reach the gateway over
    its WebSocket, so their calls are WEBSOCKET calls there."""

    WEBSOCKET = "websocket"  # JSON-RPC over the WebSocket
    OPENAI = "openai"  # /v1 on the HTTP API listener
    MCP = "mcp"  # /mcp on the HTTP API listener
    TOOL = "tool"  # the chat model's own tool calls, in a chat run
    CLI = "cli"  # `jarvis …` in process, when no gateway of the state dir answers


# Who calls: each door authenticates the caller's token (access.Principals.authenticate) and puts its
# principal on the Call; the gateway token's is the owner (principals.py), who may call every method.
OWNER = owner()

# The principal of the call being run, for what a call starts and what runs on its behalf later: a chat
# run started by `chat.send` runs the model's tool calls as the principal who sent (the run's task inherits
# this), never as more. Outside any call (the gateway's own background work): the owner.
ACTING: ContextVar[Principal] = ContextVar("jarvis_acting_principal", default=OWNER)


class Connection(Protocol):
    """What a handler may know of the caller's connection: a WebSocket connection, the CLI's in-process
    caller (cli/dispatch.py); /v1 and /mcp calls have none. Subscribing it to a session (events.EventBus)
    makes it hear that session's chat events."""

    connection_id: str
    subscriptions: set[str]
    peer: str  # the client's address ("local": the CLI in this process)
    closing: bool  # the client went away: long work for it (an import) may stop

    def deliver(self, event: "Event") -> None:
        """Send a notification to this caller (chat events, an import's progress); never blocks."""


@dataclass(frozen=True, slots=True)
class ForUser:
    """A front-end's request sent for one of its users (/v1): `user` is whom it names (the body's `user`, or
    Open WebUI's forwarded-user header), None when it names none. The dispatcher decides whom the call
    then acts as (principals.acting_for)."""

    user: str | None


@dataclass(slots=True)
class Call:
    door: Door
    method: str
    params: Any = None
    principal: Principal = OWNER
    connection: Connection | None = None  # what hears the events this call subscribes to
    request_id: Any = None  # the door's id of the request, for its logs
    for_user: ForUser | None = None  # a front-end's request for one of its users (/v1)
    # False: not audited here — another gateway's chat.confirm performed for it, whose own entry is the one.
    audited: bool = True


class ServiceAccess(Protocol):
    """What handlers and the doors may use of the gateway's services (`services.Services` is the
    implementation; typing against this keeps the methods and the doors free of imports of it)."""

    config: "Config"
    bus: "EventBus"
    storage: "Storage"
    principals: "Principals"
    started: float
    agents: dict[str, Any]
    connection_count: Callable[[], int]
    calls: Any  # the one path of a call: dispatcher.Dispatcher (typed there; it imports this module)

    @property
    def stopping(self) -> bool:
        """The gateway is shutting down: long work (an import) stops at its next step."""

    async def agent(self, agent_id: str | None = None, create: bool = False) -> Any: ...

    def request_scope(self) -> contextlib.AbstractContextManager[None]: ...

    @property
    def memory(self) -> Any: ...

    @property
    def chat(self) -> Any: ...


@dataclass(slots=True)
class CallContext:
    """What a handler is given beside its validated params."""

    services: "ServiceAccess"
    connection: Connection | None = None
    door: Door = Door.WEBSOCKET
    principal: Principal = OWNER
    # What the handler adds to the call's audit entry beyond its params (chat.confirm: the run's principal).
    noted: dict[str, Any] = field(default_factory=dict)

    @property
    def via(self) -> str:
        """What a write records as the door it came through (memory versions, the trash's `by`): the
        door, and "model" for the chat model's own tool calls."""
        return "model" if self.door is Door.TOOL else self.door.value
