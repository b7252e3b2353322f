"""Errors that cross the wire, one class per JSON-RPC code (PROTOCOL.md §2).

    -32700 ParseError             malformed JSON (answered with id null)
    -32600 InvalidRequest         not an object, bad id, binary frame, batch too large
    -32601 MethodNotFound         no such method
    -32602 InvalidParams          message names the field and the rule, data.field the path
    -32603 InternalError          unexpected failure; data.errorId correlates with the log
           DiskFull               a write failed for lack of space; data.retryable, data.errno
    -32001 Unauthenticated        no or wrong token (the socket then closes with 1008)
    -32004 NotFound               session, run, memory path
    -32009 Busy                   conflict, e.g. a run already active in the session
    -32029 RateLimited            data.retryAfterMs
    -32050 UpstreamUnavailable    LLM or embedding provider; data.retryable, data.retryAfterMs

Services raise these; the protocol layer turns them into error objects. Anything else that escapes a
handler becomes an InternalError with a correlation id, and its traceback goes only to the log.
"""

from __future__ import annotations

import errno
from typing import Any


class GatewayError(Exception):
    code: int = -32603
    default_message = "internal error"

    def __init__(self, message: str | None = None, data: dict[str, Any] | None = None):
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)

    def to_error(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data:
            err["data"] = self.data
        return err


class ParseError(GatewayError):
    code = -32700
    default_message = "parse error"


class InvalidRequest(GatewayError):
    code = -32600
    default_message = "invalid request"


class MethodNotFound(GatewayError):
    code = -32601
    default_message = "method not found"


class InvalidParams(GatewayError):
    """Invalid params. `field` is the dotted path of the offending value, e.g. ``params.k``."""

    code = -32602
    default_message = "invalid params"

    def __init__(self, message: str, field: str | None = None, data: dict[str, Any] | None = None):
        data = dict(data or {})
        if field is not None:
            data["field"] = field
        super().__init__(message, data or None)
        self.field = field


class InternalError(GatewayError):
    code = -32603
    default_message = "internal error"


class Unauthenticated(GatewayError):
    code = -32001
    default_message = "unauthenticated"


class NotFound(GatewayError):
    code = -32004
    default_message = "not found"


class Busy(GatewayError):
    code = -32009
    default_message = "busy"


class RateLimited(GatewayError):
    code = -32029
    default_message = "rate limited"

    def __init__(self, message: str | None = None, retry_after_ms: int = 1000):
        super().__init__(message, {"retryAfterMs": int(retry_after_ms)})


class UpstreamUnavailable(GatewayError):
    code = -32050
    default_message = "upstream unavailable"

    def __init__(
        self,
        message: str | None = None,
        retryable: bool = True,
        retry_after_ms: int | None = None,
    ):
        data: dict[str, Any] = {"retryable": retryable}
        if retry_after_ms is not None:
            data["retryAfterMs"] = int(retry_after_ms)
        super().__init__(message, data)
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms


_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class DiskFull(InternalError):
    """A write failed for lack of space (ENOSPC, EDQUOT, EFBIG, or SQLite's "database or disk is full").
    Nothing partial was kept, so the client may retry once space is freed: a clear message instead of a
    bare internal error."""

    def __init__(self, what: str, cause: str, code: str):
        super().__init__(f"could not save {what}: the disk is full ({code}: {cause}); free some space and retry",
                         {"retryable": True, "errno": code})


def disk_full(what: str, exc: BaseException) -> DiskFull | None:
    """The DiskFull that `exc` amounts to, or None when it is some other failure."""
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return DiskFull(what, exc.strerror or str(exc), errno.errorcode.get(exc.errno or 0, str(exc.errno)))
    if type(exc).__name__ == "OperationalError" and "database or disk is full" in str(exc):
        return DiskFull(what, "database or disk is full", "SQLITE_FULL")  # sqlite3 / pysqlite3
    return None
