"""`jarvis migrate`'s import of a keyed memory is all of it or nothing, on both engines (issue 47's review,
finding 4's siblings): PostgreSQL writes the row and its versions in one transaction; the files engine
writes the versions, then the file, and where the file cannot be written removes the versions again —
else the key would look taken (in the trash) with no memory behind it."""

from __future__ import annotations

import pytest

from gateway.errors import NotFound
from gateway.memory.notes.keyed import Entry, KeyedCopy, Version
from gateway.storage.base import ADDED


def _copy(ws, key: str) -> KeyedCopy:
    at = "2026-01-01T00:00:00.000Z"
    entry = Entry(key, "facts", "The boat is teal.", at, at, f"memory/keyed/facts/{key}.md", ws)
    return KeyedCopy(entry, (Version(1, "The boat is teal.", "facts", at, "websocket", None),))


async def test_a_keyed_import_that_cannot_write_leaves_nothing(storage):
    keyed = storage.keyed("main")
    ws = storage.config.agent_workspace("main")
    if storage.name == "files":
        (ws / "memory" / "keyed").mkdir(parents=True)
        (ws / "memory" / "keyed" / "facts").write_text("a file where the category's folder goes\n")
        with pytest.raises(OSError):
            await keyed.import_copies([_copy(ws / "memory", "boat")])
        (ws / "memory" / "keyed" / "facts").unlink()
        with pytest.raises(NotFound):  # no versions left behind
            await keyed.history("boat")
    [done] = await keyed.import_copies([_copy(ws / "memory", "boat")])
    assert done.status == ADDED, done
    assert [(v.version, v.value) for v in await keyed.history("boat")] == [(1, "The boat is teal.")]
    assert (await keyed.get("boat")).value == "The boat is teal."
