"""A session's own model and system prompt (sessions.create / sessions.update) and chat.models, against
a real local server speaking the OpenAI wire format; on the file store and on PostgreSQL."""

from __future__ import annotations

import pytest

from gateway.chat.providers import OfflineResponder, OpenAIProvider
from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def _settings_round_trip(gw, api) -> None:
    c = await gw.client()
    try:
        s = await c.call(
            "sessions.create", {"label": "pirate", "model": "fake-small", "systemPrompt": "You answer like a pirate."}
        )
        key = s["sessionKey"]
        assert (s["model"], s["systemPrompt"]) == ("fake-small", "You answer like a pirate.")
        assert (await c.call("sessions.list"))["sessions"][0]["model"] == "fake-small"
        run = await c.call("chat.send", {"sessionKey": key, "message": "hello"})
        assert (await c.run_to_end(run["runId"]))[-1]["method"] == "chat.final"
        body = api.requests[-1]["body"]
        assert body["model"] == "fake-small"
        assert body["messages"][0]["role"] == "system"
        assert body["messages"][0]["content"].startswith("You answer like a pirate.")

        # Changed, then reset with "": the configured ones apply again; the label is untouched.
        s = await c.call("sessions.update", {"sessionKey": key, "model": "fake-large"})
        assert (s["model"], s["systemPrompt"], s["label"]) == ("fake-large", "You answer like a pirate.", "pirate")
        s = await c.call("sessions.update", {"sessionKey": key, "model": "", "systemPrompt": ""})
        assert "model" not in s and "systemPrompt" not in s and s["label"] == "pirate"
        assert "model" not in await c.call("sessions.get", {"sessionKey": key})
        run = await c.call("chat.send", {"sessionKey": key, "message": "again"})
        await c.run_to_end(run["runId"])
        body = api.requests[-1]["body"]
        assert body["model"] == "fake-model"
        assert body["messages"][0]["content"].startswith(gw.config.chat.system_prompt)

        # Bad input names the field and the rule.
        with pytest.raises(RpcError) as ei:
            await c.call("sessions.update", {"sessionKey": key})
        assert ei.value.code == -32602 and "at least one of label, model, systemPrompt" in ei.value.message
        with pytest.raises(RpcError) as ei:
            await c.call("sessions.create", {"systemPrompt": "x" * 20_001})
        assert ei.value.code == -32602 and ei.value.data.get("field") == "params.systemPrompt"
        with pytest.raises(RpcError) as ei:
            await c.call("sessions.update", {"sessionKey": key, "model": 3})
        assert ei.value.code == -32602 and ei.value.data.get("field") == "params.model"
    finally:
        await c.close()


async def test_a_session_keeps_its_model_and_system_prompt_on_the_file_store(start_gateway, api):
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "fake-model"})
    await _settings_round_trip(gw, api)
    # Kept across a restart (in sessions.json).
    c = await gw.client()
    s = await c.call("sessions.create", {"model": "fake-small"})
    await c.close()
    await gw.stop()
    await gw.start()
    c = await gw.client()
    assert (await c.call("sessions.get", {"sessionKey": s["sessionKey"]}))["model"] == "fake-small"
    await c.close()


@pytest.mark.slow
async def test_a_session_keeps_its_model_and_system_prompt_on_postgresql(start_gateway, api, postgres_url):
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "fake-model", "storage.url": postgres_url})
    await _settings_round_trip(gw, api)


async def test_chat_models_lists_the_upstreams_models_or_the_configured_one(start_gateway, api, monkeypatch):
    from gateway.chat import openai_provider

    monkeypatch.setattr(openai_provider, "MODELS_TTL_S", 0)  # every call asks the upstream (it changes below)
    gw = await start_gateway(**{"chat.baseUrl": api.base_url, "chat.model": "fake-model"})
    c = await gw.client()
    try:
        res = await c.call("chat.models")
        assert res["default"] == "fake-model"
        assert [m["id"] for m in res["models"]] == ["fake-model", "fake-large", "fake-small"]
        assert res["models"][1] == {"id": "fake-large", "object": "model", "created": 1700000000, "owned_by": "fake"}
        assert res["models"][0] == {"id": "fake-model", "object": "model", "created": 0, "owned_by": "openai"}
        api.models = None  # a local server without /v1/models
        assert [m["id"] for m in (await c.call("chat.models"))["models"]] == ["fake-model"]
    finally:
        await c.close()


async def test_list_models_of_each_provider():
    offline = await OfflineResponder().list_models()
    assert offline == [{"id": "offline-responder", "object": "model", "created": 0, "owned_by": "offline"}]
    # Nothing listens there: the configured model, not an error.
    p = OpenAIProvider("", "http://127.0.0.1:9/v1", "llama3", timeout=2, max_retries=0)
    try:
        assert [m["id"] for m in await p.list_models()] == ["llama3"]
    finally:
        await p.close()
