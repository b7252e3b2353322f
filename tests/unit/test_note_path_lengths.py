"""The note path rule (memory/layout.check_lengths, through files.writable_path: every note door of both
engines): a path is taken exactly when each name is at most MAX_NAME_BYTES of UTF-8 and the whole at most
MAX_PATH_BYTES — and a path taken can be written into a real folder, temp file and lock file beside it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import Invalid
from gateway.memory.layout import MAX_NAME_BYTES, MAX_PATH_BYTES
from gateway.memory.notes import files

# Names as a person or a client might type them: any script, with many-byte characters.
_CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\\x00.~")
_NAME = st.text(_CHARS, min_size=1, max_size=130)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folders=st.lists(_NAME, max_size=6), stem=_NAME)
def test_a_path_is_taken_exactly_when_each_name_and_the_whole_fit(tmp_path, folders, stem):
    path = "/".join(["memory", *folders, stem + ".md"])
    fits = all(len(n.encode("utf-8")) <= MAX_NAME_BYTES for n in path.split("/")) and (
        len(path.encode("utf-8")) <= MAX_PATH_BYTES
    )
    try:
        rel = files.writable_path(path)
    except Invalid as exc:
        assert not fits, exc.message
        assert exc.data == {"field": "path"}
        return
    assert fits
    try:
        files.put_file(tmp_path, rel, b"# note\n")  # the mirror's write: temp file, lock file, rename
    except OSError as exc:  # only the whole path may exceed what this machine holds (PATH_MAX: 4096)
        pytest.fail(f"a path the rule took could not be written: {exc}")
    assert (tmp_path / rel).read_bytes() == b"# note\n"


def test_the_widest_name_is_taken_and_one_byte_more_refused(tmp_path):
    e = (MAX_NAME_BYTES - 3) // 2  # "é" is two bytes of UTF-8; ".md" three
    widest = "memory/" + "a" * ((MAX_NAME_BYTES - 3) % 2) + "\u00e9" * e + ".md"
    assert len(widest.split("/")[1].encode()) == MAX_NAME_BYTES
    files.put_file(tmp_path, files.writable_path(widest), b"x")  # its temp and lock files: a shortened stem
    assert (tmp_path / widest).read_bytes() == b"x"
    with pytest.raises(Invalid, match=f"at most {MAX_NAME_BYTES} bytes"):
        files.writable_path("memory/a" + widest.split("/")[1])  # one byte more
    with pytest.raises(Invalid, match=f"at most {MAX_PATH_BYTES} bytes"):
        files.writable_path("memory/" + "/".join(["x" * 200] * 6) + ".md")
