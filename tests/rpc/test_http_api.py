"""The HTTP API listener (server.httpPort): one guard in front of /mcp and /v1 — bearer token, Origin
allow-list, body cap — with errors in OpenAI's JSON shape; a busy port stops `jarvis serve` with one line."""

from __future__ import annotations

import socket

import pytest
import subprocess
import sys

import httpx2 as httpx

from tests.helpers import ROOT


async def test_the_listener_refuses_what_the_websocket_refuses_and_answers_in_openai_shape(start_gateway):
    gw = await start_gateway(**{"server.httpPort": -1, "server.authFailureDelay": 0, "server.httpMaxBodyBytes": 4096})
    base = gw.http_url
    auth = {"Authorization": f"Bearer {gw.token}"}
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.get("/v1/nothing-here")
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert "Authorization: Bearer" in r.json()["error"]["message"]

        r = await http.get("/v1/nothing-here", headers={"Authorization": "Bearer wrong-token-1234567"})
        assert (r.status_code, r.json()["error"]["message"]) == (401, "invalid token")

        r = await http.get("/v1/nothing-here", headers={**auth, "Origin": "http://evil.example"})
        assert r.status_code == 403
        assert "server.allowedOrigins" in r.json()["error"]["message"]
        own_page = f"http://127.0.0.1:{gw.gw.port}"
        r = await http.get("/v1/nothing-here", headers={**auth, "Origin": own_page})
        assert r.status_code == 404
        assert r.json()["error"] == {
            "message": "no route GET /v1/nothing-here",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }

        r = await http.post("/v1/nothing-here", headers=auth, content=b"x" * 5000)
        assert r.status_code == 413
        assert "server.httpMaxBodyBytes" in r.json()["error"]["message"]

    # The WebSocket is unaffected by the listener beside it.
    c = await gw.client()
    assert (await c.call("system.health"))["status"] == "ok"
    await c.close()


async def test_the_listener_stops_with_the_gateway(start_gateway):
    gw = await start_gateway(**{"server.httpPort": -1})
    port = gw.gw.http.port
    await gw.stop()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize(
    "flag, other, head, names",
    [
        (
            "--http-port",
            "--port",
            "cannot serve the HTTP API on",
            ("--http-port", "JARVIS_HTTP_PORT", "server.httpPort"),
        ),
        ("--port", "--http-port", "cannot serve on", ("--port", "JARVIS_PORT", "server.port")),
    ],
)
def test_a_busy_port_stops_serve_with_one_line_naming_the_flag_the_variable_and_the_key(
    tmp_path, flag, other, head, names
):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {"PATH": "/usr/bin:/bin", "JARVIS_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
        proc = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", other, "0", flag, str(port)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"jarvis: {head} 127.0.0.1:{port}: ")
    assert all(name in last for name in names), last


async def test_the_listeners_connections_send_small_writes_at_once(start_gateway):
    """TCP_NODELAY on every connection: a streamed reply is many small writes, and with Nagle's algorithm
    each waits for the client's delayed ACK of the one before (~40 ms a chunk). asyncio sets it only on
    sockets whose protocol is IPPROTO_TCP, which socket.create_server's are not."""
    gw = await start_gateway(**{"server.httpPort": -1})
    async with httpx.AsyncClient(base_url=gw.http_url) as http:
        r = await http.get("/v1/models", headers={"Authorization": f"Bearer {gw.token}"})
        assert r.status_code == 200
        connections = gw.gw.http._server.server_state.connections
        assert connections  # the keep-alive connection this request came on
        for conn in connections:
            sock = conn.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_a_trickled_body_is_answered_408_and_its_connection_closed(start_gateway):
    """A client with the right token sending its body a byte at a time would hold the request for good."""
    import asyncio

    gw = await start_gateway(**{"server.httpPort": -1, "server.httpBodyTimeout": 1})
    port = gw.gw.http.port
    for path in ("/v1/chat/completions", "/mcp"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {gw.token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 1000\r\n\r\n{".encode()
        )
        await writer.drain()

        async def trickle(writer=writer):
            while True:
                await asyncio.sleep(0.2)
                writer.write(b" ")
                await writer.drain()

        keeping_on = asyncio.create_task(trickle())
        try:
            answer = await asyncio.wait_for(reader.read(), 10)  # the answer, then EOF: closed
        finally:
            keeping_on.cancel()
            writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), (path, answer)
        assert b"server.httpBodyTimeout" in body and b"request_timeout" in body, (path, body)
    # A streamed answer outlives the deadline: it applies to the body, not the response.
    async with httpx.AsyncClient(base_url=gw.http_url, timeout=10) as http:
        r = await http.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {gw.token}"},
            json={"model": "offline-responder", "stream": True, "messages": [{"role": "user", "content": "hello"}]},
        )
        assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")


async def test_whatever_escapes_a_route_is_answered_in_openai_shape_never_text_plain(start_gateway, tmp_path):
    """A route that raises: the dispatcher's one error value in OpenAI's JSON (a cause the client can act
    on, retryable with Retry-After; else 500 with an errorId), not Starlette's `500 text/plain` with a
    traceback through uvicorn's logger. The listener here is a real one beside a real gateway, with
    routes that fail as the gateway's own might."""
    import errno

    from starlette.routing import Route

    from gateway.calls import Call, Door
    from gateway.doors.httpapi import HttpApi

    gw = await start_gateway(**{"server.httpPort": -1})

    async def out_of_descriptors(request):
        raise OSError(errno.EMFILE, "Too many open files")

    async def broken(request):
        raise RuntimeError("a bug")

    def failure(what: str, exc: Exception):
        return gw.gw.services.calls.failure(Call(Door.OPENAI, what, {}), exc)

    handshake = gw.gw.server.handshake
    plain = HttpApi(gw.config, gw.gw.services.principals, handshake)  # no dispatcher: still JSON, an internal error
    plain.add_routes([Route("/bug", broken)])
    await plain.start()
    try:
        async with httpx.AsyncClient(base_url=plain.url(), timeout=10) as http:
            r = await http.get("/bug", headers={"Authorization": f"Bearer {gw.token}"})
            assert r.status_code == 500 and r.headers["content-type"] == "application/json", r.text
            assert r.json()["error"]["code"] == "internal_error"
    finally:
        await plain.stop()
    api = HttpApi(gw.config, gw.gw.services.principals, handshake, None, failure)
    api.add_routes([Route("/fd", out_of_descriptors), Route("/bug", broken)])
    await api.start()
    try:
        async with httpx.AsyncClient(base_url=api.url(), timeout=10) as http:
            auth = {"Authorization": f"Bearer {gw.token}"}
            r = await http.get("/fd", headers=auth)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.headers["content-type"] == "application/json"
            assert r.json()["error"]["type"] == "server_error" and "too many files open" in r.json()["error"]["message"]
            r = await http.get("/bug", headers=auth)
            assert r.status_code == 500 and r.headers["content-type"] == "application/json"
            error = r.json()["error"]
            assert (
                error["code"] == "internal_error" and "errorId" in error["message"] and "a bug" not in error["message"]
            )
            assert (await http.get("/bug", headers=auth)).status_code == 500  # the listener goes on
    finally:
        await api.stop()


def test_uvicorns_log_lines_come_out_as_the_gateways_json():
    """uvicorn (and every stdlib logger) through the same processor chain: one JSON object a line, with
    the logger's name, level and time; a traceback as structured frames without locals. In a fresh
    process: structlog's configuration is process-wide."""
    code = """
import io, json, logging
from gateway import logs
buf = io.StringIO()
logs.setup("info", "json", buf)
logs.setup("info", "json", buf)  # a second setup replaces its handler: each line once
logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
try:
    raise ValueError("boom")
except ValueError:
    logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
print(json.dumps([json.loads(line) for line in buf.getvalue().splitlines()]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json

    lines = json.loads(out.stdout)
    assert len(lines) == 2, lines
    assert lines[0]["event"] == "Invalid HTTP request received." and lines[0]["logger"] == "uvicorn.error"
    assert lines[0]["level"] == "warning" and lines[0]["timestamp"].endswith("Z")
    assert lines[1]["level"] == "error" and lines[1]["exception"][0]["exc_value"] == "boom"
