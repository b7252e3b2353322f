"""One terminal's conversation with the gateway (`jarvis chat`): the session in use (kept in
`<stateDir>/chat-session`), a turn sent and its reply streamed as plain text, each memory tool call as one
line, a confirmation asked y/N (its line read in a thread, as the prompt's), and the recalled sources after
the reply. chat.py is the command,
chatprompt.py the interactive prompt around this."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from .client import CallError, Connection, GatewayCallError
from ..config import Config
from ..methods.chat import MESSAGE_CHARS

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CONNECT = 0, 1, 2, 3
NOT_FOUND = -32004


def colour(stream: Any) -> bool:
    """ANSI styling only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()


def dim(text: str, stream: Any) -> str:
    return f"\x1b[2m{text}\x1b[0m" if colour(stream) else text


def lines(start: Any, end: Any) -> str:
    """ "2" for one line, "2–3" for a range."""
    return f"{start}" if start == end else f"{start}–{end}"


# ---- the session in use ------------------------------------------------------------------------
def _last_session_file(config: Config) -> Path:
    return config.state_dir / "chat-session"


def remember_session(config: Config, key: str) -> None:
    path = _last_session_file(config)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(key + "\n")
    except OSError:
        pass  # a read-only state dir only costs the "continue where I left off" convenience


def _last_session(config: Config) -> str | None:
    try:
        key = _last_session_file(config).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return key or None


class Chat:
    def __init__(self, conn: Connection, config: Config, args: argparse.Namespace):
        self.conn = conn
        self.config = config
        self.timeout = args.timeout
        self.session: dict[str, Any] | None = None
        # -m / -s: the session's own model and system prompt, set on the session in use before a turn.
        self.settings = {
            name: value for name, value in (("model", args.model), ("systemPrompt", args.system)) if value is not None
        }
        self.run_id: str | None = None  # the run streaming now (Ctrl-C aborts it)
        self.labels: dict[str, str] = {}
        # Whether a chat.confirm can be asked: stdin gives lines (the interactive loop, or a terminal).
        self.can_ask = False
        self.aborting = asyncio.Event()  # Ctrl-C during a reply: a question waiting for y/N gives up
        # A line being read for a question that Ctrl-C gave up on: the next prompt's line is that one.
        self.pending_line: asyncio.Future[str | None] | None = None

    async def pick(self, key: str | None, new: bool) -> None:
        """The session to talk in: KEY (must exist), a new one, or the one used last."""
        if new:
            self.session = None
            return
        explicit = key is not None
        key = key or _last_session(self.config)
        if key is None:
            return
        try:
            self.session = await self.conn.call("sessions.get", {"sessionKey": key})
        except GatewayCallError as exc:
            if exc.code != NOT_FOUND:
                raise
            if explicit:
                raise CallError(
                    f"no session {key} (list them with `jarvis sessions list`; --new starts one)", EXIT_ERROR
                ) from None
            self.session = None  # the one used last was deleted: start afresh

    async def ensure_session(self) -> str:
        if self.session is None:
            self.session = await self.conn.call("sessions.create", dict(self.settings))
        elif any(self.session.get(k, "") != v for k, v in self.settings.items()):
            self.session = await self.conn.call(
                "sessions.update", {"sessionKey": self.session["sessionKey"], **self.settings}
            )
        key = self.session["sessionKey"]
        remember_session(self.config, key)
        return key

    def describe(self) -> str:
        if self.session is None:
            return "a new session"
        label = self.session.get("label") or "untitled"
        model = f", model {self.session['model']}" if self.session.get("model") else ""
        return (
            f"session “{label}” ({self.session['sessionKey']}, {self.session.get('messageCount', 0)} messages{model})"
        )

    async def turn(self, text: str) -> int:
        key = await self.ensure_session()
        res = await self.conn.call(
            "chat.send", {"sessionKey": key, "message": text, "idempotencyKey": str(uuid.uuid4())}
        )
        self.run_id = res["runId"]
        self.aborting.clear()
        out = sys.stdout
        streamed = ""
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(self.conn.events.get(), self.timeout)
                except TimeoutError:
                    raise CallError(f"no reply for {self.timeout:g}s", EXIT_CONNECT) from None
                if ev is None:
                    if streamed:
                        out.write("\n")
                    raise CallError(f"the gateway at {self.conn.url} closed the connection mid-reply", EXIT_CONNECT)
                p = ev.get("params") or {}
                if p.get("runId") != self.run_id:
                    continue
                method = ev.get("method")
                if method == "chat.delta":
                    delta = str(p.get("delta", ""))
                    streamed += delta
                    out.write(delta)
                    out.flush()
                elif method == "chat.tool" and p.get("status") != "running":
                    from ..tools.catalog import one_line

                    # One line per call; what the model said before it is kept in the session as is.
                    out.write(
                        ("\n" if streamed and not streamed.endswith("\n") else "")
                        + one_line(str(p.get("name", "?")), p.get("arguments"), str(p.get("summary") or ""))
                        + "\n"
                    )
                    out.flush()
                    streamed = ""
                elif method == "chat.confirm":
                    if streamed and not streamed.endswith("\n"):
                        out.write("\n")
                    out.flush()
                    streamed = ""
                    await self.confirm(p)
                elif method == "chat.final":
                    content = _text((p.get("message") or {}).get("content"))
                    if content.startswith(streamed):  # the stored text is what counts; print what is missing
                        out.write(content[len(streamed) :])
                    elif not streamed:
                        out.write(content)
                    out.write("\n")
                    sources = await self.sources(p.get("memory") or [])
                    if sources:
                        out.write(dim(f"sources: {'; '.join(sources)}", out) + "\n")
                    out.flush()
                    return EXIT_OK
                elif method == "chat.error":
                    if streamed:
                        out.write("\n")
                    out.flush()
                    err = p.get("error") or {}
                    again = " (retryable)" if err.get("retryable") else ""
                    print(
                        f"jarvis chat: the reply failed: {err.get('message', 'unknown error')}{again}",
                        file=sys.stderr,
                        flush=True,
                    )
                    return EXIT_ERROR
                elif method == "chat.aborted":
                    if streamed:
                        out.write("\n")
                    out.flush()
                    print(
                        "jarvis chat: the reply was aborted (the partial reply is kept in the session)",
                        file=sys.stderr,
                        flush=True,
                    )
                    return EXIT_ERROR
        finally:
            self.run_id = None

    async def confirm(self, p: dict[str, Any]) -> None:
        """The model wants to delete or overwrite a memory: ask y/N (no answer is no), answer chat.confirm."""
        print(f"jarvis chat: the model wants to {p.get('summary')} ({p.get('name')}).", file=sys.stderr, flush=True)
        allow = False
        if not self.can_ask:
            print("jarvis chat: no one to ask (stdin is not a terminal): denied", file=sys.stderr, flush=True)
        else:
            tty = sys.stdin.isatty()
            if not tty:
                print("Allow it? [y/N]", file=sys.stderr, flush=True)
            self.pending_line = asyncio.ensure_future(read_line("Allow it? [y/N] " if tty else ""))
            stop = asyncio.ensure_future(self.aborting.wait())
            await asyncio.wait([self.pending_line, stop], return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not self.pending_line.done():  # Ctrl-C: the reply is being aborted; no answer
                return
            allow = (self.pending_line.result() or "").strip().lower() in ("y", "yes")
            self.pending_line = None
        try:
            await self.conn.call("chat.confirm", {"runId": p.get("runId"), "callId": p.get("callId"), "allow": allow})
        except CallError as exc:  # too late: it timed out (a denial), or the run ended
            print(f"jarvis chat: {exc}", file=sys.stderr, flush=True)

    def abort(self) -> None:
        self.aborting.set()
        if self.run_id is not None and self.session is not None:
            asyncio.ensure_future(self._abort(self.session["sessionKey"], self.run_id))

    async def _abort(self, key: str, run_id: str) -> None:
        try:
            await self.conn.call("chat.abort", {"sessionKey": key, "runId": run_id})
        except CallError:
            pass

    async def sources(self, memory: list[dict[str, Any]]) -> list[str]:
        """`memory/garden.md:3–5`; a transcript as the session's label and date instead of its file name."""
        out = []
        for m in memory:
            path, span = str(m.get("path", "")), lines(m.get("startLine"), m.get("endLine"))
            if path.startswith("sessions/") and path.endswith(".jsonl"):
                word = "line" if "–" not in span else "lines"
                out.append(await self._session_label(path[len("sessions/") : -len(".jsonl")]) + f" ({word} {span})")
            else:
                out.append(f"{path}:{span}")
        return out

    async def _session_label(self, key: str) -> str:
        if key not in self.labels:
            try:
                s = await self.conn.call("sessions.get", {"sessionKey": key})
                label = s.get("label") or "untitled session"
                self.labels[key] = f"session “{label}”, {str(s.get('createdAt', ''))[:10]}"
            except GatewayCallError:
                self.labels[key] = f"sessions/{key}.jsonl"
        return self.labels[key]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


TOO_LONG = "\x00too long"  # what read_line gives for a line past chat.send's message (a NUL: no line holds one)


async def read_line(prompt: str) -> str | None:
    """input() in a daemon thread, so the event loop (pings, events) keeps running and a quit never
    waits for a line. None at end of input."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[str | None] = loop.create_future()

    def settle(value: str | None) -> None:
        if not fut.done():
            fut.set_result(value)

    def read() -> None:
        try:
            line: str | None = input(prompt) if prompt else sys.stdin.readline(MESSAGE_CHARS + 1)
            if not prompt and line == "":
                line = None
            elif not prompt and line is not None and len(line) > MESSAGE_CHARS and not line.endswith("\n"):
                while (rest := sys.stdin.readline(1 << 16)) and not rest.endswith("\n"):
                    pass  # the rest of a line too long to send: read past, never held
                line = TOO_LONG
        except (EOFError, OSError, ValueError):
            line = None
        loop.call_soon_threadsafe(settle, line)

    threading.Thread(target=read, daemon=True, name="jarvis-chat-input").start()
    return await fut
