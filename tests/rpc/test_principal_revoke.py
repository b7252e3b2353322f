"""A revoked token's open WebSocket, /v1 SSE stream and MCP session end — on the gateway that revoked it,
and on a second gateway of the same PostgreSQL (its poll of the principals) — and an expired token ends
the same way.

The tests hold what ends and why (the close code and reason, a stream cut short), each within a deadline
far past what it takes; how long it takes is measured by scripts/bench_revoke.py, not asserted here."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx2 as httpx
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.fake_openai import FakeOpenAI
from tests.helpers import connect_client, wait_for

DEADLINE = 20.0  # seconds: what the gateway ends must end well within this, on any machine


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def _closed(client, timeout: float = DEADLINE) -> None:
    """The server closes this WebSocket, saying why."""
    async with asyncio.timeout(timeout):
        await client.ws.wait_closed()
    assert client.ws.close_code == 1008 and client.ws.close_reason == "token revoked"


async def test_revoke_ends_the_websocket_the_sse_stream_and_the_mcp_session(start_gateway, api):
    gw = await start_gateway(
        memory=True, **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model"}
    )
    owner = await gw.client()
    token = (await owner.call("principals.create", {"name": "phone", "agents": "main", "scopes": "read,chat"}))["token"]
    ws = await connect_client(gw.url, token, "frame")
    header_ws = await connect_client(gw.url, token, "header")
    other = (await owner.call("principals.create", {"name": "laptop", "agents": "main", "scopes": "read"}))["token"]
    bystander = await connect_client(gw.url, other, "frame")
    assert (await ws.call("system.health"))["status"] == "ok"

    api.reply = " ".join(["word"] * 400)
    api.chunk_delay = 0.1  # a stream of ~40 s: it is still open when the revoke comes, and ends long after it
    held = threading.Event()
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
        http_mcp = create_mcp_http_client(headers=auth)
        async with McpClient(streamable_http_client(gw.http_url + "/mcp", http_client=http_mcp)) as mcp:
            assert [t.name for t in (await mcp.list_tools()).tools][:1] == ["memory_search"]
            body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "talk"}]}
            async with http.stream("POST", "/v1/chat/completions", headers=auth, json=body) as stream:
                assert stream.status_code == 200
                lines = stream.aiter_lines()
                assert (await anext(lines)).startswith("data: ")
                # A second request held upstream (no answer yet) is refused when the revoke comes.
                api.script(("wait", held, 20))
                waiting = asyncio.create_task(
                    http.post(
                        "/v1/chat/completions",
                        headers={**auth, "X-Jarvis-Session": "another"},
                        json={**body, "stream": False},
                    )
                )
                await wait_for(_async(lambda: api.waiting == 1), DEADLINE)  # it reached the upstream
                await owner.call("principals.revoke", {"name": "phone"})
                got = []
                async with asyncio.timeout(DEADLINE):
                    async for line in lines:
                        got.append(line)
                assert "data: [DONE]" not in got, "cut short, not finished"
                refused = await asyncio.wait_for(waiting, DEADLINE)
                held.set()
                assert refused.status_code == 401 and refused.json()["error"]["message"] == "token revoked"
            out = None
            with pytest.raises(Exception):  # noqa: B017 - the SDK raises its own error for a 401
                out = await mcp.call_tool("memory_search", {"query": "x"})
            assert out is None
        r = await http.get("/v1/models", headers=auth)
        assert r.status_code == 401
    await _closed(ws)
    await _closed(header_ws)
    assert (await bystander.call("system.health"))["status"] == "ok", "another principal's socket stays"
    await bystander.close()
    await owner.close()


async def test_an_expired_token_is_closed_like_a_revoked_one(start_gateway):
    gw = await start_gateway()
    owner = await gw.client()
    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3)) + ".000Z"
    token = (
        await owner.call("principals.create", {"name": "temp", "agents": "main", "scopes": "read", "expires": soon})
    )["token"]
    c = await connect_client(gw.url, token, "frame")
    assert (await c.call("system.health"))["status"] == "ok"
    await _closed(c)
    await owner.close()


async def test_revoke_on_one_gateway_closes_the_socket_on_another_of_the_same_postgresql(start_gateway, postgres_url):
    one = await start_gateway("one", **{"storage.url": postgres_url})
    two = await start_gateway("two", **{"storage.url": postgres_url})
    owner = await one.client()
    token = (await owner.call("principals.create", {"name": "tablet", "agents": "main", "scopes": "read"}))["token"]

    async def admitted() -> bool:  # the second gateway's poll has seen the new principal
        try:
            c = await connect_client(two.url, token, "frame")
        except AssertionError:
            return False
        await c.close()
        return True

    await wait_for(admitted, DEADLINE)
    there = await connect_client(two.url, token, "header")
    assert (await there.call("system.health"))["status"] == "ok"
    await owner.call("principals.revoke", {"name": "tablet"})
    await _closed(there)  # the revoke is in the database: gateway two's poll of the principals sees it
    await owner.close()


def _async(predicate):
    async def check() -> bool:
        return bool(predicate())

    return check


async def test_a_name_revoked_and_given_anew_within_one_poll_still_closes_the_old_token_on_another_gateway(
    start_gateway, postgres_url
):
    """Issue 47.4: gateways compare principals by identity (the token's digest), not by name — a revoke and
    a re-create of the same name before gateway two polls used to leave the old token's socket there
    writing with its old scopes."""
    one = await start_gateway("one", memory=True, **{"storage.url": postgres_url, "memory.embeddings.provider": "none"})
    two = await start_gateway("two", memory=True, **{"storage.url": postgres_url, "memory.embeddings.provider": "none"})
    owner = await one.client()
    old = (await owner.call("principals.create", {"name": "phone", "agents": "main", "scopes": "read,write"}))["token"]

    async def admitted(token: str) -> bool:  # gateway two's poll has seen this principal
        try:
            c = await connect_client(two.url, token, "frame")
        except AssertionError:
            return False
        await c.close()
        return True

    async with asyncio.timeout(DEADLINE):
        while not await admitted(old):
            await asyncio.sleep(0.1)
    there = await connect_client(two.url, old, "header")
    await there.call("memory.set", {"key": "before", "value": "written with the old token"})
    # Back to back, one request after the other: well within gateway two's poll of 0.5 s.
    await owner.call("principals.revoke", {"name": "phone"})
    new = (await owner.call("principals.create", {"name": "phone", "agents": "main", "scopes": "read"}))["token"]
    await _closed(there)
    async with asyncio.timeout(DEADLINE):
        while not await admitted(new):
            await asyncio.sleep(0.1)
    assert not await admitted(old)
    fresh = await connect_client(two.url, new, "frame")
    assert (await fresh.request("memory.set", {"key": "after", "value": "x"}))["error"]["code"] == -32003
    await fresh.close()
    await owner.close()


async def test_the_principals_tell_who_ended_by_token_not_by_name(tmp_path):
    """Deterministically, on real files: the store changed twice (revoke, then the same name anew) between
    two looks; the old token's digest is told, the new one's is not."""
    from gateway.access import Principals
    from gateway.auth import TokenStore
    from gateway.principals import make
    from gateway.storage.files.principals import FilePrincipalStore

    store = FilePrincipalStore(tmp_path / "principals.jsonl")
    principals = Principals(TokenStore("owner-token-of-plenty-of-characters", tmp_path / "gateway.token"), store)
    told: list[set[str]] = []
    principals.on_revoked.append(told.append)
    first = make("phone", ["main"], "read,write", None, "first-token-of-plenty-of-characters-aaa")
    await store.add(first)
    await principals.reload()
    await store.revoke("phone", "2030-01-01T00:00:00.000Z")
    second = make("phone", ["main"], "read", None, "second-token-of-plenty-of-characters-bbb")
    await store.add(second)
    await principals.reload()
    assert told == [{first.token_hash}]
    assert principals.authenticate("first-token-of-plenty-of-characters-aaa") is None
    assert principals.authenticate("second-token-of-plenty-of-characters-bbb").token_hash == second.token_hash
