"""The pipeline's ledger step (memory/index/pipeline.py calls it, apart from its own work): the
statements of the files a batch indexes, extracted in a thread and written to the engine's LedgerStore
before the batch's chunks (a crash between the two leaves the file to be indexed again, statements and
all); the statements of files that are gone, dropped."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ...timeutil import to_iso
from .extract import from_chunks

if TYPE_CHECKING:  # pragma: no cover
    from ..index.reading import Work
    from ..ports import LedgerStore, Statement


def _extract(works: list[Work]) -> tuple[list[str], list[Statement]]:
    from datetime import datetime, timezone

    paths: list[str] = []
    out: list[Statement] = []
    for w in works:
        if w.chunks is None:
            continue
        paths.append(w.sf.path)
        mtime = to_iso(datetime.fromtimestamp(w.sf.mtime_ns / 1e9, tz=timezone.utc))
        out.extend(from_chunks(w.sf.path, w.chunks, mtime))
    return paths, out


async def record(ledger: LedgerStore, works: list[Work]) -> None:
    """Write the statements of the changed files among `works` (blocking work in a thread)."""
    if not any(w.chunks is not None for w in works):
        return
    paths, statements = await asyncio.to_thread(_extract, works)
    await ledger.replace(paths, statements)


async def forget(ledger: LedgerStore, paths: list[str]) -> None:
    """Drop the statements of files that are gone."""
    if paths:
        await ledger.replace(paths, [])
