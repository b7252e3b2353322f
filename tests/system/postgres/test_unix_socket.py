"""A database reached through a Unix socket that goes away (issue 36, class 5): every method answers the
retryable -32050, as over TCP, instead of -32603 — the socket file missing, or in its place a socket
nobody listens on — and the gateway serves again as soon as the socket is back."""

from __future__ import annotations

import os
import socket
from urllib.parse import parse_qs, urlsplit

import asyncpg

from tests.helpers import RpcError, wait_for


async def test_a_unix_socket_database_that_is_down_answers_the_retryable_unavailable(
    start_gateway, postgres_url, tmp_path
):
    parts = urlsplit(postgres_url)
    real_dir = parse_qs(parts.query)["host"][0]  # the embedded server listens on a Unix socket
    port = parse_qs(parts.query).get("port", [str(parts.port or 5432)])[0]
    name = f".s.PGSQL.{port}"
    here = tmp_path / "sock"
    here.mkdir()
    os.symlink(os.path.join(real_dir, name), here / name)
    url = postgres_url.replace(f"host={real_dir}", f"host={here}")
    gw = await start_gateway(**{"storage.url": url, "storage.instanceId": "unix"})
    c = await gw.client()
    database = parts.path.lstrip("/")
    admin = await asyncpg.connect(postgres_url.replace(f"/{database}?", "/postgres?"))
    try:
        key = (await c.call("sessions.create"))["sessionKey"]

        async def cut_off() -> None:  # the gateway's connections end; new ones find what is in `here`
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                database,
            )

        async def all_unavailable() -> bool:
            for method, params in (
                ("sessions.list", {}),
                ("sessions.get", {"sessionKey": key}),
                ("sessions.create", {}),
                ("chat.send", {"sessionKey": key, "message": "hello?"}),
            ):
                try:
                    await c.call(method, params)
                except RpcError as exc:
                    assert exc.code == -32050, (method, exc.code, exc.message)
                    assert exc.data["retryable"] is True and "cannot be reached" in exc.message
                    continue
                return False  # a connection that had not noticed yet: ask again
            return True

        os.unlink(here / name)  # the socket file is gone (the server stopped, its directory cleaned)
        await cut_off()
        await wait_for(all_unavailable, timeout=20)

        dead = socket.socket(socket.AF_UNIX)  # a socket file nobody listens on (a server that died)
        dead.bind(str(here / name))
        dead.close()
        await cut_off()
        await wait_for(all_unavailable, timeout=20)

        os.unlink(here / name)
        os.symlink(os.path.join(real_dir, name), here / name)  # back

        async def serving():
            try:
                return await c.call("sessions.get", {"sessionKey": key})
            except RpcError as exc:
                assert exc.code == -32050, exc
                return None

        assert (await wait_for(serving, timeout=20))["sessionKey"] == key
    finally:
        await admin.close()
        await c.close()
