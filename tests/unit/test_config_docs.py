"""docs/protocol.md's table of the [server] limits (§5) against the schema: each setting it names exists
and its default is the one declared (config/server.py), so the table cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.config import ServerConfig, camel

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
UNITS = {"MiB": 1 << 20, "KiB": 1 << 10, "s": 1}


def _rows() -> list[tuple[list[str], str]]:
    """(the settings a row names, its default column) of §5's table."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## 5. Limits (config `[server]`)") :].split("\n\n")[1]
    rows = []
    for line in table.splitlines()[2:]:
        first, default = (cell.strip() for cell in line.strip("|").split("|")[:2])
        names = re.findall(r"`(\w+)`", first)
        if names and re.fullmatch(r"(`\w+`(, )?)+", first):  # a row of settings (not "before auth")
            rows.append((names, default))
    return rows


def _value(text: str) -> float | None:
    """'1 MiB after auth' → 1048576; '3 s' → 3; '64 per connection' → 64; None where it says no number."""
    m = re.match(r"(\d+(?:\.\d+)?)(?: (\w+))?", text.strip())
    if m is None:
        return None
    word = m.group(2) or ""
    if word not in UNITS:  # a short word after the number is a unit, and must be one this test knows
        assert len(word) > 3 or word in ("", "per"), f"unit {word!r} in {text!r}"
    return float(m.group(1)) * UNITS.get(word, 1)


def test_the_table_is_read():
    rows = _rows()
    assert len(rows) >= 15 and (["maxFrameBytes"], "1 MiB after auth") in rows
    assert _value("8 MiB unsent") == 8 << 20 and _value("3 s") == 3 and _value("RLIMIT_NOFILE / 8") is None
    with pytest.raises(AssertionError):
        _value("3 ms")


def test_each_limit_in_the_table_is_the_schemas_default():
    declared = {camel(name): value for name, value in vars(ServerConfig()).items()}
    wrong = []
    for names, default in _rows():
        values = default.split(", ") if len(names) > 1 else [default]
        assert len(values) == len(names), (names, default)
        for name, text in zip(names, values):
            assert name in declared, f"protocol.md §5 names server.{name}, which the schema does not declare"
            shown = _value(text)
            if shown is not None and shown != declared[name]:
                wrong.append(f"server.{name}: the table says {text!r}, the schema {declared[name]!r}")
    assert wrong == []
