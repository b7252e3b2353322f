"""The doors agree (issue 39): one table of failures driven through every door, each answering in its
own shape with the same meaning.

    door          its shape of a failure
    websocket     a JSON-RPC error: the code of the error's class, its message, `data`
    openai        /v1: an HTTP status, OpenAI's JSON error (type, code, param), Retry-After when retryable
    mcp           /mcp: a tool result marked is_error ("Error: …"); the listener's refusals as /v1's
    mcp-stdio     `jarvis mcp`: the same tool results, the gateway reached over its WebSocket
    tool          the chat model's own tool calls: the same text, as the tool message of the next request
    cli           `jarvis …` in process (no gateway answering): "jarvis: <message>" on stderr, exit 2 or 1

Every call takes the one path (gateway/dispatcher.py) and fails with one error value; a door only renders
it. Where a door shows the error's message, it is the same message; `n/a` cells say why a door cannot
meet that failure.

    failure            websocket     openai               mcp / mcp-stdio / tool          cli
    bad params         -32602 field  400 param            invalid arguments: k: …         exit 2
    unknown method     -32601        404 (no route)       unknown tool '…'                method not found
    not found          -32004        404 model_not_found  memory.get failed: <message>    exit 1, <message>
    too large          close 1009    413                  arguments are N bytes; …        n/a: no frame
    rate limited       -32029        429 + Retry-After    429 + Retry-After / HTTP 429    n/a: no token
    db unreachable     -32050        503 + Retry-After    memory.list failed: <message>   exit 1, <message>
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sys

import httpx2 as httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.cli.dispatch import methods
from gateway.errors import Invalid, MethodNotFound, NotFound, Unavailable
from tests.helpers import ROOT, RpcError
from tests.rpc import test_chat_tools as chat_tools
from tests.rpc.test_mcp import http_client, stdio_client, text

TOO_BIG = (1 << 20) + 4096  # past server.maxFrameBytes and server.httpMaxBodyBytes as set below
LIMITS = {"server.httpMaxBodyBytes": 1 << 20, "server.maxFrameBytes": 1 << 20}


api = chat_tools.api  # the fake OpenAI upstream, a fixture


async def _gateway(start_gateway, api, **overrides):
    return await chat_tools._gateway(start_gateway, api, **{"server.httpPort": -1, **LIMITS, **overrides})


def _in_process(config):
    """The config `jarvis` would use beside no gateway: nothing listens where it looks, so it works in
    process on the same state dir (cli/dispatch.py)."""
    return dataclasses.replace(config, server=dataclasses.replace(config.server, port=0))


async def _cli(config, capsys, *argv: str) -> tuple[int, str]:
    """`jarvis memory …` through its real parser, in process (in a thread: it runs its own event loop)
    → (exit code, stderr)."""
    import argparse

    import structlog

    from gateway.cli import memory as cli

    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    capsys.readouterr()
    with structlog.testing.capture_logs():
        code = await asyncio.to_thread(args.handler, args, _in_process(config))
    return code, capsys.readouterr().err.strip()


async def _tool_results(gw, api, calls: list[tuple[str, object]]) -> list[str]:
    """The chat model makes `calls` in one step; → what it reads back, one tool message per call."""
    before = len(api.requests)
    api.script(("tools", calls))
    c = await gw.client()
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "use your tools"})
        assert (await c.run_to_end(sent["runId"], timeout=30))[-1]["method"] == "chat.final"
    finally:
        await c.close()
    asked = [r["body"] for r in api.requests[before:] if r["path"].endswith("/chat/completions")]
    return [m["content"] for m in asked[-1]["messages"] if m["role"] == "tool"]


async def _ws_error(gw, method: str, params: dict) -> dict:
    c = await gw.client()
    try:
        with pytest.raises(RpcError) as exc:
            await c.call(method, params)
    finally:
        await c.close()
    return {"code": exc.value.code, "message": exc.value.message, "data": exc.value.data}


def _http(gw, token: str | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {token or gw.token}"})


async def test_bad_params_unknown_methods_and_not_found_mean_the_same_at_every_door(start_gateway, api, capsys):
    gw = await _gateway(start_gateway, api)
    # -- the WebSocket: the error value as JSON-RPC -------------------------------------------------------
    bad = await _ws_error(gw, "memory.search", {"query": "boat", "k": 500})
    assert bad == {"code": -32602, "message": "params.k: must be <= 50, got 500", "data": {"field": "params.k"}}
    unknown = await _ws_error(gw, "memory.forget_everything", {})
    assert unknown["code"] == -32601 and unknown["message"] == "method not found: memory.forget_everything"
    # A method offered at one door only (the OpenAI door's chat.relay) does not exist at the others.
    assert (await _ws_error(gw, "chat.relay", {}))["code"] == -32601
    missing = await _ws_error(gw, "memory.get", {"key": "no.such.key"})
    assert missing["code"] == -32004 and "no.such.key" in missing["message"]

    # -- the tool doors: /mcp, `jarvis mcp`, the chat model — one text each, the same text -------------
    said = {
        "bad": "Error: invalid arguments: k: must be <= 50, got 500",
        "unknown": "Error: unknown tool 'memory_forget_everything'; the tools are: memory_search, memory_get, "
        "memory_set, memory_delete, memory_list, memory_recall, memory_profile",
        "missing": f"Error: memory.get failed: {missing['message']}",
    }
    calls = [
        ("memory_search", {"query": "boat", "k": 500}),
        ("memory_forget_everything", {}),
        ("memory_get", {"key": "no.such.key"}),
    ]
    for client in (http_client(gw), stdio_client(gw)):
        async with client:
            got = [await client.call_tool(name, args) for name, args in calls]
        assert all(r.is_error for r in got)
        assert [text(r) for r in got] == list(said.values())
    assert await _tool_results(gw, api, calls) == list(said.values())

    # -- /v1: OpenAI's error shape, the status of the error's class --------------------------------------
    async with _http(gw) as http:
        r = await http.post("/v1/chat/completions", json={"model": "fake-model", "messages": []})
        assert (r.status_code, r.json()["error"]["type"], r.json()["error"]["param"]) == (
            400,
            "invalid_request_error",
            "messages",
        )
        r = await http.post("/v1/forget_everything", json={})
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
        r = await http.get("/v1/models/no-such-model")
        assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["param"]) == (
            404,
            "model_not_found",
            "model",
        )

    # -- `jarvis` in process: the same classes, the same messages; exit 2 for bad params, else 1 --------
    assert await _cli(gw.config, capsys, "memory", "search", "boat", "--k", "500") == (2, f"jarvis: {bad['message']}")
    assert await _cli(gw.config, capsys, "memory", "get", "no.such.key") == (1, f"jarvis: {missing['message']}")
    async with methods(_in_process(gw.config)) as m:
        assert m.gateway is None, "in process"
        with pytest.raises(MethodNotFound, match=unknown["message"]):
            await m.call("memory.forget_everything", {})
        with pytest.raises(Invalid) as exc:
            await m.call("memory.search", {"query": "boat", "k": 500})
        assert (exc.value.field, exc.value.rule) == ("params.k", "must be <= 50, got 500")
        with pytest.raises(NotFound, match=missing["message"]):
            await m.call("memory.get", {"key": "no.such.key"})


async def test_too_large_is_refused_at_every_door_before_it_is_read(start_gateway, api):
    gw = await _gateway(start_gateway, api)
    value = "x" * TOO_BIG
    # The WebSocket: a frame past server.maxFrameBytes closes the connection with 1009.
    async with connect(gw.url, additional_headers={"Authorization": f"Bearer {gw.token}"}, max_size=None) as ws:
        frame = {"id": 1, "method": "memory.set", "params": {"key": "huge", "value": value}}
        await ws.send(orjson.dumps(frame).decode())
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1009
    # /v1 and /mcp: a body past server.httpMaxBodyBytes is a 413, in OpenAI's shape, before any call.
    async with _http(gw) as http:
        for path, body in (
            ("/v1/chat/completions", {"model": "fake-model", "messages": [{"role": "user", "content": value}]}),
            ("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_set"}, "v": value}),
        ):
            r = await http.post(path, json=body, headers={"Accept": "application/json, text/event-stream"})
            assert (r.status_code, r.json()["error"]["code"]) == (413, "request_too_large"), path
            assert "server.httpMaxBodyBytes" in r.json()["error"]["message"]
    # The tool doors: arguments past the tool door's limit are a tool error; nothing was stored.
    async with stdio_client(gw) as client:
        huge = await client.call_tool("memory_set", {"key": "huge", "value": "x" * (300 << 10)})
    assert huge.is_error and text(huge).startswith("Error: arguments are ") and "; the limit is 262144" in text(huge)
    [told] = await _tool_results(gw, api, [("memory_set", {"key": "huge", "value": value})])
    assert told.startswith("Error: arguments are ") and "characters; the limit is" in told
    assert not (gw.config.agent_workspace("main") / "memory/keyed/general/huge.md").exists()


async def test_an_integer_past_64_bits_is_a_bad_param_at_every_tool_door(start_gateway, api):
    """It used to reach orjson (sizing the arguments) before the method's validation: 'internal error'."""
    gw = await _gateway(start_gateway, api)
    expected = "Error: invalid arguments: k: must be <= 50, got " + str(2**70)
    async with http_client(gw) as client:
        got = await client.call_tool("memory_search", {"query": "boat", "k": 2**70})
    assert got.is_error and text(got) == expected
    c = await gw.client()
    try:  # the WebSocket door reads it as JSON does (a number too big for 64 bits): the same rule
        await c.send_text(json.dumps({"id": 1, "method": "memory.search", "params": {"query": "boat", "k": 2**70}}))
        answer = await asyncio.wait_for(c.raw.get(), 10)
    finally:
        await c.close()
    assert answer["error"]["code"] == -32602 and answer["error"]["data"] == {"field": "params.k"}
    assert answer["error"]["message"].startswith("params.k: must be <= 50, got ")


async def test_rate_limited_means_retry_later_at_every_door(start_gateway, api):
    """Two limits: a connection's requests in flight (the dispatcher's budget), and wrong tokens from one
    address, counted by the one limiter the WebSocket and the HTTP listener share."""
    gw = await _gateway(
        start_gateway,
        api,
        **{"server.maxInflight": 1, "server.authFailuresPerMinute": 1, "server.authFailureDelay": 0},
    )
    c = await gw.client()
    try:  # a batch of two on a connection allowed one in flight
        await c.send_text(
            orjson.dumps([{"id": 1, "method": "system.health"}, {"id": 2, "method": "system.health"}]).decode()
        )
        answer = await asyncio.wait_for(c.raw.get(), 10)
    finally:
        await c.close()
    assert answer["error"]["code"] == -32029 and answer["error"]["data"] == {"retryAfterMs": 50}
    assert answer["error"]["message"] == "too many requests in flight on this connection (max 1)"

    wrong = "wrong-token-0123456789abcdef"
    async with _http(gw, wrong) as http:
        assert (await http.get("/v1/models")).status_code == 401  # the one failure allowed a minute
        for path, method in (("/v1/models", "GET"), ("/mcp", "POST")):
            r = await http.request(method, path, json={})
            assert (r.status_code, r.json()["error"]["type"]) == (429, "rate_limit_error"), path
            assert int(r.headers["Retry-After"]) >= 1
    async with connect(gw.url) as ws:  # the WebSocket, from the same address: the same limiter
        await ws.send(orjson.dumps({"id": 1, "method": "auth", "params": {"token": wrong}}).decode())
        refused = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    assert refused["error"]["code"] == -32029 and refused["error"]["data"]["retryAfterMs"] > 0
    stdio = await asyncio.create_subprocess_exec(  # `jarvis mcp` with that token: refused as it connects
        sys.executable,
        *("-m", "gateway.cli", "mcp", "--url", gw.url, "--token", wrong),
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "HOME": str(gw.config.state_dir)},
    )
    _, err = await asyncio.wait_for(stdio.communicate(), 60)
    assert stdio.returncode == 1 and b"HTTP 429" in err, err
    async with _http(gw) as http:  # the owner's token is never refused
        assert (await http.get("/v1/models")).status_code == 200


async def test_a_database_that_cannot_be_reached_is_retryable_at_every_door(start_gateway, api, postgres_url, capsys):
    """PostgreSQL refusing connections (as a stopped server does): the same retryable Unavailable on every
    door. /v1 answered a bare 500 text/plain and /mcp 'internal error' before the doors shared one path."""
    import asyncpg

    gw = await _gateway(start_gateway, api, **{"storage.url": postgres_url})
    name = postgres_url.split("?")[0].rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres_url.replace(f"/{name}", "/postgres"))
    stdio, http_mcp = stdio_client(gw), http_client(gw)
    async with contextlib.AsyncExitStack() as stack:
        cli = await stack.enter_async_context(methods(_in_process(gw.config)))
        assert cli.gateway is None and "memories" in await cli.call("memory.list", {})  # opened while it is up
        for client in (stdio, http_mcp):
            await stack.enter_async_context(client)
            assert not (await client.call_tool("memory_list", {})).is_error
        try:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
            lead = "the database cannot be reached ("

            ws = await _ws_error(gw, "memory.list", {})
            assert ws["code"] == -32050 and ws["message"].startswith(lead) and ws["message"].endswith("; retry shortly")
            assert ws["data"] == {"retryable": True, "retryAfterMs": 1000}
            for client in (http_mcp, stdio):
                got = await client.call_tool("memory_list", {})
                assert got.is_error and text(got).startswith(f"Error: memory.list failed: {lead}"), text(got)
            async with _http(gw) as http:
                r = await http.post(
                    "/v1/chat/completions",
                    json={"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]},
                )
            assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
            error = r.json()["error"]
            assert (error["type"], error["code"]) == ("server_error", "unavailable") and error["message"].startswith(
                lead
            )
            with pytest.raises(Unavailable) as exc:
                await cli.call("memory.list", {})
            assert exc.value.message.startswith(lead) and exc.value.retryable
            # n/a: the chat model's tool door — a run keeps its session in the database, so without one
            # no run starts (chat.send is the WebSocket's -32050 above) and no tool call is made.
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await admin.close()
