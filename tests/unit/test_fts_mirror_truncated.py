"""The PostgreSQL engine's FTS5 mirror file (storage/postgres/memory/fts_file.py; no PostgreSQL needed for the
file alone) cut short while it is open: a read of it fails or answers from the connection's cache, and the
process lives on. Mapped (`PRAGMA mmap_size`, issue 46's eighth round, reverted), the read past the new end
was SIGBUS; the scenario runs in a child process so that such a death fails this test, not the test run."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

SCENARIO = """
import asyncio, sys
from pathlib import Path
import gateway.storage.postgres.memory.fts_file as ff

async def main(p):
    f = ff.MirrorFile(p, "unicode61", ff.sqlite_module())
    await f.open({"schema": "1", "tokenizer": "unicode61", "store": "x", "agent": "main"}, 10**9)
    await f.add([(i, "memory", None, f"harbour words number {i} gulls rope tide " * 30, "ctx") for i in range(1, 3001)])
    await f.call(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
    q = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'gulls' LIMIT 5000"
    assert len(await f.fetchall(q)) == 3000
    assert p.stat().st_size > 500_000
    with open(p, "r+b") as fh:
        fh.truncate(100_000)
    try:
        print("after:", len(await f.fetchall(q)), flush=True)
    except Exception as e:
        print("after: raised", type(e).__name__, flush=True)
    await f.close()
    print("survived", flush=True)

asyncio.run(main(Path(sys.argv[1])))
"""


def test_a_mirror_file_cut_short_while_open_does_not_kill_the_process(tmp_path):
    path = tmp_path / "memory" / "main.pg.fts"
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines()[-1] == "survived"
