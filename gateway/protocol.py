"""JSON-RPC 2.0 frames: parse and validate incoming text, build outgoing objects. Pure: no sockets,
no asyncio. Lenient on input (`"jsonrpc":"2.0"` optional), strict on output (always present).

    parse(text)  -> Frame: a single Request, a batch (list of Request | error response), or an error
    response(id, result) / error_response(id, JarvisError) / notification(method, params)
    code_of(JarvisError) -> int: the one place that maps the error classes to JSON-RPC codes
    error_of(error object) -> JarvisError: a client's way back, from a gateway's answer to the class
    encode(obj)  -> bytes (UTF-8 JSON, to be sent as a text frame)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from . import errors as e
from .errors import InvalidRequest, JarvisError, ParseError

JSONRPC = "2.0"
MAX_BATCH = 50
_NO_ID = object()


@dataclass(slots=True)
class Request:
    method: str
    params: Any = None
    id: Any = _NO_ID

    @property
    def is_notification(self) -> bool:
        return self.id is _NO_ID

    @property
    def reply_id(self) -> Any:
        return None if self.id is _NO_ID else self.id


@dataclass(slots=True)
class Frame:
    """What one incoming text frame holds.

    - `requests`: validated requests (one for a single frame, several for a batch);
    - `errors`: error responses to send for invalid entries (for a batch they join the answer array);
    - `batch`: whether the frame was an array (the answer is then an array too);
    - `auth_token`: set when the frame is the `{"type":"auth","token":…}` form.
    """

    requests: list[Request] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    batch: bool = False
    auth_token: str | None = None
    auth_frame: bool = False


def encode(obj: Any) -> bytes:
    return orjson.dumps(obj)


def response(req_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": req_id, "result": result}


# PROTOCOL.md §2. Most specific class first: DiskFull and InternalError share -32603.
CODES: tuple[tuple[type[JarvisError], int], ...] = (
    (e.ParseError, -32700),
    (e.InvalidRequest, -32600),
    (e.MethodNotFound, -32601),
    (e.Invalid, -32602),
    (e.DiskFull, -32603),
    (e.InternalError, -32603),
    (e.Unauthenticated, -32001),
    (e.Forbidden, -32003),
    (e.NotFound, -32004),
    (e.Conflict, -32009),
    (e.RateLimited, -32029),
    (e.Unavailable, -32050),
)


def code_of(err: JarvisError) -> int:
    """The JSON-RPC error code of an error (-32603 for a class the table does not name)."""
    for cls, code in CODES:
        if isinstance(err, cls):
            return code
    return -32603


def error_object(err: JarvisError) -> dict[str, Any]:
    obj: dict[str, Any] = {"code": code_of(err), "message": err.message}
    if err.data:
        obj["data"] = err.data
    return obj


def error_of(error: Any) -> JarvisError:
    """The JarvisError that a JSON-RPC error object of a gateway stands for: the class of its code (the
    first of CODES; -32603 is InternalError), its message and data, an Invalid's field and rule. For
    clients of the WebSocket (`jarvis …`, `jarvis mcp`) that answer in their own shape, as the doors do."""
    obj = error if isinstance(error, dict) else {}
    code, data = obj.get("code"), obj.get("data")
    message = str(obj.get("message") or "")
    data = data if isinstance(data, dict) else None
    if code == -32602:
        field = data.get("field") if data else None
        field = field if isinstance(field, str) else None
        rule = message[len(field) + 2 :] if field and message.startswith(f"{field}: ") else message
        return e.Invalid(rule, field if rule != message else None, data)
    cls = next((c for c, n in CODES if n == code and c is not e.DiskFull), JarvisError)
    err = cls.__new__(cls)
    JarvisError.__init__(err, message, data)
    if isinstance(err, e.Unavailable):
        err.retryable = bool((data or {}).get("retryable", True))
        err.retry_after_ms = (data or {}).get("retryAfterMs")
    return err


def error_response(req_id: Any, err: JarvisError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": req_id, "error": error_object(err)}


def notification(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "method": method, "params": params}


def _valid_id(value: Any) -> bool:
    return (isinstance(value, str) and len(value) <= 256) or (
        isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63
    )


def to_request(obj: Any) -> Request:
    """Validate one decoded request object; raises InvalidRequest naming the member at fault."""
    if not isinstance(obj, dict):
        raise InvalidRequest(f"request must be an object, got {type(obj).__name__ if obj is not None else 'null'}")
    if "jsonrpc" in obj and obj["jsonrpc"] != JSONRPC:
        raise InvalidRequest('jsonrpc: must be "2.0" when present')
    req_id = obj.get("id", _NO_ID)
    if req_id is not _NO_ID and not _valid_id(req_id):
        raise InvalidRequest("id: must be a string (≤ 256 chars) or an integer")
    method = obj.get("method")
    if not isinstance(method, str) or not method:
        raise InvalidRequest("method: required, a non-empty string")
    if len(method) > 128:
        raise InvalidRequest("method: at most 128 characters")
    return Request(method=method, params=obj.get("params"), id=req_id)


def _entry(obj: Any, frame: Frame) -> None:
    try:
        frame.requests.append(to_request(obj))
    except InvalidRequest as exc:
        # Echo the id when it was itself valid, so the client can match the error to its request.
        rid = obj.get("id") if isinstance(obj, dict) and _valid_id(obj.get("id")) else None
        frame.errors.append(error_response(rid, exc))


def parse(text: str | bytes) -> Frame:
    """Decode and validate a text frame. Never raises: problems come back as error responses."""
    frame = Frame()
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        frame.errors.append(error_response(None, ParseError(f"parse error: {exc.msg} at position {exc.pos}")))
        return frame
    if isinstance(obj, list):
        frame.batch = True
        if not obj:
            frame.batch = False
            frame.errors.append(error_response(None, InvalidRequest("batch: must not be empty")))
        elif len(obj) > MAX_BATCH:
            frame.batch = False
            frame.errors.append(
                error_response(None, InvalidRequest(f"batch: at most {MAX_BATCH} entries, got {len(obj)}"))
            )
        else:
            for item in obj:
                _entry(item, frame)
        return frame
    if isinstance(obj, dict) and obj.get("type") == "auth" and "method" not in obj:
        frame.auth_frame = True
        token = obj.get("token")
        frame.auth_token = token if isinstance(token, str) else None
        return frame
    _entry(obj, frame)
    return frame
