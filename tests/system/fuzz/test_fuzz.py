"""Property-based protocol fuzzing against a LIVE gateway (`jarvis serve` subprocess, one per module).

Every frame must get a well-formed JSON-RPC answer (or none, for notifications) or the contracted
close code; the gateway never crashes (-32603 would mean a handler blew up), its memory stays
bounded, and a bystander connection keeps being served throughout.

One connection is reused across examples. After each fuzz frame a sentinel request is sent; every
message that arrives before the sentinel's answer is the answer to the fuzz frame (requests on one
connection run concurrently, so the sentinel is a quick `system.health` and we collect by id).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.helpers import GatewayProcess

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
KNOWN_CODES = {-32700, -32600, -32601, -32602, -32001, -32004, -32009, -32029, -32050}
MAX_FRAME = 1 << 20


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    config = "[memory]\nenabled = false\n[chat]\nofflineDeltaDelay = 0.0\n"
    with GatewayProcess.running(tmp_path_factory.mktemp("fuzz") / "state", config) as proc:
        yield proc


def open_ws(gw: GatewayProcess):
    ws = connect(
        gw.url,
        additional_headers={"Authorization": f"Bearer {gw.token}"},
        max_size=None,
        compression=None,
        open_timeout=10,
    )
    return ws.__enter__()  # the context-manager form, kept open across examples


class Conn:
    """A synchronous JSON-RPC connection that knows how to wait for 'everything this frame caused'."""

    _ids = itertools.count(1)

    def __init__(self, gw: GatewayProcess):
        self.gw = gw
        self.ws = open_ws(gw)

    def reopen(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        self.ws = open_ws(self.gw)

    def exchange(self, data: str | bytes, text: bool = True, timeout: float = 10, expect: int = 0) -> list[Any]:
        """Send one frame, then a sentinel; return every non-event message received until the
        sentinel is answered and `expect` answers are in. Requests run concurrently, so an answer may
        come after the sentinel's: a second sentinel then catches stragglers (extra answers)."""
        self.ws.send(data, text=text)
        answers: list[Any] = []
        self._until_sentinel(answers, expect, timeout)
        self._until_sentinel(answers, 0, timeout)
        return answers

    def _until_sentinel(self, answers: list[Any], expect: int, timeout: float) -> None:
        sid = f"sentinel-{next(self._ids)}"
        self.ws.send(orjson.dumps({"id": sid, "method": "system.health"}).decode())
        seen = False
        for _ in range(200):  # bounded: a fuzz frame can cause at most one answer (+ events)
            if seen and len(answers) >= expect:
                return
            msg = orjson.loads(self.ws.recv(timeout=timeout))
            if isinstance(msg, dict) and msg.get("id") == sid:
                assert msg.get("result", {}).get("status") == "ok", msg
                seen = True
            elif isinstance(msg, dict) and "method" in msg and "id" not in msg:
                continue  # an event (e.g. chat.* of a session the fuzz created)
            else:
                answers.append(msg)
        raise AssertionError("sentinel never answered")

    def close(self) -> None:
        self.ws.close()


@pytest.fixture(scope="module")
def conn(gw):
    c = Conn(gw)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def bystander(gw):
    """A connection opened before the fuzzing that must keep working throughout."""
    c = Conn(gw)
    try:
        yield c
    finally:
        c.close()


def assert_wellformed(msg: Any) -> None:
    assert isinstance(msg, dict), msg
    assert msg.get("jsonrpc") == "2.0", msg
    assert "id" in msg, msg
    assert ("result" in msg) != ("error" in msg), msg
    if "error" in msg:
        err = msg["error"]
        assert isinstance(err.get("code"), int) and isinstance(err.get("message"), str), msg
        assert err["code"] in KNOWN_CODES, f"unexpected error code (internal error = a crash): {msg}"
        assert "Traceback" not in err["message"]


def valid_id(v: Any) -> bool:
    return (isinstance(v, str) and len(v) <= 256) or (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63)


def expected_single(obj: Any) -> tuple[int, Any]:
    """(number of answers, id of the answer or ...) the protocol promises for one decoded entry."""
    if not isinstance(obj, dict):
        return 1, None
    if "id" not in obj:
        well = (
            ("jsonrpc" not in obj or obj["jsonrpc"] == "2.0")
            and isinstance(obj.get("method"), str)
            and 0 < len(obj["method"]) <= 128
        )
        return (0, None) if well else (1, None)
    return 1, (obj["id"] if valid_id(obj["id"]) else None)


# ---- strategies ---------------------------------------------------------------------------------
METHODS = [
    "system.health",
    "system.methods",
    "sessions.create",
    "sessions.list",
    "sessions.get",
    "sessions.update",
    "sessions.history",
    "sessions.delete",
    "sessions.subscribe",
    "sessions.unsubscribe",
    "chat.send",
    "chat.abort",
    "memory.search",
    "memory.get",
    "auth",
    "",
]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
ids = (
    st.none()
    | st.integers(-(2**64), 2**64)
    | st.text(max_size=300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.lists(st.integers(), max_size=2)
)
param_keys = st.sampled_from(
    [
        "sessionKey",
        "message",
        "limit",
        "offset",
        "label",
        "before",
        "runId",
        "query",
        "k",
        "token",
        "idempotencyKey",
        "path",
    ]
) | st.text(max_size=10)


@st.composite
def request_like(draw) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    if draw(st.booleans()):
        obj["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "1.0", 2.0, None]))
    if draw(st.integers(0, 3)):
        obj["id"] = draw(ids)
    obj["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=140) | json_scalars)
    if draw(st.booleans()):
        obj["params"] = draw(st.dictionaries(param_keys, json_values, max_size=4) | json_values)
    return obj


frames = json_values | request_like() | st.lists(request_like() | json_values, min_size=0, max_size=55)


def expected_count(value: Any) -> int:
    if isinstance(value, list):
        return 1 if (not value or len(value) > 50 or sum(expected_single(v)[0] for v in value)) else 0
    return expected_single(value)[0]


def check_answers(value: Any, answers: list[Any]) -> None:
    if isinstance(value, list) and (not value or len(value) > 50):
        assert len(answers) == 1 and answers[0]["error"]["code"] == -32600, answers
        assert_wellformed(answers[0])
        return
    if isinstance(value, list):
        want = sum(expected_single(v)[0] for v in value)
        if want == 0:
            assert answers == [], answers
            return
        assert len(answers) == 1 and isinstance(answers[0], list), answers
        assert len(answers[0]) == want, (value, answers)
        for m in answers[0]:
            assert_wellformed(m)
        return
    n, rid = expected_single(value)
    assert len(answers) == n, (value, answers)
    for m in answers:
        assert_wellformed(m)
        if rid is not None:
            assert m["id"] == rid


# ---- properties ---------------------------------------------------------------------------------
@FUZZ
@given(value=frames)
def test_random_json_frames_get_wellformed_answers(conn, value):
    answers = conn.exchange(json.dumps(value), expect=expected_count(value))  # stdlib json: ints beyond 64 bits too
    check_answers(value, answers)


def wrong_type_values(json_type: str) -> st.SearchStrategy[Any]:
    candidates = {
        "string": st.integers()
        | st.booleans()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.lists(st.text(max_size=3), max_size=3)
        | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        # integral floats (1.0) are accepted as integers, so wrong means not-integral or not a number
        "integer": st.text(max_size=8)
        | st.booleans()
        | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer())
        | st.lists(st.integers(), max_size=3)
        | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        "number": st.text(max_size=8) | st.booleans() | st.lists(st.integers(), max_size=3),
        "boolean": st.integers() | st.text(max_size=8) | st.lists(st.booleans(), max_size=2),
        "array": st.integers()
        | st.text(max_size=8)
        | st.booleans()
        | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        "object": st.integers() | st.text(max_size=8) | st.booleans() | st.lists(st.integers(), max_size=2),
    }
    return candidates[json_type]


def valid_value(schema: dict[str, Any]) -> Any:
    t = schema.get("type")
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if t == "string":
        if "pattern" in schema:
            return "fuzz-session"
        return "x" * max(1, schema.get("minLength", 1))
    if t in ("integer", "number"):
        return schema.get("minimum", 1)
    if t == "boolean":
        return False
    if t == "array":
        return []
    return {}


@pytest.fixture(scope="module")
def param_cases(conn):
    answers = conn.exchange(orjson.dumps({"id": "m", "method": "system.methods"}).decode(), expect=1)
    methods = answers[0]["result"]["methods"]
    cases = []
    for m in methods:
        props = m["params"].get("properties", {})
        required = m["params"].get("required", [])
        for name, schema in props.items():
            cases.append(
                (m["name"], name, schema, {r: valid_value(props[r]) for r in required if r != name}, name in required)
            )
    assert len(cases) >= 15, "system.methods lists the params of every method"
    return cases


@FUZZ
@given(data=st.data())
def test_wrong_type_for_every_param_is_32602_naming_it(conn, param_cases, data):
    method, name, schema, others, required = data.draw(st.sampled_from(param_cases), label="case")
    field = f"params.{name}"
    if schema["type"] == "array" and schema.get("items", {}).get("type") and data.draw(st.booleans()):
        bad: Any = [data.draw(wrong_type_values(schema["items"]["type"]))]
        field += "[0]"
    else:
        bad = data.draw(wrong_type_values(schema["type"]) | (st.none() if required else st.nothing()))
    answers = conn.exchange(json.dumps({"id": 7, "method": method, "params": {**others, name: bad}}), expect=1)
    assert len(answers) == 1, answers
    err = answers[0].get("error")
    assert err is not None and err["code"] == -32602, (method, name, bad, answers)
    assert err["data"]["field"] == field, (method, name, bad, err)
    assert err["message"].startswith(field + ":")


def test_every_method_and_param_was_covered(param_cases):
    """The wrong-type property samples from this list: make sure it spans every method."""
    assert {c[0] for c in param_cases} >= {
        "sessions.get",
        "sessions.history",
        "chat.send",
        "chat.abort",
        "sessions.list",
        "sessions.create",
        "sessions.update",
    }


@pytest.mark.parametrize("depth", [1025, 10_000, 100_000])
@pytest.mark.parametrize("kind", ["array", "object", "mixed"])
def test_deep_nesting_is_a_parse_error_not_a_crash(conn, depth, kind):
    if kind == "array":
        text = "[" * depth + "]" * depth
    elif kind == "object":
        text = '{"a":' * depth + "1" + "}" * depth
    else:
        text = '{"id":1,"method":"sessions.list","params":{"x":' + "[" * depth + "]" * depth + "}}"
    answers = conn.exchange(text, expect=1)
    assert len(answers) == 1 and answers[0]["error"]["code"] == -32700, answers[0]
    assert "depth" in answers[0]["error"]["message"] or "recursion" in answers[0]["error"]["message"]


def test_nesting_just_under_the_parser_limit_is_answered(conn):
    text = '{"id":1,"method":"sessions.list","params":{"limit":' + "[" * 1000 + "]" * 1000 + "}}"
    answers = conn.exchange(text, expect=1)
    assert answers[0]["error"]["code"] == -32602 and answers[0]["error"]["data"]["field"] == "params.limit"
    batch = (
        "["
        + ",".join(['{"id":%d,"method":"system.health","params":%s}' % (i, "[" * 900 + "]" * 900) for i in range(50)])
        + "]"
    )
    answers = conn.exchange(batch, expect=1)
    assert len(answers[0]) == 50 and all(a["error"]["code"] == -32602 for a in answers[0])


@pytest.mark.parametrize("filler", ["a", "é", "😀", "\\u0000"])
def test_huge_strings_near_the_frame_limit(conn, filler):
    head = '{"id":"big","method":"chat.send","params":{"sessionKey":"nope","message":"'
    tail = '"}}'
    room = MAX_FRAME - len(head) - len(tail) - 16
    n = room // len(filler.encode())
    text = head + filler * n + tail
    assert len(text.encode()) <= MAX_FRAME
    answers = conn.exchange(text, timeout=20, expect=1)
    assert answers[0]["id"] == "big" and answers[0]["error"]["code"] == -32602
    assert answers[0]["error"]["data"]["field"] == "params.message"
    # a huge id / method name is refused with -32600 (and the id not echoed when it is invalid)
    answers = conn.exchange(orjson.dumps({"id": "i" * 500_000, "method": "system.health"}).decode(), expect=1)
    assert answers[0]["error"]["code"] == -32600 and answers[0]["id"] is None
    answers = conn.exchange(orjson.dumps({"id": 1, "method": "m" * 900_000}).decode(), expect=1)
    assert answers[0]["error"]["code"] == -32600 and answers[0]["id"] == 1


@pytest.mark.parametrize(
    "text,code,count",
    [
        ("[]", -32600, None),
        ("[" + ",".join(["1"] * 51) + "]", -32600, None),
        ("[1,2,3]", None, 3),
        ('[[],[{}],{"id":1}]', None, 3),
        ('[{"method":"system.health"},{"method":"system.health"}]', None, 0),
        ('[{"id":1,"method":"system.health"},{"method":"nope"},{"id":2}]', None, 2),
        ('[{"type":"auth","token":"x"}]', None, 1),
        ("[" + ",".join(['{"id":%d,"method":"system.health"}' % i for i in range(50)]) + "]", None, 50),
    ],
)
def test_invalid_and_edge_batches(conn, text, code, count):
    answers = conn.exchange(text, expect=0 if count == 0 else 1)
    if code is not None:
        assert len(answers) == 1 and answers[0]["error"]["code"] == code
    elif count == 0:
        assert answers == []
    else:
        assert len(answers) == 1 and isinstance(answers[0], list) and len(answers[0]) == count
        for m in answers[0]:
            assert_wellformed(m)


@settings(max_examples=60, deadline=None)
@given(blob=st.binary(min_size=0, max_size=2048))
def test_random_bytes_in_binary_frames(conn, blob):
    answers = conn.exchange(blob, text=False, expect=1)
    assert len(answers) == 1 and answers[0]["error"]["code"] == -32600 and answers[0]["id"] is None


@settings(max_examples=40, deadline=None)
@given(blob=st.binary(min_size=1, max_size=512))
def test_random_bytes_in_text_frames(gw, conn, blob):
    """Valid UTF-8 is parsed like any text; invalid UTF-8 in a text frame is closed with 1007."""
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        try:
            value, n = orjson.loads(text), None
        except orjson.JSONDecodeError:
            value, n = None, 1
        answers = conn.exchange(blob, text=True, expect=expected_count(value) if n is None else n)
        check_answers_text(text, answers)
        return
    ws = open_ws(gw)
    try:
        ws.send(blob, text=True)
        with pytest.raises(ConnectionClosed) as info:
            for _ in range(5):
                ws.recv(timeout=10)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1007
    finally:
        ws.close()


def check_answers_text(text: str, answers: list[Any]) -> None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        assert len(answers) == 1 and answers[0]["error"]["code"] == -32700 and answers[0]["id"] is None
        return
    check_answers(value, answers)


def test_burst_keeps_memory_bounded_and_bystander_served(gw, conn, bystander):
    """A burst of junk (near-limit frames, deep nesting, bad batches) from several connections: RSS
    after the burst stays within a generous bound of RSS before it, and the bystander is served."""
    pid = gw.proc.pid

    def burst(rounds: int) -> None:
        conns = [Conn(gw) for _ in range(4)]
        try:
            big = orjson.dumps({"id": 1, "method": "sessions.list", "params": {"x": "y" * 900_000}}).decode()
            deep = "[" * 50_000 + "]" * 50_000
            batch = orjson.dumps([{"id": i, "method": "nope", "params": list(range(200))} for i in range(50)]).decode()
            for _ in range(rounds):
                for c in conns:
                    for frame in (big, deep, batch, "{" * 1000, "\x00garbage"):
                        c.ws.send(frame)
                for c in conns:
                    c.exchange('{"id":"x","method":"system.methods"}', timeout=20, expect=1)
        finally:
            for c in conns:
                c.close()

    burst(3)  # warm-up: allocator arenas, caches
    before = rss_kib(pid)
    burst(15)
    after = rss_kib(pid)
    assert after - before < 64 * 1024, f"RSS grew from {before} KiB to {after} KiB"
    answers = bystander.exchange('{"id":"b","method":"system.health"}', expect=1)
    assert answers[0]["result"]["status"] == "ok"
    assert gw.proc.poll() is None, "the gateway is still running"
    log = gw.log.read_text(errors="replace")
    assert "Traceback" not in log and '"level": "error"' not in log and "internal error" not in log, log[-3000:]
