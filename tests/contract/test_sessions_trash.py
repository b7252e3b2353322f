"""SessionStore's trash, the same on every engine: a delete moves a session whole (metadata and
transcript) to the trash, a restore brings it back exactly, only a purge removes it; a key in the trash
stays taken; retention deletes for good."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import Conflict, NotFound, SessionLimit
from gateway.storage.base import ADDED, PRESENT
from gateway.timeutil import now_iso
from tests.contract.test_sessions import msg


async def _made(sessions, key: str, *words: str) -> dict:
    await sessions.create(key=key, label=f"about {key}", settings={"model": "m1"})
    for i, w in enumerate(words):
        await sessions.append_messages(key, msg("user", w, f"2030-01-0{i + 1}T00:00:00.000Z"))
    await sessions.flush()
    return await sessions.get(key)


async def test_a_deleted_session_waits_in_the_trash_and_comes_back_whole(sessions):
    before = await _made(sessions, "boat", "The boat is teal.", "No, white.")
    page = await sessions.history("boat", 10, None)
    lines = (await sessions.local_transcript("boat")).read_bytes()
    await sessions.delete("boat")

    assert not await sessions.exists("boat") and await sessions.all() == {}
    assert (await sessions.list(10, 0)) == ([], 0)
    assert not sessions.transcript_path("boat").exists(), "no transcript where the index looks"
    for gone in (sessions.get("boat"), sessions.history("boat", 10, None)):
        with pytest.raises(NotFound):
            await gone
    [trashed] = await sessions.trash()
    assert trashed.pop("deletedAt") >= before["createdAt"] and trashed == before
    copy = await sessions.export("boat")
    assert copy is not None and copy.deleted and b"".join(x + b"\n" for x in copy.lines) == lines

    back = await sessions.restore("boat")
    assert back == before and await sessions.get("boat") == before
    assert await sessions.history("boat", 10, None) == page
    assert (await sessions.local_transcript("boat")).read_bytes() == lines
    assert await sessions.trash() == [] and (await sessions.export("boat")).deleted is None
    await sessions.append_messages("boat", msg("user", "Sold it.", "2030-01-09T00:00:00.000Z"))
    assert (await sessions.get("boat"))["messageCount"] == 3

    with pytest.raises(Conflict):
        await sessions.restore("boat")
    with pytest.raises(NotFound):
        await sessions.restore("never")


async def test_a_purge_removes_for_good_by_key_by_time_or_all(sessions):
    for key in ("a", "b", "c"):
        await _made(sessions, key, f"words of {key}")
    await sessions.delete("a")
    await asyncio.sleep(0.002)
    cut = now_iso()
    await asyncio.sleep(0.002)
    await sessions.delete("b")
    await sessions.delete("c")
    assert [s["sessionKey"] for s in await sessions.trash()][-1] == "a", "the longest deleted last"
    assert await sessions.purge(before=cut) == ["a"]
    with pytest.raises(NotFound):
        await sessions.purge(["a"])
    assert await sessions.purge(["b"]) == ["b"]
    assert await sessions.purge() == ["c"] and await sessions.trash() == []
    assert await sessions.export("a") is None
    with pytest.raises(NotFound):
        await sessions.restore("c")


async def test_retention_deletes_for_good_and_a_restore_respects_max(sessions):
    await _made(sessions, "gone-for-good", "ephemeral")
    await sessions.delete("gone-for-good", trash=False)
    assert await sessions.trash() == []
    sessions.max = 2
    await _made(sessions, "x", "one")
    await sessions.delete("x")
    await _made(sessions, "y", "two")
    await _made(sessions, "z", "three")
    with pytest.raises(SessionLimit):
        await sessions.restore("x")
    assert [s["sessionKey"] for s in await sessions.trash()] == ["x"], "still in the trash"


async def test_a_trashed_session_imports_into_the_trash_and_its_key_is_taken(storage, sessions):
    await _made(sessions, "t", "kept in the trash")
    await sessions.delete("t")
    copy = await sessions.export("t")
    other = storage.sessions("other")
    await other.open()
    try:
        assert [i.status for i in await other.import_sessions([copy], dry_run=True)] == [ADDED]
        assert await other.trash() == []
        assert [i.status for i in await other.import_sessions([copy])] == [ADDED]
        [there] = await other.trash()
        assert there["deletedAt"] == copy.deleted and await other.all() == {}
        again = await other.export("t")
        assert again.lines == copy.lines and again.deleted == copy.deleted and again.meta == copy.meta
        assert [i.status for i in await other.import_sessions([copy])] == [PRESENT]
        restored = await other.restore("t")
        assert restored == copy.meta
    finally:
        await other.close()
