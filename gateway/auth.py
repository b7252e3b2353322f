"""The shared bearer token and the failed-auth limiter.

The token comes from config (`JARVIS_GATEWAY_TOKEN`) or from `<stateDir>/gateway.token` (0600),
generated on first start. The file is re-read when it changes, so `jarvis token --rotate` takes
effect for new connections without a restart. Comparison is constant-time; the token is never logged.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections import defaultdict, deque
from pathlib import Path

from .fsutil import atomic_write, ensure_private_dir


def new_token() -> str:
    return secrets.token_urlsafe(32)


def read_token_file(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text or None


def ensure_token_file(path: Path, rotate: bool = False) -> str:
    """Return the token in `path`, creating (or, with rotate, replacing) it owner-only."""
    ensure_private_dir(path.parent)
    token = None if rotate else read_token_file(path)
    if token is None:
        token = new_token()
        atomic_write(path, (token + "\n").encode())
    elif path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return token


class TokenStore:
    def __init__(self, fixed: str | None, path: Path):
        self.fixed = fixed or None
        self.path = path
        self._token: str | None = None
        self._stamp: tuple[int, int] | None = None

    def load(self) -> str:
        if self.fixed:
            return self.fixed
        self._token = ensure_token_file(self.path)
        st = self.path.stat()
        self._stamp = (st.st_mtime_ns, st.st_size)
        return self._token

    def current(self) -> str:
        if self.fixed:
            return self.fixed
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if self._token is None or (stamp is not None and stamp != self._stamp):
            token = read_token_file(self.path)
            if token:
                self._token, self._stamp = token, stamp
        return self._token or self.load()

    def check(self, candidate: object) -> bool:
        if not isinstance(candidate, str) or not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.current().encode())


class AuthLimiter:
    """At most `per_minute` failed authentications per peer address in a sliding minute."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self._fails: dict[str, deque[float]] = defaultdict(deque)

    def _window(self, peer: str, now: float) -> deque[float]:
        q = self._fails[peer]
        while q and q[0] <= now - 60:
            q.popleft()
        return q

    def blocked_for(self, peer: str) -> float:
        """Seconds until `peer` may try again (0 when it may now)."""
        now = time.monotonic()
        q = self._window(peer, now)
        if len(q) < self.per_minute:
            if not q:
                self._fails.pop(peer, None)
            return 0.0
        return max(0.0, q[0] + 60 - now)

    def failed(self, peer: str) -> None:
        now = time.monotonic()
        self._window(peer, now).append(now)
        if len(self._fails) > 10_000:  # bound memory under a flood of distinct peers
            for key in [k for k, q in self._fails.items() if not q or q[-1] <= now - 60]:
                del self._fails[key]
