"""`jarvis chat`'s interactive prompt: lines read in a thread (chatsession.read_line: the loop keeps
running), Ctrl-C stopping a reply (or leaving at the prompt), the /commands, and a line too long to send
refused before it is held."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

from .chatsession import EXIT_ERROR, EXIT_OK, EXIT_USAGE, TOO_LONG, Chat, read_line, remember_session
from .client import CallError, GatewayCallError
from ..methods.chat import MESSAGE_CHARS

HELP = """commands (anything else is sent as a message; start it with // to send a line that begins with /):
  /help           this list
  /new            start a new session with the next message
  /session [KEY]  show the session in use, or switch to session KEY
  /quit, /exit    leave (so does Ctrl-D); Ctrl-C stops a reply"""


class ctrl_c:
    """While active, Ctrl-C calls `handler` instead of raising KeyboardInterrupt."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: Any):
        self.loop, self.handler, self.installed = loop, handler, False

    def __enter__(self) -> "ctrl_c":
        try:
            self.loop.add_signal_handler(signal.SIGINT, self.handler)
            self.installed = True
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals
            pass
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.installed:
            self.loop.remove_signal_handler(signal.SIGINT)


async def interactive(chat: Chat) -> int:
    tty = sys.stdin.isatty()
    if tty:
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:  # pragma: no cover
            pass
        from ..chat.discovery import summary

        health = await chat.conn.call("system.health")
        print(
            f"Jarvis chat, {chat.describe()}. /help lists the commands, Ctrl-D or /quit leaves, Ctrl-C stops a reply."
            f"\nchat: {summary(health.get('chat') or {})}",
            file=sys.stderr,
            flush=True,
        )
    loop = asyncio.get_running_loop()
    code = EXIT_OK
    chat.can_ask = True
    while True:
        quit_ = asyncio.Event()
        with ctrl_c(loop, quit_.set):
            reading = chat.pending_line or asyncio.ensure_future(read_line("you> " if tty else ""))
            chat.pending_line = None
            stop = asyncio.ensure_future(quit_.wait())
            waits: list[asyncio.Future[Any]] = [reading, stop]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
        if not reading.done():  # Ctrl-C at the prompt
            reading.cancel()
            if tty:
                print(file=sys.stderr)
            return 130
        line = reading.result()
        if line is None:
            if tty:
                print(file=sys.stderr)
            return code
        if line is TOO_LONG:
            print(
                f"jarvis chat: that line is more than {MESSAGE_CHARS:,} characters, the most a message may be: not sent",
                file=sys.stderr,
                flush=True,
            )
            code = EXIT_USAGE
            continue
        text = line.rstrip("\n")
        if not text.strip():
            continue
        if text.startswith("//"):
            text = text[1:]  # a message that begins with "/"
        elif text.startswith("/"):
            done, code = await _command(chat, text.strip(), code)
            if done:
                return code
            continue
        with ctrl_c(loop, chat.abort):
            try:
                code = await chat.turn(text)
            except GatewayCallError as exc:  # e.g. -32009 busy: say so and keep the prompt
                print(f"jarvis chat: {exc}", file=sys.stderr, flush=True)
                code = exc.exit_code
        if tty:
            print(flush=True)


async def _command(chat: Chat, line: str, code: int) -> tuple[bool, int]:
    """An interactive /command: (leave?, exit code). Never sent to the model."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    if name in ("/quit", "/exit"):
        return True, code
    if name == "/help":
        say(HELP)
    elif name == "/new":
        chat.session = None
        say("(a new session starts with your next message)")
    elif name == "/session" and not arg:
        if chat.session is not None:  # as it is now: the label and count move with every turn
            with contextlib.suppress(CallError):
                chat.session = await chat.conn.call("sessions.get", {"sessionKey": chat.session["sessionKey"]})
        say(f"(in {chat.describe()})")
    elif name == "/session":
        try:
            await chat.pick(arg, new=False)
        except CallError as exc:
            say(f"jarvis chat: {exc}")
            return False, EXIT_ERROR
        remember_session(chat.config, arg)
        say(f"(now in {chat.describe()})")
    else:
        say(f"jarvis chat: unknown command {name} (/help lists them; // sends a line that begins with /)")
        return False, EXIT_USAGE
    return False, code
