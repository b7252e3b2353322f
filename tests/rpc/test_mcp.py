"""MCP over the memory tool catalog, with the official SDK's own client: streamable HTTP at /mcp on the
HTTP API listener (tools run in the gateway) and `jarvis mcp` over stdio (forwarding to the gateway's
WebSocket). The same six tools, schemas and annotations either way; the token is required."""

from __future__ import annotations

import asyncio
import sys

import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.registry import registry
from tests.helpers import ROOT

NAMES = ["memory_search", "memory_get", "memory_set", "memory_delete", "memory_list", "memory_recall", "memory_profile"]


def http_client(gw, token: str | None = None) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token or gw.token}"})
    return Client(streamable_http_client(gw.http_url + "/mcp", http_client=http))


def stdio_client(gw, token: str | None = None) -> Client:
    return Client(
        StdioServerParameters(
            command=sys.executable,
            cwd=str(ROOT),
            args=["-m", "gateway.cli", "mcp", "--url", gw.url, "--token", token or gw.token],
            env={"PATH": "/usr/bin:/bin", "HOME": str(gw.config.state_dir)},
        )
    )


def text(result) -> str:
    return "\n".join(c.text for c in result.content)


async def _tools_and_round_trip(client: Client, key: str) -> None:
    tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == NAMES
    by = {t.name: t for t in tools}
    for t in tools:  # the schemas are the methods' own (memory.search's `mode` left out)
        method = registry.methods[t.name.replace("_", ".")].params.json_schema()
        method["properties"].pop("mode", None)
        assert t.input_schema == method
    search = by["memory_search"]
    assert search.input_schema["required"] == ["query"]
    assert search.input_schema["properties"]["k"] == {
        "type": "integer",
        "default": 6,
        "description": "how many results",
        "minimum": 1,
        "maximum": 50,
    }
    assert "agentId" in search.input_schema["properties"], "MCP clients may pick the agent"
    assert "mode" not in search.input_schema["properties"]
    assert (search.annotations.read_only_hint, search.annotations.destructive_hint) == (True, False)
    assert (
        by["memory_set"].annotations.read_only_hint,
        by["memory_set"].annotations.destructive_hint,
        by["memory_set"].annotations.idempotent_hint,
    ) == (False, True, True)
    assert by["memory_delete"].annotations.destructive_hint is True
    assert by["memory_recall"].annotations.read_only_hint is True
    assert (by["memory_profile"].annotations.read_only_hint, by["memory_profile"].annotations.destructive_hint) == (
        True,
        False,
    )
    assert all(len(t.description) > 150 for t in tools), "a paragraph written for a model"

    stored = await client.call_tool(
        "memory_set", {"key": key, "value": "The boat is painted dark green.", "category": "facts"}
    )
    assert not stored.is_error, text(stored)
    assert text(stored) == f"Stored {key} in facts at memory/keyed/facts/{key}.md; searchable now."

    found = await client.call_tool("memory_search", {"query": "boat colour painted", "sources": ["memory"]})
    assert not found.is_error
    body = text(found)
    assert body.startswith("1 result for 'boat colour painted':") or " results for " in body
    assert f"memory/keyed/facts/{key}.md:" in body and "dark green" in body

    got = await client.call_tool("memory_get", {"key": key})
    assert text(got).startswith(f"{key} (facts, updated ") and text(got).endswith("The boat is painted dark green.")

    listed = await client.call_tool("memory_list", {})
    assert f"- {key} (facts, updated" in text(listed)

    bad = await client.call_tool("memory_search", {"query": "", "k": 500})
    assert bad.is_error and text(bad) == "Error: invalid arguments: query: must not be empty"
    unknown = await client.call_tool("memory_forget_everything", {})
    assert unknown.is_error and text(unknown).startswith("Error: unknown tool 'memory_forget_everything'")
    missing = await client.call_tool("memory_get", {"key": "no.such.key"})
    assert missing.is_error and "memory.get failed:" in text(missing) and "no.such.key" in text(missing)

    gone = await client.call_tool("memory_delete", {"key": key})
    assert text(gone) == f"Deleted {key} (facts, memory/keyed/facts/{key}.md)."


async def test_mcp_over_http_lists_the_tools_and_stores_finds_and_reads_a_memory(start_gateway):
    gw = await start_gateway(memory=True, **{"server.httpPort": -1})
    c = await gw.client()
    await c.call("sessions.create", {"agentId": "work"})  # agents come to be with their first session
    await c.close()
    async with http_client(gw) as client:
        await _tools_and_round_trip(client, "boat.colour")
        # Per agent: agentId names another agent's memory; the default agent's stays apart.
        assert not (
            await client.call_tool("memory_set", {"key": "dog.name", "value": "Rex", "agentId": "work"})
        ).is_error
        ghost = await client.call_tool("memory_list", {"agentId": "ghost"})
        assert ghost.is_error and text(ghost) == "Error: memory.list failed: agent not found: ghost"
        other = await client.call_tool("memory_list", {"agentId": "work"})
        assert "- dog.name (general" in text(other)
        mine = await client.call_tool("memory_list", {})
        assert "dog.name" not in text(mine)
    assert (gw.config.agent_workspace("work") / "memory/keyed/general/dog.name.md").exists()


async def test_mcp_over_http_refuses_a_wrong_token_and_a_10_mb_argument(start_gateway):
    gw = await start_gateway(**{"server.httpPort": -1, "server.authFailureDelay": 0})
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient() as http:
        r = await http.post(
            gw.http_url + "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer wrong-token-0123456789", **accept},
        )
        assert r.status_code == 401 and r.json()["error"]["message"] == "invalid token"
        huge = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_set", "arguments": {"key": "huge", "value": "x" * (10 << 20)}},
        }
        r = await http.post(gw.http_url + "/mcp", json=huge, headers={"Authorization": f"Bearer {gw.token}", **accept})
        assert r.status_code == 413 and "server.httpMaxBodyBytes" in r.json()["error"]["message"]
    with pytest.raises(Exception):  # noqa: B017 - whatever the SDK's client raises on a 401: it lists nothing
        async with http_client(gw, token="wrong-token-0123456789") as client:
            await client.list_tools()


async def test_jarvis_mcp_over_stdio_forwards_to_the_gateway(start_gateway):
    gw = await start_gateway(memory=True)
    async with stdio_client(gw) as client:
        await _tools_and_round_trip(client, "boat.colour")
        # A 10 MB argument: a clear tool error (the tool door sizes it before the call; it would pass the
        # gateway's frames), the server still answers.
        huge = await client.call_tool("memory_set", {"key": "huge", "value": "x" * (10 << 20)})
        assert huge.is_error and text(huge).startswith("Error: arguments are ") and "the limit is" in text(huge)
        assert not (await client.call_tool("memory_list", {})).is_error
        # The gateway restarts: the next call connects again.
        await gw.restart()
        assert not (await client.call_tool("memory_list", {})).is_error
        # The gateway is gone: the call says so, and the client goes on.
        await gw.stop()
        gone = await client.call_tool("memory_list", {})
        assert (
            gone.is_error
            and "the gateway is not running at" in text(gone)
            and "start it with `jarvis serve`" in text(gone)
        )


async def test_jarvis_mcp_refused_by_the_gateway_says_why(start_gateway):
    gw = await start_gateway(**{"server.authFailureDelay": 0})
    proc = await asyncio.create_subprocess_exec(  # not subprocess.run: the gateway shares this event loop
        sys.executable,
        "-m",
        "gateway.cli",
        "mcp",
        "--url",
        gw.url,
        "--token",
        "wrong-token-0123456789",
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert err.decode().strip() == "jarvis mcp: gateway refused the connection: HTTP 401 (wrong token?)"


async def test_jarvis_mcp_started_before_the_gateway_lists_its_tools_and_works_once_it_answers(start_gateway):
    """An MCP client started at login, before the gateway: `initialize` and `tools/list` answer (the list
    is static), each call is a tool error that says how to start the gateway, and once the gateway is up
    the same `jarvis mcp` forwards calls, without a restart."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there yet
    token = "a-token-of-16-chars-or-more"
    url = f"ws://127.0.0.1:{port}/"
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        args=["-m", "gateway.cli", "mcp", "--url", url, "--token", token],
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    async with Client(params) as client:
        assert [t.name for t in (await client.list_tools()).tools] == NAMES
        down = await client.call_tool("memory_list", {})
        assert down.is_error and text(down).startswith(
            f"Error: memory.list failed: the gateway is not running at {url}"
        )
        assert "start it with `jarvis serve`" in text(down)
        gw = await start_gateway(memory=True, **{"server.port": port, "token": token})
        up = await client.call_tool("memory_set", {"key": "boat.colour", "value": "dark green"})
        assert not up.is_error, text(up)
        assert "dark green" in text(await client.call_tool("memory_get", {"key": "boat.colour"}))
    assert gw.token == token


async def test_jarvis_mcp_before_the_gateway_ever_ran_says_to_start_it_and_works_once_it_did(start_gateway, tmp_path):
    """The README's `claude mcp add jarvis -- jarvis mcp` before the first `jarvis serve`: no token file yet.
    The tool error names the token file (a path, not a secret to mask), says what to do, and no "still
    running"; started as it says, the gateway answers the same `jarvis mcp`."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = tmp_path / "Jarvis2State"  # mixed case and a digit: what a secret's value looks like to the masking
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        args=["-m", "gateway.cli", "mcp", "--port", str(port)],
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "JARVIS_STATE_DIR": str(state)},
    )
    async with Client(params) as client:
        assert [t.name for t in (await client.list_tools()).tools] == NAMES
        down = await client.call_tool("memory_list", {})
        said = text(down)
        assert down.is_error and said.startswith("Error: memory.list failed: the gateway is not running yet"), said
        assert f"the token file {state}/gateway.token is made at its first start" in said
        assert "Start it with `jarvis serve`" in said
        assert "redacted" not in said and "still running" not in said
        await start_gateway("Jarvis2State", memory=True, **{"server.port": port})
        up = await client.call_tool("memory_set", {"key": "boat.colour", "value": "dark green"})
        assert not up.is_error, text(up)


async def test_keep_alive_round_trips_do_not_wait_for_a_delayed_ack(start_gateway):
    """An MCP client keeps its connection open and sends each request in one write; the listener's
    answers must leave at once (TCP_NODELAY), not ~40 ms later when the client's delayed ACK comes."""
    import socket

    gw = await start_gateway(**{"server.httpPort": -1})
    port = gw.gw.http.port
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_nope", "arguments": {}}}'
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {gw.token}\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        f"MCP-Protocol-Version: 2025-06-18\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(15):
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        answer = await reader.readexactly(length)
        assert head.startswith(b"HTTP/1.1 200") and b"unknown tool 'memory_nope'" in answer
    # what sends them at once, read off the gateway's end of this very connection (a fact, not a time:
    # the ~40 ms a delayed ACK would add is for a benchmark on a quiet machine to show)
    ends = [c.transport.get_extra_info("socket") for c in gw.gw.http._server.server_state.connections]
    assert ends and all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in ends), ends
    writer.close()


async def test_jarvis_mcp_against_a_gateway_that_never_answers_says_so_once(tmp_path):
    """Connected, but no answer: the tool call ends at memory.list's limit with a clear error, and is not
    sent again on a new connection (that would only wait as long again)."""
    import time

    from websockets.asyncio.server import serve

    from gateway.cli.client import READ_TIMEOUT

    asked: list[str] = []

    async def silent(ws):
        async for frame in ws:  # take every request, answer none
            asked.append(str(frame))

    async with serve(silent, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        params = StdioServerParameters(
            command=sys.executable,
            cwd=str(ROOT),
            args=["-m", "gateway.cli", "mcp", "--url", url, "--token", "t" * 32],
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        async with Client(params) as client:
            t0 = time.monotonic()
            stuck = await client.call_tool("memory_list", {})
            took = time.monotonic() - t0
    assert stuck.is_error and text(stuck) == (
        f"Error: memory.list failed: the gateway at {url} did not answer memory.list within {READ_TIMEOUT:g}s"
    ), text(stuck)
    assert took >= READ_TIMEOUT  # it waited the limit out …
    assert sum('"memory.list"' in frame for frame in asked) == 1, asked  # … once: not sent again (a count)


async def test_jarvis_mcp_drops_a_line_past_the_frame_bound_without_holding_it(start_gateway):
    """Issue 43.7: a line on `jarvis mcp`'s stdin was read whole however long (200 MB: ~650 MB held);
    one past LINE_BYTES is now read past a block at a time, said on stderr, answered as an error for its
    id (the client waits for nothing), and the next request is answered."""
    from gateway.cli.mcpstdio import LINE_BYTES

    import orjson

    gw = await start_gateway()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "mcp",
        "--url",
        gw.url,
        "--token",
        gw.token,
        cwd=str(ROOT),
        env={"PATH": "/usr/bin:/bin", "HOME": str(gw.config.state_dir)},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    def send(msg: dict) -> None:
        proc.stdin.write(orjson.dumps(msg) + b"\n")

    async def answer(req_id: int) -> dict:
        async with asyncio.timeout(60):
            while True:
                msg = orjson.loads(await proc.stdout.readline())
                if msg.get("id") == req_id:
                    return msg

    info = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": info})
    assert "result" in await answer(1)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    huge = {"name": "memory_set", "arguments": {"key": "big", "value": "x" * (LINE_BYTES + (1 << 20))}}
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": huge})
    send({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    await proc.stdin.drain()
    refused = await answer(2)
    assert refused["error"]["code"] == -32601, refused  # the SDK's answer to the method that says why
    assert f"more than {LINE_BYTES} bytes dropped by jarvis mcp" in refused["error"]["data"]
    listed = await answer(3)
    assert [t["name"] for t in listed["result"]["tools"]] == NAMES
    proc.stdin.close()
    async with asyncio.timeout(30):
        err = (await proc.stderr.read()).decode()
        await proc.wait()
    assert f"a message of more than {LINE_BYTES:,} bytes was dropped" in err
    c = await gw.client()
    assert (await c.request("memory.get", {"key": "big"}))["error"]["code"] in (-32004, -32602)
    await c.close()
