"""One text rule on both engines (issue 36, class 3): a NUL, which PostgreSQL text cannot store, was
-32603 on PostgreSQL only in several fields (a label, a rename, a keyed memory's value, the first
message of a /v1 conversation, which it then bricked: every later turn 500) and stored by the files
engine. Now every string param, and what /v1 keeps of a request, is refused with -32602 / 400 naming
the field, on both engines alike; an upstream's reply holding one is stored faithfully by both.
"""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError

NUL = "a\x00b"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture(params=["files", "postgres"])
async def gw(request, start_gateway):
    extra = {}
    if request.param == "postgres":
        import uuid

        from gateway.storage.postgres import create_database

        server = request.getfixturevalue("postgres_server")
        extra["storage.url"] = await create_database(server, f"t_{uuid.uuid4().hex[:12]}")
    with FakeOpenAI() as api:
        api.reply = "fine"
        gw = await start_gateway(
            memory=True, **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.maxRetries": 0, **extra}
        )
        gw.api = api
        yield gw


CALLS = [
    ("sessions.create", {"label": NUL}, "params.label"),
    ("sessions.create", {"label": "ok", "systemPrompt": NUL}, "params.systemPrompt"),
    ("sessions.update", {"sessionKey": "s1", "label": NUL}, "params.label"),
    ("sessions.update", {"sessionKey": "s1", "model": NUL}, "params.model"),
    ("chat.send", {"sessionKey": "s1", "message": NUL}, "params.message"),
    ("memory.set", {"key": "boat", "value": NUL}, "params.value"),
    ("memory.set", {"key": "a\x00", "value": "v"}, "params.key"),  # its own pattern says no first
    ("memory.set", {"key": "boat", "value": "v", "category": NUL}, "params.category"),  # so do its choices
    ("memory.write", {"path": "memory/n.md", "content": NUL}, "params.content"),
    ("memory.write", {"path": "memory/n\x00.md", "content": "x"}, "params.path"),
    ("memory.learn", {"category": "tools", "text": NUL}, "params.text"),
    ("memory.setImage", {"key": "pic", "image": PNG, "description": NUL}, "params.description"),
    ("memory.search", {"query": NUL}, "params.query"),
    ("memory.recall", {"query": NUL}, "params.query"),
]


async def test_a_nul_in_any_text_param_is_refused_naming_the_field_and_nothing_is_stored(gw):
    c = await gw.client()
    try:
        await c.call("sessions.create", {"sessionKey": "s1", "label": "first"})
        await c.call("memory.set", {"key": "boat", "value": "The boat is teal."})
        before = (await c.call("sessions.list"), await c.call("memory.list"), await c.call("memory.files"))
        for method, params, field in CALLS:
            with pytest.raises(RpcError) as exc:
                await c.call(method, params)
            assert (exc.value.code, exc.value.data.get("field")) == (-32602, field), (method, exc.value)
            assert "NUL" in exc.value.message or field in ("params.key", "params.category", "params.path")
        after = (await c.call("sessions.list"), await c.call("memory.list"), await c.call("memory.files"))
        assert after == before
    finally:
        await c.close()


async def test_a_v1_conversation_with_a_nul_is_refused_at_once_and_one_whose_reply_holds_one_goes_on(gw):
    auth = {"Authorization": f"Bearer {gw.token}"}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=auth, timeout=30) as http:

        async def turn(messages, **extra):
            return await http.post("/v1/chat/completions", json={"model": "fake-model", "messages": messages, **extra})

        first = [{"role": "user", "content": "Plan the garden\x00 please"}]
        for _ in range(2):  # refused each time, the same way: never a 500
            r = await turn(first)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "messages[0].content" and "NUL" in r.json()["error"]["message"]
        r = await turn([{"role": "user", "content": [{"type": "text", "text": "x\x00"}]}])
        assert (r.status_code, r.json()["error"]["param"]) == (400, "messages[0].content")

        # The upstream's reply holds a NUL: kept as it came, on either engine; resent, it bricks nothing.
        gw.api.reply = "tomatoes\x00first"
        history = [{"role": "user", "content": "Plan the garden"}]
        for n in range(3):
            r = await turn(history)
            assert r.status_code == 200, r.text
            history += [r.json()["choices"][0]["message"], {"role": "user", "content": f"and then {n}?"}]
            gw.api.reply = f"step {n}"
        key = r.headers["x-jarvis-session"]
    c = await gw.client()
    try:
        got = await c.call("sessions.history", {"sessionKey": key})
        assert [m["content"] for m in got["messages"]][:2] == ["Plan the garden", "tomatoes\x00first"]
        assert (await c.call("sessions.get", {"sessionKey": key}))["label"] == "Plan the garden"
    finally:
        await c.close()
