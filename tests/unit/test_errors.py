"""errors.py's mapping of OS and SQLite failures to the errors clients are told about."""

from __future__ import annotations

import os
import sqlite3

import pytest

from gateway.errors import Unavailable, out_of_descriptors
from tests.helpers import descriptors_exhausted


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_sqlite_unable_to_open_for_lack_of_descriptors_is_the_retryable_emfile(tmp_path):
    """SQLite reports EMFILE only as "unable to open database file": told apart by trying to open a file."""
    with descriptors_exhausted():
        with pytest.raises(sqlite3.OperationalError) as opening:
            sqlite3.connect(tmp_path / "index.sqlite").execute("select 1")
        busy = out_of_descriptors("the memory index", opening.value)
    assert isinstance(busy, Unavailable) and busy.data["errno"] == "EMFILE" and busy.data["retryable"] is True
    assert "could not open the memory index" in busy.message and "too many files open" in busy.message
    # With descriptors free the same message is some other failure (a missing folder): not this one.
    with pytest.raises(sqlite3.OperationalError) as missing:
        sqlite3.connect(tmp_path / "no" / "such" / "dir" / "index.sqlite")
    assert "unable to open database file" in str(missing.value)
    assert out_of_descriptors("the memory index", missing.value) is None


# ---- "the database cannot be reached", every way (issue 36, class 5) --------------------------------------
class _Listener:
    """A local TCP listener that accepts and then answers `reply` (b"" : nothing at all) to anything."""

    def __init__(self, reply: bytes):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.conns: list = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply:
                try:
                    conn.recv(1024)
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def _unreachable_urls(tmp_path) -> list[tuple[str, str]]:
    import socket

    dead = tmp_path / "dead"
    dead.mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(dead / ".s.PGSQL.5432"))  # a socket file nobody listens on
    s.close()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / ".s.PGSQL.5432").write_text("")  # a file that is no socket
    return [
        ("unix socket file missing", f"postgresql://u@/db?host={tmp_path}&port=5432"),
        ("unix socket directory missing", f"postgresql://u@/db?host={tmp_path / 'gone'}&port=5432"),
        ("unix socket nobody listens on", f"postgresql://u@/db?host={dead}&port=5432"),
        ("a file that is no socket", f"postgresql://u@/db?host={plain}&port=5432"),
        ("tcp refused", "postgresql://u@127.0.0.1:1/db"),
        ("dns", "postgresql://u@no-such-host.invalid/db"),
    ]


async def test_every_way_of_not_reaching_the_database_is_the_retryable_unavailable(tmp_path):
    """Real failures of the real driver: a Unix-socket URL whose database is down was -32603 (its
    FileNotFoundError is no ConnectionError) while TCP's refusal was the retryable -32050."""
    import asyncio

    import asyncpg

    from gateway.errors import storage_unreachable

    silent, garbage = _Listener(b""), _Listener(b"S\x16\x03\x03\x00\x02\x02\x28")  # yes to TLS, then nonsense
    cases = _unreachable_urls(tmp_path) + [
        ("timeout", f"postgresql://u@127.0.0.1:{silent.port}/db"),
        ("tls", f"postgresql://u@127.0.0.1:{garbage.port}/db?sslmode=require"),
    ]
    try:
        for what, url in cases:
            with pytest.raises(Exception) as failed:  # noqa: B017 - each case its own class of failure
                async with asyncio.timeout(20):
                    await asyncpg.connect(url, timeout=1)
            down = storage_unreachable(failed.value)
            assert isinstance(down, Unavailable), (what, repr(failed.value))
            assert down.data["retryable"] is True and "cannot be reached" in down.message, (what, down)
    finally:
        silent.close()
        garbage.close()


def test_an_os_error_of_our_own_is_not_the_database():
    from gateway.errors import storage_unreachable

    try:
        open("/nonexistent/transcript.jsonl")  # noqa: SIM115 - raises
    except FileNotFoundError as exc:
        assert storage_unreachable(exc) is None
    assert storage_unreachable(OSError(28, "No space left on device")) is None
    assert storage_unreachable(ValueError("x")) is None
