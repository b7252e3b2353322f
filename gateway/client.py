"""A small JSON-RPC client for the CLI (`jarvis call`) and scripts: connect, authenticate, call."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, WebSocketException

from .auth import read_token_file
from .config import Config

TERMINAL = {"chat.final", "chat.error", "chat.aborted"}


class CallError(Exception):
    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


async def call(config: Config, method: str, params: Any, *, url: str | None = None, follow: bool = False,
               timeout: float = 120.0, on_result: Callable[[Any], None], on_event: Callable[[Any], None]) -> None:
    token = config.token or read_token_file(config.token_file)
    if not token:
        raise CallError(f"no token: {config.token_file} does not exist (start the gateway or run `jarvis token`)", 2)
    url = url or config.ws_url()
    ids = itertools.count(1)
    try:
        async with asyncio.timeout(timeout):
            async with connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                               max_size=None, compression=None, open_timeout=10) as ws:
                req_id = next(ids)
                await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}),
                              text=True)
                run_id = None
                async for raw in ws:
                    msg = orjson.loads(raw)
                    if isinstance(msg, dict) and msg.get("id") == req_id:
                        if "error" in msg:
                            err = msg["error"]
                            raise CallError(f"error {err.get('code')}: {err.get('message')}", 1)
                        on_result(msg["result"])
                        if not (follow and method == "chat.send"):
                            return
                        run_id = msg["result"].get("runId")
                        if msg["result"].get("status") == "duplicate":
                            return
                    elif isinstance(msg, dict) and msg.get("method", "").startswith("chat."):
                        p = msg.get("params") or {}
                        if follow and (run_id is None or p.get("runId") == run_id):
                            on_event(msg)
                            if msg["method"] in TERMINAL and run_id is not None:
                                return
    except TimeoutError:
        raise CallError(f"timed out after {timeout:g}s", 3) from None
    except InvalidStatus as exc:
        status = exc.response.status_code
        hint = " (wrong token?)" if status == 401 else ""
        raise CallError(f"gateway refused the connection: HTTP {status}{hint}", 3) from None
    except (OSError, WebSocketException) as exc:
        raise CallError(f"cannot reach the gateway at {url}: {exc}", 3) from None
