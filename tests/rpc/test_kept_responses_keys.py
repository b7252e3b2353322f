"""GET /v1/responses/{id} for the keys that make responses (a review of the integrated tree, issue 44): a
`chat` key made the response with POST /v1/responses and reads it back (it was 403: the method needed
`read`); a front-end key (scope `proxy`) reads back a response it made for one of its users when it names
that user as it does on a POST (Open WebUI's forwarded-user header) — it was 404, the GET acting in the
agent the key was made on — and never one of another user's, nor one the owner made."""

from __future__ import annotations

import httpx2 as httpx


async def test_the_key_that_made_a_response_reads_it_back(start_gateway):
    gw = await start_gateway(**{"server.httpPort": -1})
    owner = await gw.client()
    tokens = {}
    for name, scopes in (("app", "chat"), ("webui", "chat,proxy")):
        made = await owner.call("principals.create", {"name": name, "agents": "main", "scopes": scopes})
        tokens[name] = {"Authorization": f"Bearer {made['token']}"}
    owner_headers = {"Authorization": f"Bearer {gw.token}"}

    async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:

        async def made(headers: dict, **body) -> str:
            r = await http.post("/v1/responses", headers=headers, json={"model": "m", "input": "hi", **body})
            assert r.status_code == 200, r.text
            return r.json()["id"]

        async def get(headers: dict, rid: str, **more: str) -> httpx.Response:
            return await http.get(f"/v1/responses/{rid}", headers={**headers, **more})

        # A chat key: its own response back, as the Agents SDK's retrieve asks for it.
        mine = await made(tokens["app"])
        r = await get(tokens["app"], mine)
        assert r.status_code == 200 and r.json()["id"] == mine, r.text

        # A front-end key: alice's response with alice named, not with bob, nor with no one named.
        alices = await made(tokens["webui"], user="alice")
        r = await get(tokens["webui"], alices, **{"X-OpenWebUI-User-Id": "alice"})
        assert r.status_code == 200 and r.json()["id"] == alices, r.text
        assert (await get(tokens["webui"], alices, **{"X-OpenWebUI-User-Id": "bob"})).status_code == 404
        assert (await get(tokens["webui"], alices)).status_code == 404
        # Its users' responses are not the owner's, and the owner's are not the front-end's.
        assert (await get(owner_headers, alices)).status_code == 404
        owners = await made(owner_headers)
        assert (await get(tokens["webui"], owners)).status_code == 404
        assert (await get(tokens["webui"], owners, **{"X-OpenWebUI-User-Id": "main"})).status_code == 404
        assert (await get(owner_headers, owners)).status_code == 200
    await owner.close()
