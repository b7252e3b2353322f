"""systemd's sd_notify protocol, without libsystemd: one AF_UNIX datagram per message to $NOTIFY_SOCKET.

Under `Type=notify` systemd waits for `READY=1` before it considers the service started, kills and
restarts it when `WATCHDOG=1` pings stop arriving (`WatchdogSec=`), shows `STATUS=` in
`systemctl --user status`, and learns from `STOPPING=1` that a stop is under way.

`attach(gw)` wires this to the gateway's lifecycle phases:

    ready     (port bound, memory index open)  → READY=1 + STATUS=…, then a background task that
              sends WATCHDOG=1 every WATCHDOG_USEC/2 and STATUS=… whenever it changes
    stopping                                   → STOPPING=1 + STATUS=…, the task stops

Outside systemd (no NOTIFY_SOCKET) everything here is a no-op. Nothing here ever raises into the
gateway: a notification that cannot be sent is logged at debug and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import TYPE_CHECKING, Any, Mapping

import structlog

if TYPE_CHECKING:  # pragma: no cover
    from ..app import Gateway

log = structlog.get_logger("gateway.sdnotify")

STATUS_REFRESH_S = 10.0  # how often STATUS= is recomputed when the watchdog does not tick faster


def notify_address(env: Mapping[str, str] | None = None) -> str | bytes | None:
    """The socket address from $NOTIFY_SOCKET: a path, or (leading '@') a Linux abstract socket."""
    value = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None  # vsock and other forms are not used for user services


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when no watchdog is asked for.

    WATCHDOG_PID, when set, names the process the watchdog is meant for; another process ignores it."""
    env = os.environ if env is None else env
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    return usec / 2 / 1_000_000


class Notifier:
    """Sends sd_notify messages. `enabled` is False (and `send` does nothing) without NOTIFY_SOCKET."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self.address = notify_address(env)
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: Any) -> bool:
        """Send `KEY=value` lines in one datagram, e.g. send(READY=1, STATUS="…"). True when sent."""
        if self.address is None:
            return False
        message = "\n".join(f"{key}={_one_line(value)}" for key, value in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(message, self.address)
            return True
        except OSError as exc:  # systemd gone, socket full: the gateway keeps serving regardless
            log.debug("sd_notify failed", error=str(exc), fields=sorted(fields))
            return False

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


def _one_line(value: Any) -> str:
    return str(value).replace("\n", " ")


class SystemdLink:
    """The gateway's side of the conversation with systemd, driven by lifecycle phases."""

    def __init__(self, gw: "Gateway", notifier: Notifier, watchdog_s: float | None):
        self.gw = gw
        self.notifier = notifier
        self.watchdog_s = watchdog_s
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._last_status = ""

    def on_phase(self, name: str, info: dict[str, Any]) -> None:
        try:
            if name == "ready":
                self._on_ready()
            elif name == "stopping":
                self._on_stopping()
        except Exception as exc:  # never into the gateway
            log.debug("sd_notify phase handling failed", phase=name, error=str(exc))

    def _on_ready(self) -> None:
        self._send_status(self.status(), READY=1)
        if self.watchdog_s is not None:
            self.notifier.send(WATCHDOG=1)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sd_notify")

    def _on_stopping(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.notifier.send(STOPPING=1, STATUS="stopping: finishing running chats, closing connections")

    async def _loop(self) -> None:
        """Each tick: WATCHDOG=1 (when asked for), and STATUS= when it changed.

        A tick is half the watchdog timeout, and at most STATUS_REFRESH_S."""
        tick = min(self.watchdog_s, STATUS_REFRESH_S) if self.watchdog_s is not None else STATUS_REFRESH_S
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), tick)
            if self._stop.is_set():
                break
            try:
                if self.watchdog_s is not None:
                    # This ran, so the event loop is not stuck and the gateway can still answer.
                    self.notifier.send(WATCHDOG=1)
                status = self.status()
                if status != self._last_status:
                    self._send_status(status)
            except Exception as exc:
                log.debug("sd_notify loop step failed", error=str(exc))

    def _send_status(self, status: str, **fields: Any) -> None:
        self._last_status = status
        self.notifier.send(**fields, STATUS=status)

    # ---- STATUS= text --------------------------------------------------------------------------
    def _connections(self) -> int:
        services = self.gw.services
        return services.connection_count() if services is not None else 0

    def status(self) -> str:
        """STATUS text: the connections and the memory index's counts as last read (never waits, so the
        synchronous ready hook can send it too)."""
        memory = self.gw.memory
        health = memory.health() if memory is not None else None
        return _status_text(self._connections(), health, memory_on=memory is not None)


def _status_text(connections: int, health: Mapping[str, Any] | None, memory_on: bool = False) -> str:
    conns = f"{connections} connection{'' if connections == 1 else 's'}"
    if health is None:
        return f"serving; {conns}; memory {'on' if memory_on else 'off'}"
    state = "dirty" if health.get("dirty") else "clean"
    return f"serving; {conns}; memory index: {health.get('files', 0)} files, {health.get('chunks', 0)} chunks, {state}"


def attach(gw: "Gateway", env: Mapping[str, str] | None = None) -> SystemdLink | None:
    """Report `gw`'s lifecycle to systemd. Returns None (and does nothing) outside systemd."""
    notifier = Notifier(env)
    if not notifier.enabled:
        return None
    link = SystemdLink(gw, notifier, watchdog_interval(env))
    gw.on_phase(link.on_phase)
    return link
