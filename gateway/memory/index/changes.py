"""What changed: the files on disk against what the index holds, for the sources a sync covers.

The index gives the signatures of its files (FileRows.indexed), the scan keeps only the files whose
signature is not among them (in a thread: at 460k files the scan is the sync), and only those are looked
up again. What is gone is worked out only when the files found do not add up to the files indexed; a sync
about to remove more than half of the index looks again first (a mount that blinked).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time

import structlog

from ..ports import FileRows, FileStat, Scope
from .settings import IndexSettings, SyncStats
from ..layout import through_link
from .sources import MEMORY, SESSIONS, Scan, ScanError, SourceFile, folder_empty

log = structlog.get_logger("gateway.memory")


class Changes:
    """Finds what a sync must read and remove, asking the index through its FileRows."""

    def __init__(self, rows: FileRows, settings: IndexSettings):
        self.rows, self.s = rows, settings

    async def compare(
        self, memory: bool, sessions: Scope, force: bool, stats: SyncStats
    ) -> tuple[dict[str, FileStat], list[str], list[SourceFile]]:
        """(the stored size, mtime and content hash of each file to read that is indexed, the paths in
        scope that are gone, the files to read)."""
        t0 = time.perf_counter()
        only = sessions if isinstance(sessions, set) else None

        def scan_timed() -> Scan:
            t = time.perf_counter()
            scan = self._scan(memory, sessions, only)
            stats.scan_ms = int((time.perf_counter() - t) * 1000)
            return scan

        # The scan (a thread) and the index's signatures (the database) at once.
        scanning = asyncio.ensure_future(asyncio.to_thread(scan_timed))
        try:
            indexed = await self.rows.indexed(memory, sessions, self.s.max_file_bytes)
        except BaseException:
            with contextlib.suppress(BaseException):
                await scanning
            raise
        scan = await scanning
        # The sources of which files in scope are indexed (transcripts count only where they are sessions).
        roots = {src for src in indexed.sources if src == MEMORY or self.rows.transcripts_are_sessions}
        scan.check(roots)

        async def looked_at(scan: Scan) -> tuple[list[SourceFile], dict[str, FileStat]]:
            """The files of the scan the index does not know as they are, and their rows (if indexed)."""
            files = await asyncio.to_thread(scan.files, None if force else indexed.signatures)
            return files, (await self.rows.rows_of([sf.path for sf in files]) if indexed.files else {})

        files, known = await looked_at(scan)
        gone: set[str] = set()
        if len(scan.signatures) - len(files) + len(known) != indexed.files:  # some indexed file not found
            in_scope = await self.rows.paths_in_scope(memory, sessions)
            again, gone = await asyncio.to_thread(
                self._gone, scan, in_scope, indexed.total, memory, sessions, only, roots
            )
            if again is not scan:
                scan = again
                files, known = await looked_at(scan)
        unchanged = len(scan.signatures) - len(files)
        if memory:
            cap = self.s.max_file_bytes
            stats.skipped = {sf.path: sf.size for sf in files if sf.source == MEMORY and sf.size > cap}
            stats.unnamable = scan.unnamable
            if stats.skipped:
                files = [sf for sf in files if sf.path not in stats.skipped]
                gone |= stats.skipped.keys() & known.keys()  # indexed while smaller: its chunks go
        stats.unchanged += unchanged
        stats.bytes_read += sum(sf.size for sf in files)
        stats.compare_ms = int((time.perf_counter() - t0) * 1000)
        return known, sorted(gone), files

    def _gone(
        self,
        scan: Scan,
        in_scope: set[str],
        indexed_total: int | None,
        memory: bool,
        sessions: Scope,
        only: set[str] | None,
        roots: set[str],
    ) -> tuple[Scan, set[str]]:
        """The indexed paths in scope not found by the scan (blocking). A sync about to remove more than
        half of the index looks again first (`_recheck`), which may give another scan."""
        gone = self._missing(scan, in_scope)
        at_risk = (
            len(gone)
            if self.rows.transcripts_are_sessions
            else sum(1 for p in gone if not p.startswith(SESSIONS + "/"))
        )
        total = len(in_scope) if indexed_total is None else max(indexed_total, len(in_scope))
        if at_risk and 2 * at_risk > total:
            return self._recheck(memory, sessions, only, roots, in_scope, at_risk, total)
        return scan, gone

    def _missing(self, scan: Scan, in_scope: set[str]) -> set[str]:
        """The indexed paths in scope the scan did not find, less (notes by name: an index every gateway
        shares) those that are a link here — no note of this folder, and not gone (blocking)."""
        gone = in_scope.difference(scan.paths)
        if self.rows.notes_by_name and gone:
            gone = {p for p in gone if p.startswith(SESSIONS + "/") or not through_link(self.s.workspace, p)}
        return gone

    def _scan(self, memory: bool, sessions: Scope, only: set[str] | None) -> Scan:
        """The source files on disk (blocking)."""
        scan = Scan(self.s.workspace, self.s.sessions_dir, by_name=self.rows.notes_by_name)
        if memory:
            scan.memory()
        if sessions:
            scan.sessions(only)
        return scan

    def _recheck(
        self,
        memory: bool,
        sessions: Scope,
        only: set[str] | None,
        roots: set[str],
        in_scope: set[str],
        missing: int,
        total: int,
    ) -> tuple[Scan, set[str]]:
        """A sync about to remove more than half of the index: look again after a pause (a mount that
        blinked, a folder moved away and back) and stat what is still missing. Only files still absent
        (ENOENT) are removed; one that cannot be stat'ed stops the sync (ScanError). So does a workspace
        left with nothing in it at all while notes of it are indexed: the empty mount point of a share
        that is not mounted (a file put in it says it is empty on purpose)."""
        log.warning("memory_sync_recheck", missing=missing, indexed=total, pause_s=self.s.recheck_s)
        time.sleep(self.s.recheck_s)  # blocking: this runs in a thread
        scan = self._scan(memory, sessions, only)
        scan.check(roots)
        gone = self._missing(scan, in_scope)
        notes = sum(1 for p in gone if not p.startswith(SESSIONS + "/"))
        if notes and all(p.startswith(SESSIONS + "/") for p in scan.paths) and folder_empty(self.s.workspace):
            raise ScanError(
                "the workspace",
                self.s.workspace,
                OSError(
                    getattr(errno, "ENOMEDIUM", errno.ENOENT),
                    f"empty while {notes} notes of it are indexed: a share "
                    "that is not mounted? Put a file in it to say it is empty on purpose",
                ),
            )
        for path in gone:
            where = (
                self.s.sessions_dir / path.split("/", 1)[1]
                if path.startswith(SESSIONS + "/")
                else self.s.workspace / path
            )
            try:
                os.lstat(where)  # there but not indexable (a symlink now pointing out): gone from the index
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    raise ScanError("the file", where, exc) from None
        if gone:
            log.warning("memory_sync_removing_most", removing=len(gone), indexed=total)
        return scan, gone
