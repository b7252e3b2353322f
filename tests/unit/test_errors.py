"""errors.py's mapping of OS and SQLite failures to the errors clients are told about."""

from __future__ import annotations

import os
import sqlite3

import pytest

from gateway.errors import Unavailable, out_of_descriptors
from tests.helpers import descriptors_exhausted


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_sqlite_unable_to_open_for_lack_of_descriptors_is_the_retryable_emfile(tmp_path):
    """SQLite reports EMFILE only as "unable to open database file": told apart by trying to open a file."""
    with descriptors_exhausted():
        with pytest.raises(sqlite3.OperationalError) as opening:
            sqlite3.connect(tmp_path / "index.sqlite").execute("select 1")
        busy = out_of_descriptors("the memory index", opening.value)
    assert isinstance(busy, Unavailable) and busy.data["errno"] == "EMFILE" and busy.data["retryable"] is True
    assert "could not open the memory index" in busy.message and "too many files open" in busy.message
    # With descriptors free the same message is some other failure (a missing folder): not this one.
    with pytest.raises(sqlite3.OperationalError) as missing:
        sqlite3.connect(tmp_path / "no" / "such" / "dir" / "index.sqlite")
    assert "unable to open database file" in str(missing.value)
    assert out_of_descriptors("the memory index", missing.value) is None
