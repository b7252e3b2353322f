"""The store contracts (gateway/storage/base.py), written once and run against every engine.

Each test gets `storage`: an engine open on a fresh state dir (with the settings of the module's
`CONFIG`, when it has one) — `files`, or `postgres` on a fresh
database of the embedded PostgreSQL server (tests/conftest.py's `postgres_server`; where that cannot
start, the postgres half is skipped, saying why).
"""

from __future__ import annotations

import uuid

import pytest

from gateway.storage import open_storage
from gateway.storage.base import SessionStore, Storage
from tests.helpers import make_config

ENGINES = ["files", "postgres"]


@pytest.fixture(params=ENGINES)
async def storage(request, tmp_path):
    overrides = dict(getattr(request.module, "CONFIG", {}))  # a test module's own settings
    if request.param == "postgres":
        from gateway.storage.postgres import create_database

        server = request.getfixturevalue("postgres_server")
        overrides["storage.url"] = await create_database(server, f"c_{uuid.uuid4().hex[:12]}")
    engine: Storage = await open_storage(make_config(tmp_path / "state", **overrides))
    try:
        yield engine
    finally:
        await engine.close()


@pytest.fixture
def notes(storage):
    """The main agent's notes (the record of notes and their versions) on the engine."""
    return storage.notes("main")


@pytest.fixture
def workspace(storage):
    return storage.config.agent_workspace("main")


@pytest.fixture
async def sessions(storage):
    store: SessionStore = storage.sessions("main")
    await store.open()
    try:
        yield store
    finally:
        await store.close()
