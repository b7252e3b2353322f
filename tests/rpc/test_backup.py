"""`jarvis backup DEST` on real state dirs: while a real gateway runs, against a SQLite file that is
being written, with torn transcript lines — and restoring the copy into a gateway that starts from it."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from gateway.cli.backup import BackupError, backup_state
from gateway.storage.files.memory.db import index_driver
from tests.helpers import ROOT, GatewayProcess, connect_client, make_config


def jarvis(*args: str, state_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JARVIS_")}
    if state_dir is not None:
        env["JARVIS_STATE_DIR"] = str(state_dir)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120
    )


def tree_modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


def transcript_lines(state: Path, key: str) -> list[dict]:
    path = state / "agents" / "main" / "sessions" / f"{key}.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.parametrize("memory", [False, True], ids=["memory-off", "memory-on"])
async def test_backup_of_a_running_gateway_restores_into_a_working_gateway(tmp_path, memory):
    if memory and importlib.util.find_spec("gateway.memory.service") is None:
        pytest.skip("the memory index is not part of this build yet")
    state, dest = tmp_path / "state", tmp_path / "backup"
    state.mkdir(mode=0o700)
    (state / "config.toml").write_text(f"[memory]\nenabled = {'true' if memory else 'false'}\n")
    (state / "workspace" / "memory").mkdir(parents=True)
    (state / "workspace" / "MEMORY.md").write_text("# Me\nI keep bees on the roof.\n")
    (state / "workspace" / "memory" / "2026-11-20.md").write_text("Harvested 4 kg of honey.\n")

    gw = GatewayProcess(state)
    try:
        gw.start(timeout=120)
        client = await connect_client(gw.url, gw.token)
        keys = []
        for label in ("bees", "honey"):
            session = await client.call("sessions.create", {"label": label})
            run = await client.call("chat.send", {"sessionKey": session["sessionKey"], "message": f"about {label}"})
            events = await client.run_to_end(run["runId"])
            assert events[-1]["method"] == "chat.final"
            keys.append(session["sessionKey"])
        if memory:
            await client.call("memory.sync", {}, timeout=120)
            indexed = await client.call("memory.status", {})
        listed = await client.call("sessions.list", {})

        done = await asyncio.to_thread(jarvis, "backup", str(dest), "--state-dir", str(state))
        assert done.returncode == 0, done.stderr
        assert f"to {dest}" in done.stdout
        await client.close()
    finally:
        if gw.proc is not None and gw.proc.poll() is None:
            gw.signal(signal.SIGTERM)
            gw.wait(30)
        gw.kill()

    modes = tree_modes(dest)
    assert {m for name, m in modes.items() if (dest / name).is_dir() or name == "."} == {0o700}
    assert {m for name, m in modes.items() if (dest / name).is_file()} == {0o600}
    assert (dest / "gateway.token").read_text() == (state / "gateway.token").read_text()
    assert (dest / "config.toml").read_text() == (state / "config.toml").read_text()
    assert (dest / "workspace" / "memory" / "2026-11-20.md").read_text() == "Harvested 4 kg of honey.\n"
    for key in keys:
        assert transcript_lines(dest, key) == transcript_lines(state, key)
    assert (dest / "agents" / "main" / "memory.sqlite").is_file() == memory
    assert not list(tmp_path.glob(".backup.partial-*"))

    # Restore: the copy becomes the state dir of a new gateway.
    restored = tmp_path / "restored"
    os.rename(dest, restored)
    if memory:
        status = await asyncio.to_thread(jarvis, "memory", "status", "--json", state_dir=restored)
        assert status.returncode == 0, status.stderr
        assert orjson.loads(status.stdout)["chunks"] == indexed["chunks"] > 0
    gw2 = GatewayProcess(restored)
    try:
        gw2.start(timeout=120)
        client = await connect_client(gw2.url, (state / "gateway.token").read_text().strip())  # same token
        assert await client.call("sessions.list", {}) == listed
        history = await client.call("sessions.history", {"sessionKey": keys[0]})
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]
        if memory:
            found = await client.call("memory.search", {"query": "bees roof", "mode": "fts"}, timeout=60)
            assert any(r["path"] == "MEMORY.md" for r in found["results"])
        await client.close()
        gw2.signal(signal.SIGTERM)
        assert gw2.wait(30) == 0
    finally:
        gw2.kill()


def test_sqlite_index_is_copied_consistently_while_it_is_being_written(tmp_path):
    config = make_config(tmp_path / "state")
    db_path = config.memory_db()
    db_path.parent.mkdir(parents=True)
    # The writer plays the gateway, so it writes through the gateway's SQLite library, as backup_state
    # reads: two SQLite libraries in one process do not see each other's locks, and one may truncate
    # the -shm the other has mapped (a SIGBUS, seen in CI where the two differ).
    sqlite = index_driver(config.memory.search.vector_backend).module
    db = sqlite.connect(db_path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    db.execute("CREATE TABLE totals (n INTEGER NOT NULL)")
    db.execute("INSERT INTO totals VALUES (0)")
    db.commit()
    stop = threading.Event()

    def writer() -> None:
        # Each transaction adds 50 chunks and bumps the total: a consistent copy has total == count.
        w = sqlite.connect(db_path, timeout=30)
        while not stop.is_set():
            with w:
                w.executemany("INSERT INTO chunks (text) VALUES (?)", [("x" * 500,)] * 50)
                w.execute("UPDATE totals SET n = n + 50")
        w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while db.execute("SELECT n FROM totals").fetchone()[0] < 2000:
            pass  # let the file grow past a few backup steps
        report = backup_state(config, tmp_path / "backup")
    finally:
        stop.set()
        thread.join()
        db.close()
    assert report.indexes == 1
    copy = sqlite3.connect(tmp_path / "backup" / "agents" / "main" / "memory.sqlite")
    total = copy.execute("SELECT n FROM totals").fetchone()[0]
    assert total >= 2000
    assert copy.execute("SELECT count(*) FROM chunks").fetchone()[0] == total
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    copy.close()


def test_a_transcript_line_being_written_is_left_out(tmp_path):
    config = make_config(tmp_path / "state")
    sessions = config.sessions_dir()
    sessions.mkdir(parents=True)
    complete = b'{"type":"session","version":1,"sessionKey":"s1"}\n{"type":"message","id":"m1"}\n'
    (sessions / "s1.jsonl").write_bytes(complete + b'{"type":"message","id":"m2","mess')
    report = backup_state(config, tmp_path / "backup")
    assert (tmp_path / "backup" / "agents" / "main" / "sessions" / "s1.jsonl").read_bytes() == complete
    assert report.transcripts == 1


def test_backup_refuses_to_overwrite_or_nest_and_leaves_nothing_behind(tmp_path):
    config = make_config(tmp_path / "state")
    config.state_dir.mkdir()
    (config.state_dir / "gateway.token").write_text("t\n")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    with pytest.raises(BackupError, match="already exists and is not an empty directory"):
        backup_state(config, taken)
    with pytest.raises(BackupError, match="inside the state directory"):
        backup_state(config, config.state_dir / "backup")
    with pytest.raises(BackupError, match="does not exist; nothing to back up"):
        backup_state(make_config(tmp_path / "nowhere"), tmp_path / "b")
    assert (taken / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "taken"]

    done = jarvis("backup", str(taken), "--state-dir", str(config.state_dir))
    assert done.returncode == 1
    assert done.stderr.startswith("jarvis backup: ") and str(taken) in done.stderr


async def test_the_trash_and_versions_are_in_the_backup_and_come_back(tmp_path, start_gateway):
    """Versions of keyed memories and notes, trashed keyed memories and trashed sessions are part of
    the copy; a gateway started on the restored copy lists and restores them."""
    gw = await start_gateway(memory=True)
    c = await gw.client()
    await c.call("memory.set", {"key": "boat", "value": "The boat is teal."})
    await c.call("memory.set", {"key": "boat", "value": "The boat is white."})
    await c.call("memory.set", {"key": "old", "value": "An old fact."})
    await c.call("memory.delete", {"key": "old"})
    await c.call("memory.write", {"path": "memory/plan.md", "content": "Sail Saturday.\n"})
    await c.call("memory.write", {"path": "memory/plan.md", "content": "Sail Sunday.\n"})
    key = (await c.call("sessions.create", {"label": "trip"}))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "The trip goes to Zanzibar."})
    await c.run_to_end(sent["runId"])
    await c.call("sessions.delete", {"sessionKey": key})
    report = await asyncio.to_thread(backup_state, gw.config, tmp_path / "copy")
    await c.close()
    assert any(str(f).startswith("agents/main/trash/sessions/") for f in report.files)
    assert any(str(f).startswith("agents/main/history/keyed/") for f in report.files)
    assert all(m & 0o077 == 0 for m in tree_modes(tmp_path / "copy").values()), "owner-only, like the source"

    back = await start_gateway("copy", memory=True)
    c = await back.client()
    assert [s["sessionKey"] for s in (await c.call("sessions.trash"))["sessions"]] == [key]
    await c.call("sessions.restore", {"sessionKey": key})
    assert (await c.call("sessions.history", {"sessionKey": key}))["messages"][0][
        "content"
    ] == "The trip goes to Zanzibar."
    assert [m["key"] for m in (await c.call("memory.trash"))["memories"]] == ["old"]
    assert [v["value"] for v in (await c.call("memory.history", {"key": "boat"}))["versions"]] == [
        "The boat is white.",
        "The boat is teal.",
    ]
    assert len((await c.call("memory.history", {"path": "memory/plan.md"}))["versions"]) == 2
    await c.close()


def test_a_delete_or_restore_during_the_copy_leaves_every_session_somewhere(tmp_path):
    """A session moved between the live folder and the trash while the backup copies them: the copied
    lists (read as one moment) say where it belongs, and its transcript is in the copy (the gateway's
    open puts it there)."""
    import gateway.cli.backup as backup
    from gateway.storage.files.sessions import FileSessionStore
    from tests.contract.test_sessions import msg

    state = tmp_path / "state"
    store = FileSessionStore(state / "agents" / "main" / "sessions")

    async def setup() -> None:
        await store.open()
        for key in ("stay", "going", "coming"):
            await store.create(key=key)
            await store.append_messages(key, msg("user", f"words of {key}", "2030-01-01T00:00:00.000Z"))
        await store.delete("coming")
        await store.close()

    asyncio.run(setup())
    real = backup._Copier.complete_lines
    moved = []

    def racing(self, src, rel):  # the first transcript copied: then a delete and a restore happen
        real(self, src, rel)
        if not moved:
            moved.append(src.name)

            async def race() -> None:
                s = FileSessionStore(state / "agents" / "main" / "sessions")
                await s.open()
                await s.delete("going")
                await s.restore("coming")
                await s.close()

            asyncio.run(race())

    backup._Copier.complete_lines = racing
    try:
        backup_state(make_config(state), tmp_path / "copy")
    finally:
        backup._Copier.complete_lines = real

    async def check() -> dict:
        s = FileSessionStore(tmp_path / "copy" / "agents" / "main" / "sessions")
        await s.open()
        out = {}
        for key in ("stay", "going", "coming"):
            where = (
                "live"
                if await s.exists(key)
                else "trash"
                if key in [t["sessionKey"] for t in await s.trash()]
                else "lost"
            )
            if where == "trash":
                await s.restore(key)
            out[key] = (where, [m["content"] for m in (await s.history(key, 10, None))["messages"]])
        await s.close()
        return out

    found = asyncio.run(check())
    assert {k: v[1] for k, v in found.items()} == {k: [f"words of {k}"] for k in ("stay", "going", "coming")}
    assert all(where != "lost" for where, _ in found.values()), found
