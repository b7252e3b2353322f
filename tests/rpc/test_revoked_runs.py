"""A chat run ends when its principal is revoked — on the gateway running it, whichever gateway the revoke
was made on — and never acts as it again: the model's tool call the upstream sends after the revoke is not
run (no memory written, no audit row of it done). Who may answer a run's confirmation as its starter is
that principal by identity, never a new principal given its name."""

from __future__ import annotations

import threading

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import connect_client, wait_for

PLANT = ("tools", [("memory_set", {"key": "planted", "value": "written after revoke", "category": "facts"})])


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def _common(api) -> dict:
    return {
        "memory": True,
        "chat.baseUrl": api.base_url,
        "chat.model": "fake-model",
        "chat.maxRetries": 0,
        "memory.recall.enabled": False,
        "memory.embeddings.provider": "none",
    }


async def _revoked_run_ends(api, run_on, revoke_on) -> None:
    """`run_on` runs phone's chat run, held at the upstream; phone is revoked through `revoke_on`; the run
    ends aborted (reason "revoked") before the upstream answers with a memory_set, which never runs."""
    owner_run, owner_revoke = await run_on.client(), await revoke_on.client()
    tok = await owner_revoke.call("principals.create", {"name": "phone", "agents": "*", "scopes": "read,write,chat"})

    async def admitted() -> bool:  # the run's gateway has seen the new principal (its poll)
        try:
            c = await connect_client(run_on.url, tok["token"], "frame")
        except AssertionError:
            return False
        await c.close()
        return True

    await wait_for(admitted)
    phone = await connect_client(run_on.url, tok["token"], "frame")
    hold = threading.Event()
    api.script(("wait", hold, 30, PLANT), ("ok",))
    key = (await phone.call("sessions.create"))["sessionKey"]
    await owner_run.call("sessions.subscribe", {"sessionKey": key})
    run_id = (await phone.call("chat.send", {"sessionKey": key, "message": "hi"}))["runId"]

    async def held() -> bool:
        return api.waiting == 1

    await wait_for(held)
    await owner_revoke.call("principals.revoke", {"name": "phone"})
    events = await owner_run.run_to_end(run_id)
    hold.set()
    assert events[-1]["method"] == "chat.aborted" and events[-1]["params"]["reason"] == "revoked"
    assert [e for e in events if e["method"] == "chat.tool"] == []
    keys = {m["key"] for m in (await owner_revoke.call("memory.list"))["memories"]}
    assert "planted" not in keys
    audit = await owner_revoke.call("audit.list", {"principal": "phone"})
    assert not [e for e in audit["entries"] if e["method"] == "memory.set" and e["ok"]]
    history = await owner_run.call("sessions.history", {"sessionKey": key})
    assert history["messages"][-1].get("abortReason") == "revoked"
    for c in (owner_run, owner_revoke):
        await c.close()


async def test_a_revoked_principals_run_ends_and_its_tool_call_never_runs(start_gateway, api):
    gw = await start_gateway(**_common(api))
    await _revoked_run_ends(api, gw, gw)


async def test_a_revoke_on_another_gateway_ends_the_run_on_the_one_running_it(start_gateway, api, postgres_url):
    common = {**_common(api), "storage.url": postgres_url}
    a = await start_gateway("a", **{"storage.instanceId": "a", **common})
    b = await start_gateway("b", **{"storage.instanceId": "b", **common})
    await _revoked_run_ends(api, a, b)
