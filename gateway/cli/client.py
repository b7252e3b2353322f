"""A small JSON-RPC client for the CLI (`jarvis call`) and scripts: connect, authenticate, call."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any, Callable

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, WebSocketException

from .. import protocol
from ..auth import TokenError, read_token_file
from ..config import Config
from ..neterrors import connection_failure

TERMINAL = {"chat.final", "chat.error", "chat.aborted"}


def jarvis_command() -> str:
    """How to run this installation's `jarvis` from a shell, as it would be typed: `jarvis` when that is
    what PATH finds, else the path of the one beside this Python (`.venv/bin/jarvis` from a checkout),
    else `python -m gateway.cli`."""
    import os
    import shlex
    import shutil
    import sys
    from pathlib import Path

    beside = Path(sys.executable).parent / "jarvis"
    on_path = shutil.which("jarvis")
    if beside.is_file() and os.access(beside, os.X_OK):
        if on_path and Path(on_path).resolve() == beside.resolve():
            return "jarvis"
        try:
            rel = beside.absolute().relative_to(Path.cwd())
            return shlex.quote(str(rel))
        except ValueError:
            return shlex.quote(str(beside.absolute()))
    if on_path:
        return "jarvis"
    return f"{shlex.quote(sys.executable)} -m gateway.cli"


def token_command(config: Config) -> str:
    """A command that prints this gateway's token when typed as is, state dir included when it is not
    the default one."""
    import shlex
    from pathlib import Path

    cmd = f"{jarvis_command()} token"
    if config.state_dir.expanduser().absolute() != Path("~/.jarvis").expanduser().absolute():
        cmd += f" --state-dir {shlex.quote(str(config.state_dir))}"
    return cmd


class CallError(Exception):
    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class TokenRefused(CallError):
    """The token given to the command is not one the gateway takes (unknown, revoked, expired): exit 3,
    said alike by every command, whether a running gateway answered 401 or the command ran in process."""

    def __init__(self, status: int = 401):
        hint = " (wrong token?)" if status == 401 else ""
        super().__init__(f"gateway refused the connection: HTTP {status}{hint}", 3)
        self.status = status


class CallTimeout(CallError):
    """Connected, but no answer to a call within its method's limit (a stuck gateway, or something else
    listening on the port)."""


# How long `Connection.call` waits for the answer, per method (seconds; None: as long as it takes).
# Reads of the store answer in milliseconds (docs/performance.md), so 10 s means something is wrong.
# A method that may embed text waits on the embedding provider: one request's worst case is
# embeddings.timeout × (maxRetries + 1) plus backoff, ~92 s at the defaults, and a 256 KiB memory.write
# is up to 4 batches. memory.sync grows with the workspace (a first sync of a large one with a remote
# embedder runs for an hour): no limit; Ctrl-C stops the command (so do admin.import and admin.export).
# Anything else (writes of the store, chat.send's acknowledgement, chat.abort): 60 s.
READ_TIMEOUT = 10.0
EMBED_TIMEOUT = 600.0
DEFAULT_TIMEOUT = 60.0
CALL_TIMEOUTS: dict[str, float | None] = {
    **dict.fromkeys(
        (
            "system.health",
            "system.methods",
            "sessions.list",
            "sessions.get",
            "sessions.history",
            "memory.get",
            "memory.list",
            "memory.getImage",
            "memory.status",
            "memory.files",
            "memory.history",
            "memory.trash",
            "sessions.trash",
        ),
        READ_TIMEOUT,
    ),
    **dict.fromkeys(
        (
            "memory.search",
            "memory.set",
            "memory.similar",
            "memory.recall",
            "memory.learn",
            "memory.setImage",
            "memory.searchImage",
            "memory.write",
            "memory.restore",
            "sessions.restore",
        ),
        EMBED_TIMEOUT,
    ),
    "memory.sync": None,
    # An import or export takes as long as the export is big (progress notifications show it moving).
    "admin.import": None,
    "admin.export": None,
}


def call_timeout(method: str) -> float | None:
    return CALL_TIMEOUTS.get(method, DEFAULT_TIMEOUT)


def client_token(config: Config) -> str:
    """The token to present: the configured one, else the token file's; CallError (exit 2) when there is
    none or the file's breaks the token rule."""
    try:
        token = config.token or read_token_file(config.token_file)
    except TokenError as exc:
        raise CallError(str(exc), 2) from None
    if not token:
        # A first start: nothing to mend but starting it. (Worded so that no "token: VALUE" reads as a secret
        # to the masking of memory/secrets.py, which every tool error goes through.)
        raise CallError(
            f"the gateway is not running yet: it has never started with the state dir {config.state_dir} (the "
            f"token file {config.token_file} is made at its first start). Start it with `jarvis serve` "
            f"(./scripts/serve in a checkout), or make the token first with `{token_command(config)}`",
            2,
        )
    return token


async def call(
    config: Config,
    method: str,
    params: Any,
    *,
    url: str | None = None,
    follow: bool = False,
    timeout: float = 120.0,
    on_result: Callable[[Any], None],
    on_event: Callable[[Any], None],
) -> None:
    token = client_token(config)
    url = url or config.ws_url()
    ids = itertools.count(1)
    try:
        async with asyncio.timeout(timeout):
            async with connect(
                url,
                additional_headers={"Authorization": f"Bearer {token}"},
                max_size=None,
                compression=None,
                open_timeout=10,
            ) as ws:
                req_id = next(ids)
                await ws.send(
                    orjson.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}), text=True
                )
                run_id = None
                early: list[dict[str, Any]] = []  # a run's events can beat chat.send's answer
                async for raw in ws:
                    msg = orjson.loads(raw)
                    if isinstance(msg, dict) and msg.get("id") == req_id:
                        if "error" in msg:
                            err = msg["error"]
                            raise CallError(f"error {err.get('code')}: {err.get('message')}", 1)
                        on_result(msg["result"])
                        if not (follow and method == "chat.send") or not isinstance(msg["result"], dict):
                            return
                        run_id = msg["result"].get("runId")
                        if msg["result"].get("status") == "duplicate":
                            return
                        for ev in early:
                            if (ev.get("params") or {}).get("runId") == run_id:
                                on_event(ev)
                                if ev["method"] in TERMINAL:
                                    return
                        early.clear()
                    elif follow and isinstance(msg, dict) and str(msg.get("method", "")).startswith("chat."):
                        p = msg.get("params") or {}
                        if run_id is None:
                            early.append(msg)
                        elif p.get("runId") == run_id:
                            on_event(msg)
                            if msg["method"] in TERMINAL:
                                return
    except TimeoutError:
        raise CallError(f"timed out after {timeout:g}s", 3) from None
    except BrokenPipeError:  # our own stdout closed (`| head`), not the gateway: the caller's to handle
        raise
    except InvalidStatus as exc:
        raise TokenRefused(exc.response.status_code) from None
    except (OSError, WebSocketException) as exc:
        raise unreachable(url, exc) from None


def unreachable(url: str, exc: BaseException) -> CallError:
    """The gateway at `url` did not take the connection, said so a person knows what to do."""
    why = connection_failure(exc)
    if why == "connection refused":
        return CallError(
            f"the gateway is not running at {url} (connection refused): start it with `jarvis serve` "
            "(./scripts/serve in a checkout), or point at a running one with --url",
            3,
        )
    return CallError(f"cannot reach the gateway at {url}: {why}", 3)


class Connection:
    """One authenticated connection kept open for several calls (`jarvis chat`, `sessions`, `memory`,
    `mcp`): `call` awaits the matching response, for at most its method's limit (CALL_TIMEOUTS), and
    notifications land in `events`."""

    def __init__(self, ws: Any, url: str):
        self.ws = ws
        self.url = url
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, config: Config, url: str | None = None, open_timeout: float = 10) -> "Connection":
        token = client_token(config)
        url = url or config.ws_url()
        try:
            ws = await connect(
                url,
                additional_headers={"Authorization": f"Bearer {token}"},
                max_size=None,
                compression=None,
                open_timeout=open_timeout,
            )
        except InvalidStatus as exc:
            raise TokenRefused(exc.response.status_code) from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise unreachable(url, exc) from None
        return cls(ws, url)

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                msg = orjson.loads(raw)
                if not isinstance(msg, dict):
                    continue
                rid = msg.get("id")  # ours are whole numbers; any other id (a list cannot key a dict) is no answer
                fut = self._pending.pop(rid, None) if isinstance(rid, int) and not isinstance(rid, bool) else None
                if fut is not None:
                    if not fut.done():
                        fut.set_result(msg)
                elif "method" in msg and "id" not in msg:
                    self.events.put_nowait(msg)
        except (WebSocketException, OSError):
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(CallError(f"the gateway at {self.url} closed the connection", 3))
            self._pending.clear()
            self.events.put_nowait(None)  # end of events

    @property
    def closed(self) -> bool:
        """The gateway closed the connection (or it was closed here)."""
        return self._reader.done()

    async def call(self, method: str, params: Any = None) -> Any:
        if self._reader.done():
            raise CallError(f"the gateway at {self.url} closed the connection", 3)
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        frame = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}}
        try:
            await self.ws.send(orjson.dumps(frame), text=True)
        except (WebSocketException, OSError) as exc:
            self._pending.pop(req_id, None)
            raise unreachable(self.url, exc) from None
        limit = call_timeout(method)
        try:
            async with asyncio.timeout(limit):
                msg = await fut
        except TimeoutError:
            self._pending.pop(req_id, None)
            raise CallTimeout(f"the gateway at {self.url} did not answer {method} within {limit:g}s", 3) from None
        if "error" in msg:
            err = msg["error"]
            raise GatewayCallError(err)
        return msg["result"]

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()


class GatewayCallError(CallError):
    """The gateway answered a call with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any]):
        super().__init__(f"error {error.get('code')}: {error.get('message')}", 1)
        self.code = error.get("code")
        self.error_message = error.get("message") or ""
        self.data = error.get("data") if isinstance(error.get("data"), dict) else None
        self.error = protocol.error_of(error)  # what the gateway raised, as its class
