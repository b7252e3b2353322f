"""LocalServices: the gateway's Services built from the state dir, for the CLI's methods in process
(cli/dispatch.py) when no gateway answers.

What a tool beside no gateway needs: the engine `storage.url` names, opened as a tool's (no part in
coordinating gateways), and of each agent only its memory, opened on first use, with no sync on start
and no file watcher (the command asks for what it wants). The agent's sessions store is not opened —
the files engine's clean-close marker is a gateway's to take and give back — and no chat runs here.
"""

from __future__ import annotations

import dataclasses

from ..chat.providers import OfflineResponder
from ..config import Config
from ..events import EventBus
from ..methods import memory as _memory_methods  # noqa: F401  (registers the memory.* methods)
from ..methods import principals as _principal_methods  # noqa: F401  (principals.*, audit.list)
from ..services import Agent, Services
from ..storage import open_storage


class LocalServices(Services):
    @classmethod
    async def open(cls, config: Config) -> "LocalServices":
        sync = dataclasses.replace(config.memory.sync, on_start=False, watch=False)
        config = dataclasses.replace(config, memory=dataclasses.replace(config.memory, sync=sync))
        return cls(config, EventBus(), OfflineResponder(0), await open_storage(config, serve=False))

    async def _open_agent(self, agent_id: str) -> Agent:
        memory = None
        if self.config.memory.enabled:
            memory = self.storage.memory(agent_id)
            try:
                await memory.open()
            except BaseException:
                await memory.close()  # its lock file and connections
                raise
        return Agent(agent_id, self.storage.sessions(agent_id), None, memory)  # type: ignore[arg-type]

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self.storage.close()
