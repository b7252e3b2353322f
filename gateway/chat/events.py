"""A chat run as its starter sees it: a handle that is an async iterator of typed events.

    handle = await chat.relay(key, turn)          # RunHandle: run_id, session_key, captured
    async for event in handle:                    # Recalled, Noted, Said, ToolCalled, ConfirmAsked, Chunk …,
        ...                                       # Completed, then one end: Final, Failed (the domain
                                                  # error) or Aborted

The runner tells the handle what the run does as it does it; a door renders the events in its own shape
(doors/openaistream.py: chat completions and Responses, JSON or SSE) and never rebuilds what a run is.
The same run's events reach the session's subscribers on any gateway through the event bus, typed: each
a `Notice` (the event, numbered within its run). A subscriber renders it (`Notice.notification`, given
the wire's table of error codes): `chat.delta`, `chat.tool`, `chat.confirm`, `chat.final`, `chat.error`,
`chat.aborted`, as PROTOCOL.md has them. Another gateway receives it through the database as JSON in one
codec (`encode` / `decode`: a type tag and the event's fields) and renders it the same way there.

A slow reader holds the run back: past HANDLE_HIGH chunks waiting, the next one waits for room, for as long as a
WebSocket subscriber may take (server.slowConsumerSeconds), then the run fails retryable.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from .. import errors
from ..errors import JarvisError, Unavailable

HANDLE_HIGH = 256  # chunks waiting for a slow reader before the upstream is no longer read


@dataclass(frozen=True, slots=True)
class Recalled:
    """What memory recalled into the request, before the upstream is asked."""

    hits: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Noted:
    """Something of the request the gateway left out (a hosted tool a chat upstream cannot run)."""

    note: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of the upstream's streamed answer, as it came: a chat completion chunk, or a Responses
    event."""

    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Completed:
    """The upstream's whole answer to a request that did not stream: a completion, or a response."""

    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Said:
    """A piece of the reply's text, as the run takes it (`chat.delta`)."""

    text: str

    def notification(self, code_of: Callable[[JarvisError], int]) -> tuple[str, dict[str, Any]]:
        return "chat.delta", {"delta": self.text}


@dataclass(frozen=True, slots=True)
class ToolCalled:
    """One of the model's tool calls: `running` before it runs, then `ok` or `error` with its summary
    (`chat.tool`)."""

    call_id: str
    name: str
    arguments: str
    status: str
    summary: str | None = None

    def notification(self, code_of: Callable[[JarvisError], int]) -> tuple[str, dict[str, Any]]:
        return "chat.tool", {
            "callId": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "status": self.status,
            "summary": self.summary,
        }


@dataclass(frozen=True, slots=True)
class ConfirmAsked:
    """A destructive tool call waits for a client's `chat.confirm` (chat/confirm.py) for `timeout_seconds`."""

    call_id: str
    name: str
    arguments: str
    summary: str
    timeout_seconds: float

    def notification(self, code_of: Callable[[JarvisError], int]) -> tuple[str, dict[str, Any]]:
        return "chat.confirm", {
            "callId": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "summary": self.summary,
            "timeoutSeconds": self.timeout_seconds,
        }


@dataclass(frozen=True, slots=True)
class Final:
    """The run's reply, saved: `chat.final`'s params (message, memory, usage, truncated)."""

    params: dict[str, Any]

    @property
    def truncated(self) -> bool:
        return bool(self.params.get("truncated"))

    def notification(self, code_of: Callable[[JarvisError], int]) -> tuple[str, dict[str, Any]]:
        return "chat.final", self.params


@dataclass(frozen=True, slots=True)
class Failed:
    """The run failed with `error`, the domain error (an upstream's refusal is an UpstreamError)."""

    error: JarvisError
    retryable: bool

    def notification(self, code_of: Callable[[JarvisError], int]) -> tuple[str, dict[str, Any]]:
        # the bus's form (PROTOCOL.md §4): the JSON-RPC code of the error
        error = {"code": code_of(self.error), "message": self.error.message, "retryable": self.retryable}
        return "chat.error", {"error": error}


@dataclass(frozen=True, slots=True)
class Aborted:
    """The run was stopped (chat.abort, the client gone, or the gateway stopping: `reason` "shutdown");
    `partial` is what it had said."""

    partial: str
    reason: str | None = None

    def notification(self, code_of: Callable[[JarvisError], int]) -> tuple[str, dict[str, Any]]:
        return "chat.aborted", {"partial": self.partial, **({"reason": self.reason} if self.reason else {})}


End = Union[Final, Failed, Aborted]
# what the session's subscribers hear too (the runner publishes them on the bus, each in a Notice)
Told = Union[Said, ToolCalled, ConfirmAsked, Final, Failed, Aborted]
RunEvent = Union[Recalled, Noted, Chunk, Completed, Said, ToolCalled, ConfirmAsked, Final, Failed, Aborted]
ENDS = (Final, Failed, Aborted)


@dataclass(frozen=True, slots=True)
class Notice:
    """What the session's subscribers hear of a run (the event bus's message): one of its events, numbered
    by `seq` within the run."""

    session_key: str
    run_id: str
    seq: int
    event: Told

    def notification(self, code_of: Callable[[JarvisError], int]) -> tuple[str, dict[str, Any]]:
        """Its JSON-RPC notification (PROTOCOL.md §4): `code_of` is the wire's table of error codes."""
        method, params = self.event.notification(code_of)
        return method, {"sessionKey": self.session_key, "runId": self.run_id, "seq": self.seq, **params}


# ---- one codec, for the notices that cross gateways (cluster.py relays them through the database) ---------
_TOLD: dict[str, type] = {cls.__name__: cls for cls in (Said, ToolCalled, ConfirmAsked, Final, Failed, Aborted)}


def encode(notice: Notice) -> dict[str, Any]:
    """A notice as JSON: the run's ids and `seq`, the event's type and its fields; a failure's error as its
    domain class (the nearest of gateway/errors.py, e.g. Unavailable for an upstream's), message and data."""
    event = notice.event
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    if isinstance(event, Failed):
        kind = next(c for c in type(event.error).__mro__ if getattr(errors, c.__name__, None) is c)
        fields["error"] = {"class": kind.__name__, "message": event.error.message, "data": event.error.data}
    return {
        "sessionKey": notice.session_key,
        "runId": notice.run_id,
        "seq": notice.seq,
        "type": type(event).__name__,
        "fields": fields,
    }


def decode(obj: Any) -> Notice | None:
    """The notice `encode` made, or None for anything else (a message of another version, or damaged)."""
    try:
        cls, fields = _TOLD[obj["type"]], dict(obj["fields"])
        if cls is Failed:
            fields["error"] = _error(fields["error"])
        notice = Notice(str(obj["sessionKey"]), str(obj["runId"]), int(obj["seq"]), cls(**fields))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return notice


def _error(obj: dict[str, Any]) -> JarvisError:
    cls = getattr(errors, obj["class"])
    if not (isinstance(cls, type) and issubclass(cls, JarvisError)):
        raise TypeError(obj["class"])
    data = obj.get("data") if isinstance(obj.get("data"), dict) else None
    err = cls.__new__(cls)
    JarvisError.__init__(err, str(obj["message"]), data)
    if isinstance(err, errors.Unavailable):
        err.retryable = bool((data or {}).get("retryable", True))
        err.retry_after_ms = (data or {}).get("retryAfterMs")
    if isinstance(err, errors.Invalid):
        err.field, err.rule = (data or {}).get("field"), err.message
    return err


@dataclass(eq=False)
class RunHandle:
    """A started run: its ids, and its events in order until its end (an async iterator)."""

    slow_consumer_seconds: float
    run_id: str = ""
    session_key: str = ""
    captured: bool = True  # whether the turn is kept in its session (not a side request's)
    response_id: str | None = None  # /v1/responses: the response's id
    ended: bool = False  # the end was read
    _chunks: int = 0  # chunks waiting for the reader
    _queue: asyncio.Queue[RunEvent] = field(default_factory=asyncio.Queue)
    _room: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._room.set()

    # ---- the run's side ----------------------------------------------------------------------------------
    def tell(self, event: RunEvent) -> None:
        """An event that never waits (what was recalled, a note, the end)."""
        self._queue.put_nowait(event)

    async def put(self, event: RunEvent) -> None:
        """A piece of the answer: waits while the reader is HANDLE_HIGH behind; Unavailable (retryable) when it
        read nothing for server.slowConsumerSeconds."""
        self._queue.put_nowait(event)
        self._chunks += 1
        if self._chunks < HANDLE_HIGH:
            return
        self._room.clear()
        wait = self.slow_consumer_seconds
        try:  # as long as a WebSocket subscriber may take: a client that never reads holds nothing
            async with asyncio.timeout(wait):
                await self._room.wait()
        except TimeoutError:
            raise Unavailable(
                f"the client read nothing of the stream for {wait:g} s "
                "(server.slowConsumerSeconds): the reply was stopped",
                retryable=True,
            ) from None

    # ---- the reader's side -------------------------------------------------------------------------------
    def __aiter__(self) -> "RunHandle":
        return self

    async def __anext__(self) -> RunEvent:
        if self.ended:
            raise StopAsyncIteration
        event = await self._queue.get()
        if isinstance(event, Chunk):
            self._chunks -= 1
            if self._chunks < HANDLE_HIGH // 2:
                self._room.set()
        if isinstance(event, ENDS):
            self.ended = True
        return event
