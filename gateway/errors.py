"""The errors the gateway means to raise: one root, a class per kind of failure, no wire codes.

    JarvisError                  root: its message is meant for the client; `data` carries details
    ├── Invalid                  a value breaks a rule; `field` names it (`params.` added at the RPC edge)
    ├── NotFound                 a session, run, agent, message or memory path does not exist
    ├── Conflict                 the state forbids it now: a run is active (RunActive), the session
    │                            exists, another process rebuilds the index, every open agent is busy,
    │                            a limit is reached (SessionLimit)
    ├── RateLimited              too many at once or too many failures; `data.retryAfterMs`
    ├── Unavailable              an upstream (chat or embedding provider) or the gateway itself (shutting
    │                            down, memory rebuilding, out of file descriptors) cannot serve now;
    │                            `data.retryable`, `retryAfterMs`
    ├── Unauthenticated          no or a wrong token
    ├── DiskFull                 a write failed for lack of space; `data.retryable`, `data.errno`
    └── ProtocolError            the frame itself (raised by protocol.py only)
        ├── ParseError           not JSON
        ├── InvalidRequest       not a request object, a bad id, a binary frame, a batch too large
        ├── MethodNotFound       no such method
        └── InternalError        anything unexpected; `data.errorId` correlates with the log

Services and storage raise these. `protocol.code_of` maps each class to its JSON-RPC code at the wire
(PROTOCOL.md §2), and nothing else knows the codes. Anything else that escapes a handler becomes an
InternalError with a correlation id; its traceback goes only to the log.
"""

from __future__ import annotations

import errno
import os
from typing import Any


class JarvisError(Exception):
    default_message = "internal error"

    def __init__(self, message: str | None = None, data: dict[str, Any] | None = None):
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)


class Invalid(JarvisError):
    """A value breaks a rule. `field` is the dotted path of the value within what the caller passed
    (``k``, ``messages[2].content``; ``""`` for the whole of it) and `rule` what it breaks; the message
    reads ``"k: must be <= 50"``. The RPC edge places the path under ``params`` (`within`)."""

    default_message = "invalid params"

    def __init__(self, rule: str, field: str | None = None, data: dict[str, Any] | None = None):
        data = dict(data or {})
        if field is not None:
            data["field"] = field
        super().__init__(f"{field}: {rule}" if field else rule, data or None)
        self.rule = rule
        self.field = field

    def within(self, parent: str) -> "Invalid":
        """The same error with its field under `parent` (``k`` → ``params.k``; ``""`` → ``params``)."""
        if self.field is None:
            return self
        field = f"{parent}.{self.field}" if self.field and not self.field.startswith("[") else parent + self.field
        return Invalid(self.rule, field, {k: v for k, v in (self.data or {}).items() if k != "field"})


class NotFound(JarvisError):
    default_message = "not found"


class Conflict(JarvisError):
    default_message = "busy"


class RunActive(Conflict):
    """A run is already active in the session; `data` names the session and the run."""

    def __init__(self, session_key: str, run_id: str):
        super().__init__(
            f"a run is already active in session {session_key}; retry when it has ended",
            {"sessionKey": session_key, "runId": run_id},
        )


class SessionLimit(Conflict):
    """An agent already holds `max` sessions: a new one is refused until some are deleted."""

    def __init__(self, agent_id: str, max_sessions: int):
        super().__init__(
            f"session limit reached: agent {agent_id!r} has {max_sessions} sessions (sessions.max); "
            f"delete some with sessions.delete or raise sessions.max",
            {"max": max_sessions},
        )


class RateLimited(JarvisError):
    default_message = "rate limited"

    def __init__(self, message: str | None = None, retry_after_ms: int = 1000):
        super().__init__(message, {"retryAfterMs": int(retry_after_ms)})


class Unavailable(JarvisError):
    default_message = "upstream unavailable"

    def __init__(self, message: str | None = None, retryable: bool = True, retry_after_ms: int | None = None):
        data: dict[str, Any] = {"retryable": retryable}
        if retry_after_ms is not None:
            data["retryAfterMs"] = int(retry_after_ms)
        super().__init__(message, data)
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms


class Unauthenticated(JarvisError):
    default_message = "unauthenticated"


class Forbidden(JarvisError):
    """The caller's principal lacks the scope a method needs (gateway/principals.py METHOD_SCOPES); the
    message names that scope, `data.scope` holds it. An agent it may not reach is NotFound instead, as
    an agent that does not exist is: a refusal there would say that the agent exists."""

    default_message = "forbidden"

    def __init__(self, method: str, scope: str, principal: str):
        super().__init__(
            f"{method} needs the {scope!r} scope, which principal {principal!r} does not have",
            {"scope": scope, "method": method},
        )


class Beyond(Forbidden):
    """A principal asked to hand out, approve or see more than it holds: a principal with agents or scopes
    beyond its own (principals.create), `proxy` from anyone but the owner, an answer to another's run's
    chat.confirm without `write` on its agent. The message says which rule; `data.field` names the param."""

    def __init__(self, message: str, data: dict[str, Any] | None = None):  # noqa: D107 - the rule is the message
        JarvisError.__init__(self, message, data)


class ProtocolError(JarvisError):
    """The frame itself is wrong; raised by protocol.py (and the server for binary frames)."""


class ParseError(ProtocolError):
    default_message = "parse error"


class InvalidRequest(ProtocolError):
    default_message = "invalid request"


class MethodNotFound(ProtocolError):
    default_message = "method not found"


class InternalError(ProtocolError):
    default_message = "internal error"


_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class DiskFull(JarvisError):
    """A write failed for lack of space (ENOSPC, EDQUOT, EFBIG, or SQLite's "database or disk is full").
    Nothing partial was kept, so the client may retry once space is freed: a clear message instead of a
    bare internal error."""

    def __init__(self, what: str, cause: str, code: str):
        super().__init__(
            f"could not save {what}: the disk is full ({code}: {cause}); free some space and retry",
            {"retryable": True, "errno": code},
        )


def disk_full(what: str, exc: BaseException) -> DiskFull | None:
    """The DiskFull that `exc` amounts to, or None when it is some other failure."""
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return DiskFull(what, exc.strerror or str(exc), errno.errorcode.get(exc.errno or 0, str(exc.errno)))
    if type(exc).__name__ == "OperationalError" and "database or disk is full" in str(exc):
        return DiskFull(what, "database or disk is full", "SQLITE_FULL")  # sqlite3 / pysqlite3
    return None


_NO_DESCRIPTORS = {errno.EMFILE, errno.ENFILE}


def out_of_descriptors(what: str, exc: BaseException) -> "Unavailable | None":
    """The retryable Unavailable that `exc` amounts to when the process (EMFILE) or the system (ENFILE)
    has no file descriptor left, else None. Nothing was written; the same request succeeds once sockets
    close, so the client is told to retry rather than shown a bare internal error. SQLite says only
    "unable to open database file" (SQLITE_CANTOPEN): that is this case when opening a file fails now."""
    if type(exc).__name__ == "OperationalError" and "unable to open database file" in str(exc):
        exc = _descriptors_left() or exc
    if not (isinstance(exc, OSError) and exc.errno in _NO_DESCRIPTORS):
        return None
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    err = Unavailable(
        f"could not open {what}: the gateway has too many files open ({code}: {exc.strerror or exc}); retry shortly",
        retryable=True,
        retry_after_ms=1000,
    )
    assert err.data is not None
    err.data["errno"] = code
    return err


def _descriptors_left() -> OSError | None:
    """The OSError of opening a file now, when that fails (EMFILE, ENFILE, …); None when it works."""
    try:
        os.close(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        return exc
    return None


# Failures that mean the database (storage.url) cannot be reached now, by class name as for SQLite's
# "disk full" above: errors.py does not import the driver.
_UNREACHABLE = {
    "PostgresConnectionError",
    "ConnectionDoesNotExistError",
    "ConnectionFailureError",
    "CannotConnectNowError",
    "TooManyConnectionsError",
    "InterfaceError",
    "ObjectNotInPrerequisiteStateError",  # the database does not accept connections now
    "AdminShutdownError",
    "CrashShutdownError",  # the server ended the connection
    "InternalClientError",
}  # the driver's state after a connection ended mid-operation


def _raised_in_driver(exc: BaseException) -> bool:
    """Whether `exc` came up through the database driver's own code (its traceback passes asyncpg's
    frames): an OSError there is the database that cannot be reached, whatever its errno."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").startswith("asyncpg"):
            return True
        tb = tb.tb_next
    return False


def storage_unreachable(exc: BaseException) -> Unavailable | None:
    """The Unavailable that `exc` amounts to when it says the database cannot be reached, else None.
    For a gateway on a database only (a refused connection is then the database's). Every way of not
    reaching it counts, over TCP or a Unix socket: the driver's own errors for a connection that ended
    or is refused (by class name), a refused or reset connection, and any OSError raised while the driver
    connected or talked (a socket file that is missing or not a socket, no permission on it, a host name
    that does not resolve, a timeout, a TLS handshake that failed)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    driver = type(exc).__module__.startswith("asyncpg")
    if (
        (driver and names & _UNREACHABLE)
        or isinstance(exc, ConnectionError)
        or (isinstance(exc, OSError) and (driver or _raised_in_driver(exc)))
    ):
        return Unavailable(
            f"the database cannot be reached ({type(exc).__name__}: {str(exc)[:200]}); retry shortly",
            retryable=True,
            retry_after_ms=1000,
        )
    return None
