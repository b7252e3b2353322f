"""What a port on loopback answers is anyone's: discovery's reading of it never raises, whatever the bytes."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chat.discovery import chat_models, parse_models, summary
from tests.helpers import examples

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["data", "models", "id", "name", "model", "owned_by"]), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=examples(200))
@given(body=st.binary(max_size=200) | JSON.map(orjson.dumps), tags=st.booleans())
def test_any_answer_is_read_as_a_list_of_names_or_nothing(body, tags):
    ids, owner = parse_models(body, ollama_tags=tags)
    assert all(isinstance(i, str) and i.strip() and len(i) <= 256 for i in ids)
    assert owner is None or isinstance(owner, str)


def test_the_two_wire_formats_and_embedding_models_passed_over():
    v1 = orjson.dumps({"data": [{"id": "nomic-embed-text", "owned_by": "llamacpp"}, {"id": "qwen"}]})
    assert parse_models(v1, ollama_tags=False) == (["nomic-embed-text", "qwen"], "llamacpp")
    tags = orjson.dumps({"models": [{"name": "llama3.2:latest"}, {"model": "bge-m3-embed"}, {"name": ""}, 3]})
    assert parse_models(tags, ollama_tags=True) == (["llama3.2:latest", "bge-m3-embed"], "ollama")
    assert chat_models(["nomic-embed-text", "mxbai-EMBED-large", "llama3.2"]) == ["llama3.2"]


def test_the_one_line_summaries():
    assert summary({"provider": "offline", "reason": "no model server answered on loopback ports 11434"}) == (
        "the offline responder (no model server answered on loopback ports 11434; set chat.baseUrl or "
        "OPENAI_BASE_URL, or start a local model server)"
    )
    found = {
        "provider": "openai",
        "model": "m",
        "baseUrl": "http://127.0.0.1:1234/v1",
        "discovered": True,
        "server": "LM Studio",
    }
    assert summary(found) == "m on LM Studio at http://127.0.0.1:1234/v1 (found on this machine)"
    assert summary({"provider": "openai", "model": "gpt", "baseUrl": "https://api.openai.com/v1"}) == (
        "gpt at https://api.openai.com/v1"
    )
