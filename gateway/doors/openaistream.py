"""How /v1 renders a chat run: the events of its handle (chat/events.py) as OpenAI's answers.

    answer = await reply(handle, body, chat_frames)  # /v1/chat/completions: `data: <chunk>` … [DONE]
    answer = await reply(handle, body, response_frames)  # /v1/responses: `event: <type>` `data: <event>`
    answer.headers; answer.body or answer.frames     # the whole JSON once the run ended, or its SSE stream
                                                     # from its first chunk; ApiError when it failed first

What was recalled is told in the `X-Jarvis-Memory` response header (compact JSON, at most
MEMORY_HEADER_BYTES) and in a `jarvis` field of the last chunk (or of the completion object, or of the
response of the last Responses event). A new streaming door is another such renderer of the same events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Callable

import orjson

from ..chat.events import Aborted, Chunk, Completed, End, Failed, Final, Noted, Recalled, RunHandle
from ..chat.providers import UpstreamError
from ..chat.relay import choices
from ..chat.respevents import DONE
from ..errors import Invalid, JarvisError
from ..memory.present import references
from .httperrors import http_parts, json_error

MEMORY_HEADER_BYTES = 4096  # X-Jarvis-Memory: whole entries only, the best first


class ApiError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param
        self.headers = headers

    @classmethod
    def of(cls, err: JarvisError) -> "ApiError":
        """The one error value of a call of this door, with `param` and the message naming what the
        client sent: a member of its body, or the X-Jarvis-Session header."""
        param = message = None
        if isinstance(err, Invalid) and err.field is not None:
            field = err.field.removeprefix("params.")
            if field == "request":  # the body itself
                return cls(400, f"the request body {err.rule}", code="invalid_json")
            param = "X-Jarvis-Session" if field == "session" else field.removeprefix("request.")
            message = f"{param}: {err.rule}"
        status, type_, code, text, headers = http_parts(err, message=message)
        return cls(status, text, type_=type_, code=code, param=param, headers=headers)

    def body(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def response(self) -> Any:
        return json_error(
            self.status, self.message, type_=self.type, code=self.code, param=self.param, headers=self.headers
        )


def failure(end: Failed | Aborted) -> ApiError:
    """A run that failed or was aborted, as the HTTP error to answer with: the upstream's own refusal as it
    gave it, any other failure as its domain error, an abort as a retryable 503 saying why."""
    if isinstance(end, Aborted):  # the gateway stopping, or chat.abort from a WebSocket client
        why = "the gateway is stopping" if end.reason == "shutdown" else "chat.abort stopped it"
        return ApiError(
            503, f"the reply was aborted: {why}", type_="server_error", code="aborted", headers={"Retry-After": "1"}
        )
    exc = end.error
    if not isinstance(exc, UpstreamError):
        return ApiError.of(exc)
    error = exc.error or {}
    code = "upstream_timeout" if exc.status == 504 else "upstream_error"
    said = error.get("message")
    message = said if exc.status < 500 and isinstance(said, str) else exc.message
    headers = {"Retry-After": str(max(1, exc.retry_after_ms // 1000))} if exc.retry_after_ms else None
    return ApiError(
        exc.status,
        message,
        type_=str(error.get("type") or "upstream_error"),
        code=str(error.get("code") or code) if exc.status < 500 else code,
        param=error.get("param") if isinstance(error.get("param"), str) else None,
        headers=headers,
    )


def memory_header(recalled: list[dict[str, Any]]) -> str:
    """Compact JSON of the recalled sources, ASCII (a header), whole entries up to MEMORY_HEADER_BYTES."""
    entries = references(recalled)
    while True:
        text = json.dumps(entries, separators=(",", ":"), ensure_ascii=True)
        if len(text) <= MEMORY_HEADER_BYTES or not entries:
            return text
        entries.pop()


class Answer:
    """A run's handle as the door reads it: the chunks and the end, with what was recalled, the notes and a
    whole completion folded in as they come."""

    def __init__(self, handle: RunHandle):
        self.handle = handle
        self.memory: list[dict[str, Any]] = []  # what was recalled into the request
        self.notes: list[str] = []  # what of the request was left out (chat/restools.py)
        self.completion: dict[str, Any] | None = None

    async def next(self) -> Chunk | End:
        """The next chunk of the answer, or the run's end."""
        async for event in self.handle:
            if isinstance(event, Recalled):
                self.memory = event.hits
            elif isinstance(event, Noted):
                self.notes.append(event.note)
            elif isinstance(event, Completed):
                self.completion = event.obj
            elif isinstance(event, (Chunk, Final, Failed, Aborted)):
                return event
            # the reply's text and tool steps (Said, ToolCalled …) are in the chunks: nothing of them here
        raise RuntimeError("the run's end was read already")  # pragma: no cover

    def jarvis(self) -> dict[str, Any]:
        """The extra field of the last chunk (or of the completion): session, run and recalled sources;
        `notes` when something of the request was left out."""
        handle = self.handle
        extra = {
            "session": handle.session_key if handle.captured else None,
            "runId": handle.run_id,
            "memory": json.loads(memory_header(self.memory)),
        }
        if self.notes:
            extra["notes"] = list(self.notes)
        return extra

    def headers(self) -> dict[str, str]:
        headers = {"X-Jarvis-Memory": memory_header(self.memory)}
        if self.handle.captured:
            headers["X-Jarvis-Session"] = self.handle.session_key
        return headers


# ---- the bytes --------------------------------------------------------------------------------------
def to_json(obj: Any) -> bytes:
    """JSON of what the upstream sent. Its strings may hold lone surrogates (a pair split across chunks by
    a proxy), which orjson refuses: they go out escaped (\\ud83d), as the upstream sent them."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()


def _sse(obj: Any) -> bytes:
    return b"data: " + to_json(obj) + b"\n\n"


def _is_tail(chunk: dict[str, Any]) -> bool:
    """A chunk that may be the stream's last: no choices (usage) or one that finishes."""
    found = choices(chunk)
    return not found or any(isinstance(c, dict) and c.get("finish_reason") for c in found)


async def chat_frames(answer: Answer, body: dict[str, Any], first: Chunk | End) -> AsyncGenerator[bytes, None]:
    """The SSE body of /v1/chat/completions. Text goes out as it comes; the tail chunks are held so that the
    last one can carry the `jarvis` field; a failure is OpenAI's mid-stream error."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    held: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    event = first
    while isinstance(event, Chunk):
        chunk = last = event.obj
        if chunk.get("usage") and not chunk.get("choices") and not include_usage:
            pass  # the offline responder always counts; the client did not ask
        elif _is_tail(chunk):
            held.append(chunk)
        else:
            for h in held:
                yield _sse(h)
            held.clear()
            yield _sse(chunk)
        event = await answer.next()
    if not isinstance(event, Final):
        for h in held:
            yield _sse(h)
        # OpenAI's mid-stream error: the SDK raises it (a stream that just ends reads as whole)
        yield _sse({"error": failure(event).body()})
        return
    if event.truncated or not held:  # cut at chat.maxReplyChars, or the upstream sent no tail
        held = [
            {
                "id": last.get("id", f"chatcmpl-{answer.handle.run_id}"),
                "object": "chat.completion.chunk",
                "created": last.get("created", 0),
                "model": last.get("model", body["model"]),
                "choices": [
                    {
                        "index": 0,
                        "delta": {},
                        "logprobs": None,
                        "finish_reason": "length" if event.truncated else "stop",
                    }
                ],
            }
        ]
    held[-1] = {**held[-1], "jarvis": answer.jarvis()}
    for h in held:
        yield _sse(h)
    yield b"data: [DONE]\n\n"


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: " + str(obj.get("type", "message")).encode() + b"\n" + _sse(obj)


async def response_frames(answer: Answer, body: dict[str, Any], first: Chunk | End) -> AsyncGenerator[bytes, None]:
    """The SSE body of /v1/responses: `event: <type>` and `data: <event>` as OpenAI sends them. The
    response's last event (`response.completed` …) is held so that its response can carry the `jarvis`
    field; a failure is an `error` event, as OpenAI's."""
    held: list[dict[str, Any]] = []
    sequence = 0
    event = first
    while isinstance(event, Chunk):
        told = event.obj
        sequence = int(told.get("sequence_number", sequence)) + 1
        if told.get("type") in DONE:
            held.append(told)
        else:
            yield _event(told)
        event = await answer.next()
    if not isinstance(event, Final):
        error = failure(event).body()
        # OpenAI's `error` event: its type is "error" (the error's own type stays in `error`)
        yield _event({**error, "type": "error", "sequence_number": sequence, "error": error})
        return
    for told in held:
        yield _event({**told, "response": {**told["response"], "jarvis": answer.jarvis()}})


# ---- the answer ---------------------------------------------------------------------------------------
Frames = Callable[[Answer, dict[str, Any], "Chunk | End"], AsyncGenerator[bytes, None]]


@dataclass
class Reply:
    """The HTTP answer to a run: its headers, and either its whole JSON or its SSE frames."""

    headers: dict[str, str]
    body: bytes | None = None
    frames: AsyncGenerator[bytes, None] | None = None


async def reply(handle: RunHandle, body: dict[str, Any], frames: Frames) -> Reply:
    """The run's answer as soon as it has one: a streamed request's SSE from its first chunk (or its end,
    for an upstream stream of no chunk), else the completion (or response) with the `jarvis` field once the
    run ended; ApiError (`failure`) for a run that failed or was aborted before its first chunk."""
    stream = body.get("stream") is True  # the body is valid (the call validated it)
    answer = Answer(handle)
    first = await answer.next()
    if not (stream and isinstance(first, Chunk)):
        while isinstance(first, Chunk):
            first = await answer.next()
    if isinstance(first, Chunk) or (stream and isinstance(first, Final)):
        return Reply(answer.headers(), frames=frames(answer, body, first))
    if not isinstance(first, Final):
        raise failure(first)
    return Reply(answer.headers(), body=to_json({**(answer.completion or {}), "jarvis": answer.jarvis()}))
