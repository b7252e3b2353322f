"""NoteRecord's versions over a note's whole life (issue 47's review: findings 4, 6, 7), the same on both
engines: which version is `current` (none once the note is deleted), a restore's own size limit
(memory.maxFileBytes, not memory.write's), and `jarvis migrate`'s import over a note deleted at the
destination — the versions kept there stay, the copy's go on after them, and the note's text is its newest
version; a note's import is all of it or nothing."""

from __future__ import annotations

import pytest

from gateway.errors import Invalid
from gateway.memory.notes.files import MAX_NOTE_BYTES
from gateway.memory.notes.history import NoteVersion
from gateway.storage.base import ADDED, REFUSED, NoteCopy


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


async def test_an_import_over_a_deleted_note_keeps_its_versions_and_goes_on_after_them(notes, workspace):
    for text in ("old one\n", "old two\n", "old three\n"):
        await notes.write("memory/x.md", text, "websocket")
    await _deleted(notes, workspace, "memory/x.md")
    copy = NoteCopy("memory/x.md", (NoteVersion(1, "2026-01-01T00:00:00.000Z", "websocket", "NEW imported\n"),))
    [done] = await notes.import_copies([copy])
    assert done.status == ADDED, done.detail
    assert [(v.version, v.content) for v in await notes.versions("memory/x.md")] == [
        (1, "old one\n"),
        (2, "old two\n"),
        (3, "old three\n"),
        (4, "NEW imported\n"),
    ]
    assert await notes.current("memory/x.md") == 4
    [back] = [c for c in await notes.copies() if c.path == "memory/x.md"]
    assert back.versions[-1].content == "NEW imported\n"
    await notes.reconcile()
    assert (workspace / "memory" / "x.md").read_text() == "NEW imported\n"


async def test_an_import_that_fails_its_check_leaves_the_note_as_it_was(storage, notes, workspace):
    """A note's import is one undoable step: where its write fails or its read back differs, its versions
    are as they were (a deleted note's past ones), it has no current version and no file. On PostgreSQL a
    trigger alters the version as it is stored (the read back differs); on files the note's path is a
    folder (its text cannot be written)."""
    for text in ("y one\n", "y two\n"):
        await notes.write("memory/y.md", text, "websocket")
    await _deleted(notes, workspace, "memory/y.md")
    if storage.name == "postgresql":
        async with notes.pg.pool.acquire() as conn:
            await conn.execute(
                "CREATE FUNCTION tamper() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN NEW.content := NEW.content || 'tampered'; RETURN NEW; END $$"
            )
            await conn.execute(
                "CREATE TRIGGER tamper BEFORE INSERT ON note_versions FOR EACH ROW EXECUTE FUNCTION tamper()"
            )
    else:
        (workspace / "memory" / "y.md").mkdir()
    copy = NoteCopy("memory/y.md", (NoteVersion(1, "2026-01-01T00:00:00.000Z", "websocket", "Y imported\n"),))
    [done] = await notes.import_copies([copy])
    assert done.status == REFUSED, done
    assert [(v.version, v.content) for v in await notes.versions("memory/y.md")] == [(1, "y one\n"), (2, "y two\n")]
    assert await notes.current("memory/y.md") is None
    assert not (workspace / "memory" / "y.md").is_file()
    assert "memory/y.md" not in [c.path for c in await notes.copies()]


async def test_a_note_whose_text_is_in_no_version_is_copied_out_with_it_as_its_newest(storage, notes, workspace):
    """What an older `jarvis migrate` could leave in PostgreSQL (a row whose text no version holds) goes
    out with that text as one more version, never with an older text as the note's."""
    if storage.name != "postgresql":
        pytest.skip("the files engine's note text is its file, its newest version by construction")
    for text in ("p one\n", "p two\n"):
        await notes.write("memory/p.md", text, "websocket")
    async with notes.pg.pool.acquire() as conn:
        await conn.execute("UPDATE notes SET content = 'p in no version\n', version = 1 WHERE path = 'memory/p.md'")
    [c] = [c for c in await notes.copies() if c.path == "memory/p.md"]
    assert [(v.version, v.content) for v in c.versions] == [(1, "p one\n"), (2, "p two\n"), (3, "p in no version\n")]
