"""The lived-in people built by scripts/data/gen_livedin_*.py are exactly what their labelled turns make:
a hand edit of a committed JSON (which would skip the gold/stale checks of livedin_build) fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "scripts" / "data"
GENERATORS = sorted(DATA.glob("gen_livedin_*.py"))


def test_there_are_generated_people() -> None:
    assert GENERATORS, f"no gen_livedin_*.py under {DATA}"


@pytest.mark.parametrize("generator", GENERATORS, ids=lambda p: p.stem)
def test_a_committed_person_is_what_its_generator_builds(generator: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(generator), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
