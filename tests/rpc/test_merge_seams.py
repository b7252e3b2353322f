"""Where the merged work of issues 23-29 meets (a hostile review): the OpenAI endpoint's relay under the
upstream checks and the shutdown grace, the HTTP API listener under the pre-auth limits. Each test
failed before its fix; real gateway, real clients, tests/fake_openai.py as the upstream."""

from __future__ import annotations

import asyncio

import httpx2 as httpx
import openai
import pytest

from tests.fake_openai import FakeOpenAI
from tests.rpc.test_openai_api import sdk, upstream_gateway


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


async def test_keepalive_comments_do_not_hold_a_relayed_stream_past_the_timeout(start_gateway, api):
    # chat.send was paced (chat.timeout between chunks with content); the relay of the OpenAI endpoint
    # was not: an upstream sending only ": keep-alive" held the request and its session for good.
    api.reply = "first then the rest"
    api.script(("comments", 60, 0.5))  # 30 s of them, then the rest: held off, the stream would end with it
    gw = await upstream_gateway(start_gateway, api, **{"chat.timeout": 1.5})
    got = []
    async with sdk(gw, default_headers={"X-Jarvis-Session": "kept-alive"}) as client:
        stream = await client.chat.completions.create(
            model="fake-model", stream=True, messages=[{"role": "user", "content": "hello"}]
        )
        with pytest.raises(openai.APIError) as exc:
            async for ch in stream:
                got.append(ch.choices[0].delta.content)
    assert got == ["first "]
    assert "no content for 1.5 s" in exc.value.message


async def _streamed(gw, key: str, message: str) -> str:
    """The raw SSE body of a streamed completion of `message` in session `key`."""
    headers = {"Authorization": f"Bearer {gw.token}", "X-Jarvis-Session": key}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=headers) as http:
        async with http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": message}]},
        ) as r:
            return (await r.aread()).decode()


def chunk(content):
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }


async def test_a_relayed_surrogate_split_across_chunks_reaches_the_client_as_sent(start_gateway, api):
    # A proxy cutting by UTF-16 units: chat.send joins the halves (upstream.checked); the relay sends the
    # upstream's chunks as they are, and orjson refused the lone surrogate: the SSE body broke off
    # mid-stream without an error or [DONE], and a completion without streaming was a plain-text 500.
    api.script(("events", [chunk("smile \ud83d"), chunk("\ude00 end")]))
    gw = await upstream_gateway(start_gateway, api)
    body = await _streamed(gw, "split", "smile")
    assert body.endswith("data: [DONE]\n\n"), body
    assert '"smile \\ud83d"' in body and '"\\ude00 end"' in body  # the halves as the upstream sent them
    headers = {"Authorization": f"Bearer {gw.token}", "X-Jarvis-Session": "split"}
    async with httpx.AsyncClient(base_url=gw.http_url, headers=headers) as http:
        api.reply = "a lone \ud83d here"
        r = await http.post(
            "/v1/chat/completions", json={"model": "fake-model", "messages": [{"role": "user", "content": "once more"}]}
        )
        assert r.status_code == 200, r.text
        assert '"a lone \\ud83d here"' in r.text
    history = await (await gw.client()).call("sessions.history", {"sessionKey": "split"})
    assert [m["content"] for m in history["messages"] if m["role"] == "assistant"] == [
        "smile \U0001f600 end",
        "a lone \ufffd here",
    ]  # the transcript keeps the repaired text


async def _closed_within(reader, seconds: float) -> bool:
    """Whether the gateway closed the socket (EOF or reset) within `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(1024):
                pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def test_the_http_listener_drops_sockets_that_never_finish_their_request(start_gateway):
    # The WebSocket port counts every socket from accept (server.maxPendingSockets, handshakeTimeout);
    # server.httpPort had no such bound: sockets that sent nothing, or a request line and then a header
    # byte now and then, were held for good, and enough of them used up the descriptors.
    gw = await start_gateway(
        **{
            "server.httpPort": -1,
            "server.handshakeTimeout": 2.0,
            "server.maxPendingSockets": 4,
            "server.maxPendingPerAddress": 4,
        }
    )
    port = int(gw.http_url.rsplit(":", 1)[1])
    slow_reader, slow = await asyncio.open_connection("127.0.0.1", port)
    slow.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    await slow.drain()
    assert await _closed_within(slow_reader, 5.0), "a request whose headers never end is dropped"

    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(8)]
    closed = [await _closed_within(r, 1.0) for r, _ in idle[:4]]  # well before handshakeTimeout
    assert closed == [True] * 4, "past maxPendingSockets the oldest silent ones are dropped"
    assert gw.gw.server.admission.dropped == 4
    assert await _closed_within(idle[-1][0], 5.0), "and the rest after server.handshakeTimeout"
    for _, w in idle:
        w.close()

    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        assert (await http.get("/v1/models")).status_code == 200  # a real request still goes through
        await asyncio.sleep(2.5)  # longer than handshakeTimeout: the keep-alive connection is reused or redone
        assert (await http.get("/v1/models")).status_code == 200


async def test_a_relayed_stream_the_shutdown_stops_ends_with_an_error_not_quietly(start_gateway, api):
    # A restart during a streamed completion: past server.shutdownGrace the run is aborted (partial kept,
    # chat.aborted reason "shutdown"), and the SSE body simply ended: no error, no [DONE], no
    # finish_reason. The SDK ends such a stream without a word, so the client took half a reply as whole.
    api.reply = " ".join(f"word{i}" for i in range(40))
    api.chunk_delay = 0.2
    gw = await upstream_gateway(start_gateway, api, **{"server.shutdownGrace": 0.5})
    got = []
    async with sdk(gw, default_headers={"X-Jarvis-Session": "restart"}) as client:
        stream = await client.chat.completions.create(
            model="fake-model", stream=True, messages=[{"role": "user", "content": "talk"}]
        )
        with pytest.raises(openai.APIError) as exc:
            async for ch in stream:
                got.append(ch.choices[0].delta.content)
                if len(got) == 2:
                    stopping = asyncio.create_task(gw.stop())
    await stopping
    assert 2 <= len(got) < 40
    assert "stopping" in exc.value.message and exc.value.code == "aborted"


async def test_relayed_chunks_of_odd_shapes_neither_break_the_stream_nor_crash_the_run(start_gateway, api, caplog):
    # `choices` that is not a list, usage counts of Infinity (Python's json reads it): the relay's own
    # reading of the chunks raised TypeError / OverflowError: the SSE body broke off without an error and
    # the run was logged as crashed ("internal error"), although upstream.checked guards chat.send.
    api.script(
        (
            "events",
            [
                chunk("Hello"),
                {"id": "c1", "object": "chat.completion.chunk", "choices": 5},
                '{"id": "c1", "choices": [], "usage": {"prompt_tokens": Infinity, "completion_tokens": 1}}',
                chunk(" there"),
            ],
        )
    )
    gw = await upstream_gateway(start_gateway, api)
    body = await _streamed(gw, "odd", "hi")
    assert body.endswith("data: [DONE]\n\n"), body
    assert '"choices":5' in body  # relayed as the upstream sent it
    history = await (await gw.client()).call("sessions.history", {"sessionKey": "odd"})
    assert [m["content"] for m in history["messages"]] == ["hi", "Hello there"]


async def _tool_session(start_gateway, api):
    """A gateway with memory tools and the fake upstream, and a new session → (client, key)."""
    gw = await start_gateway(
        memory=True,
        **{
            "chat.baseUrl": api.base_url,
            "chat.model": "fake-model",
            "memory.recall.enabled": False,
            "chat.maxRetries": 0,
        },
    )
    c = await gw.client()
    return c, (await c.call("sessions.create"))["sessionKey"]


async def _first_reply(start_gateway, api):
    """A gateway with memory tools, a session, and its first reply (not using tools) → (client, key, reply)."""
    c, key = await _tool_session(start_gateway, api)
    api.reply = "First answer."
    sent = await c.call("chat.send", {"sessionKey": key, "message": "what do you know about boats?"})
    return c, key, (await c.run_to_end(sent["runId"], timeout=30))[-1]["params"]["message"]


async def test_a_regenerated_reply_that_calls_tools_can_be_regenerated_again(start_gateway, api):
    # chat.regenerate (issue 28) met the tool loop (issue 24): the new version's tool calls and results
    # are appended after the reply it replaces, the new version is shown at the first version's place,
    # so the conversation ended with a tool result: history showed the calls after the reply, and the
    # reply could not be regenerated again ("only the session's last reply can be regenerated").
    c, key, v1 = await _first_reply(start_gateway, api)

    api.script(("tools", [("memory_search", {"query": "boats"})]))
    api.reply = "Second answer, after searching."
    sent = await c.call("chat.regenerate", {"sessionKey": key, "messageId": v1["id"]})
    events = await c.run_to_end(sent["runId"], timeout=30)
    assert [e["method"] for e in events if e["method"] == "chat.tool"] == ["chat.tool", "chat.tool"]
    v2 = events[-1]["params"]["message"]
    assert v2["content"] == "Second answer, after searching."

    history = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"], history
    assert history[1]["toolCalls"][0]["function"]["name"] == "memory_search"  # v2's call, before v2
    assert history[-1]["id"] == v2["id"] and len(history[-1]["versions"]) == 2
    api.reply = "Third answer."
    sent = await c.call("chat.regenerate", {"sessionKey": key, "messageId": v2["id"]})
    v3 = (await c.run_to_end(sent["runId"], timeout=30))[-1]["params"]["message"]
    asked = [r for r in api.requests if r["path"].endswith("/chat/completions")][-1]["body"]["messages"]
    assert [m["role"] for m in asked[1:]] == ["user"], "a new version answers the question afresh"
    history = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"] and history[-1]["id"] == v3["id"]
    assert v3["content"] == "Third answer." and v3["replaces"] == v1["id"]
    # The next turn's prompt: the question, the latest version's own calls and results, its text.
    sent = await c.call("chat.send", {"sessionKey": key, "message": "and now?"})
    await c.run_to_end(sent["runId"], timeout=30)
    prompt = [r for r in api.requests if r["path"].endswith("/chat/completions")][-1]["body"]["messages"]
    assert [(m["role"], m.get("content")) for m in prompt[1:]] == [
        ("user", "what do you know about boats?"),
        ("assistant", "Third answer."),
        ("user", "and now?"),
    ]


async def test_a_session_model_that_refuses_tools_does_not_turn_tools_off_for_every_model(start_gateway, api):
    # A session's own model (issue 28) on a server hosting several (Ollama answers HTTP 400 "does not
    # support tools" for some): the refusal (issue 24) was remembered for the whole provider, so every
    # session lost its memory tools, those on models that have them too, until the gateway restarted.
    gw = await start_gateway(
        memory=True,
        **{
            "chat.baseUrl": api.base_url,
            "chat.model": "fake-model",
            "memory.recall.enabled": False,
            "chat.maxRetries": 0,
        },
    )
    c = await gw.client()
    small = (await c.call("sessions.create", {"model": "tiny-no-tools"}))["sessionKey"]
    api.script(("status", 400, {}))
    sent = await c.call("chat.send", {"sessionKey": small, "message": "hello"})
    assert (await c.run_to_end(sent["runId"], timeout=30))[-1]["method"] == "chat.final"
    sent = await c.call("chat.send", {"sessionKey": small, "message": "again"})
    await c.run_to_end(sent["runId"], timeout=30)
    reqs = [r["body"] for r in api.requests if r["path"].endswith("/chat/completions")]
    assert [("tools" in r, r["model"]) for r in reqs] == [
        (True, "tiny-no-tools"),
        (False, "tiny-no-tools"),
        (False, "tiny-no-tools"),
    ], "remembered for that model"

    other = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": other, "message": "hello"})
    await c.run_to_end(sent["runId"], timeout=30)
    last = [r["body"] for r in api.requests if r["path"].endswith("/chat/completions")][-1]
    assert last["model"] == "fake-model" and "tools" in last, "the configured model still gets its tools"


async def test_a_regeneration_that_fails_after_a_tool_call_leaves_the_reply_as_it_was(start_gateway, api):
    # "A failed or aborted regeneration leaves the versions before it as they were": but its tool calls
    # and results, appended before it failed, stayed after the reply; the conversation ended with a tool
    # result, so the reply could not be regenerated again and history showed calls no reply answered.
    c, key, v1 = await _first_reply(start_gateway, api)

    api.script(("tools", [("memory_search", {"query": "boats"})]), ("status", 500, {}))
    sent = await c.call("chat.regenerate", {"sessionKey": key, "messageId": v1["id"]})
    assert (await c.run_to_end(sent["runId"], timeout=30))[-1]["method"] == "chat.error"
    history = (await c.call("sessions.history", {"sessionKey": key}))["messages"]
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "what do you know about boats?"),
        ("assistant", "First answer."),
    ], history

    api.reply = "Second answer."
    sent = await c.call("chat.regenerate", {"sessionKey": key, "messageId": v1["id"]})
    v2 = (await c.run_to_end(sent["runId"], timeout=30))[-1]["params"]["message"]
    assert v2["content"] == "Second answer." and v2["replaces"] == v1["id"]


async def test_the_offline_responder_answers_a_relayed_message_made_of_content_parts(start_gateway):
    # The OpenAI endpoint accepts content as a list of parts (as OpenAI does); the offline responder, the
    # default without an upstream, read the last user message's content as a string: AttributeError, a
    # crashed run and a 500 "internal error" for the most ordinary vision-style request.
    gw = await start_gateway(**{"server.httpPort": -1})
    async with httpx.AsyncClient(base_url=gw.http_url, headers={"Authorization": f"Bearer {gw.token}"}) as http:
        r = await http.post(
            "/v1/chat/completions",
            json={
                "model": "offline-responder",
                "messages": [
                    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "hello in parts"},
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                        ],
                    },
                ],
            },
        )
    assert r.status_code == 200, r.text
    assert "hello in parts" in r.json()["choices"][0]["message"]["content"]


async def test_tool_arguments_with_a_surrogate_pair_split_across_fragments_are_joined(start_gateway, api):
    # upstream.checked joins a surrogate pair split across two text deltas (issue 29), but tool call
    # arguments (issue 24) came through as the halves: a str no JSON encoder takes, so the chat.tool
    # event and the transcript line raised and the run crashed ("internal error") after the call.
    def call(delta):
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }

    api.script(
        (
            "events",
            [
                call(
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_s",
                                "type": "function",
                                "function": {"name": "memory_set", "arguments": ""},
                            }
                        ],
                    }
                ),
                call(
                    {"tool_calls": [{"index": 0, "function": {"arguments": '{"key": "mood", "value": "happy \ud83d'}}]}
                ),
                call({"tool_calls": [{"index": 0, "function": {"arguments": '\ude00 today"}'}}]}),
                {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": "fake-model",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                },
            ],
        )
    )
    api.reply = "Noted."
    c, key = await _tool_session(start_gateway, api)
    sent = await c.call("chat.send", {"sessionKey": key, "message": "I am happy today"})
    events = await c.run_to_end(sent["runId"], timeout=30)
    assert events[-1]["method"] == "chat.final", events[-1]
    tools = [e["params"] for e in events if e["method"] == "chat.tool"]
    assert tools[-1]["status"] == "ok" and tools[-1]["arguments"]["value"] == "happy \U0001f600 today"
    got = await c.call("memory.get", {"key": "mood"})
    assert got["value"] == "happy \U0001f600 today"


async def test_a_relayed_reply_sent_as_content_parts_is_kept_in_the_transcript(start_gateway, api):
    # chat.send takes delta content given as a list of parts (upstream.checked, issue 29); the relay read
    # only string content, so the client got the text and the transcript kept an empty reply.
    api.script(
        (
            "events",
            [
                chunk([{"type": "text", "text": "Hello "}, {"type": "image_url", "image_url": {"url": "x"}}]),
                chunk("there"),
            ],
        )
    )
    gw = await upstream_gateway(start_gateway, api)
    body = await _streamed(gw, "parts", "hi")
    assert body.endswith("data: [DONE]\n\n"), body
    history = await (await gw.client()).call("sessions.history", {"sessionKey": "parts"})
    assert [m["content"] for m in history["messages"]] == ["hi", "Hello there"]


async def test_a_streaming_client_that_stops_reading_frees_its_session_and_the_upstream(start_gateway, api):
    # The relay holds at most QUEUE_HIGH chunks for a slow client, then stops reading the upstream until
    # the client reads: with no bound on that wait, a client that never read held the run (the session
    # answered 409 to everyone), its upstream request and its chunks until the gateway stopped. A WebSocket subscriber
    # that stops reading is closed after server.slowConsumerSeconds; so is this run now.
    from tests.helpers import wait_for

    api.reply = " ".join("x" * 999 for _ in range(6000))  # 6 MB: more than the socket buffers hold
    gw = await upstream_gateway(
        start_gateway,
        api,
        **{"server.slowConsumerSeconds": 1.0, "chat.maxReplyChars": 5_000_000, "server.maxReplyBytes": 32 << 20},
    )
    port = int(gw.http_url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"model": "fake-model", "stream": true, "messages": [{"role": "user", "content": "all of it"}]}'
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + gw.token.encode() + b"\r\nX-Jarvis-Session: stalled\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    await writer.drain()  # and never read
    chat = gw.gw.services.agents["main"].chat
    await wait_for(lambda: _true("stalled" in chat.active), timeout=10)

    async def freed():
        return not chat.active

    await wait_for(freed, timeout=10)
    # Its socket, with megabytes unsent, was held too (uvicorn has no write timeout): dropped alike.
    await wait_for(lambda: _true(not gw.gw.http._server.server_state.connections), timeout=10)
    api.reply = "free again"
    async with sdk(gw, default_headers={"X-Jarvis-Session": "stalled"}) as client:  # not 409 session_busy
        done = await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "free again"
    writer.close()


async def _true(value):
    return value


async def test_a_model_that_streams_hundreds_of_tool_calls_is_held_to_a_bounded_number(start_gateway, api):
    # At most 16 calls run per step (the rest answered "skipped"), but every call streamed was kept (up to
    # 1 MiB of arguments each), recorded in the transcript and told twice as chat.tool: a runaway or
    # hostile upstream streaming thousands of calls made the gateway hold gigabytes and write as much.
    from gateway.chat.openai_provider import MAX_TOOL_CALLS

    api.script(("tools", [("memory_list", {})] * (MAX_TOOL_CALLS + 100)))
    api.reply = "Done."
    c, key = await _tool_session(start_gateway, api)
    sent = await c.call("chat.send", {"sessionKey": key, "message": "list everything, many times"})
    events = await c.run_to_end(sent["runId"], timeout=60)
    assert events[-1]["method"] == "chat.final", events[-1]
    assert len([e for e in events if e["method"] == "chat.tool"]) == 2 * MAX_TOOL_CALLS
    second = [r["body"] for r in api.requests if r["path"].endswith("/chat/completions")][1]["messages"]
    assert len(second[-MAX_TOOL_CALLS - 1]["tool_calls"]) == MAX_TOOL_CALLS  # every call kept has its result
    assert [m["role"] for m in second[-MAX_TOOL_CALLS:]] == ["tool"] * MAX_TOOL_CALLS
