"""One agent's workspace folder as the PostgreSQL notes mirror sees it (storage/postgres/notes.py): what
is there (`stat`, `stats`), a note's text as the record can hold it (`read`), and the two changes the
mirror makes — write a note over the file as it was seen (`put`), remove one (`remove`) — each refused
when the file changed since it was seen (an editor's save wins). Blocking: call in a thread.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import structlog

from ...errors import Invalid
from ...memory.index.sources import Scan, ScanError
from ...memory.layout import through_link
from ...memory.notes import files

log = structlog.get_logger("gateway.memory")

mirrored = files.in_record  # the notes the record holds
Stat = tuple[int, int]  # (mtime_ns, size) of a file
WRITTEN, CHANGED, REFUSED = "written", "changed", "refused"  # what a mirror's write did


class NoteFolder:
    def __init__(self, agent_id: str, workspace: Path, max_bytes: int):
        self.agent_id = agent_id
        self.workspace = workspace
        self.max_bytes = max_bytes
        self._refused: set[tuple[str, str]] = set()  # (path, why) said in the log already

    def remove(self, rel: str, seen: Stat) -> int:
        """Remove the mirror of `rel` if it is still as seen (else an edit since, which wins)."""
        if self.stat(rel) != seen:
            return 0
        with contextlib.suppress(FileNotFoundError):
            (self.workspace / rel).unlink()
        return 1

    def put(self, rel: str, data: bytes, seen: Stat | None) -> Stat | str:
        """Write note `rel` over the file as it was `seen` (None: none there): its (mtime_ns, size) when
        written; CHANGED when the file is not as seen (an editor's save: the caller takes it in);
        REFUSED, said once in the log, for a symlink, a folder outside the workspace, or a name this file
        system refuses — that note, not every other."""
        if self.stat(rel) != seen:
            return CHANGED
        try:
            files.put_file(self.workspace, rel, data)
            st = os.stat(self.workspace / rel)
        except Invalid as exc:
            self.say(rel, str(exc))
            return REFUSED
        except OSError as exc:  # ENAMETOOLONG, EACCES, ENOSPC, …
            self.say(rel, f"cannot be written here: {exc.strerror or exc}")
            return REFUSED
        return st.st_mtime_ns, st.st_size

    def stat(self, rel: str) -> Stat | None:
        """(mtime_ns, size) of the regular file of `rel`; None when there is none (or it cannot be read),
        or it is no note of this folder (`plain`)."""
        try:
            st = self.plain(rel)
        except OSError:
            return None
        return None if st is None else (st.st_mtime_ns, st.st_size)

    def plain(self, rel: str) -> os.stat_result | None:
        """The stat of the regular file of `rel` when it is a note of this folder: neither it nor a folder
        on its way is a symlink (a link is this machine's own arrangement: the scan counts each name once
        and never enters a linked folder, so a note is never read, written or removed through one)."""
        target = self.workspace / rel
        if os.path.realpath(target) != os.path.join(os.path.realpath(self.workspace), rel):
            return None
        st = os.lstat(target)
        return st if stat.S_ISREG(st.st_mode) else None

    def linked(self, rel: str) -> bool:
        """`rel` is here a symlink or under a linked folder: no note of this folder, and not gone."""
        return through_link(self.workspace, rel)

    def stats(self, only: str | None) -> dict[str, Stat] | None:
        """The folder's notes (or one), None when it cannot be read: not knowing is no answer, and a
        reconcile that read it as "none there" would delete every note."""
        if only is not None:
            try:
                st = self.plain(only)
            except (FileNotFoundError, NotADirectoryError):
                return {}
            except OSError as exc:
                log.warning("notes_scan_failed", agent=self.agent_id, path=only, error=str(exc))
                return None
            return {} if st is None else {only: (st.st_mtime_ns, st.st_size)}
        try:
            scan = Scan(self.workspace, by_name=True).memory()
        except ScanError as exc:
            log.warning("notes_scan_failed", agent=self.agent_id, error=str(exc))
            return None
        # A file whose name no record can hold is left out (scan.unnamable), the others go on: the
        # memory sync's scan of the same folder says it once and lists it in memory.status `skipped`.
        return {f.path: (f.mtime_ns, f.size) for f in scan.files() if mirrored(f.path)}

    def read(self, rel: str) -> str | None:
        """The note's text, or None (said once) where the record cannot hold it; None, unsaid, where it is
        no note of this folder (`plain`: a symlink swapped in since it was seen)."""
        try:
            if self.plain(rel) is None:
                return None
            data = (self.workspace / rel).read_bytes()
        except OSError as exc:
            self.say(rel, f"unreadable: {exc.strerror or exc}")
            return None
        if len(data) > self.max_bytes:
            self.say(rel, f"over memory.maxFileBytes ({len(data)} > {self.max_bytes} bytes)")
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.say(rel, "not UTF-8 text")
            return None
        if "\x00" in text:
            self.say(rel, "holds NUL characters")
            return None
        return text

    def say(self, rel: str, why: str) -> None:
        if (rel, why) not in self._refused:
            self._refused.add((rel, why))
            log.warning("note_left_out_of_the_record", agent=self.agent_id, path=rel, reason=why)
