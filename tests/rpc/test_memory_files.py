"""memory.files and memory.write: the notes browser and editor's methods, through the WebSocket against a
real gateway and real files: listed, written atomically, searchable at once, and refused clearly."""

from __future__ import annotations

import os
import stat

import pytest

from gateway.memory.notes.files import MAX_NOTE_BYTES
from tests.helpers import RpcError


async def fts(c, query):
    res = await c.call("memory.search", {"query": query, "mode": "fts", "sources": ["memory"]})
    return [r["path"] for r in res["results"]]


async def refused(c, params) -> RpcError:
    with pytest.raises(RpcError) as ei:
        await c.call("memory.write", params)
    return ei.value


async def test_list_write_and_search_at_once(start_gateway):
    gw = await start_gateway(memory=True)
    ws = gw.config.workspace_dir
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text("# About me\n\nI take my coffee black.\n")
    (ws / "memory" / "garden.md").write_text("# Garden\n\nTomatoes in the greenhouse.\n")
    c = await gw.client()
    try:
        await c.call("memory.set", {"key": "bike", "value": "A green roadster."})
        files = (await c.call("memory.files"))["files"]
        by_path = {f["path"]: f for f in files}
        assert list(by_path) == ["MEMORY.md", "memory/garden.md", "memory/keyed/general/bike.md"]
        assert by_path["MEMORY.md"]["writable"] and by_path["memory/garden.md"]["writable"]
        assert by_path["memory/keyed/general/bike.md"]["writable"] is False
        assert by_path["memory/garden.md"]["size"] == len("# Garden\n\nTomatoes in the greenhouse.\n")
        assert by_path["MEMORY.md"]["modified"].endswith("Z")

        # Replace a note: atomic, private, and searchable as soon as the write answers.
        res = await c.call(
            "memory.write", {"path": "memory/garden.md", "content": "# Garden\n\nCucumbers climb the south fence.\n"}
        )
        assert res == {"path": "memory/garden.md", "size": 43, "created": False}
        assert (ws / "memory/garden.md").read_text() == "# Garden\n\nCucumbers climb the south fence.\n"
        assert stat.S_IMODE((ws / "memory/garden.md").stat().st_mode) == 0o600
        assert "memory/garden.md" in await fts(c, "cucumbers south fence")
        assert "memory/garden.md" not in await fts(c, "tomatoes greenhouse")
        # A new note in a new folder.
        res = await c.call("memory.write", {"path": "memory/trips/lisbon.md", "content": "Tram 28 at dawn.\n"})
        assert res["created"] is True
        assert "memory/trips/lisbon.md" in await fts(c, "tram dawn")
        got = await c.call("memory.get", {"path": "memory/trips/lisbon.md"})
        assert got["text"] == "Tram 28 at dawn."
    finally:
        await c.close()


async def test_writes_outside_the_notes_are_refused_and_change_nothing(start_gateway, tmp_path):
    gw = await start_gateway(memory=True)
    ws = gw.config.workspace_dir
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, ws / "memory" / "elsewhere")
    (ws / "memory" / "link.md").symlink_to(outside / "target.md")
    c = await gw.client()
    try:
        for path, rule in (
            ("../x.md", "must not contain '..'"),
            ("/etc/passwd", "not an absolute path"),
            ("notes.txt", "only MEMORY.md and memory/**/*.md"),
            ("LEARNINGS.md", "only MEMORY.md and memory/**/*.md"),
            ("memory/keyed/general/bike.md", "memory.set"),
            ("memory/images/cat.md", "memory.setImage"),
            ("memory/elsewhere/x.md", "outside the workspace"),
            ("memory/link.md", "symlink"),
        ):
            err = await refused(c, {"path": path, "content": "x"})
            assert err.code == -32602 and rule in err.message, (path, err.message)
            assert err.data.get("field") == "params.path", path
        assert list(outside.iterdir()) == []
        err = await refused(c, {"path": "MEMORY.md", "content": "é" * (MAX_NOTE_BYTES // 2 + 1)})
        assert err.code == -32602 and err.data.get("field") == "params.content" and "bytes of UTF-8" in err.message
        err = await refused(c, {"path": "MEMORY.md", "content": "a\x00b"})
        assert err.data.get("field") == "params.content"
        assert not (ws / "MEMORY.md").exists()
    finally:
        await c.close()
