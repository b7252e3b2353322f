"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from gateway.compose import memory_service
from gateway.memory.service import MemoryService
from gateway.storage.files.engine import FilesStorage


@pytest.fixture
async def open_manager():
    """`m = await open_manager(cfg)`: the files engine's MemoryService on `cfg`, opened; closed at the end."""
    opened: list[MemoryService] = []

    async def make(cfg) -> MemoryService:
        m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
        await m.open()
        opened.append(m)
        return m

    yield make
    for m in opened:
        await m.close()
