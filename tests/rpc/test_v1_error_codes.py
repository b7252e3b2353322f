"""A Responses input item's `call_id` and `name` of the wrong type are `invalid_type` ("must be …"), and
only a missing one is `missing_required_parameter` — before, `"call_id": 5` was answered "required",
which tells a client to add a field it sent (a review of the integrated tree, issue 44)."""

from __future__ import annotations

import httpx2 as httpx
import pytest

CASES = [
    ({"type": "function_call_output", "output": "x"}, "input[0].call_id", "missing_required_parameter"),
    ({"type": "function_call_output", "call_id": 5, "output": "x"}, "input[0].call_id", "invalid_type"),
    ({"type": "function_call_output", "call_id": "", "output": "x"}, "input[0].call_id", "invalid_value"),
    ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "input[0].name", "missing_required_parameter"),
    ({"type": "function_call", "call_id": "c", "name": ["f"], "arguments": "{}"}, "input[0].name", "invalid_type"),
    ({"type": "custom_tool_call", "call_id": ["c"], "name": "f", "input": "x"}, "input[0].call_id", "invalid_type"),
]


@pytest.mark.parametrize(("item", "param", "code"), CASES)
async def test_a_wrong_typed_call_id_or_name_is_invalid_type_not_missing(start_gateway, item, param, code):
    gw = await start_gateway(**{"server.httpPort": -1})
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        r = await http.post("/v1/responses", json={"model": "m", "input": [item]})
    error = r.json()["error"]
    assert (r.status_code, error["param"], error["code"]) == (400, param, code), error
    assert error["message"].startswith(param + ": ")
