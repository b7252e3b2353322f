"""The method registry: async handlers and plain functions (handlers that never wait) alike."""

import pytest

from gateway.errors import Invalid
from gateway.registry import CallContext, Registry
from gateway.schema import Int, Obj


async def test_plain_function_handlers_are_called_now_and_through_dispatch():
    reg = Registry()

    @reg.method("t.now", Obj(n=Int(0, 9)))
    def now(ctx, p):
        return {"n": p["n"]}

    @reg.method("t.later", Obj(n=Int(0, 9)))
    async def later(ctx, p):
        return {"n": p["n"]}

    assert not reg.methods["t.now"].waits and reg.methods["t.later"].waits
    ctx = CallContext(services=None)  # type: ignore[arg-type]
    assert reg.call_now(ctx, reg.methods["t.now"], {"n": 3}) == {"n": 3}
    assert await reg.dispatch(ctx, "t.now", {"n": 4}) == {"n": 4}
    assert await reg.dispatch(ctx, "t.later", {"n": 5}) == {"n": 5}
    with pytest.raises(Invalid) as exc:
        reg.call_now(ctx, reg.methods["t.now"], {"n": 10})
    assert exc.value.data["field"] == "params.n"
    with pytest.raises(Invalid) as exc:
        await reg.dispatch(ctx, "t.now", {"n": 10})
    assert exc.value.data["field"] == "params.n"
