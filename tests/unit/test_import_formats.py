"""The import's readers on their own: the streamed JSON array (any chunking, any cut, any damage) and the
vendors' conversation readers (any field of any conversation replaced by any JSON value), proven by
property: every input gives complete elements / a Conversation, or the one error that names where it
broke — never another exception, never a partial element."""

from __future__ import annotations

import copy
import io

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.portability import chatgpt, claude
from gateway.portability.conversation import BadExport, session_key
from gateway.portability.jsonarray import Malformed, elements
from tests.vendor_exports import chatgpt_sample, claude_sample, long_chatgpt

# JSON values whose strings hold what a scanner could trip on: brackets, quotes, escapes, non-ASCII.
TRICKY = st.text(alphabet=st.sampled_from(list('ab{}[]",:\\/ \n\t\u00e9\u6f22\U0001f5dd')), max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=20,
)
OBJECTS = st.lists(st.dictionaries(TRICKY, JSON, max_size=5), max_size=6)
SAMPLE_EXPORT = orjson.dumps(chatgpt_sample()[0])
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read_all(data: bytes, chunk: int, limit: int = 1 << 20) -> list[bytes]:
    return [e.data for e in elements(io.BytesIO(data), max_element=limit, chunk=chunk)]


@FAST
@given(objs=OBJECTS, chunk=st.integers(1, 64), indent=st.booleans())
def test_every_element_comes_out_whole_however_the_stream_is_chunked(objs, chunk, indent):
    data = orjson.dumps(objs, option=orjson.OPT_INDENT_2 if indent else None)
    got = read_all(data, chunk)
    assert [orjson.loads(g) for g in got] == objs


@FAST
@given(objs=OBJECTS.filter(bool), chunk=st.integers(1, 64), data=st.data())
def test_a_cut_anywhere_yields_the_complete_elements_before_it_then_names_the_one_cut(objs, chunk, data):
    raw = orjson.dumps(objs)
    cut = data.draw(st.integers(0, len(raw) - 1))
    got: list[bytes] = []
    with pytest.raises(Malformed) as err:
        for e in elements(io.BytesIO(raw[:cut]), max_element=1 << 20, chunk=chunk):
            got.append(e.data)
    assert [orjson.loads(g) for g in got] == objs[: len(got)]
    if err.value.index is not None:
        assert err.value.index == len(got)


@FAST
@given(chunk=st.integers(1, 64), data=st.data())
def test_damage_anywhere_gives_conversations_or_one_bad_export_error_and_nothing_else(chunk, data, tmp_path_factory):
    """Through the importer's reader (the scanner, then JSON, then the vendor's reader): bytes changed
    anywhere in a real export give the conversations before the damage and BadExport, never another
    exception."""
    from gateway.portability.importer import Limits, Tally, _Batches

    raw = bytearray(SAMPLE_EXPORT)
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.sampled_from(b'{}[]",:\\ x\x000'))
    path = tmp_path_factory.mktemp("damaged") / "conversations.json"
    path.write_bytes(bytes(raw))
    tally = Tally()
    try:
        batches = _Batches(path, "chatgpt", Limits(batch=2), tally)
    except BadExport:
        return
    try:
        while True:
            got, error = batches.next()
            for conv in got:
                assert conv.turns is not None
            if error is not None:
                assert isinstance(error, BadExport) and error.message.startswith("conversations.json")
                return
            if not got:
                return
    finally:
        batches.close()


def test_an_element_over_the_limit_is_named_and_the_ones_before_come_out():
    raw = orjson.dumps([{"a": 1}, {"big": "x" * 5000}, {"c": 3}])
    got = []
    with pytest.raises(Malformed) as err:
        for e in elements(io.BytesIO(raw), max_element=1000, chunk=64):
            got.append(orjson.loads(e.data))
    assert got == [{"a": 1}] and err.value.index == 1 and "larger than 1000 bytes" in err.value.message


def test_a_string_of_many_chunks_is_scanned_a_few_times_not_once_per_chunk():
    reads = []
    raw = orjson.dumps([{"s": "y" * 3_000_000}])
    got = [e.data for e in elements(io.BytesIO(raw), max_element=1 << 23, on_read=reads.append, chunk=1024)]
    assert orjson.loads(got[0]) == {"s": "y" * 3_000_000}
    assert len(reads) < 40, f"{len(reads)} reads: each re-scan should read as much again"


# ---- the vendors' readers: hardened by class (every field of every conversation) --------------------


def _paths(value, prefix=()):
    """Every path into a JSON value (dict keys and list indexes)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _replace(value, path, new):
    if not path:
        return new
    out = copy.copy(value)
    out[path[0]] = _replace(value[path[0]], path[1:], new)
    return out


CHATGPT, _ = chatgpt_sample()
CLAUDE, _ = claude_sample()
VENDOR_PATHS = [("chatgpt", i, p) for i, c in enumerate(CHATGPT) for p in _paths(c)] + [
    ("claude", i, p) for i, c in enumerate(CLAUDE) for p in _paths(c)
]


@settings(max_examples=600, deadline=None)
@given(which=st.sampled_from(VENDOR_PATHS), new=JSON)
def test_any_field_of_any_conversation_replaced_by_any_value_reads_or_is_named(which, new):
    vendor, index, path = which
    convs, convert = (CHATGPT, chatgpt.convert) if vendor == "chatgpt" else (CLAUDE, claude.convert)
    broken = _replace(convs[index], path, new)
    try:
        conv = convert(broken, index, "conversations.json")
    except BadExport as exc:
        assert exc.message.startswith("conversations.json: conversation ")
        assert exc.data["conversation"]["index"] == index
        return
    assert all(t.role in ("user", "assistant") and t.text.strip() and t.timestamp for t in conv.turns)
    assert len({t.id for t in conv.turns}) == len(conv.turns) or vendor == "claude"
    assert session_key(vendor, conv.id).startswith(vendor + "-")


def test_session_keys_are_stable_and_always_valid():
    from gateway.sessions.history import check_session_key

    assert session_key("chatgpt", "6780a1b2-0000") == "chatgpt-6780a1b2-0000"
    odd = session_key("claude", "a/b c" + "x" * 300)
    assert odd == session_key("claude", "a/b c" + "x" * 300) and check_session_key(odd) == odd
    assert len(odd) <= 128


class Counted(dict):
    """An object of the export that counts every look into it (the input, not our code): `looks[0]`."""

    looks = [0]

    def __getitem__(self, key):
        Counted.looks[0] += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        Counted.looks[0] += 1
        return super().get(key, default)

    def __contains__(self, key):
        Counted.looks[0] += 1
        return super().__contains__(key)

    def items(self):
        Counted.looks[0] += len(self)
        return super().items()


def counted(obj):
    if isinstance(obj, dict):
        return Counted({k: counted(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return [counted(v) for v in obj]
    return obj


def test_a_long_conversation_converts_in_linear_time():
    """Ten times the turns takes ten times the looks into the export per turn, the same (a walk that
    searched the mapping per node would take a hundred): counted, not timed. The time itself is
    scripts/bench_import.py --linear."""

    def looks_per_turn(n: int) -> float:
        conv = counted(long_chatgpt("speed", n).json())
        Counted.looks[0] = 0
        out = chatgpt.convert(conv, 0)
        assert len(out.turns) == n
        return Counted.looks[0] / n

    small, big = looks_per_turn(200), looks_per_turn(2_000)
    assert big <= small * 1.05, (small, big)
