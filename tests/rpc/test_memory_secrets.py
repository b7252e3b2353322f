"""Secrets stay where they were said (memory.redactSecrets): the transcript keeps the user's words; the
index, search, the recall into a prompt (as the fake upstream receives it), the model's memory tools and
MCP clients see a mask instead."""

from __future__ import annotations

import pytest

from tests.fake_openai import FakeOpenAI
from tests.rpc.test_mcp import http_client, text

KEY = "sk-" + "proj-" + "Qw3rTy7Uiop9Asdf2Ghjk4Lzxc6Vbnm8"  # assembled: no scanner takes this file for a leak
PASSWORD = "Tr0ub4dor&3"
SAID = f"My OpenAI key for the boat logger is {KEY} and the marina wifi password is {PASSWORD}."


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def _chat_requests(api) -> list[dict]:
    return [r["body"] for r in api.requests if r["path"].endswith("/chat/completions")]


async def _say(c, key: str, message: str) -> list[dict]:
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    return await c.run_to_end(sent["runId"], timeout=30)


async def test_a_secret_said_in_chat_is_masked_in_search_recall_tools_and_mcp_but_kept_in_the_transcript(
    start_gateway, api
):
    gw = await start_gateway(
        memory=True,
        **{"chat.baseUrl": api.base_url, "chat.model": "fake-model", "server.httpPort": -1},
    )
    c = await gw.client()
    said = (await c.call("sessions.create", {"label": "boat logger"}))["sessionKey"]
    api.reply = "Noted."
    await _say(c, said, SAID)
    await c.call("memory.sync")

    history = await c.call("sessions.history", {"sessionKey": said})
    assert history["messages"][0]["content"] == SAID, "the transcript keeps the user's words"

    found = await c.call(
        "memory.search", {"query": "OpenAI key boat logger marina wifi password", "sources": ["sessions"]}
    )
    snippets = " ".join(r["snippet"] for r in found["results"])
    assert "[redacted: OpenAI API key]" in snippets and "[redacted: password]" in snippets
    assert KEY not in str(found) and PASSWORD not in str(found)
    for mode in ("fts", "vector"):  # what is indexed holds the mask: neither list can find the key
        by_key = await c.call("memory.search", {"query": KEY, "mode": mode})
        assert KEY not in str(by_key)

    # Recall into the next turn's prompt, as the upstream receives it; then the model reads the
    # transcript itself through memory_get: the tool result it is sent is masked too.
    ask = (await c.call("sessions.create"))["sessionKey"]
    api.script(("tools", [("memory_get", {"path": f"sessions/{said}.jsonl"})]))
    api.reply = "I will not repeat it."
    await _say(c, ask, "What is the OpenAI key for my boat logger, and the marina wifi password?")
    first, second = _chat_requests(api)[-2:]
    prompt = str(first["messages"])
    assert "boat logger" in prompt and "[redacted: OpenAI API key]" in prompt, "recalled, masked"
    tool_results = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool_results and "[redacted: OpenAI API key]" in tool_results[-1]["content"]
    for request in (first, second):  # this conversation never said them: nothing it is sent holds them
        assert KEY not in str(request) and PASSWORD not in str(request)

    # An MCP client: search and reads of the transcript come masked.
    async with http_client(gw) as mcp:
        hits = text(await mcp.call_tool("memory_search", {"query": "marina wifi password", "sources": ["sessions"]}))
        read = text(await mcp.call_tool("memory_get", {"path": f"sessions/{said}.jsonl"}))
    assert "[redacted: password]" in hits and PASSWORD not in hits
    assert "[redacted: OpenAI API key]" in read and KEY not in read and PASSWORD not in read
    await c.close()


async def test_turned_off_the_index_holds_the_words_and_turning_it_on_rebuilds_it(start_gateway):
    overrides = {"memory": True, "memory.redactSecrets": False}
    gw = await start_gateway(**overrides)
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": SAID})
    await c.run_to_end(sent["runId"])
    await c.call("memory.sync")
    query = {"query": "OpenAI key boat logger", "sources": ["sessions"]}
    assert KEY in str(await c.call("memory.search", query)), "off: memory holds what was said"
    await c.close()
    await gw.stop()

    gw.config.memory.redact_secrets = True  # the signature changes: the index is built anew
    await gw.start()
    c = await gw.client()
    await c.call("memory.sync")
    found = await c.call("memory.search", query)
    assert found["results"] and KEY not in str(found) and "[redacted: OpenAI API key]" in str(found)
    await c.close()
