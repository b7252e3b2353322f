"""What handlers reach through `ctx.services`: the agents (opened lazily, closed when idle), the chat
provider, the event bus and the config.

    services = Services(config, EventBus(), provider, await open_storage(config))
    agent = await services.agent("main")        # opened on first use; agents.maxOpen, agents.max
    with services.request_scope(): ...          # agents used inside count as busy (no idle close)

Each Agent is one agent's world: its sessions, transcripts, memory index and chat runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import structlog

from .access import Principals
from .auth import TokenStore
from .chat.compaction import Compactor
from .chat.providers import ChatProvider
from .chat.responses import note_old_owners
from .chat.runner import ChatService
from .chat.tools import ChatTools
from .compose import cluster_of, memory_service
from .calls import ACTING, Call, Door
from .config import Config, MemoryConfig, SessionsConfig
from .dispatcher import Dispatcher
from .errors import Conflict, Invalid, JarvisError, NotFound, Unauthenticated, Unavailable
from .events import EventBus
from .protocol import error_object
from .schema import AGENT_ID
from .sessions.retention import ephemeral_victims
from .storage.base import SessionStore, Storage
from .timeutil import days_ago

if TYPE_CHECKING:  # pragma: no cover
    from .memory.service import MemoryService

log = structlog.get_logger("gateway.services")


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
    memory: "MemoryService | None"

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
        return self.memory is None or not self.memory.orchestrator.busy

    async def close(self) -> None:
        await self.sessions.close()
        if self.memory is not None:
            await self.memory.close()

    async def delete_session(self, key: str, trash: bool = True) -> None:
        """Abort its run, move metadata and transcript to the trash (`trash=False`: remove them for good),
        and drop its memory chunks.

        Under the session's send lock: a chat.send in flight either finishes starting its run first
        (which is then aborted here) or finds the session gone — it can never recreate the transcript."""
        async with self.chat.session_lock(key):
            await self.chat.abort(key, None)
            await self.sessions.delete(key, trash=trash)
        await self.chat.forget(key)
        if self.memory is not None:
            await self.memory.forget_session(key)

    async def restore_session(self, key: str) -> dict:
        """Bring a session back from the trash whole; it is searchable again when this returns."""
        async with self.chat.session_lock(key):
            session = await self.sessions.restore(key)
        if self.memory is not None:
            await self.memory.session_restored(key)
        return session

    async def prune(self, config: SessionsConfig) -> list[str]:
        """Delete the ephemeral sessions retention says should go (for good: retention is no mistake to undo)."""
        victims = ephemeral_victims(await self.sessions.all(), config)
        for key in victims:
            try:
                await self.delete_session(key, trash=False)
            except NotFound:  # deleted meanwhile
                continue
        if victims:
            log.info("ephemeral sessions pruned", agent=self.id, count=len(victims))
        return victims

    async def empty_trash(self, config: MemoryConfig) -> dict[str, list[str]]:
        """Purge what was deleted `memory.trashDays` ago, and the longest deleted past `memory.trashMax`:
        sessions, and keyed memories."""
        cutoff = days_ago(config.trash_days)
        stores: list[tuple[str, Any, Callable[[Any], str]]] = [("sessions", self.sessions, lambda s: s["sessionKey"])]
        if self.memory is not None:
            stores.append(("keyed", self.memory.keyed, lambda c: c.entry.key))
        out: dict[str, list[str]] = {}
        for name, store, key_of in stores:
            gone = await store.purge(before=cutoff)
            over = [key_of(t) for t in (await store.trash())[config.trash_max :]]  # the most recent first
            if over:
                gone += await store.purge(over)
            out[name] = gone
        if any(out.values()):
            log.info("trash emptied", agent=self.id, **{k: len(v) for k, v in out.items()})
        return out


class Services:
    """What handlers reach through `ctx.services`. Agents open lazily: `await services.agent(id)`."""

    def __init__(self, config: Config, bus: EventBus, provider: ChatProvider, storage: Storage):
        self.config = config
        self.bus = bus
        self.provider = provider
        self.storage = storage  # open_storage(config): the files, or PostgreSQL shared with other gateways
        # Who may call: the owner (the gateway token) and the storage's principals (gateway/access.py).
        self.principals = Principals(TokenStore(config.token, config.token_file), storage.principals())
        self.cluster = cluster_of(storage, self)
        if self.cluster is not None:
            bus.relay = self.cluster.relay
        self.started = time.monotonic()
        self.connection_count: Callable[[], int] = lambda: 0
        self.calls = Dispatcher(self)  # the one path of every call, whichever door it came by
        self.agents: dict[str, Agent] = {}  # open ones, least recently used first
        self._opening = asyncio.Lock()
        self._stop = asyncio.Event()
        self._pruner: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None

    def start_background(self) -> None:
        if self.cluster is not None:
            self.cluster.start()
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
        """Prune ephemeral sessions (and purge expired stored responses) at start, then every
        sessions.pruneIntervalMinutes."""
        interval = self.config.sessions.prune_interval_minutes * 60
        await note_old_owners(self.storage.responses())  # once: those an upgrade no longer reads
        while not self._stop.is_set():
            for agent in list(self.agents.values()):
                if self.agents.get(agent.id) is not agent:  # closed meanwhile: pruned when next open
                    continue
                try:
                    with self.request_scope():
                        self.use(agent)  # counted as in use: idle closing waits for the prune
                        await agent.prune(self.config.sessions)
                        await agent.empty_trash(self.config.memory)
                except Exception:  # retention must never take the gateway down; try next time
                    log.exception("retention failed", agent=agent.id)
            try:  # /v1/responses kept past openaiApi.storedResponseDays (a put purges them too)
                purged = await self.storage.responses().purge()
                if purged:
                    log.info("stored responses purged", count=purged)
            except Exception:
                log.exception("stored responses purge failed")
            if interval <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)

    @property
    def stopping(self) -> bool:
        """close_runs was called: the gateway is shutting down."""
        return self._stop.is_set()

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
    def memory(self) -> "MemoryService | None":
        return self.default.memory

    async def agent(self, agent_id: str | None = None, create: bool = False) -> Agent:
        """The agent `agent_id` (default: the configured one), opened on first use. An agent that
        has no folder yet (nor, with storage.url, sessions in the database) exists only once `create`
        is asked (sessions.create does)."""
        agent_id = agent_id or self.config.agent_id
        found = self.agents.get(agent_id)
        if found is None:
            if not AGENT_ID_RE.fullmatch(agent_id):
                raise Invalid("must match [A-Za-z0-9._-]{1,64}", field="agentId")
            async with self._opening:
                found = self.agents.get(agent_id)
                if found is None:
                    found = await self._open_new(agent_id, create)
        self.use(found)
        return found

    def use(self, agent: Agent) -> None:
        agent.last_used = time.monotonic()
        self.agents[agent.id] = self.agents.pop(agent.id)  # most recently used last
        held = _HELD.get()
        if held is not None and held.open and agent not in held:
            held.append(agent)
            agent.users += 1

    def revoked(self, digests: set[str]) -> None:
        """The principals of these token digests ended (access.py's `on_revoked`): their chat runs on this
        gateway are aborted, whichever gateway the revoke was made on."""
        for agent in list(self.agents.values()):
            if agent.chat is not None:
                agent.chat.revoked(digests)

    async def answer_confirm(
        self, who: str, token_hash: str, door: str, params: Any
    ) -> tuple[dict[str, Any] | None, str]:
        """A `chat.confirm` answered on another gateway for a run of this one (cluster.py): performed here
        through the one path of a call as that principal — found by identity (its name and token digest),
        live — so that who may answer is decided as for a local answer; not audited here: the asking
        gateway's audit entry is the attempt's one, and this answers what it needs → (None when it was
        accepted, else the refusal's JSON-RPC error object, for the asking gateway to answer with the
        same code and message as one gateway would; the name of the principal that started the run)."""
        try:  # validated first, as the call's own schema takes them: a clear -32602 naming the field
            checked = self.calls.methods.methods["chat.confirm"].params.validate(params)
        except Invalid as exc:
            return error_object(exc.within("params")), ""
        principal = await self.principals.by_identity(who, token_hash)
        if principal is None:
            log.info("confirm_from_unknown_principal", principal=who[:64])
            gone = Unauthenticated(f"principal {who[:64]!r} is no longer live (revoked or expired)")
            return error_object(gone), ""
        try:
            via = Door(door)
        except ValueError:  # a door this version does not know: the WebSocket, the door of most answers
            via = Door.WEBSOCKET
        agent = self.agents.get(checked["agentId"])
        chat = agent.chat if agent is not None else None
        run = next((r for r in chat.active.values() if r.run_id == checked["runId"]), None) if chat else None
        started = run.principal.name if run is not None and run.principal is not None else ""
        try:
            await self.calls.perform(Call(via, "chat.confirm", checked, principal, audited=False))
        except JarvisError as exc:  # the starter is named only to one who may answer
            log.info("confirm_from_elsewhere_refused", principal=who[:64], error=str(exc)[:200])
            return error_object(exc), ""
        return None, started

    async def _open_new(self, agent_id: str, create: bool) -> Agent:
        """Open an agent (under _opening): check it exists or may be created, make room, open it."""
        cfg = self.config
        exists = await asyncio.to_thread(cfg.agent_dir(agent_id).is_dir)
        if not exists:  # made through another gateway on the same storage
            exists = await self.storage.has_agent(agent_id)
        if not exists and not create and agent_id != cfg.agent_id:
            raise NotFound(f"agent not found: {agent_id}", {"agentId": agent_id})
        if not exists and agent_id != cfg.agent_id:
            count = await asyncio.to_thread(_count_agents, cfg.state_dir / "agents")
            if count >= cfg.agents.max:
                raise Conflict(
                    f"agent limit reached: {count} agents exist (agents.max = {cfg.agents.max}); use an "
                    f"existing agentId or raise agents.max",
                    {"agentId": agent_id, "max": cfg.agents.max},
                )
        if self._stop.is_set():
            raise Unavailable("gateway is shutting down", retryable=True, retry_after_ms=1000)
        full = len(self.agents) >= cfg.agents.max_open
        if full and self._victim() is None:
            raise Conflict(
                f"too many agents open at once (agents.maxOpen = {cfg.agents.max_open}) and none is idle "
                f"(each has a request, chat run, compaction or memory sync under way); retry shortly",
                {"agentId": agent_id, "maxOpen": cfg.agents.max_open},
            )
        # Open first: an open that fails (disk full, a damaged folder) must not cost another agent its place.
        agent = await self._open_agent(agent_id)
        self.agents[agent_id] = agent
        while len(self.agents) > cfg.agents.max_open and (victim := self._victim()) is not None:
            await self._close_agent(victim, locked=True)
        return agent

    def _victim(self) -> Agent | None:
        """The least recently used idle agent other than the default one."""
        return next((a for a in self.agents.values() if a.id != self.config.agent_id and a.idle), None)

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
            await asyncio.shield(agent.close())  # a cancelled caller must not leave it half closed
        log.info("agent closed", agent=agent.id, reason="idle" if cutoff is not None else "agents.maxOpen")

    async def _open_agent(self, agent_id: str) -> Agent:
        cfg = self.config
        sessions = self.storage.sessions(agent_id)
        ledger = self.storage.ledger(agent_id)
        await sessions.open()
        await asyncio.to_thread(cfg.agent_workspace(agent_id).mkdir, mode=0o700, parents=True, exist_ok=True)
        memory = None
        if cfg.memory.enabled:
            memory = memory_service(cfg, self.storage, agent_id)
            try:
                await memory.open()
            except BaseException:
                await memory.close()  # its lock file, connections and watcher
                await sessions.close()
                raise
        agent = Agent(agent_id, sessions, None, memory)  # type: ignore[arg-type]
        compactor = Compactor(cfg, sessions, self.provider, memory, cfg.agent_workspace(agent_id))
        tools = ChatTools(cfg, self.calls.caller(Door.TOOL, agent_id)) if memory is not None else None
        agent.chat = ChatService(
            cfg,
            sessions,
            self.bus,
            self.provider,
            ledger,
            memory,
            topic=agent.topic,
            compactor=compactor,
            tools=tools,
            request_abort=self.cluster.abort_requester(agent_id) if self.cluster else None,
            unreachable=self.storage.unreachable,
            acting=ACTING.get,
            responses=self.storage.responses(),
            answer_elsewhere=self.cluster.confirm_requester(agent_id) if self.cluster else None,
            watched_elsewhere=self.cluster.watch_asker() if self.cluster else None,
        )
        log.info("agent open", agent=agent_id, memory=memory is not None)
        return agent

    async def close_runs(self, grace: float) -> None:
        """Refuse new chat runs; give the running ones `grace` seconds to finish, then abort them (their
        partial replies are kept)."""
        self._stop.set()
        await asyncio.gather(*(a.chat.shutdown(grace) for a in self.agents.values()))
        for task in (self._pruner, self._closer):
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, max(grace, 0.1))

    async def close(self) -> None:
        await self.calls.auditor.close()  # the refusals counted and not yet written
        await self.principals.stop()
        if self.cluster is not None:
            await self.cluster.close()
        await self.provider.close()
        async with self._opening:
            for a in list(self.agents.values()):
                await a.close()
