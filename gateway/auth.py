"""The shared bearer token and the failed-auth limiter.

The token comes from config (`JARVIS_GATEWAY_TOKEN`) or from `<stateDir>/gateway.token` (0600),
generated on first start. The file is re-read when it changes, so `jarvis token --rotate` takes
effect for new connections without a restart. Comparison is constant-time; the token is never logged.

One token rule (`token_problem`), for every place a token is set and every door it is shown at: a
token is 16 to 512 visible ASCII characters (no space, tab, control or non-ASCII character), so it
reads the same in a JSON frame, an HTTP header (Latin-1 on the wire, its surrounding blanks dropped by
every HTTP parser) and a command line. A configured token (config.toml, JARVIS_GATEWAY_TOKEN, the token
file) that breaks it is refused at start, naming the rule; a presented one (`TokenStore.check`, on
every door) loses the spaces and tabs around it, as a header's value does, and is refused when what
is left breaks it.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import time
from collections import defaultdict, deque
from pathlib import Path

import structlog

from .fsutil import atomic_write, ensure_private_dir

log = structlog.get_logger("gateway.auth")

MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 512  # well inside every HTTP parser's header line (websockets: 8 KiB)
TOKEN_RULE = (
    f"{MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} visible ASCII characters (letters, digits, punctuation; "
    "no space, tab, control or non-ASCII character)"
)
_TOKEN = re.compile(rf"[\x21-\x7e]{{{MIN_TOKEN_CHARS},{MAX_TOKEN_CHARS}}}")


class TokenError(ValueError):
    """A configured token (or the token file) breaks the token rule; the message says which and why."""


def token_problem(token: str) -> str | None:
    """Why `token` cannot be the gateway's token (the one rule, see above), or None when it can."""
    if _TOKEN.fullmatch(token):
        return None
    if len(token) < MIN_TOKEN_CHARS:
        return f"must be at least {MIN_TOKEN_CHARS} characters, got {len(token)}: a short token can be guessed"
    if len(token) > MAX_TOKEN_CHARS:
        return f"must be at most {MAX_TOKEN_CHARS} characters, got {len(token)}"
    bad = next(ch for ch in token if not "\x21" <= ch <= "\x7e")
    what = "a space" if bad == " " else "a tab" if bad == "\t" else f"the character U+{ord(bad):04X}"
    return f"must be {TOKEN_RULE}; it holds {what}"


def presented(candidate: object) -> str | None:
    """A token as a client presented it, on any door: the spaces and tabs around it dropped (an HTTP
    header's value loses them on the way), None when it is no string or what is left breaks the rule."""
    if not isinstance(candidate, str):
        return None
    candidate = candidate.strip(" \t")
    return candidate if _TOKEN.fullmatch(candidate) else None


def new_token() -> str:
    """43 URL-safe characters, never starting with "-": one that did (1 in 64) would be read as an
    option when passed on a command line (`jarvis mcp --token …`, curl, wscat)."""
    while (token := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return token


def read_token_file(path: Path) -> str | None:
    """The token in `path` (its surrounding whitespace, a final newline, dropped); None when there is
    none. TokenError when what is there breaks the token rule."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise TokenError(f"{path}: the token must be {TOKEN_RULE}; the file is not UTF-8 text") from None
    if not text:
        return None
    problem = token_problem(text)
    if problem:
        raise TokenError(f"{path}: the token {problem} (`jarvis token --rotate` writes a new one)")
    return text


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
    """The token in effect: the configured one, else the token file's (re-read when it changes; a
    change that breaks the token rule is logged and the previous token stays)."""

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
            try:
                token = read_token_file(self.path)
            except TokenError as exc:
                if self._token is None:
                    raise
                log.error("token file refused; the previous token stays in effect", error=str(exc))
                self._stamp = stamp  # said once per change of the file
                token = None
            if token:
                self._token, self._stamp = token, stamp
        return self._token or self.load()

    def check(self, candidate: object) -> bool:
        """Whether `candidate`, as a client presented it on any door, is the token (constant time)."""
        token = presented(candidate)
        if token is None:
            return False
        return hmac.compare_digest(token.encode("ascii"), self.current().encode("ascii"))


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
