#!/usr/bin/env python3
"""Whether two synced state dirs (files engine) stored the same thing: the chunks (every column, in id
order), their full-text rows, the files (all but indexed_at) and the ledger's statements (every column, in id
order). For a change to the sync path that must store nothing new (issue 46): sync one corpus with each tree
(hard-linked copies, `cp -al`, so the files' mtimes are the same), then

    .venv/bin/python scripts/index_diff.py STATE_A STATE_B     # exit 0: the same rows

Prints each table's row counts and a hash of its rows, and the first row that differs.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys

QUERIES = {
    "chunks": "SELECT id, path, source, session_key, start_line, end_line, hash, text, spans, context, date, "
    "embedded FROM chunks ORDER BY id",
    "ledger": "SELECT id, path, subject, value, said, start_line, end_line, text, source, ending FROM ledger ORDER BY id",
    "files": "SELECT path, source, session_key, size, mtime_ns, hash, chunks FROM files ORDER BY path",
    "fts": "SELECT rowid, text, context FROM chunks_fts ORDER BY rowid",
    # The vectors, as vec0 keeps them (no extension needed): which chunk sits where, and the blocks' bytes.
    "vector places": "SELECT rowid, id, chunk_id, chunk_offset FROM chunks_vec_rowids ORDER BY rowid",
    "vectors": "SELECT rowid, vectors FROM chunks_vec_vector_chunks00 ORDER BY rowid",
}


def main(a: str, b: str, agent: str = "main") -> int:
    dbs = [sqlite3.connect(f"file:{d}/agents/{agent}/memory.sqlite?mode=ro", uri=True) for d in (a, b)]
    same = True
    for name, sql in QUERIES.items():
        try:
            rows_a, rows_b = (db.execute(sql).fetchall() for db in dbs)
        except sqlite3.OperationalError as exc:  # no vector table (vectors off, or none stored yet)
            print(f"{name}: not compared ({exc})")
            continue
        ha, hb = (hashlib.sha256(repr(rows).encode()).hexdigest()[:16] for rows in (rows_a, rows_b))
        print(f"{name}: {len(rows_a)} / {len(rows_b)} rows, {ha} / {hb}", "same" if rows_a == rows_b else "DIFFERENT")
        if rows_a != rows_b:
            same = False
            first = next((i for i, (x, y) in enumerate(zip(rows_a, rows_b)) if x != y), min(len(rows_a), len(rows_b)))
            print(f"  first difference at row {first}:")
            for rows in (rows_a, rows_b):
                print("   ", rows[first] if first < len(rows) else "(none)")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
