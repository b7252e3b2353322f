"""An outside reader of the memory index never costs the gateway its SQLite locks (issue 23, point 1).

POSIX locks belong to a process and a file, not to a descriptor: closing ANY descriptor of the database
file drops every lock the process holds on it. If the gateway opened and closed the database path itself
(outside SQLite) while its connections were open, the next outside reader to close would find itself
alone, checkpoint, and unlink the WAL and shared-memory files the gateway is still writing to: a fresh
reader, `jarvis memory status --direct` and `jarvis backup` then see a stale index, and a SIGKILL loses
everything written since.

The exact sequence of the issue, with the stock `sqlite3` module in this (another) process as the
outside reader, then `jarvis backup` as a second process.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, GatewayProcess, connect_client

CONFIG = """[memory]
enabled = true
[memory.embeddings]
provider = "none"
[memory.sync]
watch = false
"""


def _note(workspace: Path, i: int) -> None:
    notes = workspace / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    (notes / f"note-{i}.md").write_text(f"# Note {i}\n\nThe harbour lamp number {i} is violet.\n")


def _count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


async def _outside_reader_then_four_notes(gw: GatewayProcess, state: Path) -> Path:
    db = state / "agents" / "main" / "memory.sqlite"
    workspace = state / "workspace"
    c = await connect_client(gw.url, gw.token)
    try:
        _note(workspace, 0)
        assert (await c.call("memory.sync", {}))["indexed"] == 1
        # The user's check of the old spec: `sqlite3 memory.sqlite "select count(*) from chunks"`.
        assert _count(db, "SELECT count(*) FROM chunks") == 1
        for i in range(1, 5):
            _note(workspace, i)
        assert (await c.call("memory.sync", {}))["indexed"] == 4
        assert (await c.call("memory.status", {}))["files"] == 5
    finally:
        await c.close()
    assert gw.unlinked_sqlite_files() == [], "the gateway writes to an unlinked WAL"
    assert os.path.exists(f"{db}-wal") and os.path.exists(f"{db}-shm")
    # A fresh reader sees what the gateway committed.
    assert _count(db, "SELECT count(*) FROM files") == 5
    return db


async def test_outside_sqlite3_reader_sees_every_commit(tmp_path):
    state = tmp_path / "state"
    with GatewayProcess.running(state, CONFIG) as gw:
        await _outside_reader_then_four_notes(gw, state)
        # And again, after several more outside readers came and went.
        for _ in range(3):
            _count(state / "agents" / "main" / "memory.sqlite", "SELECT count(*) FROM chunks")
        _note(state / "workspace", 5)
        c = await connect_client(gw.url, gw.token)
        try:
            assert (await c.call("memory.sync", {}))["indexed"] == 1
        finally:
            await c.close()
        assert _count(state / "agents" / "main" / "memory.sqlite", "SELECT count(*) FROM files") == 6
        assert gw.unlinked_sqlite_files() == []


async def test_backup_after_an_outside_reader_copies_every_commit(tmp_path):
    state = tmp_path / "state"
    dest = tmp_path / "backup"
    with GatewayProcess.running(state, CONFIG) as gw:
        await _outside_reader_then_four_notes(gw, state)
        env = {**os.environ, "JARVIS_STATE_DIR": str(state)}
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "backup", str(dest)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        # The backup's reader closed too: the gateway still has its WAL.
        assert gw.unlinked_sqlite_files() == []
        direct = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "memory", "status", "--direct", "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert direct.returncode == 0, direct.stderr
        assert '"files": 5' in direct.stdout
    assert _count(dest / "agents" / "main" / "memory.sqlite", "SELECT count(*) FROM files") == 5
