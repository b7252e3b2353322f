"""Every door honours the principal, on both engines: two principals bound to two agents try every
registered method, every MCP tool and /v1 across the boundary, and find nothing of the other agent —
nothing read, written, listed or counted; an agent they may not reach answers exactly as an agent that
does not exist; a `read` principal writes through no door; events of the other's sessions never reach
them; the audit log names who did what."""

from __future__ import annotations

import asyncio
import base64
import sys

import httpx2 as httpx
import orjson
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.calls import Door
from gateway.principals import ALSO, METHOD_SCOPES
from gateway.registry import registry
from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, RpcError, connect_client

SECRET = "zebracrossing 4321"  # bob's bank PIN: must never reach alice
KEY = "bank.pin"

# Params that pass each method's schema (the matrix iterates the registry: a new method needs a line here).
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
SAMPLES: dict[str, dict] = {
    "admin.export": {"path": "/nonexistent-dir/never-written.zip"},
    "admin.import": {"source": "jsonl", "path": "/nonexistent-dir/never-read.jsonl"},
    "admin.upload": {"offset": 0, "data": ""},
    "audit.list": {},
    "chat.abort": {"sessionKey": "bob-talk"},
    "chat.confirm": {"runId": "r1", "callId": "c1", "allow": True},
    "chat.models": {},
    "chat.regenerate": {"sessionKey": "bob-talk", "messageId": "m1"},
    "chat.send": {"sessionKey": "bob-talk", "message": "what is my PIN?"},
    "memory.delete": {"key": KEY},
    "memory.files": {},
    "memory.get": {"path": "sessions/bob-talk.jsonl"},
    "memory.getImage": {"key": KEY},
    "memory.history": {"key": KEY},
    "memory.learn": {"category": "preferences", "text": "likes tea"},
    "memory.list": {},
    "memory.profile": {},
    "memory.purge": {"key": KEY},
    "memory.recall": {"query": "PIN"},
    "memory.restore": {"key": KEY},
    "memory.search": {"query": "zebracrossing PIN", "asOf": "2030-01-01"},
    "memory.searchImage": {"image": PNG},
    "memory.set": {"key": KEY, "value": "overwritten"},
    "memory.setImage": {"key": "img", "image": PNG},
    "memory.similar": {"key": KEY},
    "memory.status": {},
    "memory.sync": {},
    "memory.trash": {},
    "memory.write": {"path": "memory/x.md", "content": "x"},
    "principals.create": {"name": "sneaky", "agents": "*", "scopes": "admin"},
    "principals.list": {},
    "principals.revoke": {"name": "bob"},
    "sessions.compact": {"sessionKey": "bob-talk"},
    "sessions.create": {"sessionKey": "bob-talk"},
    "sessions.delete": {"sessionKey": "bob-talk"},
    "sessions.get": {"sessionKey": "bob-talk"},
    "sessions.history": {"sessionKey": "bob-talk"},
    "sessions.list": {},
    "sessions.prune": {},
    "sessions.purge": {"sessionKey": "bob-talk"},
    "sessions.restore": {"sessionKey": "bob-talk"},
    "sessions.subscribe": {"sessionKey": "bob-talk"},
    "sessions.trash": {},
    "sessions.unsubscribe": {"sessionKey": "bob-talk"},
    "sessions.update": {"sessionKey": "bob-talk", "label": "mine now"},
    "system.health": {},
    "system.methods": {},
}


@pytest.fixture(params=["files", "postgres"])
def engine(request):
    if request.param == "files":
        return {}
    return {"storage.url": request.getfixturevalue("postgres_url")}


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def _sample(method: str) -> dict:
    return dict(SAMPLES[method])


async def _household(start_gateway, engine, api):
    """A gateway with agents alice and bob; bob's bank PIN in his memory and his transcript; principals
    alice and bob (read, write, chat) bound to their agents, and `reader` (read) bound to bob's."""
    gw = await start_gateway(
        memory=True,
        **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model", **engine},
    )
    owner = await gw.client()
    for agent in ("alice", "bob"):
        await owner.call("sessions.create", {"agentId": agent, "sessionKey": f"{agent}-talk", "label": f"{agent}'s"})
    await owner.call("memory.set", {"agentId": "bob", "key": KEY, "value": f"My bank PIN is {SECRET}."})
    await owner.call("memory.set", {"agentId": "alice", "key": "tea", "value": "Alice likes green tea."})
    sent = await owner.call("chat.send", {"agentId": "bob", "sessionKey": "bob-talk", "message": f"PIN {SECRET}"})
    await owner.run_to_end(sent["runId"])
    tokens = {}
    for name, agents, scopes in (("alice", "alice", "read,write,chat"), ("bob", "bob", "read,write,chat")):
        made = await owner.call("principals.create", {"name": name, "agents": agents, "scopes": scopes})
        tokens[name] = made["token"]
    made = await owner.call("principals.create", {"name": "reader", "agents": "bob", "scopes": "read"})
    tokens["reader"] = made["token"]
    await owner.call("memory.sync", {"agentId": "bob"})
    await owner.call("memory.sync", {"agentId": "alice"})
    return gw, owner, tokens


async def _error(c, method: str, params: dict) -> dict:
    msg = await c.request(method, params)
    assert "error" in msg, (method, params, msg)
    return msg["error"]


def _mcp(gw, token: str) -> McpClient:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return McpClient(streamable_http_client(gw.http_url + "/mcp", http_client=http))


def _text(result) -> str:
    return "\n".join(c.text for c in result.content)


async def test_two_principals_two_agents_nothing_crosses_on_any_door(start_gateway, engine, api):
    gw, owner, tokens = await _household(start_gateway, engine, api)
    alice = await connect_client(gw.url, tokens["alice"], "header")
    bob_before = await owner.call("memory.list", {"agentId": "bob"})
    bob_sessions = await owner.call("sessions.list", {"agentId": "bob"})

    # 1. Every registered method across the boundary (agentId: bob) answers as for an agent that does not
    #    exist, or — past alice's scopes — the one scope error; never bob's data.
    offered = sorted(n for n, s in registry.methods.items() if s.offered_at(Door.WEBSOCKET))
    assert set(offered) <= set(SAMPLES), f"a method the matrix does not try: {set(offered) - set(SAMPLES)}"
    for method in offered:
        spec = registry.methods[method]
        needs = METHOD_SCOPES[method]
        if needs == "admin":
            err = await _error(
                alice,
                method,
                {**_sample(method), "agentId": "bob"} if "agentId" in spec.params.fields else _sample(method),
            )
            assert err["code"] == -32003 and err["data"]["scope"] == "admin" and "'admin'" in err["message"], (
                method,
                err,
            )
            continue
        if "agentId" not in spec.params.fields:
            continue  # system.health, system.methods: checked below
        across = await _error(alice, method, {**_sample(method), "agentId": "bob"})
        nowhere = await _error(alice, method, {**_sample(method), "agentId": "nobody"})
        assert across["code"] == -32004 and across["message"] == "agent not found: bob", (method, across)
        assert orjson.dumps(across).replace(b"bob", b"X") == orjson.dumps(nowhere).replace(b"nobody", b"X"), method

    # 2. Without agentId: alice's own agent, where bob's keys and sessions do not exist.
    assert (await alice.call("sessions.list"))["total"] == 1
    assert [s["sessionKey"] for s in (await alice.call("sessions.list"))["sessions"]] == ["alice-talk"]
    for method in ("sessions.get", "sessions.history", "sessions.subscribe"):
        assert (await _error(alice, method, {"sessionKey": "bob-talk"}))["code"] == -32004, method
    assert (await _error(alice, "memory.get", {"path": "sessions/bob-talk.jsonl"}))["code"] in (-32004, -32602)
    assert (await _error(alice, "memory.get", {"key": KEY}))["code"] == -32004
    found = await alice.call("memory.search", {"query": "zebracrossing bank PIN"})
    assert SECRET not in orjson.dumps(found).decode()
    assert all("bob" not in r["path"] for r in found["results"])
    listed = await alice.call("memory.list")
    assert KEY not in orjson.dumps(listed).decode() and "tea" in orjson.dumps(listed).decode()
    status = await alice.call("memory.status")
    bob_status = await owner.call("memory.status", {"agentId": "bob"})
    assert status["sources"]["sessions"]["files"] == 1 and bob_status["sources"]["sessions"]["files"] == 1
    assert status["files"] == (await owner.call("memory.status", {"agentId": "alice"}))["files"]
    health = await alice.call("system.health")
    assert health["memory"]["files"] == (await owner.call("memory.status", {"agentId": "alice"}))["files"]
    recalled = await alice.call("memory.recall", {"query": "bank PIN zebracrossing"})
    assert SECRET not in orjson.dumps(recalled).decode()

    # Alice's writes stay in her agent: bob's memory and sessions are as they were.
    await alice.call("memory.set", {"key": KEY, "value": "alice's own pin note"})
    await _error(alice, "memory.delete", {"key": "never-was"})
    await alice.call("sessions.create", {"sessionKey": "bob-talk"})  # alice's own session of that name
    assert await owner.call("memory.list", {"agentId": "bob"}) == bob_before
    assert (await owner.call("sessions.list", {"agentId": "bob"}))["total"] == bob_sessions["total"]
    assert SECRET in (await owner.call("memory.get", {"agentId": "bob", "key": KEY}))["value"]
    await alice.call("memory.write", {"path": "memory/alice.md", "content": "Alice's note."})
    note = (await alice.call("memory.history", {"path": "memory/alice.md"}))["versions"]
    assert [(v["principal"], v["by"]) for v in note] == [("alice", "websocket")]
    versions = (await alice.call("memory.history", {"key": KEY}))["versions"]
    assert [(v["principal"], v["by"]) for v in versions] == [("alice", "websocket")]
    assert [
        v["principal"] for v in (await owner.call("memory.history", {"agentId": "bob", "key": KEY}))["versions"]
    ] == ["owner"]

    # 3. Events of bob's sessions never reach alice: bob chats while alice listens on her own session.
    bob = await connect_client(gw.url, tokens["bob"], "frame")
    await alice.call("sessions.subscribe", {"sessionKey": "bob-talk"})  # her own "bob-talk"
    sent = await bob.call("chat.send", {"sessionKey": "bob-talk", "message": f"again: {SECRET}"})
    await bob.run_to_end(sent["runId"])
    # Then a run of her own on that session: any event of bob's routed to her was queued before its end.
    mine = await alice.call("chat.send", {"sessionKey": "bob-talk", "message": "hello"})
    while True:
        ev = await asyncio.wait_for(alice.events.get(), 60)
        assert ev["params"].get("runId") != sent["runId"] and SECRET not in orjson.dumps(ev).decode(), ev
        if ev["params"].get("runId") == mine["runId"] and ev["method"] in ("chat.final", "chat.error"):
            break

    # 4. /v1: alice's request recalls only her memory; the prompt the upstream got holds nothing of bob's.
    async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
        before = len(api.requests)
        r = await http.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {tokens['alice']}", "X-Jarvis-Session": "bob-talk"},
            json={
                "model": "fake-model",
                "messages": [{"role": "user", "content": "what is my bank PIN zebracrossing?"}],
                "user": "bob",
            },
        )
        assert r.status_code == 200, r.text
        upstream = [q["body"] for q in api.requests[before:] if q["path"].endswith("/chat/completions")]
        assert upstream and SECRET not in orjson.dumps(upstream).decode()
        assert "bob" not in r.headers.get("x-jarvis-memory", "")
    assert (await owner.call("sessions.get", {"agentId": "bob", "sessionKey": "bob-talk"}))["messageCount"] == 4

    # 5. MCP: every tool across the boundary, and in alice's own agent, finds nothing of bob's.
    async with _mcp(gw, tokens["alice"]) as mcp:
        for name, args in (
            ("memory_search", {"query": "zebracrossing bank PIN"}),
            ("memory_recall", {"query": "bank PIN"}),
            ("memory_profile", {}),
            ("memory_list", {}),
            ("memory_get", {"key": KEY}),
        ):
            out = await mcp.call_tool(name, args)
            assert SECRET not in _text(out), name
            across = await mcp.call_tool(name, {**args, "agentId": "bob"})
            assert across.is_error and "agent not found: bob" in _text(across), (name, _text(across))
        out = await mcp.call_tool("memory_set", {"key": "x", "value": "y", "agentId": "bob"})
        assert out.is_error and "agent not found: bob" in _text(out)
        out = await mcp.call_tool("memory_delete", {"key": KEY, "agentId": "bob"})
        assert out.is_error and "agent not found: bob" in _text(out)
    assert SECRET in (await owner.call("memory.get", {"agentId": "bob", "key": KEY}))["value"]

    # 6. The audit log names who wrote what, through which door, and never a value.
    audit = (await owner.call("audit.list", {"principal": "alice"}))["entries"]
    sets = [e for e in audit if e["method"] == "memory.set"]
    assert any(e["target"] == KEY and e["agent"] == "alice" and e["door"] == "websocket" and e["ok"] for e in sets)
    assert any(e["method"] == "memory.set" and e["agent"] == "bob" and not e["ok"] for e in audit)  # refused
    assert any(e["door"] == "mcp" for e in audit)
    every = await owner.call("audit.list", {})
    assert "alice's own pin note" not in orjson.dumps(every).decode() and SECRET not in orjson.dumps(every).decode()
    assert all(tokens[n] not in orjson.dumps(every).decode() for n in tokens)
    assert any(e["method"] == "principals.create" and e["target"] == "reader" for e in every["entries"])
    await alice.close()
    await bob.close()
    await owner.close()


async def test_a_read_principal_writes_through_no_door(start_gateway, engine, api):
    gw, owner, tokens = await _household(start_gateway, engine, api)
    reader = await connect_client(gw.url, tokens["reader"], "frame")
    listed = {m["name"] for m in (await reader.call("system.methods"))["methods"]}
    assert listed == {
        n for n, s in METHOD_SCOPES.items() if s in ("", "read") and registry.methods[n].offered_at(Door.WEBSOCKET)
    }
    for method, needs in sorted(METHOD_SCOPES.items()):
        if needs in ("", "read") or not registry.methods[method].offered_at(Door.WEBSOCKET):
            continue
        err = await _error(reader, method, _sample(method))
        assert err["code"] == -32003 and err["data"] == {"scope": needs, "method": method}, (method, err)
        also = f" or the {ALSO[method]!r}" if method in ALSO else ""  # sessions.create: write or chat
        assert f"needs the {needs!r}{also} scope" in err["message"]
    assert (await reader.call("memory.get", {"key": KEY}))["value"].endswith(f"{SECRET}.")  # bob's, as granted

    async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
        auth = {"Authorization": f"Bearer {tokens['reader']}"}
        r = await http.post(
            "/v1/chat/completions", headers=auth, json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert r.status_code == 403, r.text
        assert r.json()["error"]["type"] == "permission_error" and "'chat'" in r.json()["error"]["message"]
        assert (await http.get("/v1/models", headers=auth)).status_code == 200

    read_only = ["memory_search", "memory_get", "memory_list", "memory_recall", "memory_profile"]
    async with _mcp(gw, tokens["reader"]) as mcp:
        assert [t.name for t in (await mcp.list_tools()).tools] == read_only
        for name in ("memory_set", "memory_delete"):
            out = await mcp.call_tool(name, {"key": KEY, "value": "x"} if name == "memory_set" else {"key": KEY})
            assert out.is_error and "needs the 'write' scope" in _text(out), _text(out)
    stdio = McpClient(
        StdioServerParameters(
            command=sys.executable,
            cwd=str(ROOT),
            args=["-m", "gateway.cli", "mcp", "--url", gw.url, "--token", tokens["reader"]],
            env={"PATH": "/usr/bin:/bin", "HOME": str(gw.config.state_dir)},
        )
    )
    async with stdio as mcp:
        assert [t.name for t in (await mcp.list_tools()).tools] == read_only
        out = await mcp.call_tool("memory_delete", {"key": KEY})
        assert out.is_error and "needs the 'write' scope" in _text(out)
    assert SECRET in (await owner.call("memory.get", {"agentId": "bob", "key": KEY}))["value"]
    await reader.close()
    await owner.close()


async def test_the_models_tool_calls_run_as_the_principal_of_the_run(start_gateway, api):
    """A chat-only principal cannot write memory by asking the model to: its run's tool calls carry it."""
    gw = await start_gateway(
        memory=True, **{"chat.baseUrl": api.base_url, "chat.model": "fake-model", "memory.recall.enabled": False}
    )
    owner = await gw.client()
    made = await owner.call("principals.create", {"name": "talker", "agents": "main", "scopes": "read,chat"})
    talker = await connect_client(gw.url, made["token"], "frame")
    key = (await owner.call("sessions.create"))["sessionKey"]
    api.script(("tools", [("memory_set", {"key": "planted", "value": "by the model", "category": "facts"})]))
    sent = await talker.call("chat.send", {"sessionKey": key, "message": "remember: planted"})
    events = await talker.run_to_end(sent["runId"], timeout=30)
    tool = [e["params"] for e in events if e["method"] == "chat.tool" and e["params"]["status"] != "running"]
    assert tool and tool[0]["status"] == "error", tool
    assert (await _error(owner, "memory.get", {"key": "planted"}))["code"] == -32004
    audit = (await owner.call("audit.list", {"principal": "talker"}))["entries"]
    assert [(e["method"], e["door"], e["ok"]) for e in audit] == [("memory.set", "tool", False)]
    await talker.close()
    await owner.close()


async def test_the_owner_token_sees_everything_as_before(gateway, client):
    names = {m["name"] for m in (await client.call("system.methods"))["methods"]}
    assert names == {n for n, s in registry.methods.items() if s.offered_at(Door.WEBSOCKET)}
    try:
        await client.call("sessions.list", {"agentId": "nobody"})
    except RpcError as exc:
        assert exc.code == -32004
    else:
        raise AssertionError("an agent that does not exist")


async def test_a_proxy_front_end_keeps_each_users_memory_apart(start_gateway, api):
    """Open WebUI-style: one front-end token (scope proxy) for a household; each `user` (or forwarded-user
    header) gets an agent of its own, made on first use, so alice's PIN never reaches bob's answer."""
    gw = await start_gateway(
        memory=True, **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model"}
    )
    owner = await gw.client()
    webui = (await owner.call("principals.create", {"name": "webui", "agents": "main", "scopes": "chat,proxy"}))[
        "token"
    ]
    plain = (await owner.call("principals.create", {"name": "app", "agents": "main", "scopes": "chat"}))["token"]

    async def ask(http, token: str, text: str, user: str | None = None, header: str | None = None) -> list[dict]:
        before = len(api.requests)
        body: dict = {"model": "fake-model", "messages": [{"role": "user", "content": text}]}
        if user is not None:
            body["user"] = user
        headers = {"Authorization": f"Bearer {token}"}
        if header is not None:
            headers["X-OpenWebUI-User-Id"] = header
        r = await http.post("/v1/chat/completions", headers=headers, json=body)
        assert r.status_code == 200, r.text
        return [q["body"] for q in api.requests[before:] if q["path"].endswith("/chat/completions")]

    async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
        await ask(http, webui, f"Remember: my bank PIN is {SECRET}.", user="alice")
        agents = {"user.alice"}
        assert (await owner.call("sessions.list", {"agentId": "user.alice"}))["total"] == 1

        async def recalled_for_alice() -> bool:
            sent = await ask(http, webui, "what is my bank PIN zebracrossing?", user="alice")
            return SECRET in orjson.dumps(sent).decode()

        async with asyncio.timeout(15):  # alice's turn is indexed after its reply
            while not await recalled_for_alice():
                await asyncio.sleep(0.2)
        sent = await ask(http, webui, "what is my bank PIN zebracrossing?", user="bob")
        assert SECRET not in orjson.dumps(sent).decode(), "bob's answer recalled alice's memory"
        sent = await ask(http, webui, "what is my bank PIN zebracrossing?", header="carol")  # forwarded header
        assert SECRET not in orjson.dumps(sent).decode()
        agents |= {"user.bob", "user.carol"}
        for agent in agents:
            assert (await owner.call("sessions.list", {"agentId": agent}))["total"] >= 1, agent
        assert (await owner.call("sessions.list"))["total"] == 0, "nothing captured into the token's own agent"
        # Without the proxy scope, `user` picks a session of the token's own agent, never another agent.
        await ask(http, plain, "hello", user="alice")
        listed = (await owner.call("sessions.list"))["sessions"]
        assert [s["sessionKey"] for s in listed] == ["openai:user:alice"]
    await owner.close()


async def test_a_principals_own_agent_exists_from_its_creation(gateway, client):
    """A read,chat token bound to a new agent has that agent at once (it may not create sessions to make
    it): its lists are empty, not "agent not found"; past agents.max the token is not made. The new agent
    is made only when asked for (createAgents): a typo of an agent's name is an error, not an empty agent."""
    err = await _error(client, "principals.create", {"name": "kid", "agents": "kid", "scopes": "read,chat"})
    assert err["code"] == -32004 and "createAgents" in err["message"] and err["data"]["agentId"] == "kid"
    assert "kid" not in [p["name"] for p in (await client.call("principals.list"))["principals"]]
    made = await client.call(
        "principals.create", {"name": "kid", "agents": "kid", "scopes": "read,chat", "createAgents": True}
    )
    kid = await connect_client(gateway.url, made["token"], "frame")
    assert (await kid.call("sessions.list")) == {"sessions": [], "total": 0}
    await kid.close()
    err = await _error(client, "principals.create", {"name": "x", "agents": "kid,bad name", "scopes": "read"})
    assert err["code"] == -32602 and err["data"]["field"] == "params.agents"
    assert "x" not in [p["name"] for p in (await client.call("principals.list"))["principals"]]
