"""The CLI's one path to storage: the gateway's own method handlers (gateway/methods/…), by name.

    async with methods(config) as m:          # a gateway of this state dir answers: over its WebSocket;
        res = await m.call("memory.search", {"query": "boat", "k": 3})   # none: in this process
        m.gateway                              # the URL that answered, or None (in process)

Either way the call takes the one path (dispatcher.py) — the gateway's WebSocket door, or the CLI door
in process — so a command behaves alike with and without a running gateway, and nothing here
re-validates. Errors come back as the JarvisError of the one error value (over the wire rebuilt from its
JSON-RPC code by `protocol.error_of`), so the commands map them to exit codes in one way.

Notifications the method sends its caller (an import's progress) reach `call(…, on_event=fn)` either way:
from the socket, or through the `LocalCaller` an in-process call passes as its connection (peer "local":
the caller is on this machine, which admin.* methods that take a path require).

`methods(config, exclusive=True)` is for commands that write through the sessions store (`jarvis import`):
with no gateway answering, it takes the state dir's lock (as a gateway does) and opens the agents' sessions
stores too, so nothing else writes them meanwhile; a gateway that holds the lock without answering is an
error (StateDirInUse).

In process, the services are built from the state dir (cli/local.py's LocalServices). A call whose
request would not fit in one frame of the gateway (`server.maxFrameBytes`, 1 MiB, below
`memory.imageMaxBytes`: `memory set-image` of a 2 MB photo) runs in process even while a gateway
answers — the gateway would close the connection on it — as every command did beside a gateway before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
from typing import Any, AsyncIterator, Callable

import orjson

from ..auth import TokenError, read_token_file
from ..calls import OWNER, Call, Door
from ..config import Config
from ..events import Event
from ..principals import Principal, hash_token
from ..protocol import code_of

OnEvent = Callable[[dict[str, Any]], None]


async def in_process_principal(services: Any, config: Config | None) -> Principal:
    """Who calls in process. A command given no token at all is the holder of the state dir: its owner.
    A token given to the command (JARVIS_GATEWAY_TOKEN, --token) is taken as the gateway would take it:
    a live principal's acts as that principal, with its scopes and agents (access.Principals, the
    store's principals); the state dir's own token (gateway.token; with no such file, the configured
    token is the gateway's own) is the owner; any other — unknown, revoked, expired — is refused with
    TokenRefused (exit 3, the words `jarvis chat` says for it), never the owner."""
    token = config.token if config is not None else None
    if not token:
        return OWNER
    await services.principals.reload()
    directory = services.principals.directory
    found = directory.find(token)
    if found is not None:
        return found
    if directory.by_hash.get(hash_token(token)) is None:  # no principal's, live or not: the owner's?
        try:
            own = read_token_file(config.token_file)  # type: ignore[union-attr]
        except TokenError:
            own = None
        if own is None or hmac.compare_digest(own.encode(), token.encode()):
            return OWNER
    from .client import TokenRefused

    raise TokenRefused()


class LocalCaller:
    """The connection of an in-process call: on this machine, its notifications handed to `on_event`."""

    connection_id = "local"
    peer = "local"
    closing = False

    def __init__(self, on_event: OnEvent | None = None):
        self.subscriptions: set[str] = set()
        self.on_event = on_event

    def deliver(self, event: Event) -> None:
        if self.on_event is not None:
            method, params = event.notification(code_of)
            self.on_event({"method": method, "params": params})


class Methods:
    """Call a method by name: over `conn` (a gateway answered) or in process (`services`)."""

    def __init__(self, conn: Any = None, services: Any = None, config: Config | None = None):
        self.conn = conn
        self.services = services
        self.config = config  # to open services in process for a request too big for the gateway's frames
        self.gateway: str | None = conn.url if conn is not None else None
        self.principal: Principal | None = None  # in process: who calls (in_process_principal)

    def _fits(self, method: str, params: dict[str, Any]) -> bool:
        if self.config is None:
            return True
        frame = orjson.dumps({"jsonrpc": "2.0", "id": 1 << 40, "method": method, "params": params})
        return len(frame) <= self.config.server.max_frame_bytes

    async def call(self, method: str, params: dict[str, Any], on_event: OnEvent | None = None) -> Any:
        """The method's result; `on_event` gets the notifications it sends meanwhile ({method, params})."""
        if self.conn is not None and self._fits(method, params):
            from .client import GatewayCallError

            pump = asyncio.create_task(self._pump(on_event)) if on_event is not None else None
            try:
                return await self.conn.call(method, params)
            except GatewayCallError as exc:
                raise exc.error from None
            finally:
                if pump is not None:
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump
        if self.services is None:  # a gateway answers, but this request is too big for its frames
            from .local import LocalServices

            self.services = await LocalServices.open(self.config)  # type: ignore[arg-type]
        if self.principal is None:
            self.principal = await in_process_principal(self.services, self.config)
        call = Call(Door.CLI, method, params, self.principal, connection=LocalCaller(on_event))
        return await self.services.calls.perform(call)

    async def _pump(self, on_event: OnEvent) -> None:
        while True:
            msg = await self.conn.events.get()
            if msg is None:
                return
            on_event(msg)


@contextlib.asynccontextmanager
async def methods(config: Config, *, direct: bool = False, exclusive: bool = False) -> AsyncIterator[Methods]:
    """The gateway of this state dir when one answers at the configured address with its token (unless
    `direct`), else services in this process (`exclusive`: holding the state dir's lock, sessions open)."""
    conn = None if direct else await _connect(config)
    if conn is not None:
        m = Methods(conn=conn, config=config)
        try:
            yield m
        finally:
            await conn.close()
            if m.services is not None:
                await m.services.close()
        return
    from ..fsutil import lock_state_dir
    from .local import LocalServices

    lock = await asyncio.to_thread(lock_state_dir, config.state_dir) if exclusive else None  # StateDirInUse
    try:
        services = await LocalServices.open(config, sessions=exclusive)
        try:
            yield Methods(services=services, config=config)
        finally:
            await services.close()
    finally:
        if lock is not None:
            os.close(lock)


async def _connect(config: Config) -> Any:
    """A connection to the running gateway, or None when none of this state dir answers (nothing
    listens, no token yet, or a gateway that refuses the state dir's own token file: not this state
    dir's). A token given to the command (JARVIS_GATEWAY_TOKEN, --token) that the gateway refuses is
    TokenRefused (exit 3): the command never falls back to acting in process for it."""
    from .client import CallError, Connection, TokenRefused

    if config.server.port == 0:
        return None
    try:
        return await Connection.open(config, open_timeout=3)
    except TokenRefused as exc:
        if config.token and exc.status in (401, 429):  # 429: past the wrong tokens' budget (never the right one)
            raise
        return None
    except (CallError, asyncio.TimeoutError):
        return None
