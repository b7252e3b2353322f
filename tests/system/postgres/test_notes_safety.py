"""Notes on PostgreSQL, what a hostile review of the mirror found (issue 47): a file on disk is never
removed because the database lacks its note unless the database says it deleted that note (a new
database, another one, or one restored from a backup takes the files in); a folder scan that failed
deletes nothing; a note path no file system can hold is refused at the door, and one that is already in
the record is left out of the mirror without stopping the others; `jarvis migrate` does not bring a
deleted note back; a first sync of many new files and door writes of the same paths do not deadlock."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid

import asyncpg
import pytest

from gateway.storage import open_storage
from gateway.storage.postgres import create_database
from gateway.storage.postgres.note_folder import CHANGED
from tests.cli.test_migrate import ajarvis
from gateway.memory.layout import MAX_NAME_BYTES
from tests.helpers import RpcError, make_config, wait_for


def _cfg(postgres_url: str, tmp_path, name: str) -> dict:
    return {
        "storage.url": postgres_url,
        "storage.instanceId": name,
        "memory": True,
        "workspace": str(tmp_path / f"workspace-{name}"),
    }


async def _rows(url: str, sql: str = "SELECT path FROM notes ORDER BY path") -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [r[0] for r in await conn.fetch(sql)]
    finally:
        await conn.close()


def _files(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for pattern in ("*.md", "memory/*.md") for p in folder.glob(pattern))


async def test_another_database_takes_the_folders_notes_in_and_deletes_none(
    start_gateway, postgres_url, postgres_server, tmp_path
):
    cfg = _cfg(postgres_url, tmp_path, "a")
    ws = tmp_path / "workspace-a"
    a = await start_gateway("a", **cfg)
    c = await a.client()
    await c.call("memory.write", {"path": "MEMORY.md", "content": "# Me\nMy boat is Kestrel.\n"})
    await c.call("memory.write", {"path": "memory/boats.md", "content": "# Boats\nKestrel at Pier 7.\n"})
    await c.close()
    await a.stop()

    other = await create_database(postgres_server, f"t_{uuid.uuid4().hex[:12]}")
    b = await start_gateway("a", **{**cfg, "storage.url": other})
    c = await b.client()
    try:
        await c.call("memory.sync")
        assert _files(ws) == ["MEMORY.md", "memory/boats.md"]
        assert await _rows(other) == ["MEMORY.md", "memory/boats.md"], "the files are taken in"
        assert (ws / "memory" / "boats.md").read_text() == "# Boats\nKestrel at Pier 7.\n"
    finally:
        await c.close()


async def test_a_database_restored_from_a_backup_deletes_no_note_written_since(
    start_gateway, postgres_url, postgres_server, tmp_path
):
    """The restored database is the same one (its name, its migrations' times): this gateway's marks
    still count, and the note written after the backup has a mark but no row — and no deletion."""
    cfg = _cfg(postgres_url, tmp_path, "a")
    ws = tmp_path / "workspace-a"
    name = postgres_url.partition("?")[0].rsplit("/", 1)[1]
    backup = f"b_{uuid.uuid4().hex[:12]}"
    a = await start_gateway("a", **cfg)
    c = await a.client()
    await c.call("memory.write", {"path": "MEMORY.md", "content": "# Me\n"})
    await c.close()
    await a.stop()
    admin = await asyncpg.connect(postgres_server)
    try:
        await admin.execute(f'CREATE DATABASE "{backup}" TEMPLATE "{name}"')  # the backup
        a = await start_gateway("a", **cfg)
        c = await a.client()
        await c.call("memory.write", {"path": "memory/after.md", "content": "# Written after the backup\n"})
        await c.call("memory.sync")
        await c.close()
        await a.stop()
        await admin.execute(f'DROP DATABASE "{name}"')  # the restore
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{backup}"')
    finally:
        await admin.close()
    a = await start_gateway("a", **cfg)
    c = await a.client()
    try:
        await c.call("memory.sync")
        assert _files(ws) == ["MEMORY.md", "memory/after.md"]
        assert await _rows(postgres_url) == ["MEMORY.md", "memory/after.md"]
        history = await c.call("memory.history", {"path": "memory/after.md"})
        assert [v["by"] for v in history["versions"]] == ["file"]
    finally:
        await c.close()


def _unreadable_folder(root) -> None:
    """A real folder under `root` that a scan cannot list: nested names deeper than PATH_MAX (4096
    bytes), made relative to each open folder (ENAMETOOLONG for a walk by whole paths)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):
            os.mkdir("d" * 250, dir_fd=fd)
            nxt = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


async def test_a_folder_scan_that_fails_deletes_no_note(postgres_url, tmp_path):
    """A scan error is no answer: forget_gone (what a sync runs once it found files gone) deletes
    nothing from the record or the folder while the folder cannot be read."""
    storage = await open_storage(make_config(tmp_path / "a", **_cfg(postgres_url, tmp_path, "a")))
    try:
        notes = storage.notes("main")
        ws = tmp_path / "workspace-a"
        for name in ("MEMORY.md", "memory/boat.md", "memory/house.md"):
            await notes.write(name, f"# {name}\nimportant\n")
        _unreadable_folder(ws / "memory")
        assert await notes.forget_gone() == 0
        assert notes.forget_owed, "the next sync runs it again, whatever it removes"
        assert await notes.reconcile() == 0
        assert await _rows(postgres_url) == ["MEMORY.md", "memory/boat.md", "memory/house.md"]
        assert _files(ws) == ["MEMORY.md", "memory/boat.md", "memory/house.md"]
        shutil.rmtree(ws / "memory" / ("d" * 250))  # readable again: a real deletion is taken in
        (ws / "memory" / "house.md").unlink()
        assert await notes.forget_gone() == 1
        assert not notes.forget_owed
        assert await _rows(postgres_url) == ["MEMORY.md", "memory/boat.md"]
    finally:
        await storage.close()


async def test_a_path_no_folder_can_hold_is_refused_at_every_door_of_both_gateways(
    start_gateway, postgres_url, tmp_path
):
    a = await start_gateway("a", **_cfg(postgres_url, tmp_path, "a"))
    b = await start_gateway("b", **_cfg(postgres_url, tmp_path, "b"))
    ca, cb = await a.client(), await b.client()
    try:
        long = "memory/" + "\u00e9" * 250 + ".md"  # 503 bytes in one name
        for client, method, params in (
            (ca, "memory.write", {"path": long, "content": "x"}),
            (cb, "memory.history", {"path": long}),
            (cb, "memory.restore", {"path": long, "version": 1}),
            (ca, "memory.get", {"path": long}),
        ):
            with pytest.raises(RpcError) as err:
                await client.call(method, params)
            assert err.value.code == -32602, method
            assert err.value.data.get("field") == "params.path", method
            assert f"{MAX_NAME_BYTES} bytes" in err.value.message
        assert await _rows(postgres_url) == [], "nothing committed"
        with pytest.raises(RpcError) as err:  # one byte over
            await ca.call("memory.write", {"path": "memory/a" + "\u00e9" * 126 + ".md", "content": "x"})
        assert err.value.code == -32602
        widest = "memory/" + "\u00e9" * 126 + ".md"  # 255 bytes: as wide as a name may be (a shortened lock)
        assert len(widest.split("/")[1].encode()) == MAX_NAME_BYTES
        await ca.call("memory.write", {"path": widest, "content": "# wide\n"})
        await cb.call("memory.status")
        at_b = tmp_path / "workspace-b" / widest

        async def mirrored():
            return at_b.exists()

        await wait_for(mirrored)
    finally:
        await ca.close()
        await cb.close()


async def test_a_note_the_folder_cannot_hold_is_left_out_and_the_others_still_reconciled(
    start_gateway, postgres_url, tmp_path
):
    """A row an older gateway let in (a name over 255 bytes): B's mirror says so once and goes on, so
    an edit on B's disk still reaches the record and A."""
    a = await start_gateway("a", **_cfg(postgres_url, tmp_path, "a"))
    b = await start_gateway("b", **_cfg(postgres_url, tmp_path, "b"))
    ca, cb = await a.client(), await b.client()
    try:
        await cb.call("memory.status")
        await ca.call("memory.write", {"path": "memory/n.md", "content": "one\n"})
        at_b = tmp_path / "workspace-b" / "memory" / "n.md"
        await wait_for(lambda: asyncio.to_thread(at_b.exists))
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(
                "INSERT INTO notes (agent_id, path, content, hash, version, at, by_door) "
                "VALUES ('main', $1, 'poison', 'x', 1, '2026-01-01T00:00:00.000Z', 'websocket')",
                "memory/" + "\u00e9" * 250 + ".md",
            )
        finally:
            await conn.close()
        at_b.write_text("EDITED ON B\n")
        await cb.call("memory.sync")
        at_a = tmp_path / "workspace-a" / "memory" / "n.md"

        async def reached_a():
            return at_a.read_text() == "EDITED ON B\n"

        await wait_for(reached_a)
        history = await ca.call("memory.history", {"path": "memory/n.md"})
        assert [v["by"] for v in history["versions"]] == ["file", "websocket"]
    finally:
        await ca.close()
        await cb.close()


async def test_migrate_does_not_bring_a_deleted_note_back(start_gateway, postgres_url, tmp_path):
    ws = tmp_path / "workspace-a"
    a = await start_gateway("a", **_cfg(postgres_url, tmp_path, "a"))
    c = await a.client()
    await c.call("memory.write", {"path": "MEMORY.md", "content": "# Me\nkeep\n"})
    await c.call("memory.write", {"path": "memory/secret.md", "content": "# Old\nthe old alarm code is 1234\n"})
    await c.call("memory.sync")
    (ws / "memory" / "secret.md").unlink()
    await c.call("memory.sync")
    await c.close()
    await a.stop()
    assert await _rows(postgres_url) == ["MEMORY.md"]
    back = tmp_path / "back"
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=back)
    assert r.returncode == 0, r.stdout + r.stderr
    folder = make_config(back).agent_workspace("main")
    assert (folder / "MEMORY.md").exists()
    assert not (folder / "memory" / "secret.md").exists()


async def test_a_first_sync_of_many_new_files_and_door_writes_of_them_both_finish(
    start_gateway, postgres_url, tmp_path
):
    """A's folder gets many new notes and syncs while B writes the same paths through its door: one
    lock order, so neither side is aborted (a deadlock), and every note ends in the record."""
    a = await start_gateway("a", **{**_cfg(postgres_url, tmp_path, "a"), "memory.embeddings.provider": "none"})
    b = await start_gateway("b", **{**_cfg(postgres_url, tmp_path, "b"), "memory.embeddings.provider": "none"})
    ca = await a.client()
    clients = [await b.client() for _ in range(4)]
    n = 600
    try:
        await ca.call("memory.write", {"path": "MEMORY.md", "content": "# me\n"})
        folder = tmp_path / "workspace-a" / "memory"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            (folder / f"f{i:04d}.md").write_text(f"# A {i}\n")

        async def writer(client, paths):
            for i in paths:
                await client.call("memory.write", {"path": f"memory/f{i:04d}.md", "content": f"# B {i}\n"})

        order = list(range(n - 1, -1, -1))
        await asyncio.gather(
            ca.call("memory.sync", timeout=120), *(writer(cl, order[k::4]) for k, cl in enumerate(clients))
        )
        assert len(await _rows(postgres_url)) == n + 1
    finally:
        await ca.close()
        for cl in clients:
            await cl.close()


async def test_a_mirror_never_replaces_a_file_saved_since_it_was_seen(postgres_url, tmp_path):
    """An editor's save between the mirror's look and its write: the write is refused (CHANGED) and
    the save is taken into the record as the newest version, the record's text kept before it."""
    storage = await open_storage(make_config(tmp_path / "a", **_cfg(postgres_url, tmp_path, "a")))
    try:
        notes = storage.notes("main")
        await notes.write("memory/plan.md", "one\n")
        target = tmp_path / "workspace-a" / "memory" / "plan.md"
        seen = notes.folder.stat("memory/plan.md")
        target.write_text("the editor's save, longer\n")
        assert notes.folder.put("memory/plan.md", b"from the record\n", seen) == CHANGED
        assert target.read_text() == "the editor's save, longer\n"
        assert notes.folder.remove("memory/plan.md", seen) == 0 and target.exists()

        await notes.write("memory/plan.md", "two\n")  # takes the save in first, then writes over it
        texts = [v.content for v in await notes.versions("memory/plan.md")]
        assert texts == ["one\n", "the editor's save, longer\n", "two\n"]
    finally:
        await storage.close()


async def test_a_deletion_made_before_tombstones_does_not_come_back(start_gateway, postgres_url, tmp_path):
    """A note deleted by a gateway of the version before note tombstones (0016) left no tombstone: a
    gateway that mirrored it and had not reconciled since took its file back in. Migration 0017 keeps
    such a deletion (the note's versions stay, its row is gone): the mirror is removed instead."""
    a = await start_gateway("a", **_cfg(postgres_url, tmp_path, "a"))
    ca = await a.client()
    note = "memory/old-plans.md"
    await ca.call("memory.write", {"path": note, "content": "Paint the shed.\n"})
    await ca.close()
    at_a = tmp_path / "workspace-a" / "memory" / "old-plans.md"
    assert at_a.read_text(encoding="utf-8") == "Paint the shed.\n"
    await a.stop()
    conn = await asyncpg.connect(postgres_url)  # what the old version left: the row gone, no tombstone
    try:
        await conn.execute("DELETE FROM notes WHERE path = $1", note)
        await conn.execute("DELETE FROM note_tombstones")
        await conn.execute("DELETE FROM jarvis_migrations WHERE name = '0017_note_tombstones_of_old_deletions'")
    finally:
        await conn.close()
    await a.start()
    ca = await a.client()
    await ca.call("memory.sync")

    async def gone() -> bool:
        return not at_a.exists()

    await wait_for(gone)
    assert note not in await _rows(postgres_url), "not taken back in"
    history = await ca.call("memory.history", {"path": note})
    assert [v["version"] for v in history["versions"]] == [1], "its versions stay"
    await ca.close()
