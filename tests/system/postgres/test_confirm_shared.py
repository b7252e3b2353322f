"""chat.confirm across gateways (issue 47, part 3): a person watching a session through gateway B is
asked about a destructive tool call of a run on gateway A, and their answer, given on B, reaches the run
(through the database's notifications), with the same rules of who may answer as on one gateway. A run
nobody watches on any gateway still asks no one."""

from __future__ import annotations

import threading

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError, wait_for

FACTS = {"dentist": "The dentist is Dr. Okafor on Elm Street.", "wifi.name": "The home wifi is called Seagull."}


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def _pair(start_gateway, api, postgres_url):
    common = {
        "memory": True,
        "storage.url": postgres_url,
        "chat.baseUrl": api.base_url,
        "chat.model": "fake-model",
        "chat.maxRetries": 0,
        "chat.confirmSeconds": 20,
        "memory.recall.enabled": False,
    }
    a = await start_gateway("a", **{"storage.instanceId": "a", **common})
    b = await start_gateway("b", **{"storage.instanceId": "b", **common})
    ca = await a.client()
    for key, value in FACTS.items():
        await ca.call("memory.set", {"key": key, "value": value, "category": "facts"})
    return a, b, ca


async def _held_run(api, ca, cb, *calls):
    """A run on A that will call `calls`, started while no client of A watches it; B's client subscribed."""
    hold = threading.Event()
    api.script(("wait", hold, 30, ("tools", list(calls))))
    key = (await ca.call("sessions.create"))["sessionKey"]
    if cb is not None:
        await cb.call("sessions.subscribe", {"sessionKey": key})
    sent = await ca.call("chat.send", {"sessionKey": key, "message": "Tidy my memory."})
    await ca.call("sessions.unsubscribe", {"sessionKey": key})  # A's own client no longer watches
    hold.set()
    return key, sent["runId"]


async def _values(c) -> dict[str, str]:
    listed = (await c.call("memory.list"))["memories"]
    return {m["key"]: (await c.call("memory.get", {"key": m["key"]}))["value"] for m in listed}


async def _tool_denials(c, key: str) -> list:
    history = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
    return [m.get("denied", "ran") for m in history if m.get("tool") == "memory_delete"]


async def test_an_answer_given_on_another_gateway_reaches_the_run(start_gateway, api, postgres_url):
    a, b, ca = await _pair(start_gateway, api, postgres_url)
    cb = await b.client()
    key, run_id = await _held_run(
        api, ca, cb, ("memory_delete", {"key": "dentist"}), ("memory_delete", {"key": "wifi.name"})
    )
    answers = []
    while True:
        event = await cb.next_event(timeout=20)
        if event["method"] in ("chat.final", "chat.error", "chat.aborted"):
            break
        if event["method"] == "chat.confirm":
            p = event["params"]
            allow = p["arguments"]["key"] == "dentist"  # yes to the dentist, no to the wifi
            answer = {"runId": p["runId"], "callId": p["callId"], "allow": allow}
            assert await cb.call("chat.confirm", answer) == answer, "accepted on B for A's run"
            answers.append((p["arguments"]["key"], allow))
    assert event["method"] == "chat.final" and event["params"]["runId"] == run_id
    assert answers == [("dentist", True), ("wifi.name", False)]
    assert await _values(cb) == {"wifi.name": FACTS["wifi.name"]}, "exactly the allowed one happened"
    assert await _tool_denials(cb, key) == ["ran", "user"]
    # One attempt, one audit row, with all it needs: B's, naming the run's principal (A performs it unaudited).
    entries = (await cb.call("audit.list", {}))["entries"]
    rows = [(e["door"], e.get("runPrincipal"), e["allow"]) for e in entries if e["method"] == "chat.confirm"]
    assert sorted(rows) == [("websocket", "owner", False), ("websocket", "owner", True)], entries
    with pytest.raises(RpcError) as err:  # answered already: no call of that run waits, on any gateway
        await cb.call("chat.confirm", {"runId": run_id, "callId": answer["callId"], "allow": True})
    assert err.value.code == -32004
    with pytest.raises(RpcError) as err:  # a run that no gateway holds
        await cb.call("chat.confirm", {"runId": "no-such-run", "callId": "call_0", "allow": True})
    assert err.value.code == -32004
    await cb.close()
    await ca.close()


async def test_who_may_answer_is_decided_as_on_one_gateway(start_gateway, api, postgres_url):
    """A principal's answer through B counts when it may answer (the run's own principal, or one that may
    write its agent): A performs it as that principal, found by identity; one without the chat scope is
    refused on B as on one gateway; one with chat only is refused by A, which holds the run, and B answers
    with A's refusal: the code (-32003), message and data that one gateway gives, the answer not taken."""
    a, b, ca = await _pair(start_gateway, api, postgres_url)
    made = {}
    for name, scopes in (("phone", "chat"), ("viewer", "read"), ("writer", "chat,write")):
        made[name] = (await ca.call("principals.create", {"name": name, "agents": "main", "scopes": scopes}))["token"]
    owner_b = await b.client()

    async def knows(token):  # B follows the principals made on A within its poll
        from tests.helpers import connect_client

        try:
            c = await connect_client(b.url, token)
        except Exception:  # noqa: BLE001 - refused until B has polled
            return None
        return c

    phone = await wait_for(lambda: knows(made["phone"]), timeout=10)
    viewer = await wait_for(lambda: knows(made["viewer"]), timeout=10)
    writer = await wait_for(lambda: knows(made["writer"]), timeout=10)
    key, run_id = await _held_run(api, ca, owner_b, ("memory_delete", {"key": "dentist"}))
    asked = (await owner_b.next_event("chat.confirm", timeout=20))["params"]
    answer = {"runId": asked["runId"], "callId": asked["callId"], "allow": True}
    with pytest.raises(RpcError) as err:
        await viewer.call("chat.confirm", answer)
    assert err.value.code == -32003, "no chat scope: refused on B as on one gateway"
    from tests.helpers import connect_client

    phone_a = await connect_client(a.url, made["phone"])
    with pytest.raises(RpcError) as on_holder:  # the same answer on the gateway that holds the run
        await phone_a.call("chat.confirm", answer)
    with pytest.raises(RpcError) as err:
        await phone.call("chat.confirm", answer)
    assert err.value.code == on_holder.value.code == -32003, "chat but not the run's principal nor a writer"
    assert err.value.message == on_holder.value.message and "cannot answer" in err.value.message
    assert err.value.data == on_holder.value.data
    await phone_a.close()
    assert await writer.call("chat.confirm", answer) == answer
    await owner_b.next_event("chat.final", timeout=20)
    assert "dentist" not in await _values(ca)
    for c in (phone, viewer, writer, owner_b, ca):
        await c.close()


async def test_a_run_nobody_watches_on_any_gateway_asks_no_one(start_gateway, api, postgres_url):
    a, b, ca = await _pair(start_gateway, api, postgres_url)
    key, _ = await _held_run(api, ca, None, ("memory_delete", {"key": "dentist"}))

    async def ended():
        history = (await ca.call("sessions.history", {"sessionKey": key}))["messages"]
        return history[-1]["role"] == "assistant" and not history[-1].get("toolCalls")

    await wait_for(ended, timeout=20)  # within cluster.WATCH_S, not chat.confirmSeconds (20 s)
    assert await _tool_denials(ca, key) == ["unanswered"]
    assert await _values(ca) == FACTS
    await ca.close()
