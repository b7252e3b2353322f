"""Hostile clients against a real `jarvis serve` subprocess (its log is captured and inspected).

Connection floods, a consumer that never reads, repeated wrong tokens from one address, cross-site
Origins, pre-auth junk, and path traversal through session keys. Each test also checks that a
well-behaved client connected alongside keeps being served.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
import time

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.helpers import GatewayProcess, RpcError, connect_client

MAX_CONNECTIONS = 24
SEND_BUFFER = 65536


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    config = (
        "[memory]\nenabled = false\n"
        f"[server]\nmaxSendBuffer = {SEND_BUFFER}\nmaxConnections = {MAX_CONNECTIONS}\n"
        "authFailuresPerMinute = 5\nauthFailureDelay = 0.05\nauthTimeout = 2.0\nslowConsumerSeconds = 2.0\n"
    )
    with GatewayProcess.running(tmp_path_factory.mktemp("hostile") / "state", config) as proc:
        yield proc


@pytest.fixture
async def good(gw):
    """A well-behaved client that must stay served whatever the hostile one does."""
    c = await connect_client(gw.url, gw.token)
    try:
        yield c
    finally:
        await c.close()


async def served_quickly(client, within: float = 5.0) -> dict:
    t0 = time.monotonic()
    health = await client.call("system.health", timeout=within)
    assert health["status"] == "ok" and time.monotonic() - t0 < within
    return health


async def count_connections(gw, client) -> int:
    return (await client.call("system.health"))["connections"]


# ---- raw WebSocket over a plain TCP socket ------------------------------------------------------
def raw_ws(gw: GatewayProcess, rcvbuf: int | None = None, headers: dict[str, str] | None = None) -> socket.socket:
    """Do the WebSocket handshake by hand, so the test controls exactly when (if ever) it reads."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect(("127.0.0.1", gw.port))
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    s.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)  # byte by byte: read nothing past the handshake
        if not chunk:
            raise ConnectionError("closed during handshake")
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def frame(payload: bytes, opcode: int = 1) -> bytes:
    """A masked client frame (mask key 0000: masking is then the identity)."""
    n = len(payload)
    if n < 126:
        hdr = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        hdr = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        hdr = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return hdr + b"\0\0\0\0" + payload


def authenticate(s: socket.socket, token: str) -> None:
    """Send the auth frame and wait (at most 10 s) for auth.ok, the only frame the gateway sends before it."""
    s.sendall(frame(orjson.dumps({"type": "auth", "token": token})))
    s.settimeout(10)
    seen = b""
    while b"auth.ok" not in seen:
        chunk = s.recv(4096)
        assert chunk, f"closed before auth.ok: {seen[:200]!r}"
        seen += chunk


def read_frames(s: socket.socket, deadline: float) -> list[tuple[int, bytes]]:
    """Read server frames until the close frame or EOF (bounded by `deadline`)."""
    buf = b""
    out: list[tuple[int, bytes]] = []
    s.settimeout(1)
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(1 << 20)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 2:
            op, n = buf[0] & 0x0F, buf[1] & 0x7F
            pos = 2
            if n == 126:
                if len(buf) < 4:
                    break
                n, pos = struct.unpack("!H", buf[2:4])[0], 4
            elif n == 127:
                if len(buf) < 10:
                    break
                n, pos = struct.unpack("!Q", buf[2:10])[0], 10
            if len(buf) < pos + n:
                break
            out.append((op, buf[pos : pos + n]))
            buf = buf[pos + n :]
            if op == 8:
                return out
    return out


# ---- tests --------------------------------------------------------------------------------------
async def test_connection_flood_beyond_the_limit_is_refused_with_503(gw, good):
    """Fill every slot, then hammer: each extra attempt gets HTTP 503 + Retry-After, the existing
    client keeps being served, and once the flood leaves the slots are usable again."""
    held = []
    refused = 0
    try:
        while len(held) < MAX_CONNECTIONS - 1:
            held.append(await connect_client(gw.url, gw.token, how="header"))
        assert await count_connections(gw, good) == MAX_CONNECTIONS
        for _ in range(40):
            with pytest.raises(InvalidStatus) as exc:
                async with connect(gw.url, additional_headers={"Authorization": f"Bearer {gw.token}"}, open_timeout=5):
                    pass
            assert exc.value.response.status_code == 503
            assert exc.value.response.headers.get("Retry-After") == "1"
            refused += 1
        await served_quickly(good)
        for c in held[:5]:
            await served_quickly(c)
    finally:
        for c in held:
            await c.close()
    assert refused == 40
    for _ in range(50):  # the server notices the closes shortly
        if await count_connections(gw, good) == 1:
            break
        await asyncio.sleep(0.1)
    late = await connect_client(gw.url, gw.token)
    await served_quickly(late)
    await late.close()


async def test_unauthenticated_flood_is_bounded_by_the_auth_timeout(gw, good):
    """Connections that never authenticate cannot keep real clients out: at the limit one of them
    is closed (1008) to make room, and the rest hold a slot only until `authTimeout` (2 s here)."""
    loop = asyncio.get_running_loop()
    idle = []
    try:
        for _ in range(MAX_CONNECTIONS - 1):
            idle.append(await loop.run_in_executor(None, raw_ws, gw))
        newcomer = await connect_client(gw.url, gw.token)  # full of idle sockets, yet it gets in
        await served_quickly(newcomer)
        await newcomer.close()
        await served_quickly(good)
        closes = []
        for s in idle:
            frames = await loop.run_in_executor(None, read_frames, s, time.monotonic() + 10)
            closes.append(frames[-1] if frames else None)
        codes = {struct.unpack("!H", f[1][:2])[0] for f in closes if f and f[0] == 8}
        assert codes == {1008}, closes[:3]
    finally:
        for s in idle:
            s.close()
    late = await connect_client(gw.url, gw.token)
    await served_quickly(late)
    await late.close()


async def test_slow_consumer_is_closed_at_the_buffer_limit_and_nobody_else_slows(gw, good):
    """A client pipelines requests for big answers and never reads: once maxSendBuffer (64 KiB here) of
    answers is unsent (beyond what the kernel's buffers took) the gateway stops reading from it, and
    after slowConsumerSeconds (2 s here) without progress closes it with 1008 "slow consumer";
    meanwhile another client is served at once."""
    loop = asyncio.get_running_loop()
    key = (await good.call("sessions.create"))["sessionKey"]
    for i in range(3):  # a history page of ~540 KB: a few answers fill any socket buffer
        sent = await good.call("chat.send", {"sessionKey": key, "message": f"{i} " + "h" * 90_000})
        await good.run_to_end(sent["runId"])
    s = await loop.run_in_executor(None, raw_ws, gw, 4096)
    # Authenticated before it pipelines: frames sent while the auth frame is still being checked count
    # against the pre-auth budget (PREAUTH_FRAMES), and a busy gateway cut the socket for them at once.
    await loop.run_in_executor(None, authenticate, s, gw.token)
    req = frame(orjson.dumps({"id": 1, "method": "sessions.history", "params": {"sessionKey": key}}))
    log_mark = gw.log.stat().st_size

    def pipeline() -> int:
        sent = 0
        s.settimeout(2)
        try:
            for _ in range(2000):  # bounded
                s.sendall(req)
                sent += 1
                if sent % 20 == 0 and "slow consumer" in gw.log.read_text(errors="replace")[log_mark:]:
                    break
        except OSError:
            pass  # the server stopped reading us: we are being closed
        deadline = time.monotonic() + 10  # and still do not read: the gateway must give up on us
        while time.monotonic() < deadline and "slow consumer" not in gw.log.read_text(errors="replace")[log_mark:]:
            time.sleep(0.2)
        return sent

    sender = loop.run_in_executor(None, pipeline)
    worst = 0.0
    while not sender.done():  # the well-behaved client is measured while the victim piles up
        t0 = time.monotonic()
        await served_quickly(good)
        worst = max(worst, time.monotonic() - t0)
        await asyncio.sleep(0.05)
    sent = await sender
    frames = await loop.run_in_executor(None, read_frames, s, time.monotonic() + 15)
    s.close()
    assert frames and frames[-1][0] == 8, f"no close frame after {len(frames)} frames ({sent} requests)"
    code = struct.unpack("!H", frames[-1][1][:2])[0]
    assert code == 1008 and frames[-1][1][2:] == b"slow consumer"
    answered = sum(1 for op, _ in frames if op == 1)
    assert answered < sent, "it was closed before every answer was delivered"
    assert worst < 2.0, f"the other client waited {worst:.2f}s"
    await served_quickly(good)
    assert "closing slow consumer" in gw.log.read_text(errors="replace")[log_mark:]


async def test_wrong_tokens_are_rate_limited_per_address_and_never_logged(gw, good):
    """From 127.0.0.2: 5 wrong tokens, then further wrong ones get -32029 (frame) / 429 (header), while
    the right token still gets in from there (no lockout of the owner); 127.0.0.1 is unaffected. Neither
    the wrong tokens nor the real one appear in the log."""
    other = ("127.0.0.2", 0)
    wrong = [f"WRONG-TOKEN-{i}-{os.urandom(6).hex()}" for i in range(7)]
    for i, token in enumerate(wrong[:5]):
        if i % 2:
            with pytest.raises(InvalidStatus) as exc:
                async with connect(gw.url, additional_headers={"Authorization": f"Bearer {token}"}, local_addr=other):
                    pass
            assert exc.value.response.status_code == 401
        else:
            async with connect(gw.url, local_addr=other) as ws:
                await ws.send(orjson.dumps({"type": "auth", "token": token}).decode())
                assert orjson.loads(await ws.recv())["error"]["code"] == -32001
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
                assert ws.close_code == 1008
    async with connect(gw.url, local_addr=other) as ws:
        await ws.send(orjson.dumps({"id": 1, "method": "auth", "params": {"token": wrong[5]}}).decode())
        msg = orjson.loads(await ws.recv())
        assert msg["id"] == 1 and msg["error"]["code"] == -32029 and msg["error"]["data"]["retryAfterMs"] > 0
    with pytest.raises(InvalidStatus) as exc:
        async with connect(gw.url, additional_headers={"Authorization": f"Bearer {wrong[6]}"}, local_addr=other):
            pass
    assert exc.value.response.status_code == 429 and int(exc.value.response.headers["Retry-After"]) >= 1
    async with connect(gw.url, local_addr=other) as ws:  # the owner is never locked out
        await ws.send(orjson.dumps({"id": 1, "method": "auth", "params": {"token": gw.token}}).decode())
        assert "result" in orjson.loads(await ws.recv())
    async with connect(gw.url, additional_headers={"Authorization": f"Bearer {gw.token}"}, local_addr=other) as ws:
        await ws.send('{"id":2,"method":"system.health"}')
        assert orjson.loads(await ws.recv())["result"]["status"] == "ok"
    fresh = await connect_client(gw.url, gw.token)  # 127.0.0.1 is another address
    await served_quickly(fresh)
    await fresh.close()
    await served_quickly(good)
    log = gw.log.read_text(errors="replace")
    assert "auth failed" in log and "127.0.0.2" in log
    for token in [*wrong, gw.token]:
        assert token not in log
        assert token[:16] not in log


@pytest.mark.parametrize(
    "origin",
    ["http://evil.example", "null", "http://127.0.0.1.evil.example:1", "https://localhost", "http://localhost:1"],
)
async def test_cross_site_origin_is_403_even_with_the_right_token(gw, good, origin):
    with pytest.raises(InvalidStatus) as exc:
        async with connect(gw.url, origin=origin, additional_headers={"Authorization": f"Bearer {gw.token}"}):
            pass
    assert exc.value.response.status_code == 403
    await served_quickly(good)


@pytest.mark.parametrize(
    "first",
    [
        '[{"id":1,"method":"auth","params":{"token":"%s"}}]',  # auth inside a batch is not an auth frame
        '{"type":"auth","token":["%s"]}',
        '{"id":1,"method":"auth","params":["%s"]}',
        '{"type":"auth","token":"%s","method":"system.health"}',
        '{"id":1,"method":"sessions.list","params":{"token":"%s"}}',
        "not json %s",
    ],
)
async def test_preauth_junk_gets_32001_and_1008(gw, good, first):
    async with connect(gw.url) as ws:
        await ws.send(first % gw.token)
        msg = orjson.loads(await ws.recv())
        assert msg["error"]["code"] == -32001
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1008
    await served_quickly(good)


async def test_preauth_binary_and_oversized_frames(gw, good):
    async with connect(gw.url, max_size=None) as ws:
        await ws.send(b"\x00\xff" * 100)
        assert orjson.loads(await ws.recv())["error"]["code"] == -32001
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1008
    async with connect(gw.url, max_size=None) as ws:  # a huge auth frame: 1009 before it is parsed
        await ws.send(orjson.dumps({"type": "auth", "token": "x" * (70 << 10)}).decode())
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1009
    await served_quickly(good)


TRAVERSAL_KEYS = [
    "../x",
    "a/b",
    "..",
    ".",
    "...",
    "../../etc/passwd",
    "/etc/passwd",
    "a\\b",
    "x\x00y",
    "%2e%2e",
    "．．",
    "a" * 129,
    "",
    " ",
    "sessions.json/..",
    "C:\\x",
    "~root",
]


async def test_path_traversal_in_session_keys_is_refused(gw, good):
    state = gw.state_dir
    sessions_dir = state / "agents" / "main" / "sessions"
    before = sorted(p for p in state.parent.rglob("*") if "serve.log" not in p.name)
    calls = [
        ("sessions.get", {}),
        ("sessions.history", {}),
        ("sessions.delete", {}),
        ("sessions.subscribe", {}),
        ("sessions.unsubscribe", {}),
        ("sessions.update", {"label": "x"}),
        ("chat.abort", {}),
        ("chat.send", {"message": "escape?"}),
    ]
    for key in TRAVERSAL_KEYS:
        for method, extra in calls:
            with pytest.raises(RpcError) as exc:
                await good.call(method, {"sessionKey": key, **extra})
            assert exc.value.code == -32602, (method, key, exc.value.message)
            assert exc.value.data["field"] == "params.sessionKey"
    after = sorted(p for p in state.parent.rglob("*") if "serve.log" not in p.name)
    assert after == before, set(after) ^ set(before)
    assert not (sessions_dir.parent / "x.jsonl").exists()
    await served_quickly(good)


async def test_memory_get_refuses_paths_outside_the_workspace(tmp_path):
    """Only when memory has landed: memory.get on traversal and symlink escapes is refused."""
    pytest.importorskip("gateway.methods.memory")
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.toml").write_text('[memory]\nenabled = true\n[memory.embeddings]\nprovider = "none"\n')
    ws = state / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# ok\nfine\n")
    secret = tmp_path / "secret.md"
    secret.write_text("TOP SECRET\n")
    (ws / "memory" / "link.md").symlink_to(secret)
    proc = GatewayProcess(state, env={"OPENAI_BASE_URL": ""})
    try:
        proc.start()
        c = await connect_client(proc.url, proc.token)
        assert "fine" in (await c.call("memory.get", {"path": "MEMORY.md"}))["text"]
        for path in [
            "../secret.md",
            "/etc/passwd",
            "memory/../../secret.md",
            "memory/link.md",
            "../gateway.token",
            "sessions/../../gateway.token",
            "memory/%2e%2e/x.md",
            "gateway.token",
        ]:
            with pytest.raises(RpcError) as exc:
                await c.call("memory.get", {"path": path})
            assert exc.value.code in (-32602, -32004), (path, exc.value.code)
            assert "TOP SECRET" not in exc.value.message
        await c.close()
    finally:
        proc.kill()


@pytest.mark.parametrize("agent", ["..", ".", "...", "../x", "a/b", "/tmp", ""])
async def test_path_traversal_in_agent_ids_is_refused(gw, good, agent):
    """agentId names a folder under <stateDir>/agents/: ".." would put an agent's sessions in the
    state dir itself and give it the default agent's workspace (its memory) — refused as -32602."""
    state = gw.state_dir
    before = sorted(p for p in state.parent.rglob("*") if "serve.log" not in p.name)
    for method, params in [
        ("sessions.create", {}),
        ("sessions.list", {}),
        ("sessions.get", {"sessionKey": "k"}),
        ("chat.send", {"sessionKey": "k", "message": "hi"}),
    ]:
        with pytest.raises(RpcError) as exc:
            await good.call(method, {"agentId": agent, **params})
        assert exc.value.code == -32602 and exc.value.data["field"] == "params.agentId", (method, exc.value.message)
    after = sorted(p for p in state.parent.rglob("*") if "serve.log" not in p.name)
    assert after == before, set(after) ^ set(before)
    assert not (state / "sessions").exists() and not (state / "agents" / "sessions").exists()
