"""FilesStorage: the files engine (storage/base.py's Storage) for one gateway on a state dir."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from ...config import Config
from ...schema import AGENT_ID
from ...memory.notes.keyed import VersionLimits
from ..base import ResponseLimits
from .keyed import FileKeyedStore
from .ledger import LocalRunLedger
from .memory import FilesMemoryIndex
from .notes import FileNotes
from .principals import FileAuditLog, FilePrincipalStore
from .responses import FileResponseStore
from .sessions import FileSessionStore

if TYPE_CHECKING:  # pragma: no cover
    from ...errors import Unavailable


class FilesStorage:
    name = "files"
    shared = False

    def __init__(self, config: Config):
        self.config = config
        # Each agent's idempotency keys, kept here so that they outlive a chat service closed with its idle agent.
        self._idempotency: dict[str, dict[tuple[str, str], tuple[str, float]]] = {}
        a = config.audit
        self._audit = FileAuditLog(config.state_dir / "audit.jsonl", a.max_bytes, a.max_age_days * 86400, a.keep)
        self._responses: FileResponseStore | None = None

    async def close(self) -> None:
        """Nothing is held beyond each agent's own stores and the kept responses' file."""
        if self._responses is not None:
            await self._responses.close()

    async def agents(self) -> list[str]:
        """Every agent folder with a sessions folder (a link is no agent's)."""
        root = self.config.state_dir / "agents"

        def scan() -> list[str]:
            if not root.is_dir():
                return []
            return sorted(
                p.name
                for p in root.iterdir()
                if re.fullmatch(AGENT_ID, p.name) and (p / "sessions").is_dir() and not p.is_symlink()
            )

        return await asyncio.to_thread(scan)

    async def schema(self, apply: bool) -> list[str]:
        """Files need none (each SQLite index migrates itself when its agent opens it)."""
        return []

    async def has_agent(self, agent_id: str) -> bool:
        return False  # an agent is its folder in the state dir, nothing more

    def sessions(self, agent_id: str) -> FileSessionStore:
        return FileSessionStore(self.config.sessions_dir(agent_id), agent_id, self.config.sessions.max)

    def ledger(self, agent_id: str) -> LocalRunLedger:
        return LocalRunLedger(self.config.chat.idempotency_ttl, self._idempotency.setdefault(agent_id, {}))

    def keyed(self, agent_id: str) -> FileKeyedStore:
        history = self.config.agent_dir(agent_id) / "history" / "keyed"
        return FileKeyedStore(self.config.agent_workspace(agent_id), history, VersionLimits.of(self.config))

    def memory_index(self, agent_id: str) -> FilesMemoryIndex:
        return FilesMemoryIndex(self.config, agent_id)

    def notes(self, agent_id: str) -> FileNotes:
        """The workspace folder itself; memory.write's versions in the state dir."""
        history = self.config.agent_dir(agent_id) / "history" / "notes"
        return FileNotes(self.config.agent_workspace(agent_id), history, VersionLimits.of(self.config))

    def principals(self) -> FilePrincipalStore:
        return FilePrincipalStore(self.config.state_dir / "principals.jsonl")

    def audit(self) -> FileAuditLog:
        return self._audit  # one, so it remembers its file's first entry (rotation by age)

    def responses(self) -> FileResponseStore:
        if self._responses is None:
            path = self.config.state_dir / "responses.sqlite"
            self._responses = FileResponseStore(path, ResponseLimits.of(self.config))
        return self._responses

    def status(self) -> dict[str, Any]:
        return {"engine": self.name}

    def unreachable(self, exc: BaseException) -> "Unavailable | None":
        return None  # a file error is a file error (disk full and the like are answered by the dispatcher)
