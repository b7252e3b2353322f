"""The pure protocol layer, with literal JSON."""

import orjson
import pytest

from gateway import protocol
from gateway.errors import Invalid, NotFound
from gateway.schema import Arr, Int, Num, Obj, Str


def test_single_request_lenient_on_jsonrpc_member():
    f = protocol.parse('{"id":"1","method":"sessions.create","params":{}}')
    assert not f.errors and not f.batch
    assert f.requests[0].method == "sessions.create" and f.requests[0].id == "1"


def test_notification_has_no_id():
    f = protocol.parse('{"method":"system.health"}')
    assert f.requests[0].is_notification


@pytest.mark.parametrize(
    "text,code,fragment",
    [
        ("{nope", -32700, "parse error"),
        ("42", -32600, "must be an object"),
        ('"x"', -32600, "must be an object"),
        ("null", -32600, "must be an object"),
        ('{"id":1.5,"method":"a"}', -32600, "id:"),
        ('{"id":true,"method":"a"}', -32600, "id:"),
        ('{"id":1,"method":""}', -32600, "method:"),
        ('{"id":1,"method":5}', -32600, "method:"),
        ('{"jsonrpc":"1.0","id":1,"method":"a"}', -32600, "jsonrpc"),
        ("[]", -32600, "must not be empty"),
    ],
)
def test_invalid_frames(text, code, fragment):
    f = protocol.parse(text)
    assert not f.requests
    err = f.errors[0]["error"]
    assert err["code"] == code and fragment in err["message"]
    assert f.errors[0]["jsonrpc"] == "2.0"


def test_bad_method_echoes_a_valid_id():
    f = protocol.parse('{"id":7,"method":3}')
    assert f.errors[0]["id"] == 7


def test_batch_mixes_requests_and_errors():
    f = protocol.parse('[{"id":1,"method":"a"},{"method":"b"},3]')
    assert f.batch and [r.method for r in f.requests] == ["a", "b"]
    assert f.errors[0]["error"]["code"] == -32600 and f.errors[0]["id"] is None


def test_batch_too_large():
    f = protocol.parse(orjson.dumps([{"id": i, "method": "a"} for i in range(51)]))
    assert not f.batch and "at most 50" in f.errors[0]["error"]["message"]


def test_auth_frame():
    f = protocol.parse('{"type":"auth","token":"abc"}')
    assert f.auth_frame and f.auth_token == "abc"
    assert protocol.parse('{"type":"auth","token":5}').auth_token is None


def test_outgoing_shapes_are_strict():
    assert protocol.response(1, {"a": 1}) == {"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}
    err = protocol.error_response("x", NotFound("session not found: k", {"sessionKey": "k"}))
    assert err == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {"code": -32004, "message": "session not found: k", "data": {"sessionKey": "k"}},
    }
    assert protocol.notification("chat.delta", {}) == {"jsonrpc": "2.0", "method": "chat.delta", "params": {}}


SCHEMA = Obj(
    key=Str(1, 10, pattern=r"[a-z]+"),
    k=Int(1, 50, default=6),
    score=Num(0, 1, default=0),
    tags=Arr(Str(choices=("a", "b")), optional=True),
)


@pytest.mark.parametrize(
    "params,field,fragment",
    [
        ({}, "key", "required"),
        ({"key": 5}, "key", "must be a string, got integer"),
        ({"key": ""}, "key", "must not be empty"),
        ({"key": "ABC"}, "key", "must match"),
        ({"key": "abc", "k": "6"}, "k", "must be an integer, got string"),
        ({"key": "abc", "k": True}, "k", "must be an integer, got boolean"),
        ({"key": "abc", "k": 51}, "k", "must be <= 50"),
        ({"key": "abc", "score": 2}, "score", "must be <= 1"),
        ({"key": "abc", "tags": ["c"]}, "tags[0]", "must be one of"),
        ({"key": "abc", "extra": 1}, "extra", "unknown parameter"),
    ],
)
def test_schema_errors_name_field_and_rule(params, field, fragment):
    with pytest.raises(Invalid) as exc:
        SCHEMA.validate(params)
    assert exc.value.data["field"] == field
    assert fragment in exc.value.message and exc.value.message.startswith(f"{field}: ")
    # At the RPC edge the same error names the params member, its rule and details unchanged.
    wire = exc.value.within("params")
    assert wire.field == wire.data["field"] == f"params.{field}"
    assert wire.message == f"params.{field}: {exc.value.rule}"


def test_invalid_within_places_the_whole_value_and_indexes():
    assert Invalid("must be an object", field="").within("params").message == "params: must be an object"
    assert Invalid("bad", field="[2].x").within("messages").field == "messages[2].x"
    plain = Invalid("no field here")
    assert plain.within("params") is plain and plain.message == "no field here"


def test_schema_fills_defaults_and_renders_json_schema():
    assert SCHEMA.validate({"key": "abc"}) == {"key": "abc", "k": 6, "score": 0, "tags": None}
    with pytest.raises(Invalid, match="must be an object, got array"):
        SCHEMA.validate([1])
    js = SCHEMA.json_schema()
    assert js["required"] == ["key"] and js["properties"]["k"] == {
        "type": "integer",
        "default": 6,
        "minimum": 1,
        "maximum": 50,
    }
    assert js["additionalProperties"] is False
