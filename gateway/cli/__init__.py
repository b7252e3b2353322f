"""`jarvis …` — subcommands mapping 1:1 onto config and methods.

    jarvis serve [--host H] [--port P] [--state-dir D] [--workspace W]
    jarvis token [--rotate]
    jarvis call METHOD [JSON] [--follow [--text]]
    jarvis chat [MESSAGE] [--session KEY | --new] [-m MODEL] [-s SYSTEM]
    jarvis models [--json]
    jarvis sessions list|show KEY|delete KEY|export KEY [--format md|jsonl]
    jarvis memory sync|search|status …
    jarvis config [--json] [--defaults]
    jarvis mcp [--url URL] [--token T]
    jarvis migrate --to postgresql://…|sqlite [--from URL] [--dry-run]
    jarvis import chatgpt|claude|markdown|jsonl PATH [--agent A] [--dry-run] [--json]
    jarvis export [--agent A] [--out FILE.zip] [--json]

Every command that talks to the gateway takes --token TOKEN (else JARVIS_GATEWAY_TOKEN, else the token file).
Exit codes: 0 ok, 1 the gateway answered with an error, 2 bad usage or invalid config, 3 cannot connect.
"""

from __future__ import annotations

import argparse
import os
import contextlib
import errno
import asyncio
import sys
from typing import Any

import orjson

from .. import __version__
from ..config import Config, ConfigError, load_config
from .common import _common, _common_on_leaves, print_json

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CONNECT = 0, 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jarvis",
        description="Jarvis Gateway: a self-hosted memory gateway for personal AI assistants.",
        epilog="Configuration: <stateDir>/config.toml, then environment, then flags. See `jarvis config`.",
    )
    parser.add_argument("--version", action="version", version=f"jarvis-gateway {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="what to do (each has its own --help)")

    p = sub.add_parser(
        "serve",
        help="run the gateway (until SIGTERM/SIGINT)",
        description="Run the gateway: JSON-RPC over WebSocket and the web page on one port.",
    )
    _common(p, token=False)  # the gateway's own: JARVIS_GATEWAY_TOKEN or the token file, never a visible flag
    p.set_defaults(handler=cmd_serve)

    p = sub.add_parser(
        "token",
        help="print the gateway token (creating it if needed)",
        description="Print the token from <stateDir>/gateway.token, creating it on first use.",
    )
    p.add_argument(
        "--rotate",
        action="store_true",
        help="replace it with a new random token (a running gateway uses it for new connections)",
    )
    _common(p, token=False)
    p.set_defaults(handler=cmd_token, token_command=None)
    from . import access

    access.add_token_commands(p)

    p = sub.add_parser(
        "call",
        help="call a method on the running gateway and print the result",
        description="Authenticate to the running gateway, call METHOD with JSON params, print the result.",
    )
    p.add_argument("method", help="e.g. system.health, sessions.create, chat.send")
    p.add_argument("params", nargs="?", default=None, help="params as a JSON object (default {})")
    p.add_argument(
        "--follow",
        action="store_true",
        help="after chat.send, print chat events until chat.final, chat.error or chat.aborted "
        "(exit code 1 on chat.error and chat.aborted)",
    )
    p.add_argument(
        "--text",
        action="store_true",
        help="with --follow: print the reply as plain text while it streams instead of JSON events",
    )
    p.add_argument("--url", help="gateway URL (default ws://HOST:PORT/ from the config)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait (default 120)")
    _common(p)
    p.set_defaults(handler=cmd_call)

    p = sub.add_parser(
        "config",
        help="print the effective configuration as config.toml (secrets hidden)",
        description="Print the effective configuration (defaults, config.toml, environment, flags) "
        "as TOML with the camelCase keys config.toml accepts, and the state dir in use. "
        "Secrets are never printed.",
    )
    p.add_argument("--json", action="store_true", help="print it as JSON instead (stateDir and workspace included)")
    p.add_argument(
        "--defaults",
        action="store_true",
        help="print every key with its default, what it does and the values it allows",
    )
    _common(p)
    p.set_defaults(handler=cmd_config)

    from . import chat as chat_cli

    chat_cli.add_commands(sub)

    from . import models as models_cli

    models_cli.add_commands(sub)

    from . import sessions as sessions_cli

    sessions_cli.add_commands(sub)

    from . import memory as memory_cli
    from . import service

    before = set(sub.choices)
    memory_cli.add_commands(sub)
    for name in set(sub.choices) - before:
        _common_on_leaves(sub.choices[name])
    service.add_commands(sub)

    from . import migrate

    migrate.add_commands(sub)

    from . import mcp

    mcp.add_commands(sub)
    access.add_commands(sub)  # jarvis audit (jarvis token's sub-commands are added with it above)

    from . import portability

    portability.add_commands(sub)
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    overrides: dict[str, Any] = {
        "stateDir": getattr(args, "state_dir", None),
        "workspace": getattr(args, "workspace", None),
        "server.host": getattr(args, "host", None),
        "server.port": getattr(args, "port", None),
        "server.httpPort": getattr(args, "http_port", None),
        "logLevel": getattr(args, "log_level", None),
        "logFormat": getattr(args, "log_format", None),
        "token": getattr(args, "token", None),  # --token: every client command's (jarvis call, chat, memory, …)
    }
    return load_config({k: v for k, v in overrides.items() if v is not None})


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:  # bare `jarvis`: what it can do is the answer, not an error
        parser.print_help()
        return EXIT_OK
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        return _invalid(exc)
    if args.command != "serve":  # a command's own output is on stdout; the library's log lines are not
        from .. import logs

        logs.setup(getattr(args, "log_level", None) or "warning", config.log_format)
    try:
        return args.handler(args, config)  # every command sets its handler (set_defaults) where it is declared
    except ConfigError as exc:  # a name only a registry above config/ holds (an embedding provider's)
        return _invalid(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `jarvis … | head`: the reader has what it wanted; that is no failure
        with contextlib.suppress(OSError):  # (and Python's exit flush must not fail on the closed pipe)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _invalid(exc: ConfigError) -> int:
    if len(exc.errors) == 1:
        print(f"jarvis: invalid configuration: {exc}", file=sys.stderr)
    else:
        print(f"jarvis: invalid configuration ({len(exc.errors)} errors):", file=sys.stderr)
        for err in exc.errors:
            print(f"  {err}", file=sys.stderr)
    return EXIT_USAGE


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from .. import logs
    from ..app import serve
    from ..memory.embeddings.registry import check_config

    check_config(config)  # before anything starts: the embedding providers a plugin may have added
    logs.setup(config.log_level, config.log_format)

    def announce(gw: Any) -> None:
        def on_phase(name: str, info: dict[str, Any]) -> None:
            if name == "ready":
                from ..chat.discovery import summary
                from .client import token_command

                where = "JARVIS_GATEWAY_TOKEN" if config.token else str(config.token_file)
                http = f"\nHTTP API (MCP at /mcp, OpenAI-compatible at /v1): {gw.http.url()}" if gw.http.enabled else ""
                print(
                    f"Jarvis Gateway listening on {gw.url}  (web page: {gw.url.replace('ws', 'http', 1)})"
                    f"{http}\ntoken: {where}  (print it with `{token_command(config)}`)"
                    f"\nchat: {summary(info['chat'])}",
                    file=sys.stderr,
                    flush=True,
                )

        gw.on_phase(on_phase)
        from . import sdnotify

        sdnotify.attach(gw)

    from ..auth import TokenError
    from ..errors import JarvisError
    from ..fsutil import StateDirInUse
    from ..doors.httpapi import ListenError

    try:
        return asyncio.run(serve(config, announce))
    except (StateDirInUse, TokenError) as exc:
        print(f"jarvis: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:  # a value only the gateway's start could judge (what the database driver takes)
        print(f"jarvis: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except JarvisError as exc:  # the gateway could not start: the database is unreachable, say
        print(f"jarvis: cannot start: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except ListenError as exc:
        print(f"jarvis: {exc.strerror}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        hint = ""
        if exc.errno == errno.EADDRINUSE or "address already in use" in str(exc).lower():
            hint = " (another program listens there: choose a free port with --port, JARVIS_PORT or server.port)"
        print(
            f"jarvis: cannot serve on {config.server.host}:{config.server.port}: {exc.strerror or exc}{hint}",
            file=sys.stderr,
        )
        return EXIT_ERROR


def cmd_token(args: argparse.Namespace, config: Config) -> int:
    from ..auth import TokenError, ensure_token_file

    if args.token_command:  # create | list | revoke: other principals (cli/access.py)
        from . import access

        args.config = config
        return access.run_token(args, config)

    if config.token and not args.rotate:
        print(config.token)
        return EXIT_OK
    if config.token and args.rotate:
        print("jarvis: the token is set by JARVIS_GATEWAY_TOKEN or config; change it there", file=sys.stderr)
        return EXIT_USAGE
    try:
        print(ensure_token_file(config.token_file, rotate=args.rotate))
    except TokenError as exc:
        print(f"jarvis: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_config(args: argparse.Namespace, config: Config) -> int:
    from ..memory.embeddings.registry import check_config
    from . import configdump

    check_config(config)  # the effective configuration is a valid one
    if args.defaults:
        if args.json:
            print_json(configdump.defaults_json())
        else:
            sys.stdout.write(configdump.defaults_toml())
    elif args.json:
        print_json(configdump.to_json(config))
    else:
        sys.stdout.write(configdump.to_toml(config))
    return EXIT_OK


def cmd_call(args: argparse.Namespace, config: Config) -> int:
    from .client import CallError, call

    try:
        params = orjson.loads(args.params) if args.params else {}
    except orjson.JSONDecodeError as exc:
        print(f"jarvis: params: not valid JSON: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not isinstance(params, (dict, list)):
        print("jarvis: params: must be a JSON object or array", file=sys.stderr)
        return EXIT_USAGE

    if args.text and not args.follow:
        print("jarvis: --text goes with --follow", file=sys.stderr)
        return EXIT_USAGE
    ended: dict[str, Any] = {"method": None, "params": {}, "streamed": False}

    def on_event(msg: Any) -> None:
        if msg.get("method") in ("chat.final", "chat.error", "chat.aborted"):
            ended["method"], ended["params"] = msg["method"], msg.get("params") or {}
        if not args.text:
            print_json(msg)
            return
        p = msg.get("params") or {}
        if msg.get("method") == "chat.delta":
            sys.stdout.write(str(p.get("delta", "")))
            ended["streamed"] = True
        elif msg.get("method") in ("chat.final", "chat.error", "chat.aborted"):
            content = (p.get("message") or {}).get("content")
            if msg["method"] == "chat.final" and not ended["streamed"] and isinstance(content, str):
                sys.stdout.write(content)  # a reply that came in one piece, without deltas
                ended["streamed"] = True
            if ended["streamed"]:
                sys.stdout.write("\n")
        sys.stdout.flush()

    def on_result(result: Any) -> None:
        if not args.text:
            print_json(result)

    try:
        asyncio.run(
            call(
                config,
                args.method,
                params,
                url=args.url,
                follow=args.follow,
                timeout=args.timeout,
                on_result=on_result,
                on_event=on_event,
            )
        )
    except CallError as exc:
        print(f"jarvis: {exc}", file=sys.stderr)
        return exc.exit_code
    if ended["method"] == "chat.error":
        err = ended["params"].get("error") or {}
        print(f"jarvis: chat.error: {err.get('message', 'unknown error')}", file=sys.stderr)
        return EXIT_ERROR
    if ended["method"] == "chat.aborted":
        print("jarvis: chat.aborted: the reply was stopped before it finished", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK
