"""A small local HTTP server that speaks the OpenAI wire format, for tests and benchmarks.

    with FakeOpenAI() as api:                       # listens on 127.0.0.1:<free port>
        api.base_url                                # "http://127.0.0.1:PORT/v1"
        api.script(("status", 429, {"Retry-After": "0"}), ("ok",))   # per-request behaviours, in order
        api.reply = "Hello there"                    # what chat completions stream
        api.chunk_delay = 0.05                       # seconds between stream chunks

Behaviours (each consumed by one request; when the script is empty, "ok"):
    ("ok",)                         normal answer
    ("status", code, headers[, c])  an HTTP error with a JSON error body (its `code` c, else the status)
    ("cut", n)                      stream n chunks, then drop the connection mid-stream
    ("hang", seconds)               accept and say nothing for that long (provider timeout)
    ("wait", event[, seconds[, then]])  hold the request until the threading.Event is set (at most
                                    `seconds`, default 30), then answer normally (or as the behaviour
                                    `then` says); `waiting` counts them
    ("tools", [(name, arguments), …])   a model calling tools, streamed as OpenAI does: each call's id
                                    and name first, then its arguments (a dict is sent as JSON, a str
                                    as is) in 7-character fragments; finish_reason "tool_calls". Only
                                    when the request offered `tools` and did not say tool_choice
                                    "none" (a model cannot call tools then); otherwise the reply is normal
    ("vectors", kind)               embeddings only: every vector of the answer is `kind`: "nan" (NaN
                                    values, as Python's json writes them), "zero" (all zeros) or "null"
    ("events", [payload, …])        stream exactly these SSE `data:` payloads (a dict is sent as JSON,
                                    lone surrogates as \ud83d escapes; a str as it is), then [DONE]:
                                    upstream data of any shape
    ("comments", n, interval)       stream one chunk, then n SSE comment lines (": keep-alive"), one
                                    every `interval` s, then the rest of the reply
    ("reply", text)                 chat completions: answer `text` instead of `reply` (this request only)

Endpoints: POST /v1/chat/completions (stream or not), POST /v1/responses (stream or not: the reply as
one message item, or with ("tools", …) one function_call item per call, in OpenAI's `response.*` events;
("cut", n) drops the connection after n text deltas; `responses_route = False` answers 404 there, as
Ollama and llama.cpp do), POST /v1/embeddings (deterministic vectors
from a hashed bag of words, so similar texts are similar; image content parts — data URLs — too), GET
/v1/models (`models`, a list of ids; None answers 404 as many local servers do; `models_delay`
seconds before it answers), GET /api/tags (`ollama_tags`: Ollama's own list; None: 404). `FakeOpenAI(port=P)` listens on that port (a server that comes back where it
was). `requests` records
every request body (and `headers`); `cancelled` counts the streams a client stopped reading mid-way. A
server that is down: `closed_url()`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def bag_of_words_vector(text: str, dims: int) -> list[float]:
    vec = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vec[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def input_vector(item: Any, dims: int) -> list[float]:
    """A text's bag of words; an image part's (data URL) bag of 4-byte shingles of its bytes."""
    if isinstance(item, dict) and item.get("type") == "image_url":
        data = base64.b64decode(item["image_url"]["url"].split(",", 1)[1])
        return bag_of_words_vector(" ".join(data[i : i + 4].hex() for i in range(0, len(data), 4)), dims)
    return bag_of_words_vector(str(item), dims)


class FakeOpenAI:
    def __init__(self, dims: int = 64, port: int = 0):
        self.dims = dims
        self.reply = "Hello from the fake model."
        self.chunk_delay = 0.0
        self.models: list[str] | None = ["fake-large", "fake-small"]
        self.models_delay = 0.0
        self.ollama_tags: list[str] | None = None  # GET /api/tags answers these names, as Ollama's does
        self.responses_route = True  # False: POST /v1/responses is a 404, as on servers without it
        self.requests: list[dict[str, Any]] = []
        self.calls_made = 0  # tool calls streamed so far (their ids: call_0, call_1, …)
        self.waiting = 0  # requests held by a ("wait", …) behaviour right now
        self.chunk_times: list[float] = []  # time.monotonic() as each stream chunk was written
        self.cancelled = 0  # streams whose client hung up before the end
        self._script: deque[tuple[Any, ...]] = deque()
        self._lock = threading.Lock()
        self._connections: set[Any] = set()  # the sockets it holds open (closed when it goes away)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def script(self, *behaviours: tuple[Any, ...]) -> None:
        with self._lock:
            self._script.extend(behaviours)

    def _next(self) -> tuple[Any, ...]:
        with self._lock:
            return self._script.popleft() if self._script else ("ok",)

    def count(self, path: str) -> int:
        return sum(1 for r in self.requests if r["path"] == path)

    @staticmethod
    def closed_url() -> str:
        """The base URL of a server that is down: a port nothing listens on."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return f"http://127.0.0.1:{s.getsockname()[1]}/v1"

    def __enter__(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        # Its kept-alive connections end too, as a server process's do when it exits.
        import socket

        with self._lock:
            held = list(self._connections)
        for conn in held:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Each stream chunk goes out at once, as a real provider's does: with Nagle's algorithm a
            # small write waits for the client's delayed ACK (~40 ms) and benchmarks measure that.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def setup(self) -> None:
                super().setup()
                with api._lock:
                    api._connections.add(self.connection)

            def finish(self) -> None:
                with api._lock:
                    api._connections.discard(self.connection)
                super().finish()

            def _json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                path = self.path.split("?")[0]
                api.requests.append({"path": path, "body": None})
                if path == "/api/tags" and api.ollama_tags is not None:
                    self._json(200, {"models": [{"name": n, "model": n, "size": 1} for n in api.ollama_tags]})
                    return
                if path.endswith("/models") and api.models_delay:
                    time.sleep(api.models_delay)
                if path.endswith("/models") and api.models is not None:
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"}
                                for m in api.models
                            ],
                        },
                    )
                    return
                self._json(404, {"error": {"message": "no such endpoint"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                api.requests.append({"path": path, "body": body, "headers": dict(self.headers)})
                if path.endswith("/responses") and not api.responses_route:  # the script is for what comes next
                    self._json(404, {"error": {"message": "no such endpoint"}})
                    return
                behaviour = api._next()
                kind = behaviour[0]
                if kind == "status":
                    code, headers = behaviour[1], (behaviour[2] if len(behaviour) > 2 else {})
                    named = behaviour[3] if len(behaviour) > 3 else code  # ("status", 404, {}, "model_not_found")
                    self._json(
                        code, {"error": {"message": f"fake error {code}", "type": "fake", "code": named}}, headers
                    )
                    return
                if kind == "hang":
                    time.sleep(behaviour[1])
                    self.close_connection = True
                    return
                if kind == "wait":
                    with api._lock:
                        api.waiting += 1
                    try:
                        behaviour[1].wait(behaviour[2] if len(behaviour) > 2 else 30.0)
                    finally:
                        with api._lock:
                            api.waiting -= 1
                    if len(behaviour) > 3:
                        behaviour = behaviour[3]
                        kind = behaviour[0]
                if path.endswith("/embeddings"):
                    inputs = body.get("input")
                    inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
                    dims = int(body.get("dimensions") or api.dims)
                    bad = {"nan": [math.nan] * dims, "zero": [0.0] * dims, "null": None}
                    data = [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": bad[behaviour[1]] if kind == "vectors" else input_vector(t, dims),
                        }
                        for i, t in enumerate(inputs)
                    ]
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": data,
                            "model": body.get("model", "fake"),
                            "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        },
                    )
                    return
                if path.endswith("/responses") and api.responses_route:
                    try:
                        self._responses(body, behaviour)
                    except (BrokenPipeError, ConnectionResetError):
                        with api._lock:
                            api.cancelled += 1
                        self.close_connection = True
                    return
                if path.endswith("/chat/completions"):
                    try:
                        if (
                            kind == "tools"
                            and body.get("tools")
                            and body.get("tool_choice") != "none"
                            and body.get("stream")
                        ):
                            self._tool_calls(body, behaviour[1])
                        elif kind == "events":
                            self._events(behaviour[1])
                        else:
                            self._chat(
                                body,
                                cut=behaviour[1] if kind == "cut" else None,
                                comments=behaviour[1:] if kind == "comments" else None,
                                text=behaviour[1] if kind == "reply" else None,
                            )
                    except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: fine
                        with api._lock:
                            api.cancelled += 1
                        self.close_connection = True
                    return
                self._json(404, {"error": {"message": "no such endpoint"}})

            def _write(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _start_stream(self) -> Any:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def event(obj: Any) -> None:
                    self._write(f"data: {json.dumps(obj) if not isinstance(obj, str) else obj}\n\n".encode())

                return event

            def _end_stream(self, event: Any, model: str, finish: str, completion_tokens: int) -> None:
                event(
                    {
                        "id": "c1",
                        "object": "chat.completion.chunk",
                        "model": model,
                        "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                    }
                )
                event(
                    {
                        "id": "c1",
                        "object": "chat.completion.chunk",
                        "model": model,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 5,
                            "completion_tokens": completion_tokens,
                            "total_tokens": 5 + completion_tokens,
                        },
                    }
                )
                event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _tool_calls(self, body: dict[str, Any], calls: list[tuple[str, Any]]) -> None:
                model = body.get("model", "fake")
                event = self._start_stream()

                def chunk(delta: dict[str, Any]) -> None:
                    event(
                        {
                            "id": "c1",
                            "object": "chat.completion.chunk",
                            "model": model,
                            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                        }
                    )

                with api._lock:
                    first = api.calls_made
                    api.calls_made += len(calls)
                for i, (name, arguments) in enumerate(calls):
                    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
                    chunk(
                        {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": f"call_{first + i}",
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ],
                        }
                    )
                    step = 7 if len(text) < 10_000 else 1 << 16  # a huge argument in big pieces
                    for at in range(0, len(text), step):
                        chunk({"tool_calls": [{"index": i, "function": {"arguments": text[at : at + step]}}]})
                self._end_stream(event, model, "tool_calls", len(calls))

            def _responses(self, body: dict[str, Any], behaviour: tuple[Any, ...]) -> None:
                """OpenAI's Responses API, written out here by hand (not by the gateway's code)."""
                model = body.get("model", "fake")
                seq = iter(range(1_000_000))
                response: dict[str, Any] = {
                    "id": f"resp_fake{len(api.requests)}",
                    "object": "response",
                    "created_at": 1700000000,
                    "status": "in_progress",
                    "model": model,
                    "output": [],
                    "usage": None,
                    "error": None,
                    "incomplete_details": None,
                    "instructions": body.get("instructions"),
                    "tools": body.get("tools") or [],
                    "tool_choice": body.get("tool_choice", "auto"),
                    "parallel_tool_calls": True,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "metadata": {},
                }
                calls = behaviour[1] if behaviour[0] == "tools" and body.get("tools") else None
                if calls is not None:
                    with api._lock:
                        first = api.calls_made
                        api.calls_made += len(calls)
                    for i, (name, arguments) in enumerate(calls):
                        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
                        response["output"].append(
                            {
                                "id": f"fc_{first + i}",
                                "type": "function_call",
                                "status": "completed",
                                "call_id": f"call_{first + i}",
                                "name": name,
                                "arguments": text,
                            }
                        )
                else:
                    response["output"].append(
                        {
                            "id": "msg_fake",
                            "type": "message",
                            "status": "completed",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": api.reply, "annotations": []}],
                        }
                    )
                usage = {"input_tokens": 5, "output_tokens": len(api.reply.split(" ")), "total_tokens": 0}
                if not body.get("stream"):
                    self._json(200, {**response, "status": "completed", "usage": usage})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def event(kind: str, **fields: Any) -> None:
                    obj = {"type": kind, "sequence_number": next(seq), **fields}
                    self._write(f"event: {kind}\ndata: {json.dumps(obj)}\n\n".encode())

                shell = {**response, "output": []}
                event("response.created", response=shell)
                event("response.in_progress", response=shell)
                for index, item in enumerate(response["output"]):
                    if item["type"] == "function_call":
                        event("response.output_item.added", output_index=index, item={**item, "arguments": ""})
                        text = item["arguments"]
                        for at in range(0, len(text), 7):
                            event(
                                "response.function_call_arguments.delta",
                                item_id=item["id"],
                                output_index=index,
                                delta=text[at : at + 7],
                            )
                        event(
                            "response.function_call_arguments.done",
                            item_id=item["id"],
                            output_index=index,
                            arguments=text,
                        )
                        event("response.output_item.done", output_index=index, item=item)
                        continue
                    event(
                        "response.output_item.added",
                        output_index=index,
                        item={**item, "status": "in_progress", "content": []},
                    )
                    part = {"type": "output_text", "text": "", "annotations": []}
                    ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
                    event("response.content_part.added", **ids, part=part)
                    words = api.reply.split(" ")
                    for i, word in enumerate(words):
                        if behaviour[0] == "cut" and i >= behaviour[1]:
                            self.close_connection = True
                            self.wfile.flush()
                            self.connection.shutdown(2)
                            return
                        event("response.output_text.delta", **ids, delta=word + (" " if i < len(words) - 1 else ""))
                        api.chunk_times.append(time.monotonic())
                        if api.chunk_delay:
                            time.sleep(api.chunk_delay)
                    event("response.output_text.done", **ids, text=api.reply)
                    event("response.content_part.done", **ids, part={**part, "text": api.reply})
                    event("response.output_item.done", output_index=index, item=item)
                event("response.completed", response={**response, "status": "completed", "usage": usage})
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _events(self, payloads: list[Any]) -> None:
                event = self._start_stream()
                for obj in [*payloads, "[DONE]"]:
                    event(obj)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _chat(
                self,
                body: dict[str, Any],
                cut: int | None,
                comments: tuple[Any, ...] | None = None,
                text: str | None = None,
            ) -> None:
                reply = api.reply if text is None else text
                words = reply.split(" ")
                pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
                model = body.get("model", "fake")
                if not body.get("stream"):
                    self._json(
                        200,
                        {
                            "id": "c1",
                            "object": "chat.completion",
                            "model": model,
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": reply},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 5,
                                "completion_tokens": len(pieces),
                                "total_tokens": 5 + len(pieces),
                            },
                        },
                    )
                    return
                event = self._start_stream()
                for i, piece in enumerate(pieces):
                    if cut is not None and i >= cut:
                        self.close_connection = True
                        self.wfile.flush()
                        self.connection.shutdown(2)
                        return
                    event(
                        {
                            "id": "c1",
                            "object": "chat.completion.chunk",
                            "model": model,
                            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                        }
                    )
                    api.chunk_times.append(time.monotonic())
                    if comments is not None and i == 0:  # a proxy that keeps the stream alive, forever-ish
                        for _ in range(comments[0]):
                            time.sleep(comments[1])
                            self._write(b": keep-alive\n\n")
                    if api.chunk_delay:
                        time.sleep(api.chunk_delay)
                self._end_stream(event, model, "stop", len(pieces))

        return Handler


if __name__ == "__main__":  # a separate process, so that a benchmark's client does not share its GIL
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        description="Serve the fake OpenAI API until stdin closes. Each line on "
        'stdin is a behaviour to script, as JSON (`["vectors", "nan"]`), '
        "answered `scripted` on stdout."
    )
    ap.add_argument("--reply", default="Hello from the fake model.", help="what chat completions stream")
    ap.add_argument("--repeat", type=int, default=1, help="the reply, this many times over")
    ap.add_argument("--no-responses", action="store_true", help="POST /v1/responses answers 404 (as Ollama)")
    args = ap.parse_args()
    with FakeOpenAI() as fake:
        fake.reply = args.reply * args.repeat
        fake.responses_route = not args.no_responses
        print(fake.base_url, flush=True)
        for line in sys.stdin:
            fake.script(tuple(json.loads(line)))
            print("scripted", flush=True)
