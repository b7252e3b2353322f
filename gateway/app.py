"""Wires the parts together; lifecycle in named phases: startup → serve → shutdown.

    gw = Gateway(config); await gw.start()      # state dir, token, sessions, memory, chat, bind
    await gw.wait_stopped()                      # until stop() (signals call it)
    await gw.shutdown()                          # stop accepting, abort runs, close 1012, close memory
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import structlog

from . import __version__
from .auth import TokenStore
from .chat.compaction import Compactor
from .chat.providers import ChatProvider, make_provider
from .chat.runner import ChatService
from .config import Config, SessionsConfig
from .errors import Busy, InvalidParams, NotFound
from .events import EventBus
from .methods import chat as _chat_methods  # noqa: F401  (registers methods)
from .methods import sessions as _session_methods  # noqa: F401
from .methods import memory as _memory_methods  # noqa: F401
from .methods import memory_extra as _memory_extra_methods  # noqa: F401
from .methods import system as _system_methods  # noqa: F401
from .schema import AGENT_ID
from .server import GatewayServer
from .sessions.retention import ephemeral_victims
from .fsutil import ensure_private_dir, lock_state_dir
from .sessions.store import SessionStore

if TYPE_CHECKING:  # pragma: no cover
    from .memory.manager import MemoryManager

log = structlog.get_logger("gateway.app")


AGENT_ID_RE = re.compile(AGENT_ID)


class _Held(list):
    """Agents one request uses. Tasks started by the request (a chat run) inherit the context; once
    the request is done `open` is False and their uses are no longer counted."""

    open = True


_HELD: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("jarvis_held_agents", default=None)


def _count_agents(agents_dir: Path) -> int:
    try:
        return sum(1 for e in os.scandir(agents_dir) if e.is_dir())
    except FileNotFoundError:
        return 0


@dataclass
class Agent:
    """One agent's world: its own sessions, transcripts, memory index and chat runs."""

    id: str
    sessions: SessionStore
    chat: ChatService
    memory: "MemoryManager | None"

    users: int = 0  # requests being handled that use this agent (see Services.request_scope)
    last_used: float = 0.0  # time.monotonic() of the last use

    def topic(self, session_key: str) -> str:
        """Event-bus topic of a session; agent ids and session keys cannot contain '/'."""
        return f"{self.id}/{session_key}"

    @property
    def idle(self) -> bool:
        """Nothing would be cut short by closing it: no request, run, compaction or memory sync."""
        if self.users or not self.chat.idle:
            return False
        return self.memory is None or not (self.memory.orchestrator.running or self.memory.orchestrator.pending)

    async def close(self) -> None:
        await self.sessions.close()
        if self.memory is not None:
            await self.memory.close()

    async def delete_session(self, key: str) -> None:
        """Abort its run, remove metadata and transcript, and drop its memory chunks.

        Under the session's send lock: a chat.send in flight either finishes starting its run first
        (which is then aborted here) or finds the session gone — it can never recreate the transcript."""
        async with self.chat.session_lock(key):
            await self.chat.abort(key, None)
            await self.sessions.delete(key)
        self.chat.forget(key)
        if self.memory is not None:
            await self.memory.forget_session(key)

    async def prune(self, config: SessionsConfig) -> list[str]:
        """Delete the ephemeral sessions retention says should go."""
        victims = ephemeral_victims(await self.sessions.all(), config)
        for key in victims:
            try:
                await self.delete_session(key)
            except NotFound:  # deleted meanwhile
                continue
        if victims:
            log.info("ephemeral sessions pruned", agent=self.id, count=len(victims))
        return victims


class Services:
    """What handlers reach through `ctx.services`. Agents open lazily: `await services.agent(id)`."""

    def __init__(self, config: Config, bus: EventBus, provider: ChatProvider):
        self.config = config
        self.bus = bus
        self.provider = provider
        self.started = time.monotonic()
        self.connection_count: Callable[[], int] = lambda: 0
        self.agents: dict[str, Agent] = {}  # open ones, least recently used first
        self._idempotency: dict[str, dict[tuple[str, str], tuple[str, float]]] = {}  # outlives closing
        self._opening = asyncio.Lock()
        self._stop = asyncio.Event()
        self._pruner: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None

    def start_background(self) -> None:
        self._pruner = asyncio.create_task(self._prune_loop(), name="retention")
        self._closer = asyncio.create_task(self._idle_loop(), name="idle-agents")

    @contextlib.contextmanager
    def request_scope(self):
        """Wrap the handling of one request: agents it opens count as in use until it is done, so that
        idle closing never closes an agent under a request."""
        held = _Held()
        token = _HELD.set(held)
        try:
            yield
        finally:
            _HELD.reset(token)
            held.open = False
            for agent in held:
                agent.users -= 1
                agent.last_used = time.monotonic()

    async def _idle_loop(self) -> None:
        """Close agents (other than the default) that were idle for agents.idleSeconds."""
        idle_s = self.config.agents.idle_seconds
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), min(30.0, idle_s / 2))
            if self._stop.is_set():
                return
            cutoff = time.monotonic() - idle_s
            for agent in [a for a in self.agents.values() if a.last_used < cutoff]:
                try:
                    await self._close_agent(agent, cutoff=cutoff)
                except Exception:  # closing is housekeeping: log, try again next round
                    log.exception("closing an idle agent failed", agent=agent.id)

    async def _prune_loop(self) -> None:
        """Prune ephemeral sessions at start, then every sessions.pruneIntervalMinutes."""
        interval = self.config.sessions.prune_interval_minutes * 60
        while not self._stop.is_set():
            for agent in list(self.agents.values()):
                try:
                    await agent.prune(self.config.sessions)
                except Exception:  # retention must never take the gateway down; try next time
                    log.exception("retention failed", agent=agent.id)
            if interval <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)

    @property
    def default(self) -> Agent:
        return self.agents[self.config.agent_id]

    # The default agent's parts, for code that serves one agent (health, sd_notify, the CLI).
    @property
    def sessions(self) -> SessionStore:
        return self.default.sessions

    @property
    def chat(self) -> ChatService:
        return self.default.chat

    @property
    def memory(self) -> "MemoryManager | None":
        return self.default.memory

    async def agent(self, agent_id: str | None = None, create: bool = False) -> Agent:
        """The agent `agent_id` (default: the configured one), opened on first use. An agent that
        has no folder yet exists only once `create` is asked (sessions.create does)."""
        agent_id = agent_id or self.config.agent_id
        found = self.agents.get(agent_id)
        if found is None:
            if not AGENT_ID_RE.fullmatch(agent_id):
                raise InvalidParams("params.agentId: must match [A-Za-z0-9._-]{1,64}", field="params.agentId")
            async with self._opening:
                found = self.agents.get(agent_id)
                if found is None:
                    found = await self._open_new(agent_id, create)
        self._use(found)
        return found

    def _use(self, agent: Agent) -> None:
        agent.last_used = time.monotonic()
        self.agents[agent.id] = self.agents.pop(agent.id)  # most recently used last
        held = _HELD.get()
        if held is not None and held.open and agent not in held:
            held.append(agent)
            agent.users += 1

    async def _open_new(self, agent_id: str, create: bool) -> Agent:
        """Open an agent (under _opening): check it exists or may be created, make room, open it."""
        cfg = self.config
        exists = await asyncio.to_thread(cfg.agent_dir(agent_id).is_dir)
        if not exists and not create and agent_id != cfg.agent_id:
            raise NotFound(f"agent not found: {agent_id}", {"agentId": agent_id})
        if not exists and agent_id != cfg.agent_id:
            count = await asyncio.to_thread(_count_agents, cfg.state_dir / "agents")
            if count >= cfg.agents.max:
                raise Busy(f"agent limit reached: {count} agents exist (agents.max = {cfg.agents.max}); use an "
                           f"existing agentId or raise agents.max", {"agentId": agent_id, "max": cfg.agents.max})
        while len(self.agents) >= cfg.agents.max_open:
            victim = next((a for a in self.agents.values() if a.id != cfg.agent_id and a.idle), None)
            if victim is None:
                raise Busy(f"too many agents open at once (agents.maxOpen = {cfg.agents.max_open}) and none is "
                           f"idle; retry when a run ends", {"agentId": agent_id, "maxOpen": cfg.agents.max_open})
            await self._close_agent(victim, locked=True)
        agent = await self._open_agent(agent_id)
        self.agents[agent_id] = agent
        return agent

    async def _close_agent(self, agent: Agent, *, locked: bool = False, cutoff: float | None = None) -> None:
        """Close an idle agent (never the default one); it is opened again on its next use."""
        if agent.id == self.config.agent_id:
            return
        async with contextlib.nullcontext() if locked else self._opening:
            if self.agents.get(agent.id) is not agent or not agent.idle:
                return
            if cutoff is not None and agent.last_used >= cutoff:
                return
            del self.agents[agent.id]
            await agent.close()
        log.info("agent closed", agent=agent.id, reason="idle" if cutoff is not None else "agents.maxOpen")

    async def _open_agent(self, agent_id: str) -> Agent:
        cfg = self.config
        sessions = SessionStore(cfg.sessions_dir(agent_id), agent_id)
        await asyncio.to_thread(sessions.open_sync)
        await asyncio.to_thread(cfg.agent_workspace(agent_id).mkdir, mode=0o700, parents=True, exist_ok=True)
        memory = None
        if cfg.memory.enabled:
            from .memory.manager import MemoryManager

            memory = MemoryManager(cfg, agent_id)
            await memory.open()
        agent = Agent(agent_id, sessions, None, memory)  # type: ignore[arg-type]
        compactor = Compactor(cfg, sessions, self.provider, memory, cfg.agent_workspace(agent_id))
        agent.chat = ChatService(cfg, sessions, self.bus, self.provider, memory, topic=agent.topic,
                                 compactor=compactor, idempotency=self._idempotency.setdefault(agent_id, {}))
        log.info("agent open", agent=agent_id, memory=memory is not None)
        return agent

    async def close_runs(self, grace: float) -> None:
        """Refuse new chat runs and abort the running ones (their partial replies are kept)."""
        self._stop.set()
        await asyncio.gather(*(a.chat.shutdown(grace) for a in self.agents.values()))
        for task in (self._pruner, self._closer):
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, max(grace, 0.1))

    async def close(self) -> None:
        await self.provider.close()
        async with self._opening:
            for a in list(self.agents.values()):
                await a.close()


class Gateway:
    def __init__(self, config: Config):
        self.config = config
        self.services: Services | None = None
        self.server: GatewayServer | None = None
        self._stop = asyncio.Event()
        self._hooks: list[Callable[[str, dict[str, Any]], None]] = []
        self._lock_fd: int | None = None

    @property
    def memory(self) -> "MemoryManager | None":
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
        tokens = TokenStore(cfg.token, cfg.token_file)
        await asyncio.to_thread(tokens.load)
        provider = make_provider(cfg)
        self.services = Services(cfg, EventBus(), provider)
        await self.services.agent(cfg.agent_id, create=True)
        self.services.start_background()
        self.server = GatewayServer(self.services, tokens)
        self.services.connection_count = self.server.connection_count
        await self.server.start()
        log.info("gateway ready", url=self.url, version=__version__, chat=provider.name,
                 memory=cfg.memory.enabled, state_dir=str(cfg.state_dir))
        self._phase("ready", url=self.url)

    def stop(self) -> None:
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    async def shutdown(self) -> None:
        """Stop accepting, abort running chats (partials kept), close sockets with 1012, close memory."""
        self._phase("stopping")
        grace = self.config.server.shutdown_grace
        log.info("gateway stopping", grace=grace)
        if self.server is not None:
            self.server.stop_accepting()
        if self.services is not None:
            await self.services.close_runs(grace)
        if self.server is not None:
            await self.server.close_all()
        if self.services is not None:
            await self.services.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("gateway stopped")


async def serve(config: Config, on_gateway: Callable[[Gateway], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT; exit code 0 on a clean stop."""
    gw = Gateway(config)
    loop = asyncio.get_running_loop()
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
