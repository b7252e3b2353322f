"""Wires the parts together; lifecycle in named phases: startup → serve → shutdown.

gw = Gateway(config); await gw.start()      # state dir, token, sessions, memory, chat, bind
await gw.wait_stopped()                      # until stop() (signals call it)
await gw.shutdown()                          # stop accepting, let runs finish (grace), close 1012, close memory
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import TYPE_CHECKING, Any, Callable

import structlog

from . import __version__
from .calls import Call, Door
from .chat.providers import DiscoveredProvider, make_provider
from .config import Config
from .events import EventBus
from .methods import chat as _chat_methods  # noqa: F401  (registers methods)
from .methods import sessions as _session_methods  # noqa: F401
from .methods import memory as _memory_methods  # noqa: F401
from .methods import system as _system_methods  # noqa: F401
from .methods import principals as _principal_methods  # noqa: F401
from .methods import admin as _admin_methods  # noqa: F401
from .fsutil import ensure_private_dir, lock_state_dir
from .doors import openai
from .doors.httpapi import HttpApi
from .doors.websocket import GatewayServer
from .services import Services
from .storage import open_storage

if TYPE_CHECKING:  # pragma: no cover
    from .memory.service import MemoryService
    from .errors import JarvisError
    from .storage.base import Storage

log = structlog.get_logger("gateway.app")

# How long the ready line waits for the first look for a local model server (it runs beside the rest of
# start-up; loopback answers in milliseconds, a refused port at once): past it the line says "looking".
DISCOVERY_WAIT_S = 1.0


class Gateway:
    def __init__(self, config: Config):
        self.config = config
        self.services: Services | None = None
        self.server: GatewayServer | None = None
        self._stop = asyncio.Event()
        self._hooks: list[Callable[[str, dict[str, Any]], None]] = []
        self._lock_fd: int | None = None
        self.storage: "Storage | None" = None
        self.http: HttpApi | None = None

    @property
    def memory(self) -> "MemoryService | None":
        """The default agent's memory (None when disabled or not started)."""
        return self.services.memory if self.services is not None and self.services.agents else None

    @property
    def port(self) -> int:
        return self.server.port if self.server else 0

    @property
    def url(self) -> str:
        return self.config.ws_url(self.port)

    def on_phase(self, hook: Callable[[str, dict[str, Any]], None]) -> None:
        """Observe lifecycle phases ("ready", "stopping") — used by sd_notify."""
        self._hooks.append(hook)

    def _phase(self, name: str, **info: Any) -> None:
        for hook in self._hooks:
            try:
                hook(name, info)
            except Exception:  # an observer must never take the gateway down
                log.exception("phase hook failed", phase=name)

    async def start(self) -> None:
        cfg = self.config
        ensure_private_dir(cfg.state_dir)
        self._lock_fd = lock_state_dir(cfg.state_dir)  # raises StateDirInUse when another gateway has it
        provider = make_provider(cfg)
        if isinstance(provider, DiscoveredProvider):
            provider.start()  # loopback's model servers asked while the rest starts; the ready line says
        self.storage = await open_storage(cfg)
        self.services = Services(cfg, EventBus(), provider, self.storage)
        tokens = self.services.principals.tokens
        await asyncio.to_thread(tokens.load)
        await self.services.principals.start()
        await self.services.agent(cfg.agent_id, create=True)
        self.services.start_background()
        self.server = GatewayServer(self.services)
        self.services.connection_count = self.server.connection_count
        await self.server.start()
        calls = self.services.calls

        def failure(request: str, exc: Exception) -> "JarvisError":
            """What escaped an HTTP route, as the one error value of a call (logged there)."""
            door = Door.MCP if request.split(" ")[-1].startswith("/mcp") else Door.OPENAI
            return calls.failure(Call(door, request, {}), exc)

        self.http = HttpApi(cfg, self.services.principals, self.server.handshake, self.server.admission, failure)
        self.http.add_routes(openai.routes(self.services))  # /v1: OpenAI-compatible, with memory
        if self.http.enabled:
            from .doors import mcp

            mcp.mount(self.http, self.services)  # /mcp: the memory tools for MCP clients
        # A principal revoked anywhere (here, another gateway, `jarvis token revoke`): its sockets, streams,
        # MCP calls and chat runs end on this gateway within a poll of the principals (access.POLL_S).
        self.services.principals.on_revoked += [self.server.revoked, self.http.revoked, self.services.revoked]
        await self.http.start()
        if isinstance(provider, DiscoveredProvider):
            await provider.settled(DISCOVERY_WAIT_S)
        chat = provider.describe()
        log.info(
            "gateway ready",
            url=self.url,
            version=__version__,
            chat=provider.name,
            chat_model=provider.model,
            chat_url=chat["baseUrl"],
            chat_discovered=chat["discovered"],
            memory=cfg.memory.enabled,
            state_dir=str(cfg.state_dir),
            http=self.http.url() if self.http.enabled else None,
        )
        self._phase("ready", url=self.url, chat=chat)

    def stop(self) -> None:
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    async def shutdown(self) -> None:
        """Stop accepting, refuse new chats, give running ones the grace to finish (then abort them, partials
        kept), close sockets with 1012, close memory."""
        if self._lock_fd is None and self.services is None and self.server is None and self.storage is None:
            return  # never started (the state dir is another gateway's): nothing to stop, nothing to say
        self._phase("stopping")
        grace = self.config.server.shutdown_grace
        log.info("gateway stopping", grace=grace)
        if self.server is not None:
            self.server.stop_accepting()
        if self.http is not None:
            self.http.stop_accepting()
        if self.services is not None:
            await self.services.close_runs(grace)
        if self.http is not None:
            await self.http.stop()
        if self.server is not None:
            await self.server.close_all()
        if self.services is not None:
            await self.services.close()
        if self.storage is not None:
            await self.storage.close()
            self.storage = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("gateway stopped")


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard one (agents, connections and indexes each hold
    descriptors; the systemd unit sets LimitNOFILE, a shell usually leaves the soft limit at 1024)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


class LoopErrors:
    """asyncio's exception handler, throttled: out of descriptors, the accept loop reports the same
    error thousands of times a second, each with a traceback. Log each kind once per `every` seconds,
    as one structured line with a count of what was left out."""

    def __init__(self, every: float = 10.0):
        self.every = every
        self._last: dict[str, tuple[float, int]] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        kind = f"{context.get('message', '')}|{type(exc).__name__}:{getattr(exc, 'errno', '')}"
        now = time.monotonic()
        last, skipped = self._last.get(kind, (0.0, 0))
        if now - last < self.every:
            self._last[kind] = (last, skipped + 1)
            return
        self._last[kind] = (now, 0)
        if len(self._last) > 1000:
            self._last.clear()
        # An OSError (out of descriptors, a reset socket) needs no traceback; anything else is a bug.
        trace = exc if exc is not None and not isinstance(exc, OSError) else None
        log.error(
            "event loop error",
            message=context.get("message"),
            error=repr(exc) if exc else None,
            suppressed=skipped,
            exc_info=trace,
        )


async def serve(config: Config, on_gateway: Callable[[Gateway], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT; exit code 0 on a clean stop."""
    gw = Gateway(config)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(LoopErrors())
    soft, _hard = raise_open_file_limit()
    if soft < 4096:
        log.warning("open file limit is low", limit=soft, hint="set LimitNOFILE (the unit does) or ulimit -n")
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, gw.stop)
    if on_gateway is not None:
        on_gateway(gw)
    try:
        await gw.start()
        await gw.wait_stopped()
    finally:
        await gw.shutdown()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0
