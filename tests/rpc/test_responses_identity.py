"""Stored Responses (`/v1/responses` with `store`) are their principal's by identity, not by name: a
principal revoked and made anew under the same name is another one, which neither reads nor continues the
old one's responses — on the files engine, and through another gateway of the same PostgreSQL."""

from __future__ import annotations

import openai
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import connect_client, wait_for


@pytest.fixture
def api():
    with FakeOpenAI() as fake:
        yield fake


def sdk(gw, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.http_url + "/v1", api_key=token, max_retries=0)


def _common(api) -> dict:
    return {"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model", "chat.maxRetries": 0}


async def _admitted(gw, token: str) -> None:
    """`gw` knows the principal of `token` (another gateway's poll of the principals has seen it)."""

    async def known() -> bool:
        try:
            c = await connect_client(gw.url, token, "frame")
        except AssertionError:
            return False
        await c.close()
        return True

    await wait_for(known)


async def _a_new_phone_reads_nothing_of_the_old(api, made_on, read_on) -> None:
    owner = await made_on.client()
    scopes = {"name": "phone", "agents": "*", "scopes": "read,chat"}
    old = (await owner.call("principals.create", scopes))["token"]
    api.reply = "Your PIN is 4711."
    async with sdk(made_on, old) as c:
        first = await c.responses.create(model="fake-model", input="Remember my PIN 4711")
    await _admitted(read_on, old)
    async with sdk(read_on, old) as c:  # the principal itself reads it, through either gateway
        assert (await c.responses.retrieve(first.id)).output_text == "Your PIN is 4711."
    await owner.call("principals.revoke", {"name": "phone"})
    new = (await owner.call("principals.create", scopes))["token"]
    await owner.close()
    await _admitted(read_on, new)
    async with sdk(read_on, new) as c:
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(first.id)
        with pytest.raises(openai.BadRequestError, match="no response"):  # nor continued
            await c.responses.create(model="fake-model", input="and my PIN?", previous_response_id=first.id)
        kept = await c.responses.create(model="fake-model", input="hello")  # its own are kept as before
        assert (await c.responses.retrieve(kept.id)).id == kept.id


async def test_a_new_principal_of_a_revoked_name_reads_none_of_its_responses(start_gateway, api):
    gw = await start_gateway(**_common(api))
    await _a_new_phone_reads_nothing_of_the_old(api, gw, gw)


async def test_nor_through_another_gateway_of_the_same_postgresql(start_gateway, api, postgres_url):
    common = {**_common(api), "storage.url": postgres_url}
    a = await start_gateway("a", **{"storage.instanceId": "a", **common})
    b = await start_gateway("b", **{"storage.instanceId": "b", **common})
    await _a_new_phone_reads_nothing_of_the_old(api, a, b)
