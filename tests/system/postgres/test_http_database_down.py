"""The database goes away under the HTTP API listener (issue 35): /v1 answers OpenAI's JSON error, 503
with Retry-After (retryable, as the WebSocket's -32050), /mcp a tool error in words; never a 500 of
text/plain with a traceback in the log. Service resumes when the database is back."""

from __future__ import annotations

import asyncio

import httpx2 as httpx

from tests.fake_openai import FakeOpenAI


async def test_v1_and_mcp_answer_a_retryable_json_error_while_the_database_is_down(start_gateway, postgres_url):
    import asyncpg

    with FakeOpenAI() as api:
        gw = await start_gateway(
            memory=True,
            **{"storage.url": postgres_url, "server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.maxRetries": 0},
        )
        name = postgres_url.split("?")[0].rsplit("/", 1)[1]
        admin = await asyncpg.connect(postgres_url.replace(f"/{name}", "/postgres"))
        auth = {"Authorization": f"Bearer {gw.token}"}
        chat = {"model": "fake-model", "messages": [{"role": "user", "content": "the database is down?"}]}
        mcp_call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_list", "arguments": {}},
        }
        mcp_headers = {
            **auth,
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        }
        try:
            async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
                assert (await http.post("/v1/chat/completions", headers=auth, json=chat)).status_code == 200
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
                for stream in (False, True):
                    r = await http.post("/v1/chat/completions", headers=auth, json={**chat, "stream": stream})
                    assert r.status_code == 503, (stream, r.status_code, r.text)
                    assert r.headers["content-type"].startswith("application/json")
                    assert int(r.headers["retry-after"]) >= 1
                    error = r.json()["error"]
                    assert error["type"] == "server_error" and "database cannot be reached" in error["message"]
                r = await http.post("/mcp", headers=mcp_headers, json=mcp_call)
                assert r.status_code == 200, r.text
                result = r.json()["result"]
                assert result["isError"] is True
                assert "the database cannot be reached" in result["content"][0]["text"]
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
                for _ in range(100):
                    r = await http.post("/v1/chat/completions", headers=auth, json=chat)
                    if r.status_code == 200:
                        break
                    assert r.status_code == 503, r.text
                    await asyncio.sleep(0.2)
                assert r.status_code == 200
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await admin.close()


async def test_a_v1_reply_that_lost_the_database_mid_run_is_a_retryable_503(start_gateway, postgres_url):
    """The database goes away while the upstream answers: the reply cannot be saved, the run ends in
    chat.error -32050 (retryable) — over /v1 a 503 with Retry-After, not a 500 internal_error."""
    import threading

    import asyncpg

    from tests.helpers import wait_for

    release = threading.Event()
    with FakeOpenAI() as api:
        api.script(("wait", release, 30))
        gw = await start_gateway(
            **{"storage.url": postgres_url, "server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.maxRetries": 0}
        )
        name = postgres_url.split("?")[0].rsplit("/", 1)[1]
        admin = await asyncpg.connect(postgres_url.replace(f"/{name}", "/postgres"))
        auth = {"Authorization": f"Bearer {gw.token}"}
        chat = {"model": "fake-model", "messages": [{"role": "user", "content": "mid-reply"}]}
        try:
            async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
                answer = asyncio.create_task(http.post("/v1/chat/completions", headers=auth, json=chat))

                async def waiting():
                    return api.waiting > 0

                await wait_for(waiting)
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
                release.set()
                r = await answer
                assert r.status_code == 503, r.text
                assert int(r.headers["retry-after"]) >= 1
                assert r.json()["error"]["type"] == "server_error" and r.json()["error"]["code"] == "unavailable"
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await admin.close()
