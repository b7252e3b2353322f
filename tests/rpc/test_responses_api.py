"""The Responses API (`POST /v1/responses`, issue 35): the `openai` SDK's `client.responses` and the OpenAI
Agents SDK pointed at a real gateway, with tests/fake_openai.py as the upstream (speaking /v1/responses,
or only chat completions as Ollama does), and offline."""

from __future__ import annotations

import json

import pytest

from tests.fake_openai import FakeOpenAI
from tests.rpc.test_openai_api import said, sdk, transcript, upstream_gateway


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def upstream_bodies(api, path: str) -> list[dict]:
    return [r["body"] for r in api.requests if r["path"].endswith(path)]


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.mark.parametrize("route", ["upstream", "translated"])
async def test_a_streamed_response_is_relayed_with_openais_events_and_kept(start_gateway, api, route):
    api.responses_route = route == "upstream"
    api.reply = "Paris is sunny today."
    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        raw = await client.responses.with_raw_response.create(
            model="fake-model", input="What is the weather in Paris?", instructions="Be brief.", stream=True
        )
        events = [e async for e in raw.parse()]
        kinds = [e.type for e in events]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
        for kind in (
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ):
            assert kind in kinds, kind
        assert [e.sequence_number for e in events] == list(range(len(events)))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == "Paris is sunny today."
        done = events[-1].response
        assert done.output_text == "Paris is sunny today." and done.status == "completed"
        assert done.model_extra["jarvis"]["session"] == raw.headers["x-jarvis-session"]
        assert done.usage.input_tokens == 5
        # kept: GET /v1/responses/{id}
        again = await client.responses.retrieve(done.id)
        assert again.id == done.id and again.output_text == "Paris is sunny today."
    if route == "upstream":
        sent = upstream_bodies(api, "/responses")[-1]
        assert sent["input"] == [{"type": "message", "role": "user", "content": "What is the weather in Paris?"}]
        assert sent["instructions"] == "Be brief." and sent["stream"] is True
    else:
        assert api.count("/v1/responses") == 1  # asked once, 404: translated from then on
        sent = upstream_bodies(api, "/chat/completions")[-1]
        assert sent["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the weather in Paris?"},
        ]
    key = raw.headers["x-jarvis-session"]
    assert said(transcript(gw, key)) == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "Paris is sunny today."),
    ]


@pytest.mark.parametrize("route", ["upstream", "translated"])
async def test_a_function_tool_round_trip_with_previous_response_id(start_gateway, api, route):
    api.responses_route = route == "upstream"
    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        api.script(("tools", [("get_weather", {"city": "Paris"})]))
        first = await client.responses.create(model="fake-model", input="Weather in Paris?", tools=[WEATHER])
        calls = [item for item in first.output if item.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather"
        assert json.loads(calls[0].arguments) == {"city": "Paris"}
        api.reply = "It is 21 degrees in Paris."
        second = await client.responses.create(
            model="fake-model",
            previous_response_id=first.id,
            tools=[WEATHER],
            input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"celsius": 21}'}],
        )
        assert second.output_text == "It is 21 degrees in Paris."
        assert second.model_extra["jarvis"]["session"] == first.model_extra["jarvis"]["session"]
    if route == "upstream":
        sent = upstream_bodies(api, "/responses")[-1]
        assert "previous_response_id" not in sent  # the upstream does not know the gateway's ids
        assert [item.get("type") for item in sent["input"]] == ["message", "function_call", "function_call_output"]
        assert sent["tools"] == [WEATHER]
    else:
        sent = upstream_bodies(api, "/chat/completions")[-1]
        assert sent["tools"] == [
            {"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}
        ]
        assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
        assert sent["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert sent["messages"][2] == {
            "role": "tool",
            "tool_call_id": calls[0].call_id,
            "content": '{"celsius": 21}',
        }


async def test_offline_the_responder_answers_any_model_streamed_or_not(start_gateway):
    gw = await start_gateway(**{"server.httpPort": -1})
    async with sdk(gw) as client:
        reply = await client.responses.create(model="gpt-5", input="Where did I park?")
        assert reply.model == "gpt-5" and "Where did I park?" in reply.output_text
        stream = await client.responses.create(model="gpt-5-codex", input="hello", stream=True)
        events = [e async for e in stream]
    assert events[-1].type == "response.completed" and "hello" in events[-1].response.output_text


@pytest.mark.parametrize("route", ["upstream", "translated"])
async def test_the_openai_agents_sdk_runs_an_agent_with_a_function_tool(start_gateway, api, route, monkeypatch):
    """The OpenAI Agents SDK (its default model, OpenAIResponsesModel) with a custom client pointed at the
    gateway: the model calls the agent's function tool, the SDK runs it and sends its output back, the
    model answers; the whole run is one session."""
    import os

    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    api.responses_route = route == "upstream"
    gw = await upstream_gateway(start_gateway, api)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"{city}: 21 degrees, sunny"

    api.script(("tools", [("get_weather", {"city": "Paris"})]))
    api.reply = "It is 21 degrees and sunny in Paris."
    async with sdk(gw) as client:
        agent = Agent(
            name="Weather",
            instructions="Answer with the weather tool.",
            tools=[get_weather],
            model=OpenAIResponsesModel(model="fake-model", openai_client=client),
        )
        result = await Runner.run(agent, "What is the weather in Paris?")
    assert asked == ["Paris"]
    assert result.final_output == "It is 21 degrees and sunny in Paris."
    items = [item.to_input_item() for item in result.new_items]
    kinds = [i.get("type") or i.get("role") for i in items]
    assert kinds == ["function_call", "function_call_output", "message"]
    if route == "upstream":
        second = upstream_bodies(api, "/responses")[-1]
        assert [i.get("type") or i.get("role") for i in second["input"]][-2:] == [
            "function_call",
            "function_call_output",
        ]
        assert second["instructions"] == "Answer with the weather tool."
    else:
        second = upstream_bodies(api, "/chat/completions")[-1]
        assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    c = await gw.client()
    sessions = [s["sessionKey"] for s in (await c.call("sessions.list", {}))["sessions"]]
    await c.close()
    assert len(sessions) == 1  # the agent's run is one conversation, found by its history
    kept = said(transcript(gw, sessions[0]))
    assert kept[0] == ("user", "What is the weather in Paris?")
    assert kept[-1] == ("assistant", "It is 21 degrees and sunny in Paris.")
    out = os.environ.get("JARVIS_AGENTS_TRANSCRIPT")
    if out:
        with open(f"{out}.{route}.json", "w") as f:
            json.dump(
                {
                    "route": route,
                    "final_output": result.final_output,
                    "items": items,
                    "responses": [
                        {"id": r.response_id, "output": [o.model_dump(mode="json") for o in r.output]}
                        for r in result.raw_responses
                    ],
                    "upstream_requests": [r["body"] for r in api.requests if r["body"] is not None],
                    "session_transcript": kept,
                },
                f,
                indent=2,
                default=str,
            )
