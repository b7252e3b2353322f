"""Hostile clients of the HTTP API listener (issue 35), for scripts/chaos.py: each runs in its own process
(in the caller's it would share a bystander's GIL and event loop) and prints one JSON line of what the
gateway answered.

    python -m tests.http_attacks sse PORT TOKEN N HOLD_S        N standalone GET /mcp streams, held idle
    python -m tests.http_attacks wrong PORT N AT_ONCE           N requests with wrong tokens, from 127.0.0.3-10
    python -m tests.http_attacks huge PORT TOKEN N MESSAGES     N /v1/chat/completions of MESSAGES messages
                                                                each, all at once (one body, sent N times)
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import orjson


async def _request(
    port: int, head: str, body: bytes = b"", local: str | None = None, keep: list | None = None
) -> tuple[int, bytes]:
    """One request on its own connection: (status, body), status 0 when the connection was dropped.
    `keep`: the connection is left open (appended) once the response head is in."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(local, 0) if local else None)
    except OSError:
        return 0, b""
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        status = int(raw.split(b" ", 2)[1])
        if keep is not None and b"text/event-stream" in raw:
            keep.append(writer)
            return status, b""
        length = next(
            (int(line.split(b":")[1]) for line in raw.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
        )
        data = await asyncio.wait_for(reader.readexactly(length), 60) if length else b""
        return status, data
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
        return 0, b""
    finally:
        if keep is None or not keep or keep[-1] is not writer:
            writer.close()


async def sse(port: int, token: str, n: int, hold: float) -> dict:
    head = (
        f"GET /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
        "MCP-Protocol-Version: 2025-06-18\r\n\r\n"
    )
    kept: list[asyncio.StreamWriter] = []
    statuses: Counter[int] = Counter()
    for _ in range(n):  # one after another, as a client opening stream after stream
        status, _body = await _request(port, head, keep=kept)
        statuses[status] += 1
    await asyncio.sleep(hold)
    for writer in kept:
        writer.close()
    return {"statuses": dict(statuses), "held": len(kept)}


async def wrong(port: int, n: int, at_once: int) -> dict:
    statuses: Counter[int] = Counter()

    async def one(i: int) -> None:
        head = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-token-{i:012}\r\n\r\n"
        status, _ = await _request(port, head, local=f"127.0.0.{3 + i % 8}")
        statuses[status] += 1

    for start in range(0, n, at_once):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + at_once))))
    return {"statuses": dict(statuses)}


async def huge(port: int, token: str, n: int, messages: int) -> dict:
    body = orjson.dumps({"model": "fake", "messages": [{"role": "user", "content": "hi"} for _ in range(messages)]})
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    answers = await asyncio.gather(*(_request(port, head, body) for _ in range(n)))
    statuses = Counter(s for s, _ in answers)
    codes = Counter(orjson.loads(b)["error"]["code"] for s, b in answers if s >= 400 and b)
    return {"statuses": dict(statuses), "codes": dict(codes), "bodyBytes": len(body)}


def main(argv: list[str]) -> None:
    kind, port = argv[0], int(argv[1])
    if kind == "sse":
        out = sse(port, argv[2], int(argv[3]), float(argv[4]))
    elif kind == "wrong":
        out = wrong(port, int(argv[2]), int(argv[3]))
    elif kind == "huge":
        out = huge(port, argv[2], int(argv[3]), int(argv[4]))
    else:
        raise SystemExit(f"unknown attack {kind}")
    print(orjson.dumps(asyncio.run(out), option=orjson.OPT_NON_STR_KEYS).decode(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
