"""The files engine's principals and audit log, in the state dir.

    <stateDir>/principals.jsonl   one principal a line (gateway/principals.py's record, the token's hash,
                                  never the token), 0600, replaced atomically under its lock on change
    <stateDir>/audit.jsonl        one entry a line, appended (0600)

A line of principals.jsonl that is not a principal (edited by hand, cut short) is left out with a log
line naming the line and why; the gateway starts with the rest. The files are read in threads.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import structlog

from ...errors import Conflict, NotFound
from ...fsutil import FILE_MODE, atomic_write, ensure_private_dir, locked
from ...principals import Principal

log = structlog.get_logger("gateway.principals")


class FilePrincipalStore:
    def __init__(self, path: Path):
        self.path = path
        self._warned: set[tuple[int, str]] = set()  # (line, reason) already logged: said once

    async def all(self) -> list[Principal]:
        return await asyncio.to_thread(self._read)

    def _read(self) -> list[Principal]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out: dict[str, Principal] = {}
        for no, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                p = Principal.from_record(orjson.loads(line))
            except (orjson.JSONDecodeError, ValueError) as exc:
                why = "not JSON" if isinstance(exc, orjson.JSONDecodeError) else str(exc)
                if (no, why) not in self._warned:
                    self._warned.add((no, why))
                    log.warning("principal_line_ignored", file=str(self.path), line=no, reason=why)
                continue
            out[p.name] = p  # a name twice (edited by hand): the later line
        return list(out.values())

    def _write(self, principals: list[Principal]) -> None:
        body = b"".join(orjson.dumps(p.record()) + b"\n" for p in principals)
        atomic_write(self.path, body)

    async def add(self, principal: Principal) -> None:
        def run() -> None:
            with locked(self.path):
                have = self._read()
                if any(p.name == principal.name and not p.revoked for p in have):
                    raise Conflict(f"a principal named {principal.name!r} exists; revoke it first")
                self._write([p for p in have if p.name != principal.name] + [principal])

        await asyncio.to_thread(run)

    async def revoke(self, name: str, when: str) -> Principal:
        def run() -> Principal:
            with locked(self.path):
                have = self._read()
                live = next((p for p in have if p.name == name and not p.revoked), None)
                if live is None:
                    raise NotFound(f"no principal named {name!r}")
                done = replace(live, revoked=when)
                self._write([done if p is live else p for p in have])
                return done

        return await asyncio.to_thread(run)

    async def touch(self, name: str, when: str) -> None:
        def run() -> None:
            with locked(self.path):
                have = self._read()
                if any(p.name == name for p in have):
                    self._write([replace(p, last_used=when) if p.name == name else p for p in have])

        await asyncio.to_thread(run)

    async def version(self) -> str:
        try:
            st = await asyncio.to_thread(os.stat, self.path)
        except FileNotFoundError:
            return ""
        return f"{st.st_mtime_ns}:{st.st_size}"


class FileAuditLog:
    def __init__(self, path: Path):
        self.path = path

    async def append(self, entry: dict[str, Any]) -> None:
        line = orjson.dumps(entry) + b"\n"

        def run() -> None:
            ensure_private_dir(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            try:
                os.write(fd, line)  # one write of one line: appends of several processes do not interleave
            finally:
                os.close(fd)

        await asyncio.to_thread(run)

    async def read(
        self,
        since: str | None,
        principal: str | None,
        limit: int,
        agents: tuple[str, ...] | None = None,
        own: str | None = None,
    ) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return []
            out = []
            for line in data.split(b"\n"):
                try:
                    e = orjson.loads(line) if line.strip() else None
                except orjson.JSONDecodeError:
                    continue  # a torn last line (a crash mid-write): never fatal
                if not isinstance(e, dict) or not isinstance(e.get("at"), str):
                    continue
                if since and e["at"] < since or principal and e.get("principal") != principal:
                    continue
                if agents is not None and e.get("agent") not in agents and (own is None or e.get("principal") != own):
                    continue
                out.append(e)
            return out[-limit:] if limit else out

        return await asyncio.to_thread(run)
