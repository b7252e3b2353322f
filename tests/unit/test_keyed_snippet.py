"""snippet_value: a keyed memory's search result shows its value, whatever part of the file it starts in."""

from gateway.memory.notes.keyed import snippet_value

FILE = (
    "---\nkey: favorite-color\ncategory: preferences\ncreated: 2026-11-22T10:00:00.000Z\n"
    "updated: 2026-11-22T10:05:00.000Z\n---\n# favorite-color\n\nNavy blue.\n\nNot black.\n"
)
PATH = "memory/keyed/preferences/favorite-color.md"


def test_the_whole_file_shows_its_value():
    assert snippet_value(PATH, FILE) == "Navy blue.\n\nNot black."


def test_a_snippet_that_starts_inside_the_front_matter_shows_its_value():
    inside = FILE.split("\n", 3)[3]  # from "created:" on
    assert snippet_value(PATH, inside) == "Navy blue.\n\nNot black."


def test_a_postgresql_mirror_shows_its_value_too():
    """A PostgreSQL gateway's keyed file is a mirror of its row: its front matter names the row's version."""
    mirror = FILE.replace("---\n# favorite", "version: 3\n---\n# favorite")
    assert "version: 3" in mirror and snippet_value(PATH, mirror) == "Navy blue.\n\nNot black."


def test_a_value_that_looks_like_front_matter_is_kept():
    body = "key: under the blue flowerpot\ncreated: by my grandfather"
    assert snippet_value(PATH, body) == body
    assert snippet_value(PATH, "---\n" + "key: x\n---\n# favorite-color\nkey: under the pot") == "key: under the pot"


def test_other_files_are_left_as_they_are():
    assert snippet_value("memory/notes.md", FILE) == FILE
    assert snippet_value("memory/keyed/preferences/../x.md", FILE) == FILE
