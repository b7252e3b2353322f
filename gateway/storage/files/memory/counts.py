"""The rows of the files engine's index, counted: the whole index (files, chunks, chunks not embedded), or
only some files' (the sync after a chat turn counts its own sessions' rows before and after)."""

from __future__ import annotations

from .db import Database
from .migrations import vector_table


async def count_all(db: Database, vectors: bool) -> tuple[int, int, int]:
    """Files, chunks, and chunks not embedded (0 without vectors): the index whole."""
    files = int(await db.scalar("SELECT count(*) FROM files", default=0))
    chunks = int(await db.scalar("SELECT count(*) FROM chunks", default=0))
    missing = int(await db.scalar("SELECT count(*) FROM chunks WHERE embedded = 0", default=0)) if vectors else 0
    return files, chunks, missing


async def counts_of(db: Database, paths: list[str]) -> dict[str, int]:
    """Rows of these files (files, chunks, chunks not embedded), read by the writer: under the write
    lock, nothing else changes them."""
    marks = ",".join("?" * len(paths))
    row = await db.fetchone(
        f"SELECT (SELECT count(*) FROM files WHERE path IN ({marks})), "
        f"(SELECT count(*) FROM chunks WHERE path IN ({marks})), "
        f"(SELECT count(*) FROM chunks WHERE path IN ({marks}) AND embedded = 0)",
        [*paths, *paths, *paths],
    )
    assert row is not None
    return {"files": int(row[0]), "chunks": int(row[1]), "missing": int(row[2])}


async def counts_by_source(db: Database) -> tuple[dict[str, int], dict[str, int], int, int]:
    """memory.status's counts: files and chunks by source, embeddings cached, and the vectors' dims (0: none)."""
    files_by = {r[0]: int(r[1]) for r in await db.fetchall("SELECT source, count(*) FROM files GROUP BY source")}
    chunks_by = {r[0]: int(r[1]) for r in await db.fetchall("SELECT source, count(*) FROM chunks GROUP BY source")}
    cache = int(await db.scalar("SELECT count(*) FROM embedding_cache", default=0))
    vt = await vector_table(db)
    return files_by, chunks_by, cache, vt[1] if vt else 0
