"""The /v1 first steps a newcomer (or a script) takes (issue 35): the README's snippet works offline under
any model name, two conversations that start alike stay two, and what one request said is recalled by
the next one sent right after."""

from __future__ import annotations

import json

import openai
import pytest

from tests.fake_openai import FakeOpenAI
from tests.rpc.test_openai_api import chat_requests, memory_gateway_overrides, said, sdk, transcript, upstream_gateway


async def test_the_offline_responder_answers_under_any_model_name_and_lists_its_own(start_gateway):
    gw = await start_gateway(**{"server.httpPort": -1})
    async with sdk(gw) as client:
        assert [m.id for m in (await client.models.list()).data] == ["offline-responder"]
        reply = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Where did I park?"}]
        )
        assert reply.model == "gpt-4o-mini"
        assert "Where did I park?" in reply.choices[0].message.content
        stream = await client.chat.completions.create(
            model="gpt-5", stream=True, messages=[{"role": "user", "content": "hello"}]
        )
        chunks = [ch async for ch in stream]
    assert {ch.model for ch in chunks} == {"gpt-5"}
    assert "hello" in "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)


@pytest.mark.parametrize("replies", ["alike", "different"])
async def test_two_conversations_that_start_alike_stay_two_once_they_differ(start_gateway, replies):
    """Both say "hello"; with replies alike (the offline responder's) their first turns cannot be told
    apart, so each goes on in a session of its own from the turn they differ; with different replies
    each is one session from the start."""
    with FakeOpenAI() as api:
        gw = await upstream_gateway(start_gateway, api)
        keys: dict[str, list[str]] = {"a": [], "b": []}
        histories = {name: [{"role": "user", "content": "hello"}] for name in keys}
        async with sdk(gw) as client:
            for turn in range(4):
                for name, history in histories.items():
                    api.reply = "Hi there." if replies == "alike" else f"Hi there, {name}."
                    raw = await client.chat.completions.with_raw_response.create(model="fake-model", messages=history)
                    keys[name].append(raw.headers["x-jarvis-session"])
                    history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
                    history.append({"role": "user", "content": f"conversation {name}, turn {turn + 1}"})
    first = 1 if replies == "alike" else 0  # the turn from which each conversation is known
    for name in keys:
        assert len(set(keys[name][first:])) == 1, keys  # each stays in its session
        kept = said(transcript(gw, keys[name][-1]))
        assert kept == [(m["role"], m["content"]) for m in histories[name][2 * first : -1]], name
    assert not set(keys["a"]) & set(keys["b"])  # and the two are two
    assert chat_requests(api)[-1]["messages"] == histories["b"][:-2]  # the upstream got the history as sent


async def test_a_fact_said_in_one_request_is_recalled_by_the_next_sent_right_after(start_gateway):
    """Read-your-writes: a script's second request must not race the indexing of its first."""
    with FakeOpenAI() as api:
        overrides = memory_gateway_overrides(api)
        overrides["memory.sync.sessionDebounceMs"] = 5000  # the default's order of magnitude, not 0
        gw = await upstream_gateway(start_gateway, api, **overrides)
        async with sdk(gw) as client:
            for i, (told, asked) in enumerate(
                [
                    ("Remember: my locker code is 4512.", "What is my locker code?"),
                    ("Remember: the wifi password is plum-horse-91.", "What is the wifi password?"),
                ]
            ):
                api.reply = "Noted."
                await client.chat.completions.create(
                    model="fake-model", messages=[{"role": "user", "content": told}], user=f"script{i}"
                )
                api.reply = "Here."
                raw = await client.chat.completions.with_raw_response.create(
                    model="fake-model", stream=True, messages=[{"role": "user", "content": asked}]
                )
                _ = [ch async for ch in raw.parse()]
                system = chat_requests(api)[-1]["messages"][0]
                assert (
                    system["role"] == "system" and told.split(": ")[1].split(" is ")[1].rstrip(".") in system["content"]
                ), system
                assert json.loads(raw.headers["x-jarvis-memory"])


async def test_the_readme_snippet_works_offline(start_gateway):
    gw = await start_gateway(**{"server.httpPort": -1})
    client = openai.OpenAI(base_url=gw.http_url + "/v1", api_key=gw.token, max_retries=0)
    import asyncio

    reply = await asyncio.to_thread(
        client.chat.completions.create, model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}]
    )
    assert reply.choices[0].message.content
    client.close()
