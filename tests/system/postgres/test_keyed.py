"""Keyed memories on PostgreSQL (storage.url): rows are the record for every gateway; each gateway's
workspace files are a mirror it keeps in step (storage/postgres/keyed.py).

Here A and B have workspaces of their own, so what B knows of A's writes came through the database.
"""

from __future__ import annotations

import asyncpg
import pytest

from tests.helpers import RpcError, wait_for

QUIET = {"memory.sync.onStart": False, "memory.sync.watch": False}


async def two(start_gateway, postgres_url, tmp_path):
    def cfg(name: str) -> dict:
        return {
            "storage.url": postgres_url,
            "storage.instanceId": name,
            "memory": True,
            "workspace": str(tmp_path / f"workspace-{name}"),
            **QUIET,
        }

    return await start_gateway("a", **cfg("a")), await start_gateway("b", **cfg("b"))


def mirror(tmp_path, gateway: str, category: str, key: str):
    return tmp_path / f"workspace-{gateway}" / "memory" / "keyed" / category / f"{key}.md"


async def test_a_memory_set_through_a_is_read_listed_found_and_deleted_through_b(start_gateway, postgres_url, tmp_path):
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        saved = await ca.call(
            "memory.set", {"key": "boat-colour", "value": "The sailing boat is painted teal.", "category": "facts"}
        )
        assert saved["replaced"] is False and saved["path"] == "memory/keyed/facts/boat-colour.md"

        got = await cb.call("memory.get", {"key": "boat-colour"})
        assert (got["value"], got["category"], got["created"]) == (
            "The sailing boat is painted teal.",
            "facts",
            saved["created"],
        )
        listed = await cb.call("memory.list", {})
        assert [m["key"] for m in listed["memories"]] == ["boat-colour"] and listed["total"] == 1

        # B's mirror file arrives through the notification, and B's search finds it after B's sync.
        await wait_for(lambda: _exists(mirror(tmp_path, "b", "facts", "boat-colour")))
        await cb.call("memory.sync")
        res = await cb.call("memory.search", {"query": "what colour is the sailing boat", "sources": ["memory"]})
        assert res["results"][0]["path"] == "memory/keyed/facts/boat-colour.md"
        text = await cb.call("memory.get", {"path": "memory/keyed/facts/boat-colour.md"})
        assert "painted teal" in text["text"]

        # Moved to another category through B: one row, each mirror follows.
        moved = await cb.call(
            "memory.set", {"key": "boat-colour", "value": "The sailing boat is now white.", "category": "general"}
        )
        assert moved["replaced"] is True and moved["movedFrom"] == "facts" and moved["created"] == saved["created"]
        assert (await ca.call("memory.get", {"key": "boat-colour"}))["value"] == "The sailing boat is now white."
        await wait_for(lambda: _exists(mirror(tmp_path, "a", "general", "boat-colour")))
        await wait_for(lambda: _gone(mirror(tmp_path, "a", "facts", "boat-colour")))

        await ca.call("memory.delete", {"key": "boat-colour"})
        with pytest.raises(RpcError) as err:
            await cb.call("memory.get", {"key": "boat-colour"})
        assert err.value.code == -32004
        assert (await cb.call("memory.list", {}))["total"] == 0
        await wait_for(lambda: _gone(mirror(tmp_path, "b", "general", "boat-colour")))
        await cb.call("memory.sync")
        res = await cb.call("memory.search", {"query": "sailing boat white", "sources": ["memory"]})
        assert not any("boat-colour" in r["path"] for r in res["results"])
    finally:
        await ca.close()
        await cb.close()


async def _exists(path) -> bool:
    return path.exists()


async def _gone(path) -> bool:
    return not path.exists()


async def test_files_and_rows_are_reconciled_by_version_not_by_clock(start_gateway, postgres_url, tmp_path):
    # A state dir with keyed memory files from before PostgreSQL: they become rows.
    ws = tmp_path / "workspace-a" / "memory" / "keyed"
    (ws / "people").mkdir(parents=True)
    (ws / "people" / "dentist.md").write_text("# dentist\n\nDr Imani Osei, on Harbour Street.\n")
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        await ca.call("memory.sync")
        got = await cb.call("memory.get", {"key": "dentist"})
        assert (got["value"], got["category"]) == ("Dr Imani Osei, on Harbour Street.", "people")

        # Edited by hand in A's mirror (the front matter still names the row's version): the row takes it.
        path = mirror(tmp_path, "a", "people", "dentist")
        assert "version: 1\n" in path.read_text()
        path.write_text(path.read_text().replace("Harbour Street", "Mill Lane"))
        await ca.call("memory.sync")
        assert (await cb.call("memory.get", {"key": "dentist"}))["value"] == "Dr Imani Osei, on Mill Lane."

        # A mirror of an older version (a gateway that missed the notification) is rewritten, not taken:
        # B's file is put back to the old text, with its old version in the front matter.
        await cb.call("memory.sync")
        b_path = mirror(tmp_path, "b", "people", "dentist")
        assert "version: 2\n" in b_path.read_text()
        b_path.write_text(b_path.read_text().replace("Mill Lane", "Harbour Street").replace("version: 2", "version: 1"))
        await cb.call("memory.sync")
        assert (await ca.call("memory.get", {"key": "dentist"}))["value"] == "Dr Imani Osei, on Mill Lane."
        assert "Mill Lane" in b_path.read_text()

        # A delete leaves a tombstone: B's mirror, written back while B was not told, goes again.
        await ca.call("memory.delete", {"key": "dentist"})
        await wait_for(lambda: _gone(b_path))
        b_path.write_text(
            path.read_text()
            if path.exists()
            else f"---\nkey: dentist\ncategory: people\ncreated: {got['created']}\n"
            f"updated: {got['updated']}\nversion: 2\n---\n# dentist\n\nDr Imani Osei, on Mill Lane.\n"
        )
        await cb.call("memory.sync")
        assert not b_path.exists()
        with pytest.raises(RpcError):
            await ca.call("memory.get", {"key": "dentist"})
    finally:
        await ca.close()
        await cb.close()


async def test_the_rows_survive_in_the_database(start_gateway, postgres_url, tmp_path):
    a, _ = await two(start_gateway, postgres_url, tmp_path)
    ca = await a.client()
    try:
        await ca.call("memory.set", {"key": "wifi", "value": "The guest network is called Lighthouse."})
    finally:
        await ca.close()
    conn = await asyncpg.connect(postgres_url)
    try:
        row = await conn.fetchrow(
            "SELECT category, value, deleted FROM keyed_memories WHERE agent_id = 'main' AND key = 'wifi'"
        )
    finally:
        await conn.close()
    assert tuple(row) == ("general", "The guest network is called Lighthouse.", False)


async def test_jarvis_memory_set_on_the_database_reaches_a_running_gateway(start_gateway, postgres_url, tmp_path):
    import asyncio
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    _, b = await two(start_gateway, postgres_url, tmp_path)
    cb = await b.client()
    try:
        env = {
            **os.environ,
            "JARVIS_STATE_DIR": str(tmp_path / "cli-state"),
            "JARVIS_DATABASE_URL": postgres_url,
            "JARVIS_WORKSPACE": str(tmp_path / "workspace-cli"),
        }
        r = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "memory",
                "set",
                "bins",
                "Bins go out on Thursday.",
                "--category",
                "tasks",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert (await cb.call("memory.get", {"key": "bins"}))["value"] == "Bins go out on Thursday."
        await wait_for(lambda: _exists(mirror(tmp_path, "b", "tasks", "bins")))
    finally:
        await cb.close()


async def test_a_stale_mirror_from_a_fast_clock_and_a_file_postgresql_cannot_hold_change_no_row(
    start_gateway, postgres_url, tmp_path
):
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        await ca.call("memory.set", {"key": "ferry", "value": "The ferry leaves at 7:40."})
        await cb.call("memory.sync")
        now = await cb.call("memory.set", {"key": "ferry", "value": "The ferry now leaves at 8:10."})
        # A's mirror of the first version, as a gateway whose clock runs fast would have stamped it:
        # newer by the clock, an older version all the same.
        path = mirror(tmp_path, "a", "general", "ferry")
        path.write_text(
            f"---\nkey: ferry\ncategory: general\ncreated: {now['created']}\n"
            f"updated: 2999-01-01T00:00:00.000Z\nversion: 1\n---\n# ferry\n\nThe ferry leaves at 7:40.\n"
        )
        # And a keyed file whose text PostgreSQL cannot hold: skipped, the sync goes on.
        bad = mirror(tmp_path, "a", "general", "nul")
        bad.write_bytes(b"# nul\n\nbefore\x00after\n")
        res = await ca.call("memory.sync")
        assert res["indexed"] >= 1
        assert (await cb.call("memory.get", {"key": "ferry"}))["value"] == "The ferry now leaves at 8:10."
        assert "8:10" in path.read_text()
        with pytest.raises(RpcError):
            await ca.call("memory.get", {"key": "nul"})
    finally:
        await ca.close()
        await cb.close()
