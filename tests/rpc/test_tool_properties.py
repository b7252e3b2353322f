"""The memory tools against hostile arguments through /mcp (issue 36, classes 3 and 6): the arguments come
from the tools' own input schemas (`tools/list`), with the same hostile contents as the methods' params
get (tests/rpc/test_params_properties.py). MCP's JSON reaches the tools as Python parses it — integers of
any size (a lone surrogate's escape is refused by the SDK's parser, as orjson refuses it on the WebSocket)
— so here, unlike over the WebSocket, integers past 64 bits reach the schema's rules as integers. Every call is answered as a tool result (an error one saying why when refused), never
"internal error", and nothing in the log says a tool crashed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2 as httpx
import pytest
import structlog
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.helpers import examples
from tests.hostile_values import has_surrogate, hostile_for, logged_failures, valid_for

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
async def mcp(start_gateway):
    gw = await start_gateway(memory=True, **{"server.httpPort": -1, "memory.sync.watch": False})
    async with httpx.AsyncClient(base_url=gw.http_url, timeout=60) as http:

        async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})  # \\ud800 escapes
            r = await http.post("/mcp", content=body, headers={**ACCEPT, "Authorization": f"Bearer {gw.token}"})
            if len(body) > gw.config.server.http_max_body_bytes:  # several 1 MB strings, escaped: too big to read
                assert r.status_code == 413 and "server.httpMaxBodyBytes" in r.text, r.text[:300]
                return {"result": {"content": [], "refused": True}}
            if has_surrogate(params):  # the SDK's JSON parser refuses a lone surrogate's escape: -32700
                assert r.status_code == 400 and r.json()["error"]["code"] == -32700, r.text[:300]
                return {"result": {"content": [], "refused": True}}
            assert r.status_code == 200, (r.status_code, r.text[:300])
            return r.json()

        tools = (await rpc("tools/list", {}))["result"]["tools"]
        yield rpc, {t["name"]: t["inputSchema"] for t in tools}


@st.composite
def tool_call(draw, tools: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(tools)))
    schema = tools[name]
    args: dict[str, Any] = {}
    for prop, sub in schema.get("properties", {}).items():
        if prop in schema.get("required", []) or draw(st.booleans()):
            args[prop] = draw(st.one_of(valid_for(prop, sub), hostile_for(prop, sub)))
    return name, args


@settings(max_examples=examples(80), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@example(data=None)
async def test_every_tool_answers_hostile_arguments_with_a_tool_result(mcp, caplog, data):
    rpc, tools = mcp
    if data is None:  # issue 36: an integer past 64 bits was "memory tool crashed", a traceback logged
        calls = [
            ("memory_list", {"offset": 2**64}),
            ("memory_search", {"query": "boat", "k": 10**30}),
            ("memory_set", {"key": "boat", "value": "a\ud800b"}),
            ("memory_set", {"key": "boat", "value": "a\x00b"}),
            ("memory_recall", {"minScore": 10**400}),
        ]
    else:
        calls = [data.draw(tool_call(tools), label="call")]
    caplog.set_level(logging.ERROR)
    caplog.clear()
    with structlog.testing.capture_logs() as logs:
        for name, args in calls:
            answer = await rpc("tools/call", {"name": name, "arguments": args})
            assert "result" in answer, answer
            text = "\n".join(c.get("text", "") for c in answer["result"]["content"])
            assert "internal error" not in text and "crashed" not in text, text
            if answer["result"].get("isError"):
                assert text.startswith("Error: "), text
    assert not logged_failures(logs, caplog.records), logged_failures(logs, caplog.records)
