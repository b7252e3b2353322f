"""Codex CLI through every route (issue 49): requests Codex CLI 0.171 sent, captured from the real CLI
(tests/data/codex/, paths anonymised), replayed against a real gateway — through a chat-completions-only
upstream (tests/fake_openai.py with no /v1/responses, as Ollama and llama.cpp) and the offline responder,
streaming and not. Its tools are translated instead of refused (a namespace's functions, a freeform
`custom` apply_patch, a client-run tool_search; web_search left out with a note), the model's calls come
back as the items Codex runs, and Codex's next request — built as Codex builds it — goes on."""

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
    from gateway.chat.responses import RESPONSES_REQUEST
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
