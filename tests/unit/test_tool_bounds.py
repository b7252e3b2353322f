"""One answer's tool calls within bounds whatever the model sent (issue 34, part 4): chat/tools.bound_calls
against any mix of ids, sizes and cut arguments, as the provider hands them over."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chat.stream import ToolCall
from gateway.chat.tools import bound_calls
from gateway.tools.catalog import MAX_ARGUMENT_BYTES
from tests.helpers import examples

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=3000)


@st.composite
def calls(draw) -> list[ToolCall]:
    out = []
    for _ in range(draw(st.integers(0, 20))):
        arguments = draw(TEXT)
        # The provider keeps a head of arguments that were too long: `size` says how many were sent.
        size = len(arguments) + draw(st.sampled_from([0, 0, 0, 1, MAX_ARGUMENT_BYTES, 12 << 20]))
        call_id = draw(st.one_of(st.text(max_size=40), st.integers(0, 5000).map(lambda n: "i" * n)))
        out.append(ToolCall(call_id, draw(st.sampled_from(["memory_set", "memory_search", "x"])), arguments, size))
    return out


@given(calls(), st.integers(1024, 64 << 10), st.integers(16, 256))
@settings(max_examples=examples(300), deadline=None)
def test_what_is_kept_of_an_answer_is_bounded_and_what_is_refused_is_a_note(batch, max_bytes, max_id):
    sent = [(c.arguments, c.size) for c in batch]
    refused = bound_calls(batch, max_bytes, max_id)
    assert len(refused) == len(batch)
    kept = 0
    for call, (arguments, size), why in zip(batch, sent, refused, strict=True):
        assert len(call.id) <= max_id
        if why is None:
            assert call.arguments == arguments and size == len(arguments), "a call kept is kept whole"
            kept += len(arguments.encode())
        else:
            assert why.error and why.summary == "refused" and why.text.startswith("Error: ")
            note = orjson.loads(call.arguments)  # valid JSON: a provider may parse what is replayed
            assert note["head"] == arguments[:200] and "not kept" in note["refused"]
            assert len(call.arguments.encode()) < 2000
    assert kept <= max_bytes
    refused_for_budget = [i for i, why in enumerate(refused) if why and "in all" in why.text]
    if refused_for_budget:  # past the budget, every later call that is not too long by itself is refused too
        first = refused_for_budget[0]
        assert all(refused[i] is not None for i in range(first, len(batch)))
