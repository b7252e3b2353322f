"""The export's file names and keyed.jsonl's versions, by class: every session key makes a name every
platform can unpack, and any `versions` value an archive brings is read or refused by name, never a crash."""

from __future__ import annotations

import re
import urllib.parse
import zipfile

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.portability.archive import file_name
from gateway.portability.conversation import BadExport
from gateway.portability.transcripts import Archive
from gateway.schema import SESSION_KEY
from tests.helpers import examples

KEYS = st.from_regex(rf"\A{SESSION_KEY}\Z", fullmatch=True)


@settings(max_examples=examples(300))
@given(keys=st.lists(KEYS, max_size=12, unique=True))
def test_every_key_makes_a_portable_name_that_gives_the_key_back(keys):
    taken: set[str] = set()
    names = [file_name(k, taken) for k in keys]
    assert len({n.casefold() for n in names}) == len(names)  # no two alike on a case-insensitive disk
    for key, name in zip(keys, names):
        assert re.fullmatch(r"[A-Za-z0-9._%~-]+", name), name
        assert name.split(".")[0].lower() not in ("con", "prn", "aux", "nul", "com1", "lpt1")
        assert urllib.parse.unquote(name.split("~", 1)[0]) == key


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["version", "value", "category", "at", "by", "principal"]), inner, max_size=6)
    ),
    max_leaves=12,
)


def _archive(tmp_path, line: dict) -> Archive:
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", orjson.dumps({"format": "jarvis-export", "version": 1}))
        zf.writestr("keyed.jsonl", orjson.dumps(line) + b"\n")
    return Archive(path)


@settings(max_examples=examples(100), deadline=None)
@given(versions=JSON, deleted=st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5))
def test_any_versions_value_is_read_or_refused_by_name(tmp_path_factory, versions, deleted):
    line = {"key": "k", "category": "general", "value": "v", "created": "c", "updated": "u", "versions": versions}
    if deleted is not None:
        line["deletedAt"] = deleted
    archive = _archive(tmp_path_factory.getbasetemp(), line)
    try:
        [copy] = archive.keyed()
    except BadExport as exc:
        assert "keyed.jsonl" in str(exc) and ("versions" in str(exc) or "deletedAt" in str(exc)), exc
        return
    finally:
        archive.close()
    assert all(v.version >= 1 for v in copy.versions)
    assert [v.version for v in copy.versions] == sorted({v.version for v in copy.versions})


def test_an_export_older_than_versions_reads_as_memories_with_none(tmp_path):
    line = {"key": "k", "category": "general", "value": "v", "created": "c", "updated": "u"}
    archive = _archive(tmp_path, line)
    [copy] = archive.keyed()
    archive.close()
    assert copy.versions == () and copy.deleted is None


@pytest.mark.parametrize("key", ["openai:3f2a", "CON", "com1.x", "a.b"])
def test_names_of_known_keys(key):
    assert (
        file_name(key, set())
        == {"openai:3f2a": "openai%3A3f2a", "CON": "%43ON", "com1.x": "%63om1.x", "a.b": "a.b"}[key]
    )
