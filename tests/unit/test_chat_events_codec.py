"""The one codec of a run's events across gateways (chat/events.py `encode`/`decode`): whatever a run
tells, the gateway that receives it through the database renders the same notification as the gateway
that ran it — byte for byte, error codes included — and anything else is dropped, never raised."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway import errors
from gateway.chat.events import Aborted, ConfirmAsked, Failed, Final, Notice, Said, ToolCalled, decode, encode
from gateway.chat.providers import UpstreamError
from gateway.protocol import code_of, encode as frame, notification

text = st.text(max_size=40)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
domain_errors = st.one_of(
    st.builds(errors.Invalid, text, st.none() | st.just("messages[0].content")),
    st.builds(errors.NotFound, text),
    st.builds(errors.SessionLimit, text, st.integers(0, 99)),
    st.builds(errors.RunActive, text, text),
    st.builds(errors.RateLimited, text, st.integers(0, 10**6)),
    st.builds(errors.Unavailable, text, st.booleans(), st.none() | st.integers(0, 10**6)),
    st.builds(errors.DiskFull, text, text, st.just("ENOSPC")),
    st.builds(errors.InternalError, text),
    st.builds(
        UpstreamError, text, st.integers(400, 599), retryable=st.booleans(), error=st.none() | st.just({"code": "x"})
    ),
)
told = st.one_of(
    st.builds(Said, text),
    st.builds(ToolCalled, text, text, text, st.sampled_from(["running", "ok", "error"]), st.none() | text),
    st.builds(ConfirmAsked, text, text, text, text, st.floats(0, 600)),
    st.builds(Final, st.dictionaries(text, json_value, max_size=4)),
    st.builds(Failed, domain_errors, st.booleans()),
    st.builds(Aborted, text, st.none() | st.just("shutdown")),
)
notices = st.builds(Notice, text, text, st.integers(1, 10**6), told)


def wire(notice: Notice) -> bytes:
    return frame(notification(*notice.notification(code_of)))


@given(notices)
def test_a_relayed_notice_renders_the_same_frame_on_the_far_gateway(notice):
    through_the_database = orjson.loads(orjson.dumps({"t": "topic", "n": encode(notice)}))["n"]
    again = decode(through_the_database)
    assert again is not None
    assert wire(again) == wire(notice)
    assert type(again.event) is type(notice.event) and again.seq == notice.seq


def test_a_failure_crosses_as_its_domain_class_with_its_code():
    failed = Notice("s", "r", 3, Failed(errors.DiskFull("the reply", "No space left", "ENOSPC"), True))
    again = decode(encode(failed))
    assert isinstance(again.event, Failed) and isinstance(again.event.error, errors.DiskFull)
    upstream = Notice("s", "r", 4, Failed(UpstreamError("chat provider said 503", 503, retryable=True), True))
    crossed = decode(encode(upstream))
    assert type(crossed.event.error) is errors.Unavailable  # its nearest domain class: the same code
    assert code_of(crossed.event.error) == code_of(upstream.event.error) == -32050
    method, params = crossed.notification(code_of)
    assert method == "chat.error" and params["error"] == {
        "code": -32050,
        "message": "chat provider said 503",
        "retryable": True,
    }


@given(json_value)
def test_anything_else_from_the_database_is_dropped_not_raised(junk):
    assert decode(junk) is None or isinstance(decode(junk), Notice)


def test_damaged_notices_are_dropped():
    good = encode(Notice("s", "r", 1, Failed(errors.NotFound("gone"), False)))
    for damaged in (
        {**good, "type": "Chunk"},  # not an event subscribers hear
        {**good, "seq": "x"},
        {**good, "fields": {**good["fields"], "error": {**good["fields"]["error"], "class": "Path"}}},
        {**good, "fields": {**good["fields"], "error": {**good["fields"]["error"], "class": "os"}}},
        {**good, "fields": {"nope": 1}},
        {k: v for k, v in good.items() if k != "runId"},
        None,
        [],
        "event",
    ):
        assert decode(damaged) is None, damaged
