"""Codex CLI through every route (issue 49): requests Codex CLI 0.171 sent, captured from the real CLI
(tests/data/codex/, paths anonymised), replayed against a real gateway — through a chat-completions-only
upstream (tests/fake_openai.py with no /v1/responses, as Ollama and llama.cpp) and the offline responder,
streaming and not. Its tools are translated instead of refused (a namespace's functions, a freeform
`custom` apply_patch, a client-run tool_search; web_search left out with a note), the model's calls come
back as the items Codex runs, and Codex's next request — built as Codex builds it — goes on. Separate runs
in one folder are separate sessions, on both storage engines and through chat completions too; the UI's
title request makes none."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fake_openai import FakeOpenAI
from tests.rpc.test_openai_api import upstream_gateway

DATA = Path(__file__).resolve().parent.parent / "data" / "codex"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello world\n*** End Patch\n"


def capture(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        fake.responses_route = False  # chat completions only, as Ollama and llama.cpp
        yield fake


@pytest.fixture(params=["files", "postgres"])
def engine(request) -> dict[str, str]:
    if request.param == "files":
        return {}
    return {"storage.url": request.getfixturevalue("postgres_url")}


def chat_bodies(api) -> list[dict]:
    return [r["body"] for r in api.requests if r["path"] == "/v1/chat/completions"]


async def respond(gw, body: dict[str, Any], stream: bool) -> tuple[httpx.Response, dict[str, Any], list[dict]]:
    """POST /v1/responses as Codex does (its own SSE reader): the HTTP answer, the response object (the
    last event's, streamed) and the events."""
    body = {**body, "stream": stream}
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        r = await http.post("/v1/responses", json=body, timeout=30)
    if not stream or r.status_code != 200:
        return r, r.json(), []
    events = []
    for block in r.text.split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        if data:
            events.append(json.loads("".join(data)))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed", events[-1]
    return r, events[-1]["response"], events


def output_items(response: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == kind]


def next_turn(sent: dict[str, Any], produced: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """Codex's next request: the same body, its input followed by the item the model produced (echoed as
    Codex echoes it) and Codex's answer to it (from the capture, under this call's id)."""
    body = copy.deepcopy(sent)
    echoed = {k: v for k, v in produced.items() if k != "status"}
    body["input"] = [*body["input"], {**echoed, "status": "completed"}, {**answer, "call_id": produced["call_id"]}]
    return body


def function(tools: list[dict], name: str) -> dict[str, Any]:
    found = [t["function"] for t in tools if t["function"]["name"] == name]
    assert len(found) == 1, [t["function"]["name"] for t in tools]
    return found[0]


@pytest.mark.parametrize("stream", [True, False])
async def test_codex_tools_are_translated_for_a_chat_completions_upstream(start_gateway, api, stream):
    """The first request of `codex exec` (gpt-5.5: functions, a freeform apply_patch with its grammar,
    tool_search, web_search) and of a model Codex has no metadata for (the namespace multi_agent_v1):
    answered, not refused; the upstream is offered functions only, each name once; web_search is left out
    with a note in the response."""
    gw = await upstream_gateway(start_gateway, api)
    api.reply = "Hello from a local model."
    for name in ("exec-apply-patch.json", "exec-namespace.json"):
        sent = capture(name)["requests"][0]
        r, response, _ = await respond(gw, sent, stream)
        assert r.status_code == 200, r.text
        assert response["output"][0]["content"][0]["text"] == "Hello from a local model."
        notes = response["jarvis"]["notes"]
        assert len(notes) == 1 and "web_search" in notes[0] and "tools[" in notes[0]
        tools = chat_bodies(api)[-1]["tools"]
        names = [t["function"]["name"] for t in tools]
        assert len(names) == len(set(names)) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n) for n in names)
        assert all(t["type"] == "function" for t in tools)
        offered = [t for t in sent["tools"] if t["type"] == "function"]
        for tool in offered:  # a function tool goes as it is
            assert function(tools, tool["name"])["parameters"] == tool["parameters"]
        if name == "exec-namespace.json":
            namespace = next(t for t in sent["tools"] if t["type"] == "namespace")
            for inner in namespace["tools"]:  # its functions, under their own names (none clash)
                assert function(tools, inner["name"])["parameters"] == inner["parameters"]
            assert len(tools) == len(offered) + len(namespace["tools"])
        else:
            patch = function(tools, "apply_patch")
            grammar = next(t for t in sent["tools"] if t["type"] == "custom")["format"]["definition"]
            assert grammar in patch["description"]
            assert patch["parameters"]["properties"] == {
                "input": {"type": "string", "description": "the tool's raw input"}
            }
            assert function(tools, "tool_search")["parameters"]["required"] == ["query"]
            assert len(tools) == len(offered) + 2
        messages = chat_bodies(api)[-1]["messages"]
        assert [m["role"] for m in messages] == ["system", "system", "user", "user"]  # developer as system


@pytest.mark.parametrize("stream", [True, False])
async def test_the_offline_responder_takes_any_tool_list(start_gateway, stream):
    gw = await start_gateway(**{"server.httpPort": -1})
    for name in ("exec-apply-patch.json", "exec-namespace.json", "tui-turn-and-title.json"):
        sent = capture(name)["requests"][0]
        odd = {**sent, "tools": [*(sent.get("tools") or []), {"type": "computer_use_preview"}, {"type": "telepathy"}]}
        r, response, _ = await respond(gw, odd, stream)
        assert r.status_code == 200, r.text
        assert response["status"] == "completed" and response["output"][0]["type"] == "message"


@pytest.mark.parametrize("stream", [True, False])
async def test_an_apply_patch_round_trip(start_gateway, api, stream):
    """The model calls apply_patch (a function of its raw input, upstream): Codex gets a custom_tool_call
    with the patch as its input (streamed: the input's events, as OpenAI sends them), and its next
    request — the call and Codex's custom_tool_call_output — reaches the upstream as a tool call and its
    result."""
    gw = await upstream_gateway(start_gateway, api)
    data = capture("exec-apply-patch.json")
    sent = data["requests"][0]
    api.script(("tools", [("apply_patch", {"input": PATCH})]))
    r, response, events = await respond(gw, sent, stream)
    assert r.status_code == 200, r.text
    [call] = response["output"]
    assert (call["type"], call["name"], call["input"], call["status"]) == (
        "custom_tool_call",
        "apply_patch",
        PATCH,
        "completed",
    )
    if stream:
        kinds = [e["type"] for e in events]
        assert "response.function_call_arguments.delta" not in kinds
        done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
        assert done["input"] == PATCH and done["item_id"] == call["id"]
        added = next(e for e in events if e["type"] == "response.output_item.added")
        assert added["item"]["type"] == "custom_tool_call" and added["item"]["call_id"] == call["call_id"]
    # Codex's next request, as it sent it (its custom_tool_call_output from the capture)
    answer = data["requests"][1]["input"][-1]
    assert answer["type"] == "custom_tool_call_output"
    api.reply = "I added hello.txt."
    r, response, _ = await respond(gw, next_turn(sent, call, answer), stream)
    assert r.status_code == 200, r.text
    assert response["output"][0]["content"][0]["text"] == "I added hello.txt."
    messages = chat_bodies(api)[-1]["messages"]
    assert messages[-2]["tool_calls"] == [
        {
            "id": call["call_id"],
            "type": "function",
            "function": {"name": "apply_patch", "arguments": json.dumps({"input": PATCH})},
        }
    ]
    assert messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": answer["output"]}


@pytest.mark.parametrize("stream", [True, False])
async def test_a_namespace_function_round_trip(start_gateway, api, stream):
    """The model calls close_agent, a function of the namespace multi_agent_v1: Codex gets a function_call
    with that namespace (without it Codex answers "unsupported call"), and its output goes back."""
    gw = await upstream_gateway(start_gateway, api)
    data = capture("exec-namespace.json")
    sent = data["requests"][0]
    api.script(("tools", [("close_agent", {"target": "agent-1"})]))
    r, response, events = await respond(gw, sent, stream)
    assert r.status_code == 200, r.text
    [call] = response["output"]
    assert (call["type"], call["name"], call["namespace"]) == ("function_call", "close_agent", "multi_agent_v1")
    assert json.loads(call["arguments"]) == {"target": "agent-1"}
    if stream:
        added = next(e for e in events if e["type"] == "response.output_item.added")
        assert added["item"]["namespace"] == "multi_agent_v1"
    answer = data["requests"][1]["input"][-1]
    assert answer["type"] == "function_call_output"
    api.reply = "Closed."
    r, response, _ = await respond(gw, next_turn(sent, call, answer), stream)
    assert r.status_code == 200, r.text
    messages = chat_bodies(api)[-1]["messages"]
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "close_agent"
    assert messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": answer["output"]}


async def test_a_tool_search_round_trip(start_gateway, api):
    """tool_search, run by the client: the call comes back as a tool_search_call with its arguments as an
    object, and Codex's tool_search_output goes back as the tool's result."""
    gw = await upstream_gateway(start_gateway, api)
    data = capture("exec-tool-search.json")
    sent = data["requests"][0]
    api.script(("tools", [("tool_search", {"query": "calendar create", "limit": 1})]))
    r, response, _ = await respond(gw, sent, True)
    [call] = response["output"]
    assert (call["type"], call["execution"], call["arguments"]) == (
        "tool_search_call",
        "client",
        {"query": "calendar create", "limit": 1},
    )
    answer = data["requests"][1]["input"][-1]
    assert answer["type"] == "tool_search_output"
    r, response, _ = await respond(gw, next_turn(sent, call, answer), True)
    assert r.status_code == 200, r.text
    messages = chat_bodies(api)[-1]["messages"]
    assert messages[-2]["tool_calls"][0]["function"] == {
        "name": "tool_search",
        "arguments": json.dumps({"query": "calendar create", "limit": 1}),
    }
    assert json.loads(messages[-1]["content"]) == {"tools": []}


def as_chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    from gateway.chat.responses import as_messages

    return as_messages(body["input"], body.get("instructions"))


async def sessions_of(gw) -> dict[str, str]:
    c = await gw.client()
    try:
        found = (await c.call("sessions.list", {}))["sessions"]
        return {s["sessionKey"]: s.get("label") or "" for s in found}
    finally:
        await c.close()


async def history_of(gw, key: str) -> list[tuple[str, str]]:
    c = await gw.client()
    try:
        found = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
        return [(m["role"], m["content"]) for m in found]
    finally:
        await c.close()


@pytest.mark.parametrize("door", ["responses", "chat"])
async def test_two_runs_in_one_folder_are_two_sessions_and_resume_goes_on(start_gateway, api, engine, door):
    """Two `codex exec` runs in one folder begin with the same developer and environment messages: two
    sessions, each labelled by what its user asked; `codex exec resume --last` goes on in the second. The
    same conversation through chat completions alike; on both storage engines."""
    gw = await upstream_gateway(start_gateway, api, **engine)
    data = capture("two-runs-and-resume.json")
    keys = []
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        for body, reply in zip(data["requests"], data["answered"]):
            api.reply = reply  # what the capture's server answered, so that the resumed history is ours
            if door == "responses":
                r = await http.post("/v1/responses", json={**body, "stream": False}, timeout=30)
            else:
                chat = {"model": body["model"], "messages": as_chat_messages(body)}
                r = await http.post("/v1/chat/completions", json=chat, timeout=30)
            assert r.status_code == 200, r.text
            keys.append(r.headers["x-jarvis-session"])
    assert keys[0] != keys[1] and keys[2] == keys[1]
    labels = await sessions_of(gw)
    assert labels == {keys[0]: "what is in this folder", keys[1]: "write a haiku"}
    assert await history_of(gw, keys[1]) == [
        ("user", "write a haiku"),
        ("assistant", "Second answer."),
        ("user", "and another"),
        ("assistant", "Third answer."),
    ]


@pytest.mark.parametrize("door", ["responses", "chat"])
async def test_a_title_request_makes_no_session(start_gateway, api, engine, door):
    """The interactive UI's turn is a session; its title request (a structured answer, no tools, no reply
    in it) is answered but kept nowhere: no session, no X-Jarvis-Session."""
    gw = await upstream_gateway(start_gateway, api, **engine)
    turn, title = capture("tui-turn-and-title.json")["requests"]
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        answers = []
        for body in (turn, title):
            if door == "responses":
                r = await http.post("/v1/responses", json={**body, "stream": False}, timeout=30)
            else:
                chat = {"model": body["model"], "messages": as_chat_messages(body)}
                fmt = (body.get("text") or {}).get("format")
                if fmt:
                    chat["response_format"] = {
                        "type": "json_schema",
                        "json_schema": {"name": fmt["name"], "schema": fmt["schema"]},
                    }
                r = await http.post("/v1/chat/completions", json=chat, timeout=30)
            assert r.status_code == 200, r.text
            answers.append(r)
    assert "x-jarvis-session" in answers[0].headers and "x-jarvis-session" not in answers[1].headers
    assert answers[1].json()["jarvis"]["session"] is None
    assert await sessions_of(gw) == {answers[0].headers["x-jarvis-session"]: "what else"}


# ---- the translation, as a class -----------------------------------------------------------------------
NAMES = st.sampled_from(["a", "b", "exec", "x.y", "tool_search", "n" * 70, "ä"])
FUNCTION = st.builds(lambda n: {"type": "function", "name": n, "parameters": {"type": "object"}}, NAMES)
CUSTOM = st.builds(
    lambda n: {"type": "custom", "name": n, "format": {"type": "grammar", "definition": "start: /.+/"}}, NAMES
)
NAMESPACE = st.builds(
    lambda n, tools: {"type": "namespace", "name": n, "description": "", "tools": tools},
    NAMES,
    st.lists(FUNCTION | CUSTOM, min_size=1, max_size=3),
)
TOOL = (
    FUNCTION
    | CUSTOM
    | NAMESPACE
    | st.just({"type": "tool_search", "execution": "client"})
    | st.just({"type": "web_search"})
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TOOL, max_size=6), st.lists(TOOL, max_size=3))
def test_every_tool_gets_one_upstream_name_that_maps_back(tools, additional):
    """Whatever tools a request offers (clashing names, names chat completions cannot carry, namespaces,
    tools in the input too): each is offered upstream under one name of its own, valid there, and a call
    of that name comes back as that tool's item."""
    from gateway.chat.resrequest import RESPONSES_REQUEST
    from gateway.chat.restools import chat_tools

    request = {
        "model": "m",
        "tools": tools,
        "input": [{"type": "additional_tools", "tools": additional}, {"role": "user", "content": "hi"}],
    }
    RESPONSES_REQUEST.validate(request, "request")
    offered = chat_tools(request, request["input"])
    names = [t["function"]["name"] for t in offered.tools]
    assert len(names) == len(set(names)) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n) for n in names)
    wanted = set()
    for tool in [*tools, *additional]:
        if tool["type"] == "namespace":
            wanted |= {(t["type"], t["name"], tool["name"]) for t in tool["tools"]}
        elif tool["type"] in ("function", "custom"):
            wanted.add((tool["type"], tool["name"], None))
        elif tool["type"] == "tool_search":
            wanted.add(("tool_search", "tool_search", None))
    assert {(o.kind, o.name, o.namespace) for o in offered.by_chat.values()} == wanted
    for name, tool in offered.by_chat.items():
        assert offered.chat_name(tool.kind, tool.namespace, tool.name) == name
        item = offered.item(name, "call_1", json.dumps({"input": "raw", "query": "q"}))
        kind = {"function": "function_call", "custom": "custom_tool_call", "tool_search": "tool_search_call"}[tool.kind]
        assert item["type"] == kind and item["call_id"] == "call_1"
        if tool.kind != "tool_search":
            assert item["name"] == tool.name and item.get("namespace") == tool.namespace
        if tool.kind == "custom":
            assert item["input"] == "raw"
    notes = [n for n in offered.notes if "web_search" in n]
    assert len(notes) == sum(1 for t in [*tools, *additional] if t["type"] == "web_search")


PREAMBLE = st.lists(
    st.sampled_from(
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "developer", "content": "<skills_instructions>…</skills_instructions>"},
            {"role": "user", "content": "<environment_context><cwd>/home/user/project</cwd></environment_context>"},
            {"role": "user", "content": "# AGENTS.md instructions for /home/user/project"},
        ]
    ),
    max_size=4,
)
WORDS = st.text(alphabet="abc ", min_size=1, max_size=6).filter(str.strip)


CANNED = st.sampled_from(
    [
        [],
        [{"role": "assistant", "content": "Hello! How can I help?"}],  # a front-end's greeting
        [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4"}],  # few-shot turns
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    PREAMBLE,
    CANNED,
    st.lists(st.tuples(WORDS, WORDS), min_size=1, max_size=3),
    st.lists(WORDS, min_size=1, max_size=3),
)
def test_runs_that_share_only_their_preamble_are_sessions_of_their_own(preamble, canned, first, second):
    """The class, not Codex's wording: two conversations that begin with the same system, developer and
    context messages (or a canned opening: a greeting, few-shot turns the gateway never answered) are
    two sessions from their first request, labelled by what their user asked; each of their turns goes
    on in its own (its history is that session's whole conversation so far)."""
    from gateway.chat.relay import Threads, first_user_text

    preamble = [*preamble, *canned]
    threads = Threads()
    keys: dict[int, set[str]] = {0: set(), 1: set()}
    runs = [list(first), [(text, f"reply {i}") for i, text in enumerate(second)]]
    history: dict[int, list[dict[str, Any]]] = {0: list(preamble), 1: list(preamble)}
    for turn in range(max(len(r) for r in runs)):
        for run in (0, 1):
            if turn >= len(runs[run]):
                continue
            asked, reply = runs[run][turn]
            messages = [*history[run], {"role": "user", "content": asked}]
            key = threads.find(messages)
            keys[run].add(key)
            if turn == 0 and not canned:  # few-shot turns read as the conversation's own
                assert first_user_text({"messages": messages}) == asked
            threads.remember(messages, reply, key)
            history[run] = [*messages, {"role": "assistant", "content": reply}]
    # one session a run, unless the two asked word for word the same: behind a canned opening the gateway
    # did not answer, that is the same request twice (a retry), one session; otherwise, once they got the
    # same reply too, each goes on in a new one
    same = " ".join(runs[0][0][0].split()) == " ".join(runs[1][0][0].split())
    if not (same and canned):
        assert not keys[0] & keys[1]
    if not same:
        assert len(keys[0]) == 1 and len(keys[1]) == 1


async def test_an_agents_sdk_structured_run_is_kept_when_it_names_its_session(start_gateway, api):
    """An Agents SDK agent with an output_type and no tools sends a side request's shape: kept nowhere,
    unless its client names the session (docs/openai-endpoint.md)."""
    import openai
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from pydantic import BaseModel

    class Plan(BaseModel):
        items: list[str]

    set_tracing_disabled(True)
    gw = await upstream_gateway(start_gateway, api)
    api.reply = '{"items": ["milk", "bread"]}'
    for headers in ({}, {"X-Jarvis-Session": "my-agent"}):
        client = openai.AsyncOpenAI(
            base_url=gw.http_url + "/v1", api_key=gw.token, max_retries=0, default_headers=headers
        )
        agent = Agent(
            name="Planner",
            instructions="List what to buy.",
            output_type=Plan,
            model=OpenAIResponsesModel(model="fake-model", openai_client=client),
        )
        result = await Runner.run(agent, "What do I need for breakfast?")
        assert result.final_output == Plan(items=["milk", "bread"])
        await client.close()
    assert chat_bodies(api)[0]["response_format"]["type"] == "json_schema"
    assert await sessions_of(gw) == {"my-agent": "What do I need for breakfast?"}


async def test_only_a_tool_that_cannot_be_carried_is_refused_naming_it(start_gateway, api):
    """Through chat completions a tool of a kind none of the translation knows (wherever it is: the
    tools, a namespace, an additional_tools item) is a 400 naming it, and the upstream is not asked."""
    gw = await upstream_gateway(start_gateway, api)
    fn = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    cases = [
        ({"tools": [fn, {"type": "local_shell"}]}, "tools[1].type"),
        (
            {"tools": [{"type": "namespace", "name": "ns", "tools": [fn, {"type": "computer_use_preview"}]}]},
            "tools[0].tools[1].type",
        ),
        (
            {
                "input": [
                    {"type": "additional_tools", "tools": [{"type": "telepathy"}]},
                    {"role": "user", "content": "hi"},
                ]
            },
            "input[0].tools[0].type",
        ),
    ]
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        for extra, param in cases:
            r = await http.post("/v1/responses", json={"model": "m", "input": "hi", **extra}, timeout=30)
            error = r.json()["error"]
            assert (r.status_code, error["param"], error["code"]) == (400, param, "unsupported_value"), r.text
            assert error["message"].startswith(param)
    assert api.count("/v1/chat/completions") == 0
