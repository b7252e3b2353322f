"""Several gateways on one PostgreSQL database (`storage.url`) serving the same sessions.

What crosses between them, all through the database (storage/postgres/instance.py):

- **chat events**: every event this gateway publishes is relayed in order (NOTIFY); another gateway
  delivers it to its own subscribers of that session. A client subscribed on B sees the run on A.
- **transcripts**: a `lines` notification after each append; the other gateways update their local
  mirror and re-index the session's memory (debounced, like after a local `chat.final`).
- **keyed memories** (`keyed`, after memory.set/delete): the other gateways rewrite or remove their
  mirror file of that key (storage/postgres/keyed.py) and re-index their memory files.
- **deletes** (`deleted`) and **aborts** (`abort`: `chat.abort` sent to a gateway that does not run the
  session's run asks the one that does).
- **dead gateways**: every SWEEP_S seconds each gateway looks for runs held by an instance whose
  liveness lock is gone (killed, its machine lost). The first to claim such a run ends it as the
  runner would have: the partial reply it saw relayed is appended to the transcript marked
  `aborted`, and `chat.aborted` goes to every subscriber. The user message was durable before the
  run started, so nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ContextManager, Protocol

import structlog

from .events import EventBus
from .sessions import transcript as tx
from .storage.postgres.ledger import claims, drop_claim
from .tasks import log_failure

if TYPE_CHECKING:  # pragma: no cover
    from .storage.postgres import Postgres

log = structlog.get_logger("gateway.cluster")

SWEEP_S = 5.0
MAX_REMOTE_RUNS = 10_000  # other gateways' runs followed at once (their partial replies, for a sweep)
_ENDS = ("chat.final", "chat.error", "chat.aborted")


class Host(Protocol):
    """What the cluster needs of the gateway that holds it (services.Services): the event bus, the
    open agents (services.Agent: id, sessions, chat, memory, topic) and a way to open one."""

    bus: EventBus
    agents: dict[str, Any]

    def request_scope(self) -> ContextManager[Any]: ...

    async def agent(self, agent_id: str) -> Any: ...

    def use(self, agent: Any) -> None: ...


class Cluster:
    """Wired by services.py through two declared hooks: `relay` is the event bus's relay, and
    `abort_requester(agent_id)` each agent's ChatService `request_abort`."""

    def __init__(self, services: Host, pg: "Postgres"):
        self.services = services
        self.pg = pg
        self._relaying = False  # from start() to close()
        # Runs of other gateways seen through relayed events: (topic, runId) → [last seq, partial text].
        self._remote: dict[tuple[str, str], list[Any]] = {}
        self._sweeper: asyncio.Task | None = None
        self._stop = asyncio.Event()

    def start(self) -> None:
        pg = self.pg
        self._relaying = True
        pg.on("event", self._on_event)
        pg.on("lines", lambda msg: self._to_agent(msg, "lines"))
        pg.on("deleted", lambda msg: self._to_agent(msg, "deleted"))
        pg.on("abort", lambda msg: self._to_agent(msg, "abort"))
        pg.on("keyed", lambda msg: self._to_agent(msg, "keyed"))
        pg.on_reconnect(self._refresh_open_agents)
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="cluster-sweeper")
        self._sweeper.add_done_callback(log_failure("cluster_sweeper_failed"))

    def relay(self, topic: str, method: str, params: dict[str, Any]) -> None:
        """The event bus's relay: every event published here goes, in order, to the other gateways."""
        if self._relaying:
            self.pg.send_ordered("event", t=topic, m=method, p=params)

    def abort_requester(self, agent_id: str) -> Callable[[str, str], Awaitable[None]]:
        """An agent's `request_abort`: `chat.abort` of another gateway's run goes through the database."""

        async def request_abort(session_key: str, run_id: str) -> None:
            await self.pg.notify("abort", agent=agent_id, key=session_key, run=run_id)

        return request_abort

    async def close(self) -> None:
        self._stop.set()
        self._relaying = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sweeper

    # ---- notifications from the other gateways -------------------------------------------------
    def _on_event(self, msg: dict[str, Any]) -> None:
        topic, method, params = msg.get("t"), msg.get("m"), msg.get("p")
        if not isinstance(topic, str) or not isinstance(method, str) or not isinstance(params, dict):
            return
        run = (topic, str(params.get("runId")))
        if method in _ENDS:
            self._remote.pop(run, None)
        else:
            if run not in self._remote and len(self._remote) >= MAX_REMOTE_RUNS:
                self._remote.pop(next(iter(self._remote)))  # the oldest: its end was never relayed
            seen = self._remote.setdefault(run, [0, []])
            seen[0] = max(seen[0], int(params.get("seq") or 0))
            if method == "chat.delta" and isinstance(params.get("delta"), str):
                seen[1].append(params["delta"])
        self.services.bus.deliver_local(topic, method, params)

    def _to_agent(self, msg: dict[str, Any], kind: str) -> None:
        agent = self.services.agents.get(str(msg.get("agent")))
        if agent is None:  # not open here: its mirrors are brought up to date when it opens
            return
        key = str(msg.get("key"))
        task = asyncio.get_running_loop().create_task(self._handle(agent, kind, key, msg))
        task.add_done_callback(log_failure("cluster_notification_failed"))

    async def _handle(self, agent: Any, kind: str, key: str, msg: dict[str, Any]) -> None:
        if kind == "lines":
            await agent.sessions.grown(key)
            if agent.memory is not None:
                agent.memory.schedule_session_sync(key)
        elif kind == "deleted":
            await agent.sessions.gone(key)
            await agent.chat.forget(key)
            if agent.memory is not None:
                await agent.memory.forget_session(key)
        elif kind == "abort":
            run = agent.chat.active.get(key)
            if run is not None and run.run_id == msg.get("run"):
                await agent.chat.abort(key, run.run_id)
        elif kind == "keyed":
            if agent.memory is not None:
                await agent.memory.keyed_changed(key)

    def _refresh_open_agents(self) -> None:
        for agent in list(self.services.agents.values()):
            task = asyncio.get_running_loop().create_task(agent.sessions.refresh_mirrors())
            task.add_done_callback(log_failure("cluster_mirror_refresh_failed"))
            if agent.memory is not None:
                task = asyncio.get_running_loop().create_task(agent.memory.keyed_changed(None))
                task.add_done_callback(log_failure("cluster_keyed_refresh_failed"))

    # ---- runs of gateways that died ---------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), SWEEP_S)
            if self._stop.is_set():
                return
            try:
                await self.sweep()
                await self.pg.prune()
            except Exception:  # housekeeping: try again next round
                log.exception("cluster sweep failed")

    async def sweep(self) -> int:
        """End the runs of gateways that are gone; returns how many this gateway ended. Also free this
        gateway's own claims that no run holds any more (a release the database missed)."""
        for agent_id, key, run_id, _ in await claims(self.pg, mine=True, older_than_s=60):
            agent = self.services.agents.get(agent_id)
            run = agent.chat.active.get(key) if agent is not None else None
            if run is None or run.run_id != run_id:
                await drop_claim(self.pg, agent_id, key, run_id)
        alive: dict[str, bool] = {}
        ended = 0
        for agent_id, key, run_id, inst in await claims(self.pg, mine=False):
            if inst not in alive:
                alive[inst] = await self.pg.is_alive(inst)
            if alive[inst]:
                continue
            if await drop_claim(self.pg, agent_id, key, run_id):
                await self._end_orphan(agent_id, key, run_id, inst)
                ended += 1
        return ended

    async def _end_orphan(self, agent_id: str, key: str, run_id: str, instance: str) -> None:
        with self.services.request_scope():
            agent = await self.services.agent(agent_id)
            self.services.use(agent)
            topic = agent.topic(key)
            seq, parts = self._remote.pop((topic, run_id), [0, []])
            partial = "".join(parts)
            try:
                await agent.sessions.append_messages(
                    key,
                    tx.message_record(
                        str(uuid.uuid4()),
                        "assistant",
                        partial,
                        run_id,
                        aborted=True,
                        error=f"the gateway running it ({instance}) stopped",
                    ),
                )
            except Exception as exc:  # the session was deleted meanwhile: nothing to keep
                log.info("orphaned run not recorded", session=key, error=str(exc))
            self.services.bus.publish(
                topic, "chat.aborted", {"sessionKey": key, "runId": run_id, "seq": seq + 1, "partial": partial}
            )
            log.warning("run of a stopped gateway ended", agent=agent_id, session=key, run=run_id, instance=instance)
