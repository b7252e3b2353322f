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
    """43 URL-safe characters, never starting with "-": one that did (1 in 64) would be read as an
    option when passed on a command line (`jarvis mcp --token …`, curl, wscat)."""
    while (token := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return token


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
    """Counts failed authentications per peer address in a sliding minute.

    It never refuses the right token: past `per_minute` failures, wrong tokens are answered with
    "rate limited" instead of "invalid token" (and every wrong answer is slowed down by the server)."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self._fails: dict[str, deque[float]] = defaultdict(deque)

    def _window(self, peer: str, now: float) -> deque[float]:
        q = self._fails[peer]
        while q and q[0] <= now - 60:
            q.popleft()
        return q

    def failed(self, peer: str) -> float:
        """Record a failure; → seconds until `peer` is back under its budget (0 when it is now)."""
        now = time.monotonic()
        q = self._window(peer, now)
        q.append(now)
        if len(q) > self.per_minute * 2:  # the window only needs to say when the budget frees up
            q.popleft()
        if len(self._fails) > 10_000:  # bound memory under a flood of distinct peers
            for key in [k for k, v in self._fails.items() if not v or v[-1] <= now - 60]:
                del self._fails[key]
        if len(q) <= self.per_minute:
            return 0.0
        return max(0.001, q[-self.per_minute - 1] + 60 - now)
