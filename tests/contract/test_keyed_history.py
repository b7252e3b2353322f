"""KeyedStore's versions and trash, the same on every engine: every write of a keyed memory is a version
(value, category, when, the door it came through), a delete moves it to the trash whole, and only a
purge removes it. Small limits here (memory.versions.*) so that the bounds show."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import Conflict, NotFound
from gateway.timeutil import now_iso

CONFIG = {"memory.versions.keep": 5, "memory.versions.maxBytes": 262_144}


@pytest.fixture
def keyed(storage):
    return storage.keyed("main")


def _brief(versions) -> list[tuple]:
    return [(v.version, v.value, v.category, v.by) for v in versions]


async def test_every_write_is_a_version_newest_first_with_its_door(keyed):
    await keyed.set("boat", "The boat is teal.", "facts", by="websocket")
    await keyed.set("boat", "The boat is white.", None, by="model")
    await keyed.set("boat", "The boat is white.", None, by="mcp")  # nothing changed: no version
    now, _, _ = await keyed.set("boat", "The boat is white.", "preferences", by="cli")  # moved: a version
    history = await keyed.history("boat")
    assert _brief(history) == [
        (3, "The boat is white.", "preferences", "cli"),
        (2, "The boat is white.", "facts", "model"),
        (1, "The boat is teal.", "facts", "websocket"),
    ]
    assert history[0].at == now.updated and all(v.principal is None for v in history)
    assert history[1].at < history[0].at or history[1].at == history[0].at
    with pytest.raises(NotFound):
        await keyed.history("no-such-key")


async def test_a_version_names_the_principal_who_wrote_it(keyed):
    await keyed.set("boat", "The boat is teal.", "facts", by="websocket", principal="alice")
    await keyed.set("boat", "The boat is red.", None, by="mcp", principal="phone")
    await keyed.set("boat", "The boat is blue.", None, by="file")  # an edit by hand: nobody known
    assert [(v.by, v.principal) for v in await keyed.history("boat")] == [
        ("file", None),
        ("mcp", "phone"),
        ("websocket", "alice"),
    ]


async def test_versions_are_bounded_by_count_and_by_bytes_the_newest_kept(keyed):
    for n in range(1, 9):
        await keyed.set("counted", f"value {n}", None)
    assert [v.version for v in await keyed.history("counted")] == [8, 7, 6, 5, 4]  # keep = 5
    big = "\U0001f6a4" * 20_000  # 80,000 bytes of UTF-8 each: three fit in 262,144
    for n in range(1, 6):
        await keyed.set("big", big[:-1] + str(n), None)
    history = await keyed.history("big")
    assert [v.version for v in history] == [5, 4, 3] and history[0].value.endswith("5")


async def test_a_delete_goes_to_the_trash_and_a_restore_brings_it_back_whole(storage, keyed):
    first, _, _ = await keyed.set("boat", "The boat is teal.", "facts", by="websocket")
    before, _, _ = await keyed.set("boat", "The boat is white.", None, by="model")
    gone = await keyed.delete("boat", by="model")
    assert gone.full() == before.full()
    workspace = storage.config.agent_workspace("main")
    assert await keyed.find("boat") is None and not (workspace / before.path).exists()
    assert (await keyed.list(None, 10, 0))["total"] == 0
    [trashed] = await keyed.trash()
    assert trashed.entry.full() == before.full() and trashed.deleted_by == "model"
    assert trashed.deleted >= before.updated and len(trashed.versions) == 2
    assert trashed.brief()["deletedAt"] == trashed.deleted
    assert _brief(await keyed.history("boat"))[0] == (2, "The boat is white.", "facts", "model"), "kept in the trash"

    back = await keyed.untrash("boat")
    assert back.full() == before.full() and back.created == first.created
    assert (await keyed.get("boat")).full() == before.full() and (workspace / before.path).exists()
    assert await keyed.trash() == [] and len(await keyed.history("boat")) == 2
    with pytest.raises(Conflict):
        await keyed.untrash("boat")

    await keyed.delete("boat")
    assert await keyed.purge(["boat"]) == ["boat"]
    assert await keyed.trash() == []
    for missing in (keyed.history("boat"), keyed.untrash("boat"), keyed.purge(["boat"])):
        with pytest.raises(NotFound):
            await missing
    again, replaced, _ = await keyed.set("boat", "A new boat.", None)
    assert replaced is False and [v.version for v in await keyed.history("boat")] == [1]


async def test_setting_a_key_in_the_trash_takes_it_out_and_keeps_the_old_value_a_version(keyed):
    await keyed.set("plan", "Sail on Saturday.", "tasks")
    await keyed.delete("plan")
    entry, replaced, _ = await keyed.set("plan", "Sail on Sunday.", None, by="cli")
    assert replaced is False and entry.category == "general"
    assert _brief(await keyed.history("plan")) == [
        (2, "Sail on Sunday.", "general", "cli"),
        (1, "Sail on Saturday.", "tasks", ""),
    ]
    assert await keyed.trash() == []


async def test_purge_by_time_takes_what_was_deleted_before_it_and_no_more(keyed):
    for key in ("old", "new", "kept"):
        await keyed.set(key, f"the {key} one", None)
    await keyed.delete("old")
    await asyncio.sleep(0.002)
    cut = now_iso()
    await asyncio.sleep(0.002)
    await keyed.delete("new")
    assert [c.entry.key for c in await keyed.trash()] == ["new", "old"], "the most recently deleted first"
    assert await keyed.purge(before=cut) == ["old"]
    assert await keyed.purge() == ["new"]
    assert await keyed.trash() == [] and (await keyed.get("kept")).value == "the kept one"
