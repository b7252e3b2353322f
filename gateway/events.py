"""Fan-out of server-pushed events to the connections subscribed to a session.

Services publish; the server's connections subscribe. A subscriber's `push(data)` must not block: the
server queues the bytes per connection and closes consumers that fall too far behind.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Protocol

from . import protocol


class Subscriber(Protocol):
    subscriptions: set[str]

    def push(self, data: bytes) -> None: ...


class EventBus:
    def __init__(self) -> None:
        self._subs: dict[str, set[Subscriber]] = defaultdict(set)

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

    def publish(self, session_key: str, method: str, params: dict[str, Any]) -> int:
        subs = self._subs.get(session_key)
        if not subs:
            return 0
        data = protocol.encode(protocol.notification(method, params))
        for sub in list(subs):
            sub.push(data)
        return len(subs)
