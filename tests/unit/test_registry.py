"""The method registry and the one path of a call (dispatcher.py): async handlers and plain functions
(handlers that never wait) alike; methods offered at some doors only; one error value for any failure."""

import contextlib
from types import SimpleNamespace

import pytest

from gateway.calls import Call, Door
from gateway.dispatcher import Dispatcher
from gateway.errors import InternalError, Invalid, MethodNotFound, NotFound, RateLimited, Unavailable
from gateway.registry import Registry
from gateway.schema import Int, Obj


def _services(unreachable=lambda exc: None):
    return SimpleNamespace(
        request_scope=contextlib.nullcontext,
        storage=SimpleNamespace(unreachable=unreachable),
        config=SimpleNamespace(server=SimpleNamespace(max_inflight=2)),
    )


async def test_plain_function_handlers_are_called_now_and_through_perform():
    reg = Registry()

    @reg.method("t.now", Obj(n=Int(0, 9)))
    def now(ctx, p):
        return {"n": p["n"], "door": ctx.door}

    @reg.method("t.later", Obj(n=Int(0, 9)))
    async def later(ctx, p):
        return {"n": p["n"]}

    assert not reg.methods["t.now"].waits and reg.methods["t.later"].waits
    calls = Dispatcher(_services(), reg)  # type: ignore[arg-type]
    call = Call(Door.TOOL, "t.now", {"n": 3})
    assert calls.perform_now(call, calls.find(call)) == {"n": 3, "door": Door.TOOL}
    assert await calls.perform(Call(Door.MCP, "t.now", {"n": 4})) == {"n": 4, "door": Door.MCP}
    assert await calls.perform(Call(Door.CLI, "t.later", {"n": 5})) == {"n": 5}
    with pytest.raises(Invalid) as exc:
        calls.perform_now(Call(Door.CLI, "t.now", {"n": 10}), reg.methods["t.now"])
    assert exc.value.data["field"] == "params.n"
    with pytest.raises(Invalid) as exc:
        await calls.perform(Call(Door.CLI, "t.now", {"n": 10}))
    assert exc.value.data["field"] == "params.n"


async def test_a_method_offered_at_some_doors_does_not_exist_at_the_others():
    reg = Registry()

    @reg.method("t.relay", doors=frozenset({Door.OPENAI}))
    async def relay(ctx, p):
        return "relayed"

    calls = Dispatcher(_services(), reg)  # type: ignore[arg-type]
    assert await calls.perform(Call(Door.OPENAI, "t.relay", {})) == "relayed"
    for door in (Door.WEBSOCKET, Door.MCP, Door.TOOL, Door.CLI):
        with pytest.raises(MethodNotFound, match="method not found: t.relay"):
            await calls.perform(Call(door, "t.relay", {}))
    assert [m["name"] for m in reg.describe(Door.OPENAI)] == ["t.relay"]
    assert reg.describe(Door.WEBSOCKET) == []


async def test_every_failure_comes_out_as_one_error_value():
    """What a handler raises reaches every door as a JarvisError: its own, or the class of what went wrong."""
    reg = Registry()
    raised: list[BaseException] = []

    @reg.method("t.fail")
    async def fail(ctx, p):
        raise raised[-1]

    class DatabaseGone(ConnectionError):
        pass

    def unreachable(exc):
        return (
            Unavailable("the database cannot be reached", retry_after_ms=1000)
            if isinstance(exc, DatabaseGone)
            else None
        )

    calls = Dispatcher(_services(unreachable), reg)  # type: ignore[arg-type]
    cases = [
        (NotFound("no such thing"), NotFound, "no such thing"),
        (Invalid("must be short", field="name"), Invalid, "params.name: must be short"),
        (DatabaseGone("refused"), Unavailable, "the database cannot be reached"),
        (OSError(28, "No space left on device"), type(None), "disk is full"),
        (KeyError("a bug"), InternalError, "internal error"),
    ]
    for exc, cls, message in cases:
        raised.append(exc)
        with pytest.raises(Exception) as got:
            await calls.perform(Call(Door.MCP, "t.fail", {}))
        assert message in got.value.message
        if cls is not type(None):
            assert type(got.value) is cls
    assert got.value.data["errorId"]


def test_a_connections_requests_in_flight_are_bounded_through_the_dispatcher():
    calls = Dispatcher(_services(), Registry())  # type: ignore[arg-type]
    conn = SimpleNamespace(inflight=0)
    calls.reserve(conn)
    with pytest.raises(RateLimited, match=r"max 2") as exc:
        calls.reserve(conn, 2)
    assert exc.value.data == {"retryAfterMs": 50} and conn.inflight == 1
    calls.reserve(conn)
    calls.release(conn, 2)
    assert conn.inflight == 0
