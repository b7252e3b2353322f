"""The Responses API (`POST /v1/responses`, issue 35): the `openai` SDK's `client.responses` and the OpenAI
Agents SDK pointed at a real gateway, with tests/fake_openai.py as the upstream (speaking /v1/responses,
or only chat completions as Ollama does), and offline."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


MALFORMED = [
    (b"{not json", None),
    (b"[]", None),
    (b'{"input": "hi"}', "model"),
    (b'{"model": 7, "input": "hi"}', "model"),
    (b'{"model": "m"}', "input"),
    (b'{"model": "m", "input": ""}', "input"),
    (b'{"model": "m", "input": []}', "input"),
    (b'{"model": "m", "input": [7]}', "input[0]"),
    (b'{"model": "m", "input": [{"type": "telepathy"}]}', "input[0].type"),
    (b'{"model": "m", "input": [{"role": "god", "content": "hi"}]}', "input[0].role"),
    (b'{"model": "m", "input": [{"role": "user", "content": 5}]}', "input[0].content"),
    (b'{"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}', "input[0].call_id"),
    (b'{"model": "m", "input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}', "input[0].name"),
    (
        b'{"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}',
        "input[0].arguments",
    ),
    (b'{"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": 1}]}', "input[0].output"),
    (b'{"model": "m", "input": "hi", "instructions": 3}', "instructions"),
    (b'{"model": "m", "input": "hi", "stream": "yes"}', "stream"),
    (b'{"model": "m", "input": "hi", "store": 1}', "store"),
    (b'{"model": "m", "input": "hi", "tools": {}}', "tools"),
    (b'{"model": "m", "input": "hi", "tools": [{"type": "function"}]}', "tools[0].name"),
    (
        b'{"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": 1}]}',
        "tools[0].parameters",
    ),
    (b'{"model": "m", "input": "hi", "tool_choice": "always"}', "tool_choice"),
    (b'{"model": "m", "input": "hi", "tool_choice": {"type": "function"}}', "tool_choice.name"),
    (b'{"model": "m", "input": "hi", "previous_response_id": 5}', "previous_response_id"),
    (b'{"model": "m", "input": "hi", "previous_response_id": "resp_nope"}', "previous_response_id"),
    (b'{"model": "m", "input": "hi", "conversation": "a/b"}', "conversation"),
    (b'{"model": "m", "input": "hi", "conversation": {"id": ""}}', "conversation.id"),
    (b'{"model": "m", "input": "hi", "user": 5}', "user"),
    (b'{"model": "m", "input": "nul \\u0000 here"}', "input"),
    (
        b'{"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "a\\u0000b"}]}]}',
        "input[0].content",
    ),
]


async def test_each_malformed_request_is_a_400_naming_the_field(start_gateway, api):
    import httpx2 as httpx

    gw = await upstream_gateway(start_gateway, api)
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        for body, param in MALFORMED:
            r = await http.post("/v1/responses", content=body, headers={"Content-Type": "application/json"})
            error = r.json()["error"]
            assert (r.status_code, error["type"], error["param"]) == (400, "invalid_request_error", param), body
            assert error["message"].startswith(param + ":" if param else "the request body"), body
        r = await http.get("/v1/responses/resp_nothing")
        assert r.status_code == 404 and "resp_nothing" in r.json()["error"]["message"]
        # a tool chat completions cannot say at all, for an upstream that has no /v1/responses: a 400 naming
        # it (a hosted tool, web_search, is left out instead: test_codex_cli.py)
        api.responses_route = False
        tools = [{"type": "web_search"}, {"type": "computer_use_preview", "display_width": 1024}]
        r = await http.post("/v1/responses", json={"model": "m", "input": "hi", "tools": tools}, timeout=10)
        error = r.json()["error"]
        assert (r.status_code, error["param"]) == (400, "tools[1].type") and "computer_use_preview" in error["message"]
    assert api.count("/v1/chat/completions") == 0


JSONS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
ITEM = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(
            [
                "message",
                "function_call",
                "function_call_output",
                "custom_tool_call",
                "custom_tool_call_output",
                "tool_search_call",
                "tool_search_output",
                "additional_tools",
                "web_search_call",
                "reasoning",
                "x",
            ]
        )
        | JSONS,
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | JSONS,
        "content": st.text(max_size=20)
        | st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["input_text", "output_text", "input_image"]), "text": st.text(max_size=8)}
            ),
            max_size=2,
        )
        | JSONS,
        "call_id": st.text(max_size=5) | JSONS,
        "name": st.text(max_size=5) | JSONS,
        "arguments": st.text(max_size=5) | JSONS,
        "output": st.text(max_size=5) | JSONS,
        "input": st.text(max_size=5) | JSONS,
        "namespace": st.text(max_size=5) | JSONS,
        "tools": st.lists(st.deferred(lambda: TOOL), max_size=2) | JSONS,
    },
)
TOOL = st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "web_search", "namespace", "custom", "tool_search", "computer_use"]) | JSONS},
    optional={
        "name": st.text(max_size=4) | JSONS,
        "parameters": JSONS,
        "format": st.just({"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}) | JSONS,
        "tools": st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["function", "custom", "namespace"]) | JSONS},
                optional={"name": st.text(max_size=4) | JSONS},
            ),
            max_size=2,
        )
        | JSONS,
    },
)
REQUEST = st.fixed_dictionaries(
    {},
    optional={
        "model": st.text(max_size=6) | JSONS,
        "input": st.text(max_size=20) | st.lists(ITEM, max_size=4) | JSONS,
        "instructions": st.text(max_size=10) | JSONS,
        "tools": st.lists(TOOL, max_size=2) | JSONS,
        "tool_choice": st.sampled_from(
            ["auto", "none", "required", {"type": "function", "name": "f"}, {"type": "custom", "name": "f"}]
        )
        | JSONS,
        "previous_response_id": st.text(max_size=6) | JSONS,
        "conversation": st.text(max_size=6) | JSONS,
        "stream": st.booleans() | JSONS,
        "store": st.booleans() | JSONS,
        "user": st.text(max_size=6) | JSONS,
        "max_output_tokens": JSONS,
    },
)


@settings(max_examples=400, deadline=None)
@given(REQUEST)
def test_any_request_is_valid_or_refused_naming_a_field_of_it_and_valid_ones_translate(body):
    """The class of bad input, not one instance: whatever a client sends is either taken (and then says
    a chat completions request of the same conversation, or a 400 naming the tool it cannot say) or
    refused with an Invalid that names a field the request has or lacks — never another exception."""
    from gateway.chat.providers import UpstreamError
    from gateway.chat.resrequest import RESPONSES_REQUEST
    from gateway.chat.responses import as_chat, as_messages, input_items
    from gateway.errors import Invalid

    try:
        RESPONSES_REQUEST.validate(body, "request")
    except Invalid as exc:
        assert exc.field and exc.field.startswith("request") and exc.rule
        top = exc.field.removeprefix("request.").split(".")[0].split("[")[0]
        assert exc.field == "request" or top in REQUEST_FIELDS, exc.field
        return
    items = input_items(body)
    messages = as_messages(items, body.get("instructions"))
    assert all(m["role"] in ("system", "user", "assistant", "tool") for m in messages)
    try:
        chat = as_chat(body, items)
    except UpstreamError as exc:
        assert exc.status == 400 and exc.error["param"].startswith(("tools[", "input["))
        return
    json.dumps(chat)  # a body the upstream can be sent


REQUEST_FIELDS = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "previous_response_id",
    "conversation",
    "stream",
    "store",
    "user",
}


@pytest.mark.parametrize("route", ["upstream", "translated"])
async def test_an_upstream_that_breaks_off_ends_the_stream_with_an_error_event(start_gateway, api, route):
    import openai

    api.responses_route = route == "upstream"
    api.reply = "one two three four five six"
    gw = await upstream_gateway(start_gateway, api)
    api.script(("cut", 2))
    async with sdk(gw) as client:
        stream = await client.responses.create(model="fake-model", input="count", stream=True)
        seen = []
        with pytest.raises(openai.APIError) as exc:
            async for event in stream:
                seen.append(event.type)
        assert "response.output_text.delta" in seen and "response.completed" not in seen
        assert exc.value.code == "upstream_error"
        # the session is free again, and a non-streamed request gets the same failure as a status
        api.script(("cut", 1))
        with pytest.raises(openai.APIStatusError) as exc:
            await client.responses.create(model="fake-model", input="count again")
        assert exc.value.status_code == 502


async def test_a_runaway_reply_is_cut_and_the_response_is_incomplete(start_gateway, api):
    api.reply = "word " * 200
    gw = await upstream_gateway(start_gateway, api, **{"chat.maxReplyChars": 50})
    async with sdk(gw) as client:
        events = [e async for e in await client.responses.create(model="fake-model", input="talk", stream=True)]
        assert events[-1].type == "response.incomplete"
        assert events[-1].response.incomplete_details.reason == "max_output_tokens"
        assert events[-1].response.model_extra["jarvis"]["runId"]
        whole = await client.responses.create(model="fake-model", input="talk more")
        assert whole.status == "incomplete"


async def test_conversation_names_the_session_and_store_false_keeps_nothing(start_gateway, api):
    import openai

    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        api.reply = "First."
        one = await client.responses.with_raw_response.create(
            model="fake-model", input="one", conversation="conv_notes"
        )
        api.reply = "Second."
        two = await client.responses.create(model="fake-model", input="two", conversation={"id": "conv_notes"})
        assert one.headers["x-jarvis-session"] == "conv_notes"
        assert said(transcript(gw, "conv_notes")) == [
            ("user", "one"),
            ("assistant", "First."),
            ("user", "two"),
            ("assistant", "Second."),
        ]
        assert (await client.responses.retrieve(two.id)).output_text == "Second."
        unkept = await client.responses.create(model="fake-model", input="three", store=False)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(unkept.id)
        with pytest.raises(openai.BadRequestError) as exc:
            await client.responses.create(model="fake-model", input="four", previous_response_id=unkept.id)
        assert exc.value.param == "previous_response_id"


async def test_the_store_is_bounded(start_gateway, api):
    import openai

    gw = await upstream_gateway(start_gateway, api, **{"openaiApi.storedResponses": 2})
    async with sdk(gw) as client:
        ids = [(await client.responses.create(model="fake-model", input=f"n{i}")).id for i in range(3)]
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(ids[0])  # the least recently used, forgotten
        assert [(await client.responses.retrieve(i)).id for i in ids[1:]] == ids[1:]


async def test_an_unknown_model_is_not_taken_for_a_missing_route(start_gateway, api):
    """OpenAI answers 404 model_not_found for a model it lacks: that is passed on, and /v1/responses is
    still asked next time (a 404 without that code means the route is missing: translated from then on)."""
    import openai

    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        api.script(("status", 404, {}, "model_not_found"))
        with pytest.raises(openai.NotFoundError) as exc:
            await client.responses.create(model="gpt-9", input="hi")
        assert exc.value.code == "model_not_found"
        assert (await client.responses.create(model="fake-model", input="hi")).output_text
    assert api.count("/v1/responses") == 2 and api.count("/v1/chat/completions") == 0


async def test_kept_responses_outlive_a_restart(start_gateway, api):
    """Kept in the storage engine (the files engine's responses.sqlite), not the gateway's memory."""
    gw = await upstream_gateway(start_gateway, api)
    api.reply = "Kept."
    async with sdk(gw) as client:
        kept = await client.responses.create(model="fake-model", input="keep this")
    await gw.restart()
    async with sdk(gw) as client:
        assert (await client.responses.retrieve(kept.id)).output_text == "Kept."
        api.reply = "Continued."
        more = await client.responses.create(model="fake-model", input="and then?", previous_response_id=kept.id)
        assert more.output_text == "Continued."
    assert "keep this" in str(api.requests[-1]["body"])


async def test_responses_kept_past_their_days_are_purged_at_start(start_gateway, api):
    import sqlite3

    from tests.helpers import wait_for

    gw = await upstream_gateway(start_gateway, api)
    async with sdk(gw) as client:
        await client.responses.create(model="fake-model", input="keep this a while")
    path = gw.config.state_dir / "responses.sqlite"

    def rows() -> int:
        with sqlite3.connect(path) as db:
            return db.execute("SELECT count(*) FROM responses").fetchone()[0]

    assert rows() == 1
    gw.config.openai_api.stored_response_days = 0.0  # restarted with nothing kept past its time
    await gw.restart()

    async def purged():
        return rows() == 0

    await wait_for(purged)
