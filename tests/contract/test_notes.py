"""NoteRecord's contract (memory/ports.py): an agent's notes with their versions, the same on both
engines — the files engine's plain folder, PostgreSQL's rows with the folder a mirror. Whatever the
engine, a note written is in the folder, its versions say who wrote what through which door, an edit
by hand is never lost, and a text the record cannot hold is refused naming the rule."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import Invalid
from gateway.memory.notes.files import MAX_NOTE_BYTES
from tests.helpers import examples


async def test_a_note_written_is_in_the_folder_with_its_versions(notes, workspace):
    made = await notes.write("MEMORY.md", "# Me\nI sail.\n", "websocket", "owner")
    assert made == {"path": "MEMORY.md", "size": len("# Me\nI sail.\n"), "created": True}
    assert (workspace / "MEMORY.md").read_text() == "# Me\nI sail.\n"
    again = await notes.write("MEMORY.md", "# Me\nI sail and row.\n", "mcp", "phone")
    assert again["created"] is False
    await notes.write("MEMORY.md", "# Me\nI sail and row.\n", "mcp", "phone")  # the same text: no new version
    versions = await notes.versions("MEMORY.md")
    assert [(v.version, v.by, v.principal, v.content) for v in versions] == [
        (1, "websocket", "owner", "# Me\nI sail.\n"),
        (2, "mcp", "phone", "# Me\nI sail and row.\n"),
    ]
    assert all(v.at for v in versions)
    assert await notes.versions("memory/never.md") == []


async def test_an_edit_by_hand_is_kept_as_a_version_before_the_next_write(notes, workspace):
    await notes.write("memory/boat.md", "The boat is green.\n", "websocket")
    (workspace / "memory" / "boat.md").write_text("The boat is blue now.\n")  # the person's editor
    assert (await notes.versions("memory/boat.md"))[-1].content == "The boat is blue now.\n"
    await notes.write("memory/boat.md", "The boat is red.\n", "websocket")
    contents = [v.content for v in await notes.versions("memory/boat.md")]
    assert contents == ["The boat is green.\n", "The boat is blue now.\n", "The boat is red.\n"]
    assert (workspace / "memory" / "boat.md").read_text() == "The boat is red.\n"


async def test_reconcile_leaves_the_folder_as_the_record_says(notes, workspace):
    await notes.write("memory/2026-11-20.md", "# 2026-11-20\n\n## Flushed\nA day.\n", "tool")
    await notes.reconcile()
    await notes.reconcile("memory/2026-11-20.md")
    assert (workspace / "memory" / "2026-11-20.md").read_text() == "# 2026-11-20\n\n## Flushed\nA day.\n"
    (workspace / "LEARNINGS.md").write_text("# Learnings\n- [2026-11-20] Short answers.\n")  # memory.learn's file
    await notes.reconcile()
    assert (await notes.versions("LEARNINGS.md"))[-1].content.endswith("Short answers.\n")


@pytest.mark.parametrize(
    "text, rule",
    [("a\x00b", "NUL"), ("x" * (MAX_NOTE_BYTES + 1), f"at most {MAX_NOTE_BYTES} bytes")],
)
async def test_a_text_the_record_cannot_hold_is_refused_naming_the_rule(notes, workspace, text, rule):
    with pytest.raises(Invalid) as exc:
        await notes.write("memory/bad.md", text, "websocket")
    assert exc.value.field == "content" and rule in str(exc.value)
    assert not (workspace / "memory" / "bad.md").exists()
    assert await notes.versions("memory/bad.md") == []


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=300))
async def test_any_text_a_note_may_hold_comes_back_as_it_was(notes, workspace, text):
    await notes.write("memory/any.md", text, "websocket")
    assert (workspace / "memory" / "any.md").read_bytes() == text.encode("utf-8")
    assert (await notes.versions("memory/any.md"))[-1].content == text


async def test_whole_notes_go_out_and_in_with_their_versions(storage):
    """NoteStore's copies and import_copies (`jarvis migrate`): into another agent, then again (present,
    identical), then over another text (present, nothing written)."""
    from gateway.storage.base import ADDED, IDENTICAL_NOTE, PRESENT

    src, dst = storage.notes("main"), storage.notes("other")
    await src.write("MEMORY.md", "I sail.\n", "websocket", "owner")
    await src.write("MEMORY.md", "I sail and row.\n", "mcp", "phone")
    await src.write("memory/boat.md", "Green.\n", "websocket")
    copies = await src.copies()
    assert [(c.path, len(c.versions)) for c in copies] == [("MEMORY.md", 2), ("memory/boat.md", 1)]
    assert [i.status for i in await dst.import_copies(copies, dry_run=True)] == [ADDED, ADDED]
    assert await dst.copies() == [], "a dry run writes nothing"
    assert [i.status for i in await dst.import_copies(copies)] == [ADDED, ADDED]
    assert [(c.path, [v.full() for v in c.versions]) for c in await dst.copies()] == [
        (c.path, [v.full() for v in c.versions]) for c in copies
    ]
    again = await dst.import_copies(copies)
    assert [(i.status, i.detail) for i in again] == [(PRESENT, IDENTICAL_NOTE)] * 2
    await dst.write("memory/boat.md", "Red.\n", "websocket")
    [other] = await dst.import_copies([copies[1]])
    assert other.status == PRESENT and other.detail != IDENTICAL_NOTE
    assert (await dst.versions("memory/boat.md"))[-1].content == "Red.\n"


async def test_a_folder_of_many_notes_is_taken_in_at_once(notes, workspace):
    """A folder's first sync on PostgreSQL: every note new to the record, in one statement per batch."""
    folder = workspace / "memory" / "vault"
    folder.mkdir(parents=True)
    for i in range(40):
        (folder / f"n{i:02d}.md").write_text(f"Note {i}.\n")
    await notes.reconcile()
    await notes.reconcile()  # again: nothing new
    for i in (0, 17, 39):
        assert [(v.version, v.content) for v in await notes.versions(f"memory/vault/n{i:02d}.md")] == [
            (1, f"Note {i}.\n")
        ]
