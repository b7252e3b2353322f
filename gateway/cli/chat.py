"""`jarvis chat` — talk to the running gateway from a terminal.

    jarvis chat                      an interactive prompt (/help lists its commands; Ctrl-D or /quit leaves)
    jarvis chat "message"            one message: print the reply, then exit
    jarvis chat - < question.txt     one message read from stdin (refused, exit 2, past 400,000 bytes:
                                     chat.send takes 100,000 characters; a piped line past them is not sent)
    --session KEY                    continue that session
    --new                            start a new session
    -m/--model NAME, -s/--system T   the session's model and system prompt (kept with the session)

Without --session or --new, `jarvis chat` continues the session it used last (its key is kept in
`<stateDir>/chat-session`), or starts one. The reply is printed as plain text while it streams, followed
by one line listing what memory recalled for it (dimmed on a terminal, unless NO_COLOR is set); each
memory tool the model calls shows as one line (`🔎 memory_search "boat colour" → 3 results`). Exit
codes: 0 the reply arrived; 1 the gateway
answered with an error, or the reply ended in chat.error / chat.aborted; 2 bad usage; 3 cannot connect
(or the connection was lost). Interactively, the exit code is that of the last message.

This module is the command; chatsession.py the conversation (a turn, its reply, confirmations, the session
in use), chatprompt.py the interactive prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from .chatprompt import interactive, ctrl_c
from .chatsession import EXIT_USAGE, Chat
from .client import CallError, Connection
from .common import read_stdin
from ..config import Config
from ..errors import Invalid
from ..methods.chat import MESSAGE_CHARS


def add_commands(sub: Any) -> None:
    from .common import _common

    p = sub.add_parser(
        "chat",
        help="chat with the running gateway: an interactive prompt, or one message",
        description="Chat with the running gateway. Without MESSAGE: an interactive prompt (/help lists its "
        "commands, Ctrl-D or /quit leaves, Ctrl-C stops a reply). With MESSAGE: send it, print the "
        "reply and exit. The reply streams as plain text, then one line lists the recalled sources "
        "(dimmed on a terminal; NO_COLOR turns colour off). Without --session or --new, the session "
        "`jarvis chat` used last is continued. When the model wants to delete or overwrite a memory "
        "(chat.toolPolicy ask), `jarvis chat` asks y/N (anything but y is no; no answer within "
        "chat.confirmSeconds is no); with MESSAGE and stdin not a terminal, no one can answer: denied.",
        epilog="Exit codes: 0 ok; 1 the gateway answered with an error or the reply ended in chat.error or "
        "chat.aborted; 2 bad usage; 3 cannot connect.",
    )
    p.add_argument("message", nargs="?", help="send this one message and exit ('-' reads it from stdin)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="KEY", help="continue this session (see `jarvis sessions list`)")
    which.add_argument("--new", action="store_true", help="start a new session")
    p.add_argument(
        "-m",
        "--model",
        metavar="NAME",
        help='the chat model for this session, kept with it (see `jarvis call chat.models`; "" resets '
        "it to the configured one)",
    )
    p.add_argument(
        "-s",
        "--system",
        metavar="PROMPT",
        help='the system prompt for this session, kept with it ("" resets it to the configured one)',
    )
    p.add_argument("--url", help="gateway URL (default ws://HOST:PORT/ from the config)")
    p.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for the next part of a reply (default 120)"
    )
    _common(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, config: Config) -> int:
    if args.message is not None and not args.message.strip():
        print("jarvis chat: the message is empty", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(_main(args, config))
    except CallError as exc:
        print(f"jarvis chat: {exc}", file=sys.stderr)
        return exc.exit_code


async def _main(args: argparse.Namespace, config: Config) -> int:
    conn = await Connection.open(config, args.url)
    chat = Chat(conn, config, args)
    try:
        await chat.pick(args.session, args.new)
        if args.message is not None:
            if args.message == "-":
                try:  # chat.send takes 100,000 characters: at most 4 bytes of UTF-8 each
                    text = read_stdin(4 * MESSAGE_CHARS, "the message", "message")
                except Invalid as exc:
                    print(f"jarvis chat: {exc}", file=sys.stderr)
                    return EXIT_USAGE
            else:
                text = args.message
            if not text.strip():
                print("jarvis chat: the message is empty", file=sys.stderr)
                return EXIT_USAGE
            return await _one(chat, text, args.message == "-")
        return await interactive(chat)
    finally:
        await conn.close()


async def _one(chat: Chat, text: str, from_stdin: bool) -> int:
    loop = asyncio.get_running_loop()
    chat.can_ask = not from_stdin and sys.stdin.isatty()
    with ctrl_c(loop, chat.abort):
        return await chat.turn(text)
