"""PostgreSQL stopped mid-reply and back moments later (issue 29, point 7): the run whose gateway lost
the database is ended as soon as the database is back, not a minute later by the sweep."""

from __future__ import annotations

import asyncio
import threading

from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError, wait_for


async def test_a_run_that_lost_the_database_frees_its_session_once_the_database_is_back(start_gateway, postgres_url):
    import asyncpg

    release = threading.Event()
    with FakeOpenAI() as api:
        api.script(("wait", release, 30))
        gw = await start_gateway(
            "a",
            **{
                "storage.url": postgres_url,
                "storage.instanceId": "a",
                "chat.baseUrl": api.base_url,
                "chat.maxRetries": 0,
            },
        )
        c = await gw.client()
        name = postgres_url.split("?")[0].rsplit("/", 1)[1]
        admin = await asyncpg.connect(postgres_url.replace(f"/{name}", "/postgres"))
        try:
            key = (await c.call("sessions.create"))["sessionKey"]
            sent = await c.call("chat.send", {"sessionKey": key, "message": "mid-reply"})

            async def waiting():
                return api.waiting > 0

            await wait_for(waiting)
            # The database goes away while the reply streams; the run cannot save it or release its claim.
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
            release.set()
            events = await c.run_to_end(sent["runId"])
            assert events[-1]["method"] == "chat.error"
            await asyncio.sleep(3)  # back 3 s later
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')

            async def accepted():
                try:
                    return await c.call("chat.send", {"sessionKey": key, "message": "again"})
                except RpcError as exc:
                    if exc.code in (-32050, -32009):  # unreachable, or (the bug) the dead run's claim
                        assert exc.code == -32050 or exc.data.get("runId") == sent["runId"]
                        return None
                    raise

            t0 = asyncio.get_running_loop().time()
            again = await wait_for(accepted, timeout=20, interval=0.25)
            assert asyncio.get_running_loop().time() - t0 < 5, "freed as soon as the database is back"
            assert (await c.run_to_end(again["runId"]))[-1]["method"] == "chat.final"
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await admin.close()
            await c.close()
