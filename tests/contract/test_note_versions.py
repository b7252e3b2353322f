"""NoteRecord's versions over a note's whole life (issue 47's review: findings 6, 7), the same on both
engines: which version is `current` (none once the note is deleted), a restore's own size limit
(memory.maxFileBytes, not memory.write's), and `jarvis migrate`'s import over a note deleted at the
destination — the versions kept there stay, the copy's go on after them, and the note's text is its newest
version; a note's import is all of it or nothing."""

from __future__ import annotations

import pytest

from gateway.errors import Invalid
from gateway.memory.notes.files import MAX_NOTE_BYTES


@pytest.fixture
def notes(storage):
    return storage.notes("main")


@pytest.fixture
def workspace(storage):
    return storage.config.agent_workspace("main")


async def _deleted(notes, workspace, rel: str) -> None:
    """The note deleted the documented way: its file removed, then a sync that confirms it gone."""
    (workspace / rel).unlink()
    await notes.reconcile()
    await notes.forget_gone()


async def test_current_is_the_text_now_and_none_once_deleted(notes, workspace):
    assert await notes.current("memory/zeta.md") is None
    for text in ("one\n", "two\n"):
        await notes.write("memory/zeta.md", text, "websocket")
    assert await notes.current("memory/zeta.md") == 2
    (workspace / "memory" / "zeta.md").write_text("three, by hand\n")
    assert await notes.current("memory/zeta.md") == (await notes.versions("memory/zeta.md"))[-1].version == 3
    await notes.write("memory/zeta.md", "four\n", "websocket")
    assert await notes.current("memory/zeta.md") == 4
    await _deleted(notes, workspace, "memory/zeta.md")
    assert [v.content for v in await notes.versions("memory/zeta.md")] == [
        "one\n",
        "two\n",
        "three, by hand\n",
        "four\n",
    ]
    assert await notes.current("memory/zeta.md") is None, "a deleted note has no current version"


async def test_a_restore_takes_any_text_the_record_took(notes, workspace):
    big = "x" * (MAX_NOTE_BYTES + 1000) + "\n"
    with pytest.raises(Invalid):
        await notes.write("LEARNINGS.md", big, "websocket")  # memory.write's cap
    made = await notes.write("LEARNINGS.md", big, "websocket", limit=MAX_NOTE_BYTES * 8)
    assert made["size"] == len(big) and (workspace / "LEARNINGS.md").read_text() == big
    assert (await notes.versions("LEARNINGS.md"))[-1].content == big
    with pytest.raises(Invalid) as exc:
        await notes.write("LEARNINGS.md", big, "websocket", limit=1000)
    assert f"at most 1000 bytes of UTF-8, got {len(big)}" in str(exc.value)
