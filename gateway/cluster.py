"""Several gateways on one PostgreSQL database (`storage.url`) serving the same sessions.

What crosses between them, all through the database (storage/postgres/db.py):

- **chat events**: every event this gateway publishes is relayed in order (NOTIFY), typed, in the codec
  of chat/events.py (`encode`/`decode`); another gateway delivers it to its own subscribers of that
  session, who render it as on the gateway of the run. A client subscribed on B sees the run on A.
  (The gateways of one database speak one codec: an event in another shape, from a gateway of an older
  version, is dropped, not rendered.)
- **transcripts**: a `lines` notification after each append; the other gateways update their local
  mirror and re-index the session's memory (debounced, like after a local `chat.final`).
- **keyed memories** (`keyed`, after memory.set/delete): the other gateways rewrite or remove their
  mirror file of that key (storage/postgres/keyed.py) and re-index their memory files.
- **notes** (`note`, after a new version of MEMORY.md, LEARNINGS.md or a memory/**/*.md note, written
  through a door or taken in from a folder): the other gateways write it into their folder
  (storage/postgres/notes.py) and re-index.
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

from .chat.events import ENDS, Aborted, Notice, Said, decode, encode
from .errors import InternalError, NotFound
from .events import EventBus, Notifies
from .protocol import error_object, error_of
from .sessions import transcript as tx
from .storage.postgres.ledger import claims, drop_claim, run_holder
from .tasks import log_failure

if TYPE_CHECKING:  # pragma: no cover
    from .storage.postgres import Postgres

log = structlog.get_logger("gateway.cluster")

SWEEP_S = 5.0
WATCH_S = 1.0  # how long a run waits to hear whether a client of another gateway can answer its chat.confirm
CONFIRM_WAIT_S = 5.0  # how long a chat.confirm sent on to the gateway running the run waits for its verdict
MAX_ASKED = 1_000  # questions to other gateways waiting for their answer at once (watch?, confirm)
MAX_REMOTE_RUNS = 10_000  # other gateways' runs followed at once (their partial replies, for a sweep)
REFUSAL_CHARS = 2_000  # a refusal's message as sent back to the asking gateway (a NOTIFY holds 8000 bytes)


def _bounded(refusal: dict[str, Any] | None) -> dict[str, Any] | None:
    """A refusal's error object small enough for a notification: its message cut, its data kept only
    while it is small (runId and callId, a scope)."""
    if refusal is None:
        return None
    out = {"code": refusal.get("code"), "message": str(refusal.get("message", ""))[:REFUSAL_CHARS]}
    data = refusal.get("data")
    if isinstance(data, dict) and len(repr(data)) <= REFUSAL_CHARS:
        out["data"] = data
    return out


class Host(Protocol):
    """What the cluster needs of the gateway that holds it (services.Services): the event bus, the
    open agents (services.Agent: id, sessions, chat, memory, topic) and a way to open one."""

    bus: EventBus
    agents: dict[str, Any]

    def request_scope(self) -> ContextManager[Any]: ...

    async def agent(self, agent_id: str) -> Any: ...

    def use(self, agent: Any) -> None: ...

    async def answer_confirm(
        self, who: str, token_hash: str, door: str, params: Any
    ) -> tuple[dict[str, Any] | None, str]:
        """Perform `chat.confirm` with `params` as the principal `who` (its token's digest `token_hash`),
        through the one path of a call, not audited here (the asking gateway's entry is the attempt's one)
        → (None when it was accepted, else the refusal's JSON-RPC error object (code, message, data), as
        the call would have answered on this gateway; the name of the principal that started the run)."""


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
        # question id → the answer's message (watch?, confirm), None when it is a no
        self._asked: dict[str, asyncio.Future[dict[str, Any] | None]] = {}

    def start(self) -> None:
        pg = self.pg
        self._relaying = True
        pg.on("event", self._on_event)
        pg.on("lines", lambda msg: self._to_agent(msg, "lines"))
        pg.on("deleted", lambda msg: self._to_agent(msg, "deleted"))
        pg.on("abort", lambda msg: self._to_agent(msg, "abort"))
        pg.on("keyed", lambda msg: self._to_agent(msg, "keyed"))
        pg.on("note", lambda msg: self._to_agent(msg, "note"))
        pg.on("watch?", self._on_watch)
        pg.on("confirm", self._on_confirm)
        pg.on("watching", self._on_answer)
        pg.on("confirmed", self._on_answer)
        pg.on_reconnect(self._refresh_open_agents)
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="cluster-sweeper")
        self._sweeper.add_done_callback(log_failure("cluster_sweeper_failed"))

    def relay(self, topic: str, notice: Notifies) -> None:
        """The event bus's relay: every event published here goes, in order, to the other gateways (in
        chat/events.py's one codec; the bus publishes only a run's Notice)."""
        assert isinstance(notice, Notice), type(notice)
        if self._relaying:
            self.pg.send_ordered("event", t=topic, n=encode(notice))

    def abort_requester(self, agent_id: str) -> Callable[[str, str], Awaitable[None]]:
        """An agent's `request_abort`: `chat.abort` of another gateway's run goes through the database."""

        async def request_abort(session_key: str, run_id: str) -> None:
            await self.pg.notify("abort", agent=agent_id, key=session_key, run=run_id)

        return request_abort

    def watch_asker(self) -> Callable[[str], Awaitable[bool]]:
        """An agent's chat service's `watched_elsewhere(topic)`: whether a client of another gateway
        subscribed to the session can answer a `chat.confirm` (False when none says so within WATCH_S)."""

        async def watched_elsewhere(topic: str) -> bool:
            return await self._ask("watch?", WATCH_S, t=topic) is not None

        return watched_elsewhere

    def confirm_requester(self, agent_id: str) -> Callable[[str, str, bool, Any, str], Awaitable[str | None]]:
        """An agent's chat service's `answer_elsewhere`: a `chat.confirm` for a run this gateway does not
        hold, sent to the gateway that does → when it was accepted there, the name of the principal that
        started the run ("" when not said), for this gateway's audit entry; None when not (no such run
        elsewhere, no such call waiting, or no verdict within CONFIRM_WAIT_S); the holder's refusal
        (the principal may not answer) raised as its error."""

        async def answer_elsewhere(run_id: str, call_id: str, allow: bool, principal: Any, door: str) -> str | None:
            holder = await run_holder(self.pg, agent_id, run_id)
            if holder is None or holder == self.pg.instance_id:
                return None
            params = {"agentId": agent_id, "runId": run_id, "callId": call_id, "allow": allow}
            verdict = await self._ask(
                "confirm", CONFIRM_WAIT_S, to=holder, p=params, who=principal.name, h=principal.token_hash, d=door
            )
            if verdict is None:
                return None
            if verdict.get("yes") is True:
                started = verdict.get("rp")
                return started[:64] if isinstance(started, str) else ""
            if isinstance(verdict.get("err"), dict):
                raise error_of(verdict["err"])
            return None

        return answer_elsewhere

    async def _ask(self, kind: str, wait_s: float, **fields: Any) -> dict[str, Any] | None:
        """Ask the other gateways; the answer (its message) when one answers within `wait_s` — a yes, or
        the holder's verdict (`confirmed`, yes or its refusal) — else None."""
        if not self._relaying or len(self._asked) >= MAX_ASKED:
            return None
        q = uuid.uuid4().hex
        answer: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._asked[q] = answer
        try:
            await self.pg.notify(kind, q=q, **fields)
            return await asyncio.wait_for(answer, wait_s)
        except asyncio.TimeoutError:
            return None
        finally:
            self._asked.pop(q, None)

    def _on_answer(self, msg: dict[str, Any]) -> None:
        if msg.get("to") != self.pg.instance_id:
            return
        answer = self._asked.get(str(msg.get("q")))
        if answer is None or answer.done():
            return
        if msg.get("yes") is True or msg.get("k") == "confirmed":
            answer.set_result(msg)  # a yes, or the holder's verdict (a "watching" no is silence)

    def _on_watch(self, msg: dict[str, Any]) -> None:
        topic = msg.get("t")
        if isinstance(topic, str) and self.services.bus.answerers(topic):
            self._reply("watching", msg, True)

    def _on_confirm(self, msg: dict[str, Any]) -> None:
        if msg.get("to") != self.pg.instance_id:
            return  # params of any shape are answered (answer_confirm validates them): never silence
        task = asyncio.get_running_loop().create_task(self._confirm_here(msg))
        task.add_done_callback(log_failure("cluster_confirm_failed"))

    async def _confirm_here(self, msg: dict[str, Any]) -> None:
        who, token_hash, door = msg.get("who"), msg.get("h"), msg.get("d")
        refusal: dict[str, Any] | None = None
        started = ""
        if isinstance(who, str) and isinstance(token_hash, str) and isinstance(door, str):
            try:
                refusal, started = await self.services.answer_confirm(who, token_hash, door, msg.get("p"))
            except Exception as exc:  # the asking gateway hears an error, never silence until its timeout
                log.warning("cluster_confirm_failed", error=str(exc)[:200])
                refusal = error_object(InternalError("the gateway holding the run could not answer"))
        else:
            refusal = error_object(NotFound("the confirmation's sender named no principal"))
        self._reply("confirmed", msg, refusal is None, err=_bounded(refusal), rp=started)

    def _reply(self, kind: str, msg: dict[str, Any], yes: bool, **fields: Any) -> None:
        task = asyncio.get_running_loop().create_task(
            self.pg.notify(kind, to=msg.get("o"), q=msg.get("q"), yes=yes, **fields)
        )
        task.add_done_callback(log_failure("cluster_reply_failed"))

    async def close(self) -> None:
        self._stop.set()
        self._relaying = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sweeper

    # ---- notifications from the other gateways -------------------------------------------------
    def _on_event(self, msg: dict[str, Any]) -> None:
        topic, notice = msg.get("t"), decode(msg.get("n"))
        if not isinstance(topic, str) or notice is None:
            return
        run = (topic, notice.run_id)
        if isinstance(notice.event, ENDS):
            self._remote.pop(run, None)
        else:
            if run not in self._remote and len(self._remote) >= MAX_REMOTE_RUNS:
                self._remote.pop(next(iter(self._remote)))  # the oldest: its end was never relayed
            seen = self._remote.setdefault(run, [0, []])
            seen[0] = max(seen[0], notice.seq)
            if isinstance(notice.event, Said):
                seen[1].append(notice.event.text)
        self.services.bus.deliver_local(topic, notice)

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
        elif kind == "note":  # (no path: many notes at once, reconcile them all)
            if agent.memory is not None:
                await agent.memory.note_changed(msg["key"] if isinstance(msg.get("key"), str) else None)

    def _refresh_open_agents(self) -> None:
        for agent in list(self.services.agents.values()):
            task = asyncio.get_running_loop().create_task(agent.sessions.refresh_mirrors())
            task.add_done_callback(log_failure("cluster_mirror_refresh_failed"))
            if agent.memory is not None:
                task = asyncio.get_running_loop().create_task(agent.memory.keyed_changed(None))
                task.add_done_callback(log_failure("cluster_keyed_refresh_failed"))
                task = asyncio.get_running_loop().create_task(agent.memory.note_changed(None))
                task.add_done_callback(log_failure("cluster_notes_refresh_failed"))

    # ---- runs of gateways that died ---------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        failed = 0  # rounds failed in a row (the database away): the first is said, the rest counted
        while not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), SWEEP_S)
            if self._stop.is_set():
                return
            try:
                await self.sweep()
                await self.pg.prune()
            except Exception as exc:  # housekeeping: try again next round
                if not failed:
                    log.warning("cluster sweep failed", error=f"{type(exc).__name__}: {str(exc)[:200]}")
                failed += 1
            else:
                if failed:
                    log.info("cluster sweep resumed", failed=failed)
                failed = 0

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
            self.services.bus.publish(topic, Notice(key, run_id, seq + 1, Aborted(partial)))
            log.warning("run of a stopped gateway ended", agent=agent_id, session=key, run=run_id, instance=instance)
