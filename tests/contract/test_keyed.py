"""KeyedStore's contract: keyed memories (memory.set/get/delete/list), the same on every engine.

Both engines keep each memory as a markdown file at its `path` in the agent's workspace (the record,
or the PostgreSQL engine's mirror), so search and editors see it."""

from __future__ import annotations

import pytest

from gateway.errors import Invalid, NotFound


@pytest.fixture
def keyed(storage):
    return storage.keyed("main")


async def test_set_get_find_and_the_file_at_its_path(storage, keyed):
    entry, replaced, moved = await keyed.set("favorite-color", "\n\nNavy blue.\n\n", None)
    assert (replaced, moved) == (False, None)
    assert (entry.key, entry.category, entry.value) == ("favorite-color", "general", "Navy blue.")
    assert entry.path == "memory/keyed/general/favorite-color.md" and entry.created == entry.updated
    got = await keyed.get("favorite-color")
    assert got.full() == entry.full()
    assert (await keyed.find("favorite-color")).full() == entry.full()
    assert await keyed.find("nothing-here") is None
    text = (storage.config.agent_workspace("main") / entry.path).read_text()
    assert "Navy blue." in text and "# favorite-color" in text


async def test_setting_again_replaces_and_another_category_moves_it(storage, keyed):
    first, _, _ = await keyed.set("boat", "The boat is teal.", "facts")
    again, replaced, moved = await keyed.set("boat", "The boat is white.", None)  # keeps its category
    assert (replaced, moved, again.category, again.created) == (True, None, "facts", first.created)
    moved_entry, replaced, moved = await keyed.set("boat", "The boat is white.", "preferences")
    assert (replaced, moved, moved_entry.category) == (True, "facts", "preferences")
    workspace = storage.config.agent_workspace("main")
    assert (workspace / moved_entry.path).exists() and not (workspace / first.path).exists()
    assert (await keyed.list(None, 10, 0))["total"] == 1


async def test_list_is_newest_first_paged_and_filtered(keyed):
    for key, category in [("a", "facts"), ("b", "people"), ("c", "facts")]:
        await keyed.set(key, f"value of {key}", category)
    everything = await keyed.list(None, 10, 0)
    assert everything["total"] == 3 and [m["key"] for m in everything["memories"]] == ["c", "b", "a"]
    assert set(everything["memories"][0]) == {"key", "category", "path", "preview", "created", "updated"}
    page = await keyed.list(None, 1, 1)
    assert page["total"] == 3 and [m["key"] for m in page["memories"]] == ["b"]
    facts = await keyed.list("facts", 10, 0)
    assert facts["total"] == 2 and [m["key"] for m in facts["memories"]] == ["c", "a"]


async def test_a_deleted_memory_is_gone_with_its_file(storage, keyed):
    entry, _, _ = await keyed.set("temp", "short lived", "tasks")
    gone = await keyed.delete("temp")
    assert (gone.key, gone.category, gone.path) == ("temp", "tasks", entry.path)
    assert not (storage.config.agent_workspace("main") / entry.path).exists()
    with pytest.raises(NotFound):
        await keyed.get("temp")
    with pytest.raises(NotFound):
        await keyed.delete("temp")
    assert (await keyed.list(None, 10, 0))["total"] == 0
    again, replaced, _ = await keyed.set("temp", "back again", None)
    assert replaced is False and again.category == "general"


@pytest.mark.parametrize(
    "key, value, category, field",
    [
        ("../escape", "v", None, "key"),
        (".hidden", "v", None, "key"),
        ("k" * 129, "v", None, "key"),
        ("fine", "   \n  ", None, "value"),
        ("fine", "v", "no-such-category", "category"),
    ],
)
async def test_bad_input_names_its_field_and_writes_nothing(keyed, key, value, category, field):
    with pytest.raises(Invalid) as err:
        await keyed.set(key, value, category)
    assert err.value.data["field"] == field
    assert (await keyed.list(None, 10, 0))["total"] == 0
    with pytest.raises(Invalid):
        await keyed.list("no-such-category", 10, 0)
