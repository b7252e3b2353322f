"""Whole sessions in and out of every engine (`export` / `import_sessions`, what `jarvis migrate` copies
through): a session exported and imported elsewhere is the same session, byte for byte."""

from __future__ import annotations

import uuid

import orjson

from gateway.sessions import transcript as tx
from gateway.storage.base import ADDED, PRESENT, REFUSED, SessionCopy


def msg(role: str, content: str, timestamp: str) -> dict:
    return tx.message_record(str(uuid.uuid4()), role, content, timestamp=timestamp)


async def test_an_exported_session_imports_elsewhere_as_the_same_session_and_never_twice(storage, sessions):
    await sessions.create(label="Garden", key="plans", settings={"model": "m1"})
    await sessions.append_messages(
        "plans",
        msg("user", "Where do the tomatoes go? ü 漢字", "2024-05-01T10:00:00.000Z"),
        msg("assistant", "In the greenhouse.", "2024-05-01T10:01:00.000Z"),
    )
    await sessions.append_records("plans", {"type": "compaction", "summary": "tomatoes", "upTo": 1})
    assert await sessions.export("nothing") is None
    copy = await sessions.export("plans")
    assert copy is not None and copy.meta == await sessions.get("plans") and copy.meta["model"] == "m1"
    assert copy.lines == tuple((await sessions.local_transcript("plans")).read_bytes().splitlines())
    assert len(copy.lines) == 4 and copy.torn == 0 and copy.problem == ""

    other = storage.sessions("other")  # not opened: a tool beside no gateway writes into it
    assert [i.status for i in await other.import_sessions([copy], dry_run=True)] == [ADDED]
    assert await other.export("plans") is None, "a dry run writes nothing"
    assert [i.status for i in await other.import_sessions([copy])] == [ADDED]
    assert await other.export("plans") == copy
    again = await other.import_sessions([copy, SessionCopy({**copy.meta, "label": "else"}, copy.lines[:1])])
    assert [i.status for i in again] == [PRESENT, PRESENT] and await other.export("plans") == copy
    assert "other" in await storage.agents() and await storage.schema(apply=False) == []

    await other.open()  # served as any session: its counters, its history, and it carries on
    try:
        assert await other.get("plans") == copy.meta and await other.strays() == []
        page = await other.history("plans", 10, None)
        assert [m["content"] for m in page["messages"]] == ["Where do the tomatoes go? ü 漢字", "In the greenhouse."]
        await other.append_messages("plans", msg("user", "And the beans?", "2024-05-01T10:02:00.000Z"))
        assert (await other.get("plans"))["messageCount"] == 3
    finally:
        await other.close()


async def test_an_import_is_whole_per_session_and_what_the_engine_cannot_hold_is_refused_alone(storage):
    store = storage.sessions("main")
    meta = {
        "sessionKey": "odd",
        "label": None,
        "createdAt": "2024-05-01T10:00:00.000Z",
        "updatedAt": "2024-05-01T10:00:00.000Z",
        "messageCount": 0,
    }
    header = tx.header("odd", "main", meta["createdAt"])

    fine = SessionCopy(meta, (orjson.dumps(header),))
    nul = SessionCopy({**meta, "sessionKey": "nul"}, (orjson.dumps(header), b'{"type":"note","text":"a\x00b"}'))
    done = await store.import_sessions([fine, nul])
    assert done[0].status == ADDED
    if storage.name == "postgresql":  # text holds no NUL byte: that session is refused, nothing of it written
        assert done[1].status == REFUSED and "NUL byte" in done[1].detail and await store.export("nul") is None
    else:  # files hold any bytes
        assert done[1].status == ADDED and (await store.export("nul")).lines == nul.lines
    assert (await store.export("odd")).lines == fine.lines


async def test_keyed_memories_import_elsewhere_whole_with_their_times_and_never_over_one(storage, tmp_path):
    from gateway.memory.notes.keyed import Entry

    mine = storage.keyed("main")
    await mine.set("boat", "The boat is blue.", "facts")
    await mine.set("color", "Navy.", None)
    got = {e.key: e for e in await mine.entries()}
    assert {k: (e.category, e.value) for k, e in got.items()} == {
        "boat": ("facts", "The boat is blue."),
        "color": ("general", "Navy."),
    }
    assert got["boat"].full() == (await mine.get("boat")).full()
    old = Entry(
        "old",
        "people",
        "Ada wrote the first program.",
        "2020-01-01T00:00:00.000Z",
        "2021-06-01T00:00:00.000Z",
        "",
        tmp_path,
    )
    other = storage.keyed("other")
    assert [i.status for i in await other.import_entries([old], dry_run=True)] == [ADDED]
    assert await other.entries() == []
    done = await other.import_entries([old, got["boat"], Entry("bad key!", "facts", "x", "", "", "", tmp_path)])
    assert [i.status for i in done] == [ADDED, ADDED, REFUSED]
    back = {e.key: e for e in await other.entries()}
    assert {k: (e.category, e.value, e.created, e.updated) for k, e in back.items()} == {
        "old": ("people", "Ada wrote the first program.", "2020-01-01T00:00:00.000Z", "2021-06-01T00:00:00.000Z"),
        "boat": ("facts", "The boat is blue.", got["boat"].created, got["boat"].updated),
    }
    changed = Entry("boat", "facts", "The boat is red.", old.created, old.updated, "", tmp_path)
    assert [i.status for i in await other.import_entries([changed])] == [PRESENT]
    assert (await other.get("boat")).value == "The boat is blue."
    await other.delete("old")  # in the trash: the key is taken on every engine; never revived over it
    assert [i.status for i in await other.import_entries([old])] == [PRESENT]
    await other.purge(["old"])  # gone for good: taken still on an engine that remembers deletes (tombstones)
    again = await other.import_entries([old])
    assert again[0].status in (ADDED, PRESENT) and (again[0].status == PRESENT) == (storage.name == "postgresql")
