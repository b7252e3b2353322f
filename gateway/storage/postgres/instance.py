"""The PostgreSQL database as one gateway holds it (`storage.url`): `await Postgres(url, …).open()`, then
`pool`, `notify`, `on`. The tables and their migrations are db.py's.

Driver: asyncpg — one package with its own connection pool, LISTEN/NOTIFY callbacks and the binary
protocol; nothing else to install beside it. Nothing outside this engine imports it: the driver's errors
a tool must tell apart are named here (REFUSED, UNUSABLE).

Liveness: a gateway holds a session-level advisory lock on its own key (from its instance id) on one
dedicated connection for as long as it runs; the lock goes when its process or its connection dies. So
another gateway that can take that lock knows the holder is gone (`is_alive`), and ends its runs.

Notifications go on channel `jarvis` as JSON `{"o": origin instance, "k": kind, …}`; handlers
registered with `on(kind, fn)` get them from every other instance, on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from typing import Any, Callable

import asyncpg
import orjson
import structlog

from ...config import ConfigError
from ...errors import Unavailable
from ...outage import Outage
from ...tasks import log_failure
from .db import migrate
from .sqlutil import lock_key, redact

log = structlog.get_logger("gateway.storage")

CHANNEL = "jarvis"
MAX_NOTIFY_BYTES = 7900  # PostgreSQL refuses payloads of 8000 bytes and more
PAYLOAD_TTL_S = 60


class _NoTraceback(logging.Filter):
    """The driver's pool says each failed try to keep its floor of connections (backing off from 1 s to
    60 s) with a traceback: while the database is away that is the outage said again and again. Its line
    stays — with the error's one-line reason — the traceback goes (`database_unreachable` says why)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {str(exc)[:200]})"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


logging.getLogger("asyncpg.pool").addFilter(_NoTraceback())
OUTBOX_MAX = 10_000  # events waiting to be relayed; past it they are dropped (and counted)

# The driver's errors: a statement the database refused (and any other error the server sent), and a
# connection the driver cannot make or use (a URL it cannot take, a connection closed under it).
REFUSED: type[Exception] = asyncpg.PostgresError
UNUSABLE: type[Exception] = asyncpg.InterfaceError


def default_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Postgres:
    """The shared database of a gateway: `await Postgres(url, …).open()`, then `pool`, `notify`, `on`."""

    def __init__(self, url: str, pool_size: int = 10, instance_id: str = ""):
        self.url = url
        self.pool_size = pool_size
        self.instance_id = instance_id or default_instance_id()
        self._pool: asyncpg.Pool | None = None
        self._liveness: asyncpg.Connection | None = None
        self._listener: asyncpg.Connection | None = None
        self._handlers: dict[str, list[Callable[[dict[str, Any]], Any]]] = {}
        self._watch: asyncio.Task | None = None
        self.serving = True  # a gateway's (open's `serve`); False: a tool's beside it, which saves no derived data
        self._reconnected: list[Callable[[], Any]] = []
        self._closed = False
        # Chat events leave and arrive in order: one queue and one connection each way.
        self._outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=OUTBOX_MAX)
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._sender: asyncpg.Connection | None = None
        self._workers: list[asyncio.Task] = []
        self.dropped = 0  # events not relayed because the outbox was full (the database is too slow)
        # A database gone away is said once when it goes and once when it is back (gateway/outage.py).
        self.outage = Outage(lambda: self.pool.fetchval("SELECT 1"), self.instance_id)

    @property
    def pool(self) -> asyncpg.Pool:
        """The connection pool, once `open` made it."""
        if self._pool is None:
            raise Unavailable("PostgreSQL storage is not open", retryable=False)
        return self._pool

    async def open(self, serve: bool = True, schema: bool = True) -> "Postgres":
        """Connect and migrate the schema (`schema`; else leave it as it is). `serve`: a gateway's, which
        also holds its liveness lock, listens to the others and relays its events; else a tool's: only
        the pool, to query and notify."""
        try:
            self._pool = await asyncpg.create_pool(
                self.url, min_size=1, max_size=self.pool_size, command_timeout=60, server_settings=self._name("pool")
            )
        except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
            raise Unavailable(f"PostgreSQL unreachable at {redact(self.url)}: {exc}", retryable=True) from None
        except ValueError as exc:  # the driver's own reading of the URL (a parameter it does not know, …)
            why = str(exc).replace(self.url, redact(self.url))[:300]
            raise ConfigError(f"storage.url: the PostgreSQL driver cannot use it: {why}") from None
        self.serving = serve
        applied: list[str] = []
        if schema:
            async with self.pool.acquire() as conn:
                applied = await migrate(conn)
        if applied:
            log.info("postgres schema migrated", applied=applied)
        if not serve:
            return self
        self._liveness = await asyncpg.connect(self.url, server_settings=self._name("liveness"))
        if not await self._liveness.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(self.instance_id)):
            raise Unavailable(
                f"another gateway runs as instance {self.instance_id!r} on this database; give "
                f"each its own storage.instanceId",
                retryable=False,
            )
        await self._listen()
        self._sender = await asyncpg.connect(self.url, server_settings=self._name("relay"))
        self._watch = asyncio.create_task(self._keep_listening())
        self._workers = [asyncio.create_task(self._send_loop()), asyncio.create_task(self._receive_loop())]
        for task in [self._watch, *self._workers]:
            task.add_done_callback(log_failure("postgres_background_task_failed"))
        log.info("postgres storage open", url=redact(self.url), instance=self.instance_id)
        return self

    def _name(self, role: str) -> dict[str, str]:
        """application_name of a connection, as pg_stat_activity shows it: jarvis:<instance>:<role>."""
        return {"application_name": f"jarvis:{self.instance_id}:{role}"[:63]}

    async def _listen(self) -> None:
        self._listener = await asyncpg.connect(self.url, server_settings=self._name("listen"))
        await self._listener.add_listener(CHANNEL, self._on_notify)

    async def _keep_listening(self) -> None:
        """Reconnect a listener whose connection died; then tell `on_reconnect` callbacks, since
        notifications sent meanwhile were missed."""
        failed = 0  # reconnects failed in a row (the database away): the first is said, the rest counted
        while not self._closed:
            await asyncio.sleep(1.0)
            if self._listener is not None and not self._listener.is_closed():
                try:  # a dead server or network is only noticed when the connection is used
                    await asyncio.wait_for(self._listener.execute("SELECT 1"), 5.0)
                    continue
                except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.warning("postgres listener lost", error=str(exc))
                    self._listener.terminate()
            try:
                await self._listen()
            except (OSError, asyncpg.PostgresError) as exc:
                if not failed:
                    log.warning("postgres listener reconnect failed", error=str(exc), retrying_every_s=1.0)
                failed += 1
                continue
            log.info("postgres listener reconnected", failed=failed)
            failed = 0
            for fn in self._reconnected:
                with contextlib.suppress(Exception):
                    fn()

    def on(self, kind: str, fn: Callable[[dict[str, Any]], Any]) -> None:
        self._handlers.setdefault(kind, []).append(fn)

    def on_reconnect(self, fn: Callable[[], Any]) -> None:
        self._reconnected.append(fn)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            msg = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if msg.get("o") != self.instance_id:
            self._inbox.put_nowait(msg)

    async def _receive_loop(self) -> None:
        """Dispatch notifications in the order they came, fetching those too big for NOTIFY."""
        while True:
            msg = await self._inbox.get()
            if "ref" in msg:
                try:
                    payload = await self.pool.fetchval(
                        "SELECT payload FROM event_payloads WHERE id = $1", int(msg["ref"])
                    )
                except (OSError, asyncpg.PostgresError) as exc:
                    log.warning("postgres notification lost", error=str(exc))
                    continue
                if payload is None:
                    continue
                msg = orjson.loads(payload)
            self._dispatch(msg)

    def send_ordered(self, kind: str, **fields: Any) -> None:
        """Queue a notification; queued ones go out in order, batched, on their own connection."""
        try:
            self._outbox.put_nowait(self.message(kind, **fields))
        except asyncio.QueueFull:
            self.dropped += 1

    async def _send_loop(self) -> None:
        while True:
            batch = [await self._outbox.get()]
            while not self._outbox.empty() and len(batch) < 256:
                batch.append(self._outbox.get_nowait())
            try:
                await self._send_batch(batch)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("postgres events not relayed", count=len(batch), error=str(exc))
                with contextlib.suppress(Exception):
                    if self._sender is None or self._sender.is_closed():
                        self._sender = await asyncpg.connect(self.url, server_settings=self._name("relay"))

    async def _send_batch(self, batch: list[str]) -> None:
        assert self._sender is not None
        args = []
        for payload in batch:
            if len(payload.encode()) > MAX_NOTIFY_BYTES:
                ref = await self._sender.fetchval(
                    "INSERT INTO event_payloads(payload) VALUES ($1) RETURNING id", payload
                )
                payload = orjson.dumps({"o": self.instance_id, "ref": ref}).decode()
            args.append((CHANNEL, payload))
        await self._sender.executemany("SELECT pg_notify($1, $2)", args)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        for fn in self._handlers.get(msg.get("k", ""), ()):
            try:
                fn(msg)
            except Exception:
                log.exception("postgres notification handler failed", kind=msg.get("k"))

    def message(self, kind: str, **fields: Any) -> str:
        return orjson.dumps({"o": self.instance_id, "k": kind, **fields}).decode()

    async def notify(self, kind: str, conn: asyncpg.Connection | None = None, **fields: Any) -> None:
        """Tell the other instances (inside `conn`'s transaction: delivered when it commits)."""
        payload = self.message(kind, **fields)
        async with contextlib.AsyncExitStack() as stack:
            db = conn if conn is not None else await stack.enter_async_context(self.pool.acquire())
            if len(payload.encode()) > MAX_NOTIFY_BYTES:
                ref = await db.fetchval("INSERT INTO event_payloads(payload) VALUES ($1) RETURNING id", payload)
                payload = self.message(kind, ref=ref)
            await db.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)

    async def is_alive(self, instance_id: str) -> bool:
        """Whether the gateway running as `instance_id` still holds its liveness lock."""
        if instance_id == self.instance_id:
            return True
        key = lock_key(instance_id)
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", key):
                return True
            await conn.execute("SELECT pg_advisory_unlock($1)", key)
            return False

    async def prune(self) -> None:
        """Housekeeping: big payloads are read within moments; expired idempotency keys are dead."""
        await self.pool.execute(
            "DELETE FROM event_payloads WHERE created_at < now() - make_interval(secs => $1)", float(PAYLOAD_TTL_S)
        )
        await self.pool.execute("DELETE FROM idempotency WHERE expires_at < now()")

    async def close(self) -> None:
        self._closed = True
        await self.outage.close()
        with contextlib.suppress(asyncio.TimeoutError):  # what is queued still goes out, briefly
            await asyncio.wait_for(self._drain(), 2.0)
        for task in [self._watch, *self._workers]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for conn in (self._listener, self._liveness, self._sender):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 10)

    async def _drain(self) -> None:
        while not self._outbox.empty():
            await asyncio.sleep(0.01)
