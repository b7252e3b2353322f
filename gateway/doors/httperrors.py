"""The HTTP API's answers in OpenAI's error shape, which MCP clients read as well as OpenAI SDKs do: the
guard's refusals, a body refused while it is read (`BodyRefused`), and the one error value of a call
(dispatcher.py) by its class (`http_error`: status, type, code, `Retry-After` for what may be retried)."""

from __future__ import annotations

from typing import Any, Callable

import orjson

from .. import errors as e

Send = Callable[[dict[str, Any]], Any]


def error_body(status: int, message: str, *, type_: str, code: str | None = None, param: str | None = None) -> bytes:
    """OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def json_error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """A Starlette response in OpenAI's error shape."""
    from starlette.responses import Response

    body = error_body(status, message, type_=type_, code=code, param=param)
    return Response(body, status, media_type="application/json", headers=headers)


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    await send_json(send, status, error_body(status, message, type_=type_, code=code, param=param), headers)


async def send_json(send: Send, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    """A whole JSON answer over ASGI `send`."""
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# The one error value of a call (dispatcher.py) over HTTP, by its class (most specific first): the status,
# OpenAI's error `type`, and its `code`.
HTTP_ERRORS: tuple[tuple[type[e.JarvisError], int, str, str], ...] = (
    (e.Invalid, 400, "invalid_request_error", "invalid_value"),
    (e.ParseError, 400, "invalid_request_error", "invalid_json"),
    (e.InvalidRequest, 400, "invalid_request_error", "invalid_request"),
    (e.Unauthenticated, 401, "authentication_error", "invalid_api_key"),
    (e.Forbidden, 403, "permission_error", "insufficient_scope"),
    (e.MethodNotFound, 404, "invalid_request_error", "not_found"),
    (e.NotFound, 404, "invalid_request_error", "not_found"),
    (e.SessionLimit, 409, "conflict_error", "session_limit"),
    (e.RunActive, 409, "conflict_error", "session_busy"),
    (e.Conflict, 409, "conflict_error", "conflict"),
    (e.RateLimited, 429, "rate_limit_error", "rate_limited"),
    (e.DiskFull, 507, "server_error", "insufficient_storage"),
    (e.Unavailable, 503, "server_error", "unavailable"),
)


def http_error(
    err: e.JarvisError, *, param: str | None = None, message: str | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers) of an error value (`http_parts`) in OpenAI's error shape."""
    status, type_, code, text, headers = http_parts(err, message=message)
    return status, error_body(status, text, type_=type_, code=code, param=param), headers


def http_parts(err: e.JarvisError, *, message: str | None = None) -> tuple[int, str, str, str, dict[str, str]]:
    """(status, type, code, message, headers) of an error value: 500 `internal_error` for a class the table
    does not name; `Retry-After` (whole seconds, at least 1) when the error says when to retry or is
    retryable; the message names its errorId when it has one."""
    status, type_, code = next(
        ((s, t, c) for cls, s, t, c in HTTP_ERRORS if isinstance(err, cls)), (500, "server_error", "internal_error")
    )
    if isinstance(err, e.Invalid):
        code = _invalid_code(err.rule)
    data = err.data or {}
    headers: dict[str, str] = {}
    if isinstance(data.get("retryAfterMs"), int):
        headers["Retry-After"] = str(max(1, -(-data["retryAfterMs"] // 1000)))
    elif isinstance(err, e.Unavailable) and err.retryable:
        headers["Retry-After"] = "1"
    text = message or err.message
    if data.get("errorId"):
        text += f" (errorId {data['errorId']})"
    return status, type_, code, text, headers


def _invalid_code(rule: str) -> str:
    if rule.startswith("required"):
        return "missing_required_parameter"
    if rule.startswith(("must be a ", "must be an ", "must be true or false")):
        return "invalid_type"
    return "invalid_value"


class BodyRefused(Exception):
    """Raised from `receive()` for a request body past `server.httpMaxBodyBytes` (413) or not all in
    within `server.httpBodyTimeout` of the first read (408: a client trickling it would hold the
    request, its task and its socket for good)."""

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    async def send_to(self, send: Send) -> None:
        await send_error(send, self.status, self.message, type_="invalid_request_error", code=self.code)

    @classmethod
    def too_large(cls, limit: int) -> "BodyRefused":
        return cls(413, f"request body is over {limit} bytes (server.httpMaxBodyBytes)", "request_too_large")
