"""The docs' key recipes, followed as a new user types them (issue 43 items 3, 8, 9, 10): the README's phone
key holds a conversation in its agent; docs/openai-endpoint.md's front-end key (`--scope chat,proxy`)
lists the models, keeps each user in an agent of their own — literal and digested names in name spaces
that never meet — sends requests that name no user to an anonymous agent, never to a person's memory,
and leaves audit entries naming the front-end's principal and the user's agent; `token create --agent
nosuch` makes no agent unless asked."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys

import httpx2 as httpx
import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.principals import agent_for_user, anonymous_agent
from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, connect_client

SECRET = "zebracrossing 4321"


async def jarvis(gw, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """A `jarvis` command as the docs give it, against the running test gateway (its state dir and port)."""
    env = {**os.environ, "JARVIS_STATE_DIR": str(gw.config.state_dir)}
    env.pop("JARVIS_GATEWAY_TOKEN", None)
    if token is not None:
        env["JARVIS_GATEWAY_TOKEN"] = token
    argv = [sys.executable, "-m", "gateway.cli", *args, "--port", str(gw.config.server.port)]
    return await asyncio.to_thread(subprocess.run, argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


async def test_the_readme_phone_key_holds_a_conversation_in_its_agent(start_gateway):
    """README: `jarvis token create phone --agent main --scope read,chat --expires 90d`. Before, its first
    `jarvis chat --new` (and the web page's Send) answered "sessions.create needs the 'write' scope"."""
    gw = await start_gateway()
    made = await jarvis(gw, "token", "create", "phone", "--agent", "main", "--scope", "read,chat", "--expires", "90d")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    r = await jarvis(gw, "chat", "--new", "hello from my phone", token=token)
    assert r.returncode == 0, r.stderr
    phone = await connect_client(gw.url, token, "frame")
    listed = (await phone.call("sessions.list"))["sessions"]
    assert len(listed) == 1 and listed[0]["messageCount"] >= 2
    key = listed[0]["sessionKey"]
    # What chat does not open stays closed: renaming, deleting, writing memory.
    for method, params in (
        ("sessions.update", {"sessionKey": key, "label": "x"}),
        ("sessions.delete", {"sessionKey": key}),
        ("memory.set", {"key": "k", "value": "v"}),
    ):
        err = (await phone.request(method, params))["error"]
        assert err["code"] == -32003 and "'write'" in err["message"], (method, err)
    reader = await jarvis(gw, "token", "create", "ro", "--agent", "main", "--scope", "read")
    ro = await connect_client(gw.url, reader.stdout.strip(), "frame")
    err = (await ro.request("sessions.create", {}))["error"]
    assert err["code"] == -32003 and err["message"] == (
        "sessions.create needs the 'write' or the 'chat' scope, which principal 'ro' does not have"
    )
    await phone.close()
    await ro.close()


async def test_the_front_end_recipe_of_the_openai_endpoint_doc(start_gateway):
    """docs/openai-endpoint.md: `jarvis token create webui --agent main --scope chat,proxy`. Before, GET
    /v1/models was 403; a request naming no user read and wrote the owner's own agent (main); /v1 traffic
    left no audit entry."""
    with FakeOpenAI() as api:
        gw = await start_gateway(
            memory=True, **{"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model"}
        )
        owner = await gw.client()
        await owner.call("memory.set", {"key": "bank.pin", "value": f"The owner's bank PIN is {SECRET}."})
        await owner.call("memory.sync", {})
        made = await jarvis(gw, "token", "create", "webui", "--agent", "main", "--scope", "chat,proxy")
        assert made.returncode == 0, made.stderr
        webui = {"Authorization": f"Bearer {made.stdout.strip()}"}

        async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
            models = await http.get("/v1/models", headers=webui)
            assert models.status_code == 200 and models.json()["data"], models.text

            async def ask(text: str, user: str | None = None) -> list[dict]:
                before = len(api.requests)
                body: dict = {"model": "fake-model", "messages": [{"role": "user", "content": text}]}
                if user is not None:
                    body["user"] = user
                r = await http.post("/v1/chat/completions", headers=webui, json=body)
                assert r.status_code == 200, r.text
                return [q["body"] for q in api.requests[before:] if q["path"].endswith("/chat/completions")]

            # Open WebUI's title task names no user: it never reaches the owner's memory (main).
            sent = await ask("Create a title for: what is my bank PIN zebracrossing?")
            assert SECRET not in orjson.dumps(sent).decode(), "an anonymous request recalled the owner's memory"
            assert (await owner.call("sessions.list"))["total"] == 0, "nothing written into main"
            assert (await owner.call("sessions.list", {"agentId": "anon.webui"}))["total"] == 1
            # Users: a literal name and a name that digests; the literal digest of one is not the other.
            weird = "Zoë Smith"
            digest = hashlib.sha256(weird.encode()).hexdigest()[:24]
            await ask(f"Remember: my code is {SECRET}.", user=weird)
            sent = await ask("what is my code zebracrossing?", user=digest)
            assert SECRET not in orjson.dumps(sent).decode(), "a literal digest reached the digested user's agent"
            await ask("hello", user="alice")
        agents = {"anon.webui", f"user_{digest}", "user.alice"}
        for agent in agents:
            assert (await owner.call("sessions.list", {"agentId": agent}))["total"] >= 1, agent
        assert (
            await owner.call("sessions.list", {"agentId": f"user_{hashlib.sha256(digest.encode()).hexdigest()[:24]}"})
        )["total"] == 1, "the hex-shaped literal name is digested too"
        # The audit names the front-end's principal and the user's agent, as the doc says.
        r = await jarvis(gw, "audit", "--json", "--principal", "webui")
        entries = orjson.loads(r.stdout)["entries"]
        relayed = [(e["method"], e["agent"], e["door"], e["ok"]) for e in entries if e["method"] == "chat.relay"]
        assert ("chat.relay", "anon.webui", "openai", True) in relayed
        assert ("chat.relay", f"user_{digest}", "openai", True) in relayed
        assert ("chat.relay", "user.alice", "openai", True) in relayed
        assert all(e.get("target") for e in entries if e["method"] == "chat.relay"), "each names its session"
        await owner.close()


async def test_token_create_for_an_agent_that_does_not_exist_asks_for_a_flag(start_gateway):
    gw = await start_gateway()
    r = await jarvis(gw, "token", "create", "kid", "--agent", "nosuch", "--scope", "read,chat")
    assert r.returncode == 1 and "agent not found: nosuch" in r.stderr and "--new-agent" in r.stderr, r.stderr
    owner = await gw.client()
    err = (await owner.request("sessions.list", {"agentId": "nosuch"}))["error"]
    assert err["code"] == -32004, "no agent was made"
    r = await jarvis(gw, "token", "create", "kid", "--agent", "nosuch", "--scope", "read,chat", "--new-agent")
    assert r.returncode == 0, r.stderr
    assert (await owner.call("sessions.list", {"agentId": "nosuch"}))["total"] == 0
    await owner.close()


NAMES = st.one_of(
    st.text(min_size=1, max_size=80),
    st.text(alphabet="abcdefABCDEF0123456789", min_size=20, max_size=28),
    st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True),
)


@given(a=NAMES, b=NAMES)
def test_literal_and_digested_user_names_never_meet(a, b):
    """Two users share an agent only when they are one name: no literal name takes a digest's agent."""
    if agent_for_user(a) == agent_for_user(b):
        assert a == b
    for name in (a, b):
        agent = agent_for_user(name)
        assert agent.startswith(("user.", "user_")) and len(agent) <= 64
        assert agent.startswith("user.") == (agent == "user." + name)
        assert not anonymous_agent(name).startswith("user")
