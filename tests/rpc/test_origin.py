"""A browser page under a host name the gateway does not admit: the refused handshake says why, and
`GET /healthz?origin=…` tells a page (which cannot read a refused handshake) that its origin is the reason."""

from __future__ import annotations

import asyncio
import urllib.request

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.helpers import RunningGateway, make_config


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as res:
        return orjson.loads(res.read())


async def test_refused_origin_names_the_setting_and_the_probe_reports_it(tmp_path):
    gw = RunningGateway(make_config(tmp_path / "state", **{"server.allowedOrigins": ["http://admitted:8080"]}))
    await gw.start()
    try:
        port = gw.gw.port
        with pytest.raises(InvalidStatus) as info:
            await connect(gw.url, origin="http://my-laptop:18789", open_timeout=5)
        response = info.value.response
        assert response.status_code == 403
        assert b"origin http://my-laptop:18789 is not allowed" in response.body
        assert b"server.allowedOrigins" in response.body

        base = f"http://127.0.0.1:{port}/healthz"
        assert await asyncio.to_thread(get, base) == {"status": "ok"}
        refused = await asyncio.to_thread(get, base + "?origin=http%3A%2F%2Fmy-laptop%3A18789")
        assert refused["origin"]["allowed"] is False and refused["origin"]["setting"] == "server.allowedOrigins"
        assert "server.allowedOrigins" in refused["origin"]["reason"]
        for ok in (f"http://127.0.0.1:{port}", "http://admitted:8080"):
            answer = await asyncio.to_thread(get, f"{base}?origin={ok}")
            assert answer["origin"] == {"origin": ok, "allowed": True, "setting": "server.allowedOrigins"}
    finally:
        await gw.stop()
