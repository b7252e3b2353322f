"""`jarvis migrate` — move a gateway's sessions between its state dir's files and PostgreSQL.

    jarvis migrate --to postgresql://user:pass@host/db [--dry-run] [--verbose]
    jarvis migrate --to postgresql [--dry-run] [--verbose]     (the URL from storage.url / JARVIS_DATABASE_URL)
    jarvis migrate --to sqlite [--from postgresql://…] [--dry-run] [--verbose]

The copying and checking is gateway/storage/migrate.py (through the storage engines' interface); this
takes the state dir's lock, shows progress on stderr, prints the report and maps what happened to an
exit code: 0 every session is at the destination and checked; 1 a conflict or a failed session (nothing
was overwritten), or the copy could not go on or start (MigrateError: e.g. more sessions than the
destination's sessions.max, refused before any is copied); 2 bad usage, or a gateway holds the state
dir; 3 the database cannot be reached (errors.Unavailable).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..config import Config
from ..errors import Unavailable
from .common import _common

if TYPE_CHECKING:  # imported when the command runs: other commands need not load asyncpg
    from ..storage import migrate as mig

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
FILES = ("sqlite", "files")  # the state dir's own engine: sessions.json + <key>.jsonl (and SQLite indexes)

DESCRIPTION = """\
Copy every agent's sessions (metadata and transcripts), keyed memories (memory.set, with their
versions), notes (MEMORY.md, LEARNINGS.md, memory/**/*.md, with their versions), and what is in their
trash, between this state dir and PostgreSQL, through the storage engines' own interface, then check
the copy: per session, the line count and a SHA-256 over the transcript bytes on both sides; per keyed
memory, its fields and versions; per note, its text.

  --to postgresql://…   from <stateDir>/agents/*/sessions into the database (its schema is created or
                        migrated first); then set storage.url (or JARVIS_DATABASE_URL) to that URL
  --to sqlite           from the database (--from, else storage.url / JARVIS_DATABASE_URL) back into
                        the state dir's files (sessions.json and <key>.jsonl); then unset storage.url

Stop the gateway first: the command refuses to run while one holds the state dir. Nothing at the
destination is overwritten: a session already there with the same content is skipped (so running it
again is safe), one with different content is reported and left alone (exit code 1); the same for a
keyed memory and a note. Each session is copied whole or not at all: an interrupted run goes on when run again.
An agent that would hold more sessions at the destination than its sessions.max (those there plus
the new ones) is refused before any session is copied (exit code 1).
A torn last line (a transcript write cut short by a crash, never read by the gateway) is not copied;
its bytes are reported. Memory indexes are not copied: they are derived data, rebuilt from the
transcripts and memory files. Nor are active runs and idempotency keys: they live only while a
gateway runs.
"""

EPILOG = (
    "Exit codes: 0 copied and checked, 1 conflicts or failures, or over the destination's sessions.max "
    "(nothing copied), 2 bad usage or state dir in use, "
    "3 database unreachable."
)


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "migrate",
        help="copy sessions, keyed memories and notes between the state dir and PostgreSQL, and check the copy",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--to",
        required=True,
        metavar="URL|sqlite",
        help="postgresql://user:pass@host/db to copy into that database (plain `postgresql`: the one "
        "storage.url / JARVIS_DATABASE_URL names, so the password stays out of the command line); "
        "sqlite to copy back into the state dir's files",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="URL",
        help="with --to sqlite: the database to copy from (default storage.url / JARVIS_DATABASE_URL)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be copied, skipped and refused; write nothing (not even the schema)",
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="list every session (by default only those with something to report)",
    )
    p.set_defaults(handler=run)
    _common(p)


def run(args: argparse.Namespace, config: Config) -> int:
    from ..fsutil import StateDirInUse, lock_state_dir
    from ..storage import migrate as mig

    to = args.to.strip()
    if to.lower() in FILES:
        url = args.source or config.storage.url
        if not url:
            return _usage(
                "--to sqlite copies from a database: give --from postgresql://… or set storage.url "
                "(JARVIS_DATABASE_URL)"
            )
        into_files = True
    elif re.match(r"^postgres(ql)?(://|$)", to, re.IGNORECASE):
        if args.source:
            return _usage("--from goes with --to sqlite; copying into PostgreSQL reads this state dir")
        url, into_files = (to if "://" in to else config.storage.url), False
        if not url:
            return _usage("--to postgresql without a URL takes storage.url (JARVIS_DATABASE_URL), which is not set")
    else:
        return _usage(f"--to: give a postgresql:// URL or sqlite, not {mig.redact(to)!r}")
    if not re.match(r"^postgres(ql)?://", url):
        return _usage(f"--from / storage.url: not a postgresql:// URL: {mig.redact(url)}")

    state_dir = config.state_dir.expanduser().absolute()
    if not into_files and not state_dir.is_dir():
        return _usage(f"no state dir at {state_dir}; nothing to copy (--state-dir / JARVIS_STATE_DIR)")
    try:
        lock = lock_state_dir(state_dir)
    except StateDirInUse as exc:
        print(f"jarvis: {exc}", file=sys.stderr)
        return EXIT_USAGE
    progress = _Progress()
    config = dataclasses.replace(config, state_dir=state_dir)
    try:
        if into_files:
            work = mig.to_files(url, config, dry_run=args.dry_run, progress=progress)
        else:
            work = mig.to_postgres(config, url, dry_run=args.dry_run, progress=progress)
        report = asyncio.run(work)
    except (mig.MigrateError, Unavailable) as exc:
        progress.finish()
        print(f"jarvis: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE if isinstance(exc, Unavailable) else EXIT_ERROR
    finally:
        os.close(lock)
    progress.finish()
    show(report, verbose=args.verbose)
    return EXIT_OK if report.ok else EXIT_ERROR


def _usage(message: str) -> int:
    print(f"jarvis: migrate: {message}", file=sys.stderr)
    return EXIT_USAGE


class _Progress:
    """Sessions done so far, on stderr, for many sessions: in place on a terminal (also for a slow
    few), else a line at each tenth."""

    MANY = 100

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.step = -1
        self.shown = False

    def __call__(self, phase: str, done: int, total: int) -> None:
        if total <= 0 or (total < self.MANY and not (self.tty and time.monotonic() - self.t0 > 0.5)):
            return
        verb = "copying" if phase == "copy" else "verifying"
        if self.tty:
            now = time.monotonic()
            if done < total and now - self.last < 0.1:
                return
            self.last = now
            sys.stderr.write(f"\r{verb} {done}/{total} sessions")
            if done == total:
                sys.stderr.write("\n")
                self.shown = False
            else:
                self.shown = True
        else:
            step = done * 10 // total
            if step != self.step:
                self.step = step
                sys.stderr.write(f"{verb} {done}/{total} sessions\n")
            if done == total:
                self.step = -1
        sys.stderr.flush()

    def finish(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            self.shown = False


def show(report: "mig.Report", verbose: bool = False) -> None:
    from ..storage import migrate as mig

    out: list[str] = []
    done = "would copy" if report.dry_run else "copied"
    out.append(
        f"jarvis migrate: {report.source} → {report.destination}"
        + ("  (dry run: nothing written)" if report.dry_run else "")
    )
    if report.schema:
        out.append(("schema: would apply " if report.dry_run else "schema: applied ") + ", ".join(report.schema))
    if not report.entries:
        out.append("no sessions found at the source" + ("" if report.keyed else "; nothing to copy"))
    else:
        head = ("agent", "sessions", done, "identical", "conflict", "failed", "lines", "bytes", "hash check")
        rows = [_row(agent, [e for e in report.entries if e.agent == agent], report.dry_run) for agent in report.agents]
        if len(rows) > 1:
            rows.append(_row("all", report.entries, report.dry_run))
        widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
        out.append("")
        for r in [head, *rows]:
            out.append(
                "  ".join(
                    str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))
                ).rstrip()
            )
        listed = (
            report.entries
            if verbose
            else [e for e in report.entries if e.detail or e.status in (mig.CONFLICT, mig.FAILED)]
        )
        if listed:
            out.append("")
            for e in listed:
                check = {True: "hash OK", False: "hash FAILED", None: ""}[e.verified]
                line = (
                    f"{e.status:<10}  {e.name}{' (in the trash)' if e.trashed else ''}  {_n(e.lines, 'line')}, "
                    f"{_n(e.bytes, 'byte')}, sha256 {e.sha256[:12]}…"
                )
                out.append(line + (f"  {check}" if check else "") + (f"\n            {e.detail}" if e.detail else ""))
    _rows(
        out,
        "keyed memories",
        report.keyed,
        done,
        verbose,
        lambda ke: f"keyed {ke.name} ({ke.category}{', in the trash' if ke.trashed else ''})",
    )
    _rows(out, "notes", report.notes, done, verbose, lambda n: f"note {n.name} ({_n(n.versions, 'version')})")
    torn = [e for e in report.entries if e.torn_bytes]
    if torn:
        out.append("")
        out.append(
            f"torn last lines not copied ({_n(sum(e.torn_bytes for e in torn), 'byte')} in "
            f"{_n(len(torn), 'transcript')}: bytes after the last newline, never read as a line):"
        )
        out += [f"  {e.name}: {_n(e.torn_bytes, 'byte')}" for e in torn]
    if report.unlisted:
        more = len(report.unlisted) - 5
        shown = ", ".join(report.unlisted[:5]) + (f" and {more} more" if more > 0 else "")
        out.append("")
        out.append(
            f"not sessions, not copied: {_n(len(report.unlisted), 'transcript file')} that sessions.json "
            f"does not list (a gateway on PostgreSQL keeps such local mirrors): {shown}"
        )
    out.append("")
    out.append(
        "memory indexes: not copied; they are derived data, rebuilt from the transcripts by the gateway\n"
        "that serves them (`jarvis memory sync` does it at once)"
    )
    out.append(_verdict(report))
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def _row(agent: str, entries: "list[mig.Entry]", dry_run: bool) -> tuple[Any, ...]:
    from ..storage import migrate as mig

    def n(*statuses: str) -> int:
        return sum(1 for e in entries if e.status in statuses)

    moved = [e for e in entries if e.status in (mig.COPIED, mig.WOULD_COPY, mig.IDENTICAL)]
    if n(mig.FAILED):
        check = "FAILED"
    elif dry_run and not n(mig.IDENTICAL):
        check = "-"
    else:
        check = "OK" if moved else "-"
    return (
        agent,
        len(entries),
        n(mig.COPIED, mig.WOULD_COPY),
        n(mig.IDENTICAL),
        n(mig.CONFLICT),
        n(mig.FAILED),
        f"{sum(e.lines for e in moved):,}",
        f"{sum(e.bytes for e in moved):,}",
        check,
    )


def _verdict(report: "mig.Report") -> str:
    from ..storage import migrate as mig

    copied = len(report.of(mig.COPIED, mig.WOULD_COPY))
    same = len(report.of(mig.IDENTICAL))
    conflicts = len(report.of(mig.CONFLICT)) + len(report.keyed_of(mig.CONFLICT)) + len(report.notes_of(mig.CONFLICT))
    failed = len(report.of(mig.FAILED)) + len(report.keyed_of(mig.FAILED)) + len(report.notes_of(mig.FAILED))
    if report.dry_run:
        return (
            f"dry run: {_n(copied, 'session')} would be copied, {same} there already (identical), "
            f"{conflicts} in conflict, {failed} cannot be copied"
        )
    if report.ok:
        return (
            f"OK: {_n(copied, 'session')} copied and checked (line count and SHA-256 equal on both sides), "
            f"{same} there already (identical, skipped)"
        )
    return (
        f"FAILED: {conflicts} in conflict, {failed} failed (listed above); nothing at the destination was "
        f"overwritten. {_n(copied, 'session')} copied and checked, {same} there already."
    )


def _rows(
    out: list[str], label: str, entries: Sequence[Any], done: str, verbose: bool, name: Callable[[Any], str]
) -> None:
    """One kind of copied thing (keyed memories, notes): a count per status, then each entry that has
    something to say (every one with `verbose`)."""
    from ..storage import migrate as mig

    if not entries:
        return
    count = collections.Counter(e.status for e in entries)
    out.append("")
    out.append(
        f"{label}: {len(entries):,} ({count[mig.COPIED] + count[mig.WOULD_COPY]} {done}, {count[mig.IDENTICAL]} "
        f"identical, {count[mig.CONFLICT]} in conflict, {count[mig.FAILED]} failed)"
    )
    for e in entries if verbose else [e for e in entries if e.detail or e.status in (mig.CONFLICT, mig.FAILED)]:
        check = {True: "checked", False: "check FAILED", None: ""}[e.verified]
        out.append(
            f"{e.status:<10}  {name(e)}"
            + (f"  {check}" if check else "")
            + (f"\n            {e.detail}" if e.detail else "")
        )
