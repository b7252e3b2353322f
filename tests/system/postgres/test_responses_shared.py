"""Stored Responses on PostgreSQL (issue 47, part 2): a response kept through one gateway's /v1/responses
is read (GET /v1/responses/{id}) and continued (previous_response_id) through another gateway of the
same database, and outlives a restart of the gateway that made it; another principal does not see it."""

from __future__ import annotations

import openai
import pytest

from tests.fake_openai import FakeOpenAI


def sdk(gw, token: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.http_url + "/v1", api_key=token or gw.token, max_retries=0)


async def test_a_response_kept_on_one_gateway_is_read_and_continued_on_another(start_gateway, postgres_url):
    with FakeOpenAI() as api:
        common = {
            "storage.url": postgres_url,
            "server.httpPort": -1,
            "chat.baseUrl": api.base_url,
            "chat.model": "fake-model",
            "chat.maxRetries": 0,
        }
        a = await start_gateway("a", **{"storage.instanceId": "a", **common})
        b = await start_gateway("b", **{"storage.instanceId": "b", **common})
        api.reply = "The harbour is north of the station."
        async with sdk(a) as client:
            first = await client.responses.create(model="fake-model", input="Where is the harbour?")
        async with sdk(b) as client:
            got = await client.responses.retrieve(first.id)
            assert got.id == first.id and got.output_text == "The harbour is north of the station."
            api.reply = "Take the number 4 bus."
            second = await client.responses.create(
                model="fake-model", input="How do I get there?", previous_response_id=first.id
            )
        sent = api.requests[-1]["body"]
        said = sent.get("input") or sent.get("messages")
        text = str(said)
        assert "Where is the harbour?" in text and "north of the station" in text, "the first turn went upstream"
        assert "How do I get there?" in text

        await a.restart()  # what A kept is the database's, not A's memory
        async with sdk(a) as client:
            assert (await client.responses.retrieve(second.id)).output_text == "Take the number 4 bus."
            assert (await client.responses.retrieve(first.id)).id == first.id

        owner = await a.client()
        token = (await owner.call("principals.create", {"name": "phone", "agents": "*", "scopes": "read,chat"}))[
            "token"
        ]
        await owner.close()
        async with sdk(a, token) as client:  # (B learns of the new principal within its poll)
            with pytest.raises(openai.NotFoundError) as exc:
                await client.responses.retrieve(first.id)  # the owner's, not the phone's
            assert "openaiApi.storedResponses" in str(exc.value)
            with pytest.raises(openai.BadRequestError) as bad:
                await client.responses.create(model="fake-model", input="and?", previous_response_id=first.id)
            assert bad.value.param == "previous_response_id"
