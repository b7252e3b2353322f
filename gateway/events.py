"""Fan-out of server-pushed events to the connections subscribed to a session.

Services publish (method, params); the server's connections subscribe and encode the frame (once per
event, whatever the number of subscribers: `Event.frame` caches it). A subscriber's `deliver(event)`
must not block: the server queues the bytes per connection and closes consumers that fall too far
behind.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Protocol


class Event:
    __slots__ = ("method", "params", "frame")

    def __init__(self, method: str, params: dict[str, Any]):
        self.method = method
        self.params = params
        self.frame: bytes | None = None  # the encoded notification, set by the first subscriber that needs it


class Subscriber(Protocol):
    """`answers`, where a subscriber has it and it is true: its client can answer a `chat.confirm` (a
    WebSocket client); the CLI's in-process caller cannot. (/v1 subscribes to nothing: it reads the run it
    started from the run's handle, chat/events.py.)"""

    subscriptions: set[str]

    def deliver(self, event: Event) -> None: ...


class EventBus:
    def __init__(self) -> None:
        self._subs: dict[str, set[Subscriber]] = defaultdict(set)
        self.relay: Callable[[str, str, dict[str, Any]], None] | None = None

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

    def publish(self, session_key: str, method: str, params: dict[str, Any]) -> int:
        """Deliver to this gateway's subscribers, and hand to `relay` (other gateways on one database)."""
        if self.relay is not None:
            self.relay(session_key, method, params)
        return self.deliver_local(session_key, method, params)

    def deliver_local(self, session_key: str, method: str, params: dict[str, Any]) -> int:
        subs = self._subs.get(session_key)
        if not subs:
            return 0
        event = Event(method, params)
        for sub in list(subs):
            sub.deliver(event)
        return len(subs)
