"""`jarvis models`: which chat model answers, and the models there are to pick from.

Asks the running gateway (`system.health`'s chat, `chat.models`: a gateway that discovers looks again for
a model server on this machine as it answers); with no gateway running, looks the same way here
(`chat.discover`: the loopback ports of `chat.discoverPorts`) so a newcomer sees before the first start
what the gateway will chat with.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ..config import Config
from .client import CallError, Connection

EXIT_OK, EXIT_ERROR = 0, 1


def add_commands(sub: Any) -> None:
    from .common import _common

    p = sub.add_parser(
        "models",
        help="the chat model in use and the models to pick from (looks for a local model server again)",
        description="Say which chat model answers — the configured one, a model server found on this machine "
        "(Ollama 11434, llama.cpp 8080, LM Studio 1234, vLLM 8000: chat.discoverPorts, loopback only) when none "
        "is configured, or the offline responder and why — and list the models a session may pick (jarvis chat "
        "-m NAME). Asks the running gateway; with none running, looks here as the gateway would.",
    )
    p.add_argument("--json", action="store_true", help="print {chat, models, default, gateway} as JSON")
    p.add_argument("--url", help="gateway URL (default ws://HOST:PORT/ from the config)")
    _common(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, config: Config) -> int:
    try:
        out = asyncio.run(_ask(config, args.url))
    except CallError as exc:
        print(f"jarvis models: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        from .common import print_json

        print_json(out)
        return EXIT_OK
    from ..chat.discovery import summary

    print(f"chat: {summary(out['chat'])}")
    if out["gateway"] is None:
        print("(no gateway running: looked from here, as `jarvis serve` will)")
    for m in out["models"]:
        print(f"{'*' if m['id'] == out['default'] else ' '} {m['id']}")
    return EXIT_OK


async def _ask(config: Config, url: str | None) -> dict[str, Any]:
    try:
        conn = await Connection.open(config, url)
    except CallError as exc:
        if exc.exit_code not in (2, 3) or url:  # refused (a wrong token), or the gateway asked for is down
            raise
        return await _here(config)  # not running (or never ran: no token yet)
    try:
        health = await conn.call("system.health")
        models = await conn.call("chat.models")
        return {"chat": health["chat"], **models, "gateway": conn.url}
    finally:
        await conn.close()


async def _here(config: Config) -> dict[str, Any]:
    from ..chat.providers import DiscoveredProvider, make_provider

    provider = make_provider(config)
    try:
        if isinstance(provider, DiscoveredProvider):
            await provider.discover()
        models = await provider.list_models()
        return {"chat": provider.describe(), "models": models, "default": provider.model, "gateway": None}
    finally:
        await provider.close()
