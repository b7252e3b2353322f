"""The CLI's one path to storage: the gateway's own method handlers (gateway/methods/…), by name.

    async with methods(config) as m:          # a gateway of this state dir answers: over its WebSocket;
        res = await m.call("memory.search", {"query": "boat", "k": 3})   # none: in this process
        m.gateway                              # the URL that answered, or None (in process)

Either way the call takes the one path (dispatcher.py) — the gateway's WebSocket door, or the CLI door
in process — so a command behaves alike with and without a running gateway, and nothing here
re-validates. Errors come back as the JarvisError of the one error value (over the wire rebuilt from its
JSON-RPC code by `protocol.error_of`), so the commands map them to exit codes in one way.

In process, the services are built from the state dir (cli/local.py's LocalServices). A call whose
request would not fit in one frame of the gateway (`server.maxFrameBytes`, 1 MiB, below
`memory.imageMaxBytes`: `memory set-image` of a 2 MB photo) runs in process even while a gateway
answers — the gateway would close the connection on it — as every command did beside a gateway before.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator

import orjson

from ..calls import Call, Door
from ..config import Config


class Methods:
    """Call a method by name: over `conn` (a gateway answered) or in process (`services`)."""

    def __init__(self, conn: Any = None, services: Any = None, config: Config | None = None):
        self.conn = conn
        self.services = services
        self.config = config  # to open services in process for a request too big for the gateway's frames
        self.gateway: str | None = conn.url if conn is not None else None

    def _fits(self, method: str, params: dict[str, Any]) -> bool:
        if self.config is None:
            return True
        frame = orjson.dumps({"jsonrpc": "2.0", "id": 1 << 40, "method": method, "params": params})
        return len(frame) <= self.config.server.max_frame_bytes

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        if self.conn is not None and self._fits(method, params):
            from .client import GatewayCallError

            try:
                return await self.conn.call(method, params)
            except GatewayCallError as exc:
                raise exc.error from None
        if self.services is None:  # a gateway answers, but this request is too big for its frames
            from .local import LocalServices

            self.services = await LocalServices.open(self.config)  # type: ignore[arg-type]
        return await self.services.calls.perform(Call(Door.CLI, method, params))


@contextlib.asynccontextmanager
async def methods(config: Config, *, direct: bool = False) -> AsyncIterator[Methods]:
    """The gateway of this state dir when one answers at the configured address with its token (unless
    `direct`), else services in this process."""
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
    from .local import LocalServices

    services = await LocalServices.open(config)
    try:
        yield Methods(services=services)
    finally:
        await services.close()


async def _connect(config: Config) -> Any:
    """A connection to the running gateway, or None when none of this state dir answers (nothing
    listens, a gateway that refuses this token, or no token yet)."""
    from .client import CallError, Connection

    if config.server.port == 0:
        return None
    try:
        return await Connection.open(config, open_timeout=3)
    except (CallError, asyncio.TimeoutError):
        return None
