"""LocalServices: the gateway's Services built from the state dir, for the CLI's methods in process
(cli/dispatch.py) when no gateway answers.

What a tool beside no gateway needs: the engine `storage.url` names, opened as a tool's (no part in
coordinating gateways), and of each agent only its memory, opened on first use, with no sync on start
and no file watcher (the command asks for what it wants). The agent's sessions store is not opened —
the files engine's clean-close marker is a gateway's to take and give back — unless the command holds
the state dir's lock as a gateway would (`sessions=True`: `jarvis import` writing sessions with no
gateway running); no chat runs here.
"""

from __future__ import annotations

import dataclasses

from ..chat.providers import OfflineResponder
from ..compose import memory_service
from ..config import Config
from ..events import EventBus
from ..methods import admin as _admin_methods  # noqa: F401  (registers the admin.* methods)
from ..methods import memory as _memory_methods  # noqa: F401  (registers the memory.* methods)
from ..methods import principals as _principal_methods  # noqa: F401  (principals.*, audit.list)
from ..services import Agent, Services
from ..storage import open_storage


class LocalServices(Services):
    open_sessions = False  # the caller holds the state dir's lock: agents open their sessions store too

    @classmethod
    async def open(cls, config: Config, sessions: bool = False) -> "LocalServices":
        sync = dataclasses.replace(config.memory.sync, on_start=False, watch=False)
        config = dataclasses.replace(config, memory=dataclasses.replace(config.memory, sync=sync))
        services = cls(config, EventBus(), OfflineResponder(0), await open_storage(config, serve=False))
        services.open_sessions = sessions
        return services

    async def _open_agent(self, agent_id: str) -> Agent:
        store = self.storage.sessions(agent_id)
        if self.open_sessions:
            await store.open()
        memory = None
        if self.config.memory.enabled:
            memory = memory_service(self.config, self.storage, agent_id)
            try:
                await memory.open()
            except BaseException:
                await memory.close()  # its lock file and connections
                if self.open_sessions:
                    await store.close()
                raise
        return Agent(agent_id, store, None, memory)  # type: ignore[arg-type]

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self.storage.close()
