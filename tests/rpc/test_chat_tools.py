"""The chat model calls the memory tools: OpenAI function calling against the fake OpenAI server,
which streams tool calls as OpenAI does (id and name first, arguments in fragments)."""

from __future__ import annotations

import contextlib
import threading

import orjson

import pytest

from gateway.sessions import transcript as tx
from tests.fake_openai import FakeOpenAI
from tests.helpers import wait_for

NAMES = ["memory_search", "memory_get", "memory_set", "memory_delete", "memory_list", "memory_recall", "memory_profile"]


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def _gateway(start_gateway, api, **overrides):
    return await start_gateway(
        memory=True,
        **{"chat.baseUrl": api.base_url, "chat.model": "fake-model", "memory.recall.enabled": False, **overrides},
    )


async def _turn(c, key: str, message: str) -> list[dict]:
    sent = await c.call("chat.send", {"sessionKey": key, "message": message})
    return await c.run_to_end(sent["runId"], timeout=30)


def _records(gw, key: str) -> list[dict]:
    return [r.data for r in tx.iter_records(gw.config.sessions_dir() / f"{key}.jsonl") if r.data["type"] == "message"]


def _chat_requests(api) -> list[dict]:
    return [r["body"] for r in api.requests if r["path"].endswith("/chat/completions")]


async def test_a_run_stores_a_memory_finds_it_and_its_transcript_replays(start_gateway, api):
    gw = await _gateway(start_gateway, api)
    api.script(
        (
            "tools",
            [("memory_set", {"key": "boat.colour", "value": "The boat is painted dark green.", "category": "facts"})],
        ),
        ("tools", [("memory_search", {"query": "boat colour", "sources": ["memory"]})]),
    )
    api.reply = "Noted: your boat is dark green."
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    events = await _turn(c, key, "My boat is dark green. Remember that, then check it.")

    tools = [e["params"] for e in events if e["method"] == "chat.tool"]
    assert [(t["name"], t["status"]) for t in tools] == [
        ("memory_set", "running"),
        ("memory_set", "ok"),
        ("memory_search", "running"),
        ("memory_search", "ok"),
    ]
    assert tools[1]["summary"] == "stored boat.colour" and tools[1]["callId"] == "call_0"
    assert tools[3]["arguments"] == {"query": "boat colour", "sources": ["memory"]}
    assert tools[3]["summary"].endswith("result") or tools[3]["summary"].endswith("results")
    seqs = [e["params"]["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    final = events[-1]
    assert final["method"] == "chat.final"
    assert final["params"]["message"]["content"] == "Noted: your boat is dark green."
    assert {"path": "memory/keyed/facts/boat.colour.md"}.items() <= final["params"]["memory"][0].items()
    assert final["params"]["usage"]["completionTokens"] == 1 + 1 + 6, "usage of all three requests"
    assert (gw.config.agent_workspace("main") / "memory/keyed/facts/boat.colour.md").read_text().count("dark green")

    reqs = _chat_requests(api)
    assert len(reqs) == 3
    assert [t["function"]["name"] for t in reqs[0]["tools"]] == NAMES
    assert "agentId" not in reqs[0]["tools"][0]["function"]["parameters"]["properties"]
    second = reqs[1]["messages"]
    assert second[-2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {
                    "name": "memory_set",
                    "arguments": '{"key": "boat.colour", "value": "The boat is painted dark green.", "category": "facts"}',
                },
            }
        ],
    }
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_0"
    assert second[-1]["content"].startswith("Stored boat.colour in facts")
    found = reqs[2]["messages"][-1]
    assert found["tool_call_id"] == "call_1" and "memory/keyed/facts/boat.colour.md:" in found["content"]
    assert "dark green" in found["content"]

    # The transcript keeps calls and results in OpenAI's shape, results out of the memory index.
    recs = _records(gw, key)
    assert [(r["message"]["role"], bool(r["message"].get("tool_calls"))) for r in recs] == [
        ("user", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", False),
    ]
    assert recs[2]["tool"] == "memory_set" and recs[2]["remember"] is False
    assert recs[2]["message"]["tool_call_id"] == "call_0"

    # The next turn replays the history to the model exactly as it went.
    events = await _turn(c, key, "thanks")
    assert events[-1]["method"] == "chat.final"
    again = _chat_requests(api)[-1]["messages"]
    assert again[1:-2] == reqs[2]["messages"][1:]
    assert again[-2] == {"role": "assistant", "content": "Noted: your boat is dark green."}
    assert again[-1] == {"role": "user", "content": "thanks"}

    # sessions.history shows the calls and results too.
    hist = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
    assert hist[1]["toolCalls"][0]["function"]["name"] == "memory_set"
    assert hist[2]["role"] == "tool" and hist[2]["toolCallId"] == "call_0" and hist[2]["tool"] == "memory_set"
    await c.close()


async def test_bad_tool_calls_become_tool_errors_and_the_run_finishes(start_gateway, api):
    gw = await _gateway(start_gateway, api)
    api.script(
        (
            "tools",
            [
                ("memory_nuke", {"all": True}),
                ("memory_search", '{"query": "boat'),
                ("memory_set", {"key": "huge", "value": "x" * (10 << 20)}),
                ("memory_search", {"query": "boat", "k": 500}),
            ],
        )
    )
    api.reply = "Something went wrong with my tools."
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    events = await _turn(c, key, "try your tools")
    done = [e["params"] for e in events if e["method"] == "chat.tool" and e["params"]["status"] != "running"]
    assert [(t["name"], t["status"]) for t in done] == [
        ("memory_nuke", "error"),
        ("memory_search", "error"),
        ("memory_set", "error"),
        ("memory_search", "error"),
    ]
    assert events[-1]["method"] == "chat.final"
    results = [m["content"] for m in _chat_requests(api)[-1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("Error: unknown tool 'memory_nuke'; the tools are: memory_search, ")
    assert results[1].startswith("Error: arguments are not valid JSON")
    huge = len('{"key": "huge", "value": ""}') + (10 << 20)
    assert results[2].startswith(f"Error: arguments are {huge} characters; the limit is ")
    assert results[3] == "Error: invalid arguments: k: must be <= 50, got 500"
    # Refused for its size: the call is kept as a note with the arguments' head, in the event, the
    # transcript and the next round's request alike.
    note = done[2]["arguments"]
    assert note["refused"].startswith(f"arguments are {huge} characters") and note["head"].startswith('{"key": "huge"')
    assert len(note["head"]) == 200
    step = next(m for m in _chat_requests(api)[-1]["messages"] if m.get("tool_calls"))
    replayed = step["tool_calls"][2]["function"]["arguments"]
    assert (
        len(replayed) < 1000 and replayed == _records(gw, key)[1]["message"]["tool_calls"][2]["function"]["arguments"]
    )
    assert not (gw.config.agent_workspace("main") / "memory/keyed/general/huge.md").exists()
    roles = [r["message"]["role"] for r in _records(gw, key)]
    assert roles == ["user", "assistant", "tool", "tool", "tool", "tool", "assistant"], "nothing lost"
    await c.close()


async def test_a_model_calling_tools_forever_stops_at_the_step_limit_and_says_so(start_gateway, api):
    gw = await _gateway(start_gateway, api, **{"chat.maxToolSteps": 3})
    api.script(*[("tools", [("memory_list", {})])] * 10)
    api.reply = "Here is what I know."
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    events = await _turn(c, key, "list forever")
    assert sum(1 for e in events if e["method"] == "chat.tool" and e["params"]["status"] == "ok") == 3
    reqs = _chat_requests(api)
    assert len(reqs) == 4 and reqs[-1]["tool_choice"] == "none", "the last round: the model must answer"
    assert all("tool_choice" not in r for r in reqs[:-1])
    content = events[-1]["params"]["message"]["content"]
    assert content.startswith("Here is what I know.")
    assert content.endswith("the limit of 3 tool steps for one reply was reached (chat.maxToolSteps).]")
    await c.close()


async def test_tools_can_be_turned_off_or_narrowed(start_gateway, api):
    gw = await _gateway(start_gateway, api, **{"chat.tools": ["memory_search", "memory_get"]})
    api.script(("tools", [("memory_set", {"key": "a", "value": "b"})]))
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    await _turn(c, key, "hi")
    reqs = _chat_requests(api)
    assert [t["function"]["name"] for t in reqs[0]["tools"]] == ["memory_search", "memory_get"]
    assert reqs[1]["messages"][-1]["content"].startswith("Error: tool 'memory_set' is not enabled here (chat.tools)")
    await gw.stop()

    gw = await _gateway(start_gateway, api, state_name="off", **{"chat.tools": False})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    await _turn(c, key, "hi")
    assert "tools" not in _chat_requests(api)[-1]


async def test_a_provider_refusing_tools_is_retried_without_and_remembered(start_gateway, api):
    gw = await _gateway(start_gateway, api)
    api.script(("status", 400, {}))
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    events = await _turn(c, key, "hello")
    assert events[-1]["method"] == "chat.final"
    reqs = _chat_requests(api)
    assert len(reqs) == 2 and "tools" in reqs[0] and "tools" not in reqs[1]
    await _turn(c, key, "again")
    assert "tools" not in _chat_requests(api)[-1], "remembered for the provider"
    assert len(_chat_requests(api)) == 3
    await c.close()


async def test_abort_stops_a_run_mid_tool_and_the_next_run_replays_cleanly(start_gateway, api):
    with FakeOpenAI() as emb:
        gw = await _gateway(
            start_gateway,
            api,
            **{
                "memory.embeddings.provider": "openai",
                "memory.embeddings.baseUrl": emb.base_url,
                "memory.embeddings.apiKey": "test",
                "memory.embeddings.model": "fake-emb",
            },
        )
        (gw.config.agent_workspace("main") / "MEMORY.md").write_text("# Boat\n\nThe boat is green.\n")
        c = await gw.client()
        await c.call("memory.sync")  # vectors exist: a search embeds its query
        hold = threading.Event()
        emb.script(("wait", hold, 30))  # the query's embedding: the tool waits on it
        api.script(("tools", [("memory_search", {"query": "a query no cache has seen"})]))
        key = (await c.call("sessions.create"))["sessionKey"]
        sent = await c.call("chat.send", {"sessionKey": key, "message": "search please"})

        async def held():
            return emb.waiting == 1

        await wait_for(held)
        assert await c.call("chat.abort", {"sessionKey": key}) == {"aborted": True}
        events = await c.run_to_end(sent["runId"])
        assert events[-1]["method"] == "chat.aborted"
        assert [e["params"]["status"] for e in events if e["method"] == "chat.tool"] == ["running"]
        hold.set()

        events = await _turn(c, key, "and now?")
        assert events[-1]["method"] == "chat.final"
        replayed = _chat_requests(api)[-1]["messages"]
        assert not any(m.get("tool_calls") or m["role"] == "tool" for m in replayed), (
            "a call without its result is not sent (the provider would refuse it)"
        )
        assert [m["content"] for m in replayed if m["role"] == "user"] == ["search please", "and now?"]
        await c.close()


async def test_the_offline_responder_works_without_tools(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    events = await _turn(c, key, "hello there")
    assert events[-1]["method"] == "chat.final"
    assert not any(e["method"] == "chat.tool" for e in events)
    await c.close()


async def test_compaction_leaves_tool_results_out_of_the_summary(start_gateway, api):
    gw = await _gateway(start_gateway, api, **{"chat.compactBudgetTokens": 0, "chat.compactKeepRecent": 1})
    api.script(("tools", [("memory_list", {})]))
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    await _turn(c, key, "what do you keep about me")
    assert (await c.call("sessions.compact", {"sessionKey": key}))["compacted"] == 3
    asked = _chat_requests(api)[-1]["messages"][-1]["content"]
    assert asked.startswith("user: what do you keep about me")
    assert "tool:" not in asked and "keyed memories" not in asked
    await c.close()


async def test_a_history_window_that_cuts_a_call_off_from_its_result_sends_neither(start_gateway, api):
    gw = await _gateway(start_gateway, api, **{"chat.historyMessages": 3})
    api.script(("tools", [("memory_list", {})]))
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    await _turn(c, key, "what do you keep")
    await _turn(c, key, "and now?")  # the window: the tool result, the reply, this message
    sent = _chat_requests(api)[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "assistant", "user"]
    await c.close()


def _rss_kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def _tool_call_events(calls: list[tuple[str, str, str]]) -> list[dict]:
    """SSE payloads of one answer that calls (id, name, arguments) each, every call's arguments in one piece."""

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out = []
    for i, (call_id, name, arguments) in enumerate(calls):
        head = {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        out.append(chunk({"role": "assistant", "content": None, "tool_calls": [head]}))
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments}}]}))
    out.append(chunk({}, "tool_calls"))
    out.append({"id": "c1", "object": "chat.completion.chunk", "model": "fake-model", "choices": [], "usage": {}})
    return out


async def test_a_runaway_answer_of_64_huge_calls_and_a_huge_id_stays_bounded(start_gateway, api):
    """Issue 34, part 4: 64 calls of 1 MiB arguments each and a 12 MiB id grew the transcript by 320 MiB
    and the gateway to 1.5 GB, and the id was stored and replayed whole."""
    gw = await _gateway(start_gateway, api)
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    path = gw.config.sessions_dir() / f"{key}.jsonl"
    huge = '{"key": "k", "value": "' + "x" * (1 << 20) + '"}'  # one string, shared by every call
    calls = [("i" * (12 << 20) if i == 0 else f"call_{i}", "memory_set", huge) for i in range(64)]
    api.script(("events", _tool_call_events(calls)))
    api.reply = "I could not store that."
    with contextlib.suppress(OSError):  # the peak RSS from here on (Linux ≥ 4.0; else since the start)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    rss, size = _rss_kib("VmRSS"), path.stat().st_size
    events = await _turn(c, key, "store it all")
    peak = _rss_kib("VmHWM")

    assert events[-1]["method"] == "chat.final"
    assert events[-1]["params"]["message"]["content"] == "I could not store that."
    done = [e["params"] for e in events if e["method"] == "chat.tool" and e["params"]["status"] != "running"]
    assert len(done) == 64 and {d["summary"] for d in done} == {"refused"}
    grown = path.stat().st_size - size
    assert grown < 256 << 10, f"the transcript grew by {grown} bytes"
    step = _records(gw, key)[1]["message"]["tool_calls"]
    assert step[0]["id"] == done[0]["callId"] and len(step[0]["id"]) < 64, "the huge id is replaced"
    assert all(len(s["function"]["arguments"]) < 1000 for s in step)
    last = _chat_requests(api)[-1]
    assert len(orjson.dumps(last)) < 256 << 10, "the next round's request is bounded too"
    assert peak - rss < 300 << 10, f"RSS went from {rss} KiB to a peak of {peak} KiB"
    await c.close()


async def test_calls_past_an_answers_argument_bytes_are_refused_and_the_rest_run(start_gateway, api):
    gw = await _gateway(start_gateway, api, **{"chat.maxToolArgumentBytes": 4096})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    query = '{"query": "' + "boat " * 300 + '"}'  # ~1.5 KB: two fit in 4 KiB, the third does not
    api.script(("events", _tool_call_events([(f"c{i}", "memory_search", query) for i in range(4)])))
    events = await _turn(c, key, "search")
    done = [e["params"]["summary"] for e in events if e["method"] == "chat.tool" and e["params"]["status"] != "running"]
    assert done[2:] == ["refused", "refused"] and "refused" not in done[:2]
    told = [m["content"] for m in _chat_requests(api)[-1]["messages"] if m["role"] == "tool"]
    assert told[2].startswith("Error: this answer's tool-call arguments come to more than 4096 bytes in all")
    stored = _records(gw, key)[1]["message"]["tool_calls"]
    assert stored[1]["function"]["arguments"] == query
    assert orjson.loads(stored[3]["function"]["arguments"])["head"] == query[:200]
    await c.close()
