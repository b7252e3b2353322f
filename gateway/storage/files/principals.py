"""The files engine's principals and audit log, in the state dir.

    <stateDir>/principals.jsonl   one principal a line (gateway/principals.py's record, the token's hash,
                                  never the token), 0600, replaced atomically under its lock on change
    <stateDir>/audit.jsonl        one entry a line, appended (0600); rotated to audit.1.jsonl … by size
                                  and age (`[audit]` settings), `keep` of them kept; read backwards

A line of principals.jsonl that is not a principal (edited by hand, cut short) is left out with a log
line naming the line and why; the gateway starts with the rest. The files are read in threads.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import orjson
import structlog

from ...errors import Conflict, NotFound
from ...fsutil import FILE_MODE, atomic_write, ensure_private_dir, locked
from ...principals import Principal, storable_entry
from ...timeutil import parse_iso, to_iso

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
    """audit.jsonl, appended one line an entry, rotated (audit.1.jsonl … audit.<keep>.jsonl, the oldest
    beyond them deleted) once it holds `max_bytes` or its first entry is `max_age` seconds old; read
    backwards, newest first, a block at a time, so a read holds what it returns and one block."""

    def __init__(self, path: Path, max_bytes: int = 16 << 20, max_age: float = 30 * 86400.0, keep: int = 4):
        self.path = path
        self.max_bytes = max_bytes
        self.max_age = max_age  # seconds; 0: by size only
        self.keep = keep
        self._first: tuple[int, float] | None = None  # (inode, its first entry's time): read once a file

    def files(self) -> list[Path]:
        """The audit's files, newest first: audit.jsonl, then the rotated ones."""
        stem, suffix = self.path.stem, self.path.suffix
        return [self.path] + [self.path.with_name(f"{stem}.{n}{suffix}") for n in range(1, self.keep + 1)]

    async def append(self, entry: dict[str, Any]) -> None:
        line = orjson.dumps(storable_entry(entry)) + b"\n"

        def run() -> None:
            ensure_private_dir(self.path.parent)
            self._rotate_if_due()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            try:
                os.write(fd, line)  # one write of one line: appends of several processes do not interleave
            finally:
                os.close(fd)

        await asyncio.to_thread(run)

    def _due(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        if st.st_size >= self.max_bytes:
            return True
        if not self.max_age or st.st_size == 0:
            return False
        if self._first is None or self._first[0] != st.st_ino:
            self._first = (st.st_ino, _first_time(self.path))
        return time.time() - self._first[1] >= self.max_age

    def _rotate_if_due(self) -> None:
        if not self._due():
            return
        with locked(self.path):  # another process may have rotated it meanwhile: looked at again
            if not self._due():
                return
            names = self.files()
            if self.keep == 0:
                names[0].unlink(missing_ok=True)
                return
            names[-1].unlink(missing_ok=True)
            for older, newer in zip(reversed(names[1:]), reversed(names[:-1])):
                if newer.exists():
                    os.replace(newer, older)  # an appender holding the old file writes into audit.1: kept
        log.info("audit_rotated", file=str(self.path), kept=self.keep)

    async def read(
        self,
        since: str | None,
        principal: str | None,
        limit: int,
        agents: tuple[str, ...] | None = None,
        own: str | None = None,
    ) -> list[dict[str, Any]]:
        # Entries are appended in time order but for a collapsed refusal's count, written when its minute
        # ends: reading stops at an entry older than `since` by more than that.
        stop = _minus(since, STOP_MARGIN) if since else None

        def run() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for path in self.files():
                for line in _lines_backwards(path):
                    try:
                        e = orjson.loads(line)
                    except orjson.JSONDecodeError:
                        continue  # a torn last line (a crash mid-write): never fatal
                    if not isinstance(e, dict) or not isinstance(e.get("at"), str):
                        continue
                    if stop is not None and e["at"] < stop:
                        out.reverse()
                        return out
                    if since and e["at"] < since or principal and e.get("principal") != principal:
                        continue
                    if (
                        agents is not None
                        and e.get("agent") not in agents
                        and (own is None or e.get("principal") != own)
                    ):
                        continue
                    out.append(e)
                    if len(out) >= limit:
                        out.reverse()
                        return out
            out.reverse()
            return out

        return await asyncio.to_thread(run)


STOP_MARGIN = 300.0  # seconds: how far out of order an entry may be written (a collapsed count: a minute)
BLOCK = 64 << 10  # bytes read at a time, backwards
LONGEST_LINE = 1 << 20  # a longer line (edited by hand) is skipped, not held


def _lines_backwards(path: Path) -> Iterator[bytes]:
    """The non-empty lines of `path`, last first, reading `BLOCK` bytes at a time from its end."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        pos = f.seek(0, os.SEEK_END)
        carry = b""
        skipping = False  # inside a line longer than LONGEST_LINE: dropped until its start
        while pos > 0:
            step = min(BLOCK, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step) + carry
            parts = block.split(b"\n")
            carry = parts[0]
            for part in reversed(parts[1:]):
                if skipping:
                    skipping = False
                    continue
                if part.strip():
                    yield part
            if len(carry) > LONGEST_LINE:
                carry, skipping = b"", True
        if carry.strip() and not skipping:
            yield carry


def _first_time(path: Path) -> float:
    """When the first entry of `path` was written (its `at`); the file's change time when unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.readline(64 << 10)
        when = parse_iso(orjson.loads(head).get("at", ""))
        if when is not None:
            return when.timestamp()
    except (OSError, orjson.JSONDecodeError, AttributeError):
        pass
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def _minus(at: str, seconds: float) -> str | None:
    when = parse_iso(at)
    return None if when is None else to_iso(when - timedelta(seconds=seconds))
