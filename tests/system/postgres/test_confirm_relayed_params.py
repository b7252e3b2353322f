"""A relayed `chat.confirm` (cluster.py's "confirm" question, answered by the gateway that holds the run)
with odd params, as a peer of another version or a damaged message could send them: the holder validates
them first (a -32602 naming the field), authenticates the principal, then looks the run up — and always
answers the asking gateway (never silence until its timeout), naming the run's principal only when the
answer was accepted."""

from __future__ import annotations

import logging
import threading

import pytest
import structlog
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fake_openai import FakeOpenAI
from tests.helpers import examples
from tests.hostile_values import logged_failures

WAIT_S = 20  # a bound for the question only: each answer comes as an event, long before it
FIELDS = ["agentId", "runId", "callId", "allow"]
INT = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what JSON between gateways carries
ODD = st.one_of(
    st.none(),
    st.booleans(),
    INT,
    st.floats(allow_nan=False),
    st.text(st.characters(codec="utf-8"), max_size=80),  # NUL included, no lone surrogate (JSON text)
    st.sampled_from(["main", "a\x00b", "x" * 65, "y" * 5000, "", "../main", "main\n"]),
    st.lists(INT, max_size=3),
    st.dictionaries(st.text(max_size=5), INT, max_size=3),
)


@st.composite
def odd_params(draw) -> object:
    if draw(st.integers(0, 9)) == 0:  # not an object at all
        return draw(ODD)
    params = {name: draw(ODD) for name in FIELDS if draw(st.booleans())}
    if draw(st.integers(0, 4)) == 0:
        params[draw(st.text(max_size=20))] = draw(ODD)
    return params


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
        "chat.confirmSeconds": 30,
        "memory.recall.enabled": False,
    }
    a = await start_gateway("a", **{"storage.instanceId": "a", **common})
    b = await start_gateway("b", **{"storage.instanceId": "b", **common})
    return a, b


@pytest.fixture
async def pair(start_gateway, api, postgres_url):
    return await _pair(start_gateway, api, postgres_url)


async def _ask(b, params, who: str = "owner", token_hash: str = "", door: str = "websocket") -> dict:
    """B asks A, through the database, as answer_elsewhere does → A's verdict (asserted to come)."""
    cluster = b.gw.services.cluster
    verdict = await cluster._ask("confirm", WAIT_S, to="a", p=params, who=who, h=token_hash, d=door)
    assert verdict is not None, f"A answered nothing for {params!r:.200}"
    return verdict


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(params=odd_params())
@example(params={"agentId": ["unhashable"], "runId": "r", "callId": "c", "allow": True})
@example(params={"agentId": "main\x00", "runId": "r", "callId": "c", "allow": True})
@example(params={"agentId": "main", "runId": {"a": 1}, "callId": "c", "allow": "yes"})
@example(params="not an object")
async def test_odd_params_get_an_error_answer(pair, caplog, params):
    _, b = pair  # one pair of gateways for all the examples
    caplog.set_level(logging.ERROR)
    caplog.clear()
    with structlog.testing.capture_logs() as logs:
        verdict = await _ask(b, params)
    assert verdict.get("yes") is False, verdict
    assert verdict["err"]["code"] in (-32602, -32004), verdict  # invalid, or no such call waits
    assert verdict.get("rp") == ""
    assert not logged_failures(logs, caplog.records)


async def test_a_refused_answer_never_names_who_started_the_run(start_gateway, api, postgres_url):
    a, b = await _pair(start_gateway, api, postgres_url)
    ca = await a.client()
    await ca.call("memory.set", {"key": "dentist", "value": "Dr. Okafor", "category": "facts"})
    made = await ca.call("principals.create", {"name": "phone", "agents": "main", "scopes": "chat"})
    assert made["token"]
    hold = threading.Event()
    api.script(("wait", hold, 30, ("tools", [("memory_delete", {"key": "dentist"})])))
    key = (await ca.call("sessions.create"))["sessionKey"]
    run_id = (await ca.call("chat.send", {"sessionKey": key, "message": "Tidy my memory."}))["runId"]
    hold.set()
    asked = (await ca.next_event("chat.confirm", timeout=20))["params"]
    params = {"agentId": "main", "runId": run_id, "callId": asked["callId"], "allow": False}
    ghost = await _ask(b, params, who="ghost", token_hash="0" * 64)  # no such principal
    assert ghost["yes"] is False and ghost["err"]["code"] == -32001 and ghost["rp"] == ""
    phone_hash = a.gw.services.principals.directory.by_name["phone"].token_hash
    phone = await _ask(b, params, who="phone", token_hash=phone_hash)  # live, but may not answer this run
    assert phone["yes"] is False and phone["err"]["code"] == -32003 and phone["rp"] == ""
    owner = await _ask(b, params)  # the run's own principal: accepted, and named for B's audit
    assert owner["yes"] is True and owner["rp"] == "owner"
    await ca.next_event("chat.final", timeout=20)
    await ca.close()


async def test_each_bad_field_is_named(pair):
    _, b = pair
    good = {"agentId": "main", "runId": "r1", "callId": "c1", "allow": True}
    for name, bad in (
        ("agentId", ["main"]),
        ("agentId", "a\x00b"),
        ("runId", "r" * 65),
        ("callId", 7),
        ("allow", "yes"),
    ):
        verdict = await _ask(b, {**good, name: bad})
        assert verdict["yes"] is False and verdict["err"]["code"] == -32602, verdict
        assert verdict["err"]["data"]["field"] == f"params.{name}", verdict
        assert verdict["rp"] == ""
