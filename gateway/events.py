"""Fan-out of server-pushed events to the connections subscribed to a session.

The chat service publishes its runs' typed events (a `Notice` of chat/events.py: the event and its run's
ids); the server's connections subscribe and render each as its notification, encoding the frame once
per event whatever the number of subscribers (`Event.frame` caches it). A subscriber's `deliver(event)`
must not block: the server queues the bytes per connection and closes consumers that fall too far
behind.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Protocol


class Notifies(Protocol):
    """A typed event for subscribers (chat/events.py `Notice`): rendered by the door that sends it, with the
    wire's table of error codes."""

    def notification(self, code_of: Callable[[Any], int]) -> tuple[str, dict[str, Any]]: ...


class Event:
    """One event for a subscriber: a published `told` (a run's Notice), or a notification already in its
    shape (`method`, `params`: an import's progress, sent to its caller only)."""

    __slots__ = ("told", "method", "params", "frame")

    def __init__(self, method: str = "", params: dict[str, Any] | None = None, *, told: Notifies | None = None):
        self.told = told
        self.method = method
        self.params = params or {}
        self.frame: bytes | None = None  # the encoded notification, set by the first subscriber that needs it

    def notification(self, code_of: Callable[[Any], int]) -> tuple[str, dict[str, Any]]:
        """(method, params) of its JSON-RPC notification."""
        if self.told is not None:
            return self.told.notification(code_of)
        return self.method, self.params


class Subscriber(Protocol):
    """`answers`, where a subscriber has it and it is true: its client can answer a `chat.confirm` (a
    WebSocket client); the CLI's in-process caller cannot. (/v1 subscribes to nothing: it reads the run it
    started from the run's handle, chat/events.py.)"""

    subscriptions: set[str]

    def deliver(self, event: Event) -> None: ...


class EventBus:
    def __init__(self) -> None:
        self._subs: dict[str, set[Subscriber]] = defaultdict(set)
        self.relay: Callable[[str, Notifies], None] | None = None

    def subscribe(self, session_key: str, sub: Subscriber) -> None:
        self._subs[session_key].add(sub)
        sub.subscriptions.add(session_key)

    def unsubscribe(self, session_key: str, sub: Subscriber) -> bool:
        subs = self._subs.get(session_key)
        was = bool(subs and sub in subs)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[session_key]
        sub.subscriptions.discard(session_key)
        return was

    def drop(self, sub: Subscriber) -> None:
        """Forget a closed connection everywhere."""
        for key in list(sub.subscriptions):
            self.unsubscribe(key, sub)

    def answerers(self, session_key: str) -> int:
        """This gateway's subscribers of the session whose client can answer a `chat.confirm`."""
        return sum(1 for sub in self._subs.get(session_key, ()) if getattr(sub, "answers", False))

    def publish(self, session_key: str, told: Notifies) -> int:
        """Deliver to this gateway's subscribers, and hand to `relay` (other gateways on one database)."""
        if self.relay is not None:
            self.relay(session_key, told)
        return self.deliver_local(session_key, told)

    def deliver_local(self, session_key: str, told: Notifies) -> int:
        subs = self._subs.get(session_key)
        if not subs:
            return 0
        event = Event(told=told)
        for sub in list(subs):
            sub.deliver(event)
        return len(subs)
