"""The HTTP API listener's limits (doors/httplimits.py) as a class, with hypothesis: whatever requests,
bodies, streams and wrong tokens come and go, in any order and under any limits, no count passes its
limit, every refusal names its setting in a status the client can act on (429 for the token's own
requests, 503 with Retry-After for the listener's), and everything given back leaves nothing held."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import ServerConfig
from gateway.doors.httplimits import HttpLimits, Refusal
from tests.helpers import examples

OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "done", "body", "give", "open", "close", "wrong", "cut"]),
        st.integers(0, 3),  # which token, or which held thing
        st.integers(0, 5000),  # body bytes
    ),
    max_size=60,
)
SETTINGS = st.fixed_dictionaries(
    {
        "max_connections": st.integers(1, 8),
        "http_max_per_token": st.integers(2, 6),
        "http_max_streams": st.integers(1, 5),
        "http_body_bytes_in_flight": st.integers(1024, 12_000),
        "max_pending_sockets": st.integers(1, 4),
    }
)


@settings(max_examples=examples(200), deadline=None)
@given(SETTINGS, OPS)
def test_no_limit_is_passed_and_everything_given_back_frees_all(limits_settings, ops):
    asyncio.run(_run(limits_settings, ops))


async def _run(limits_settings: dict, ops: list) -> None:
    config = ServerConfig(**limits_settings)
    limits = HttpLimits(config)
    loop = asyncio.get_running_loop()
    admitted: list[str] = []
    bodies: list[int] = []
    streams: list = []
    waits: list[asyncio.Task] = []
    keys = [f"principal-{i}" for i in range(4)]

    def refused_well(refusal: Refusal, *settings_named: str) -> None:
        assert refusal.status in (429, 503) and refusal.headers["Retry-After"].isdigit()
        assert any(name in refusal.message for name in settings_named), refusal.message
        assert refusal.status == 429 or refusal.type == "server_error"

    for op, which, n in ops:
        if op == "admit":
            refusal = limits.admit(keys[which])
            if refusal is None:
                admitted.append(keys[which])
            else:
                refused_well(refusal, "server.httpMaxPerToken", "server.maxConnections")
        elif op == "done" and admitted:
            limits.done(admitted.pop(which % len(admitted)))
        elif op == "body":
            refusal = limits.take_body(n)
            if refusal is None:
                bodies.append(n)
            else:
                refused_well(refusal, "server.httpBodyBytesInFlight")
        elif op == "give" and bodies:
            limits.give_body(bodies.pop(which % len(bodies)))
        elif op == "open":
            opened = limits.open_stream("/mcp", loop.create_future())
            if isinstance(opened, Refusal):
                refused_well(opened, "server.httpMaxStreams")
            else:
                streams.append(opened)
        elif op == "close" and streams:
            limits.close_stream(streams.pop(which % len(streams)))
        elif op == "wrong":
            waits.append(asyncio.create_task(limits.unauthenticated("127.0.0.1", asyncio.sleep(30, "slow"))))
            await asyncio.sleep(0)
        elif op == "cut" and waits:
            waits.pop(which % len(waits)).cancel()
            await asyncio.sleep(0)
        # the invariants, after every step
        assert limits.inflight == len(admitted) <= config.max_connections
        assert all(limits.per_token[k] <= config.http_max_per_token for k in keys)
        assert limits.body_bytes == sum(bodies) <= config.http_body_bytes_in_flight
        assert len(limits.streams) == len(streams) <= config.http_max_streams
        assert len(limits.waiting) <= config.max_pending_sockets
    await asyncio.sleep(0)
    for wait in waits:  # the ones cut short to make room are answered; the rest still wait
        if wait.done():
            assert wait.result() == (None, True)
        else:
            wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    for key in admitted:
        limits.done(key)
    for n in bodies:
        limits.give_body(n)
    for stream in streams:
        limits.close_stream(stream)
    assert limits.inflight == limits.body_bytes == len(limits.streams) == len(limits.waiting) == 0
    assert not limits.per_token
