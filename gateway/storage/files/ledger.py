"""The files engine's RunLedger (storage/base.py): idempotency keys in this process's memory; active
runs are the chat service's own table (one gateway on a state dir). The PostgreSQL engine's,
storage/postgres/ledger.py, keeps both in the database so several gateways share them.
"""

from __future__ import annotations

import time


class LocalRunLedger:
    """In memory. Runs are tracked by the chat service itself; only idempotency keys live here."""

    shared = False  # True: other gateways see these records

    def __init__(self, ttl: float, keys: dict[tuple[str, str], tuple[str, float]] | None = None):
        self.ttl = ttl
        # (sessionKey, idempotencyKey) → (runId, expiry); may be owned by the caller so that it outlives
        # a chat service closed with its idle agent.
        self._keys: dict[tuple[str, str], tuple[str, float]] = {} if keys is None else keys

    async def seen(self, session: str, key: str) -> str | None:
        now = time.monotonic()
        while self._keys:  # insertion order is expiry order (one TTL): drop from the front
            first = next(iter(self._keys))
            if self._keys[first][1] >= now:
                break
            del self._keys[first]
        hit = self._keys.get((session, key))
        return hit[0] if hit is not None and hit[1] >= now else None

    async def remember(self, session: str, key: str, run_id: str) -> None:
        self._keys.pop((session, key), None)  # to the back: insertion order stays expiry order
        self._keys[(session, key)] = (run_id, time.monotonic() + self.ttl)

    async def claim(self, session: str, run_id: str) -> str | None:
        return None  # the chat service's own table of active runs is the whole truth here

    async def release(self, session: str, run_id: str) -> None:
        return None

    async def holder(self, session: str) -> tuple[str, str] | None:
        return None

    async def forget_session(self, session: str) -> None:
        for k in [k for k in self._keys if k[0] == session]:
            del self._keys[k]
