"""A front-end's key (scope `proxy`, docs/openai-endpoint.md's `--scope chat,proxy`) acts for its users
on every door, not on /v1 only: with no user named — which is all the WebSocket and MCP can say — it acts
in its anonymous agent, never in the agent it was made on. Before, the same key over the WebSocket
(`jarvis chat --token`) chatted in the owner's agent and was answered with the owner's memory recalled,
the very thing /v1 refuses it (a review of the dispatcher's narrowing, issue 44)."""

from __future__ import annotations

from tests.helpers import RpcError, connect_client

SECRET = "zebracrossing 4321"


async def test_a_proxy_key_on_the_websocket_never_reaches_the_agent_it_was_made_on(start_gateway):
    gw = await start_gateway(memory=True)
    owner = await gw.client()
    await owner.call("memory.set", {"key": "bank.pin", "value": f"The owner's bank PIN is {SECRET}."})
    await owner.call("memory.sync", {})
    made = await owner.call("principals.create", {"name": "webui", "agents": "main", "scopes": "chat,read,proxy"})
    webui = await connect_client(gw.url, made["token"], "frame")

    found = None
    try:
        found = await webui.call("memory.search", {"query": "zebracrossing bank PIN"})
    except RpcError as exc:
        assert exc.code == -32004, exc  # the anonymous agent, not made yet: as an agent that does not exist
    assert SECRET not in str(found), "a proxy key read the owner's memory over the WebSocket"
    for method, params in (
        ("sessions.create", {"sessionKey": "fe-talk"}),
        ("chat.send", {"sessionKey": "main-talk", "message": "PIN?"}),
    ):
        try:
            await webui.call(method, params)
        except RpcError as exc:
            assert exc.code == -32004, exc
    assert (await owner.call("sessions.list"))["total"] == 0, "a proxy key wrote into the owner's agent"
    await webui.close()
    await owner.close()
