from __future__ import annotations

import pytest

from tests.helpers import RunningGateway, make_config


@pytest.fixture
async def gateway(tmp_path):
    """A real gateway on a free port, in this test's event loop, with its own state dir."""
    gw = RunningGateway(make_config(tmp_path / "state"))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


@pytest.fixture
async def client(gateway):
    c = await gateway.client()
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def start_gateway(tmp_path):
    """Factory: `gw = await start_gateway(**dotted_config_overrides)`; all are stopped at the end."""
    started: list[RunningGateway] = []

    async def start(state_name: str = "state", **overrides) -> RunningGateway:
        gw = RunningGateway(make_config(tmp_path / state_name, **overrides))
        await gw.start()
        started.append(gw)
        return gw

    try:
        yield start
    finally:
        for gw in started:
            await gw.stop()
