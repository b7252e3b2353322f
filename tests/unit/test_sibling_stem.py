"""fsutil.sibling_stem: the stem of a note's hidden siblings (its atomic write's temp file, its lock). Any name
a file system holds (≤ 255 bytes) gets siblings it holds too; a name that fits keeps its own stem (the lock
older gateways made); a long one is cut at a character's edge (valid UTF-8 where the name is) with a digest
of the whole, the same for the same name and different for another."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from gateway.fsutil import NAME_MAX, SIBLING_ROOM, atomic_write, locked, sibling_stem

# A file name a Linux folder holds: up to 255 bytes of UTF-8, no "/" and no NUL, often long and not ASCII.
NAME = st.one_of(
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=255),
    st.tuples(st.sampled_from(["é", "漢", "🦉", "n"]), st.integers(1, 255)).map(lambda t: t[0] * t[1]),
).map(lambda t: t.encode("utf-8")[:NAME_MAX].decode("utf-8", "ignore") or "n")


@given(NAME)
def test_every_name_gets_siblings_a_file_system_holds_in_utf8(name):
    stem = sibling_stem(name)
    assert len(stem.encode("utf-8")) + SIBLING_ROOM <= NAME_MAX  # valid UTF-8, and room for `.<stem>.XXXXXXXX.tmp`
    if len(name.encode()) + SIBLING_ROOM <= NAME_MAX:
        assert stem == name  # the lock older gateways made
    assert sibling_stem(name) == stem


@given(NAME, NAME)
def test_two_names_share_no_stem(a, b):
    if a != b:
        assert sibling_stem(a) != sibling_stem(b)


def test_a_note_of_255_bytes_is_written_and_locked(tmp_path):
    name = "é" * 126 + ".md"  # 255 bytes
    assert len(name.encode()) == NAME_MAX
    target = tmp_path / name
    with locked(target):
        atomic_write(target, b"A long name.\n")
    assert target.read_bytes() == b"A long name.\n"
    for sibling in os.listdir(tmp_path):
        sibling.encode("utf-8")  # every name in the folder is UTF-8 (a watcher decodes them)
