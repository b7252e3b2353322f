"""The pipeline's ledger step (memory/index/pipeline.py calls it, apart from its own work): the
statements of the files a batch indexes — extracted where the batch was read and chunked
(index/reading.py: a thread, or a worker process) — written to the engine's LedgerStore before the
batch's chunks (a crash between the two leaves the file to be indexed again, statements and all); the
statements of files that are gone, dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..index.reading import Work
    from ..ports import LedgerStore


async def record(ledger: LedgerStore, works: list[Work]) -> None:
    """Write the statements of the changed files among `works` (extracted as they were chunked)."""
    changed = [w for w in works if w.chunks is not None]
    if changed:
        await ledger.replace([w.sf.path for w in changed], [s for w in changed for s in w.statements])


async def forget(ledger: LedgerStore, paths: list[str]) -> None:
    """Drop the statements of files that are gone."""
    if paths:
        await ledger.replace(paths, [])
