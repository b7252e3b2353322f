"""`jarvis import` and `jarvis export` — bring history in, take memory out (gateway/portability/).

    jarvis import chatgpt EXPORT.zip|conversations.json|DIR [--agent A] [--dry-run] [--json]
    jarvis import claude  EXPORT.zip|conversations.json|DIR [--agent A] [--dry-run] [--json]
    jarvis import markdown VAULT_DIR|VAULT.zip [--folder NAME] [--agent A] [--dry-run] [--json]
    jarvis import jsonl   FILE.jsonl|DIR|JARVIS_EXPORT.zip [--agent A] [--dry-run] [--json]
    jarvis export [--agent A] [--out FILE.zip] [--json]

Both are the admin.import / admin.export methods (cli/dispatch.py): run by the gateway of this state dir
when one answers (it reads the export from where it lies: the path goes over the socket, not the file),
else in this process holding the state dir's lock. Progress goes to stderr on a terminal; the report to
stdout (`--json`: the method's result). Exit codes: 0 done; 1 the import or export failed (a malformed
export: the message names the conversation and the field, and what came before it was imported); 2 bad
usage, or a gateway holds the state dir without answering.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import JarvisError
from .common import _common, print_json

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

IMPORT_HELP = """\
Import conversations or notes into an agent. Importing the same export again adds nothing; a newer
export adds only the new conversations and the new turns of those already here. An import that stops
(Ctrl-C, a crash) goes on where it stopped when run again.

  chatgpt   ChatGPT's data export: the .zip as downloaded, its conversations.json, or the folder it was
            unzipped into. Each conversation becomes a session (key chatgpt-<id>, its title the label,
            its original times), the branch you saw last; system and tool messages are left out.
  claude    Claude's data export (.zip, conversations.json or folder): each conversation's chat_messages.
  markdown  An Obsidian or Logseq vault (a folder, or a .zip of one), copied under memory/<folder>/ of
            the agent's workspace, front matter and [[wiki links]] as they are.
  jsonl     This gateway's own: a transcript (<key>.jsonl), a folder of them, or a `jarvis export` zip
            (sessions, keyed memories and notes, on either storage engine).

--dry-run says what would be imported (counts, the date range, what is left out and why) and writes
nothing.
"""


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="import ChatGPT or Claude conversations, a markdown vault, or Jarvis transcripts and exports",
        description=IMPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 done, 1 the import failed (what came before the failure is kept), 2 bad usage.",
    )
    p.add_argument("source", choices=("chatgpt", "claude", "markdown", "jsonl"), help="what PATH is")
    p.add_argument("path", help="the export, vault or file (see above)")
    p.add_argument("--agent", metavar="ID", help="the agent to import into (default: the configured one, main)")
    p.add_argument("--dry-run", action="store_true", help="say what would be imported; write nothing")
    p.add_argument("--folder", help="markdown: the folder under memory/ to copy into (default: the vault's name)")
    p.add_argument("--json", action="store_true", help="print the admin.import result as JSON")
    _common(p)
    p.set_defaults(handler=run_import)

    p = sub.add_parser(
        "export",
        help="write an agent's sessions, notes and keyed memories into one zip",
        description="Write one agent's memory into one zip, readable without Jarvis: its sessions (JSONL "
        "transcripts and an index), keyed memories (keyed.jsonl), notes (the workspace's memory files) and "
        "a manifest with every file's SHA-256. `jarvis import jsonl FILE.zip` brings it into another "
        "gateway, on either storage engine.",
        epilog="Exit codes: 0 written, 1 the export failed (no partial file is left), 2 bad usage.",
    )
    p.add_argument("--agent", metavar="ID", help="the agent to export (default: the configured one, main)")
    p.add_argument(
        "--out",
        metavar="FILE.zip",
        help="where to write it (must not exist; default jarvis-export-<agent>-<UTC time>.zip here)",
    )
    p.add_argument("--json", action="store_true", help="print the admin.export result as JSON")
    _common(p)
    p.set_defaults(handler=run_export)


def run_import(args: argparse.Namespace, config: Config) -> int:
    path = Path(args.path).expanduser()
    if not path.exists():
        print(f"jarvis import: {args.path}: no such file or folder", file=sys.stderr)
        return EXIT_USAGE
    if args.folder and args.source != "markdown":
        print("jarvis import: --folder goes with markdown", file=sys.stderr)
        return EXIT_USAGE
    params: dict[str, Any] = {"source": args.source, "path": str(path.resolve()), "dryRun": args.dry_run}
    if args.agent:
        params["agentId"] = args.agent
    if args.folder:
        params["folder"] = args.folder
    return _run(config, "admin.import", params, args.json, show_import)


def run_export(args: argparse.Namespace, config: Config) -> int:
    agent = args.agent or config.agent_id
    out = (
        Path(args.out).expanduser()
        if args.out
        else Path(f"jarvis-export-{agent}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.zip")
    )
    params: dict[str, Any] = {"path": str(out.resolve())}
    if args.agent:
        params["agentId"] = args.agent
    return _run(config, "admin.export", params, args.json, show_export)


def _run(config: Config, method: str, params: dict[str, Any], as_json: bool, show: Any) -> int:
    from ..fsutil import StateDirInUse

    meter = Meter(sys.stderr.isatty())
    try:
        result = asyncio.run(_call(config, method, params, meter))
    except StateDirInUse as exc:
        meter.clear()
        print(
            f"jarvis {method.split('.')[1]}: a gateway (pid {exc.pid or 'unknown'}) holds {config.state_dir} but does "
            f"not answer at {config.ws_url()}: give its --port, or wait for it to be ready",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except JarvisError as exc:
        meter.clear()
        print(f"jarvis {method.split('.')[1]}: {exc.message}", file=sys.stderr)
        done = (exc.data or {}).get("done")
        if done:
            print("before it stopped:", file=sys.stderr)
            sys.stderr.write(_counts(done))
        return EXIT_ERROR
    meter.clear()
    if as_json:
        print_json(result)
    else:
        sys.stdout.write(show(result))
    return EXIT_OK


async def _call(config: Config, method: str, params: dict[str, Any], meter: "Meter") -> Any:
    from .dispatch import methods

    async with methods(config, exclusive=True) as m:
        return await m.call(method, params, on_event=meter.event)


class Meter:
    """Progress notifications as one line on a terminal, rewritten in place."""

    def __init__(self, tty: bool):
        self.tty = tty
        self.shown = False

    def event(self, msg: dict[str, Any]) -> None:
        if not self.tty or not str(msg.get("method", "")).endswith(".progress"):
            return
        p = msg.get("params") or {}
        sys.stderr.write("\r\x1b[2K" + progress_line(p))
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
            self.shown = False


def progress_line(p: dict[str, Any]) -> str:
    phase = p.get("phase")
    if phase == "indexing":
        return "indexing what came in…"
    if "bytesTotal" in p:
        total = p["bytesTotal"] or 1
        return (
            f"reading {min(100, 100 * p['bytesRead'] // total)}% ({_mb(p['bytesRead'])} of {_mb(total)}) · "
            f"{p['conversations']:,} conversations · {p['added']:,} added · {p['messagesAdded']:,} messages"
        )
    if "total" in p:
        return f"{phase}: {p['done']:,} of {p['total']:,}"
    return " · ".join(
        f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
        for k, v in p.items()
        if k not in ("agentId", "path", "source")
    )


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def show_import(r: dict[str, Any]) -> str:
    dry = " (dry run: nothing was written)" if r.get("dryRun") else ""
    out = [f"{r['source']}: {r['path']} → agent {r['agentId']}{dry}"]
    out.append(_counts(r).rstrip("\n"))
    index = r.get("index")
    if index and index.get("error"):
        out.append(f"  not indexed yet: {index['error']} (the next sync will)")
    elif index:
        out.append(f"  indexed: {index.get('indexed', 0):,} files, {index.get('chunksEmbedded', 0):,} chunks embedded")
    out.append(f"  took {r.get('durationMs', 0) / 1000:.1f} s")
    return "\n".join(out) + "\n"


def _counts(r: dict[str, Any]) -> str:
    """The numbers of an import report (or of what an import did before it stopped), as lines."""
    verb = "would add" if r.get("dryRun") else "added"
    out: list[str] = []
    c = r.get("conversations")
    if c:
        out.append(
            f"  conversations: {c['found']:,} found · {verb} {c['added']:,} · extended {c['extended']:,} · "
            f"unchanged {c['unchanged']:,} · skipped {c['skipped']:,}"
        )
        m = r["messages"]
        why = ", ".join(f"{k} {v:,}" for k, v in (r.get("skippedMessages") or {}).items())
        out.append(f"  messages: {verb} {m['added']:,}; left out {m['skipped']:,}" + (f" ({why})" if why else ""))
        if r.get("dateRange"):
            out.append(f"  dates: {r['dateRange']['from'][:10]} to {r['dateRange']['to'][:10]}")
        for s in r.get("skippedConversations") or []:
            out.append(f"  skipped conversation {s['index']} ({s.get('title') or s.get('id')}): {s['reason']}")
        for b in r.get("branched") or []:
            out.append(f"  continued on another branch: {b.get('title') or b.get('id')} (+{b['added']} turns)")
    s = r.get("sessions")
    if s:
        out.append(
            f"  sessions: {s['found']:,} found · {verb} {s['added']:,} · extended {s['extended']:,} · "
            f"unchanged {s['unchanged']:,} · skipped {s['skipped']:,}"
        )
        for x in s.get("skippedSessions") or []:
            out.append(f"  skipped session {x['sessionKey']}: {x['reason']}")
    k = r.get("keyed")
    if k:
        out.append(f"  keyed memories: {k['found']:,} found · {verb} {k['added']:,} · skipped {k['skipped']:,}")
    n = r.get("notes") if isinstance(r.get("notes"), dict) else (r if "folder" in r else None)
    if n:
        where = f" into {r['folder']}/" if "folder" in r else ""
        out.append(
            f"  files{where}: {n['found']:,} found · {verb} {n['added']:,} · updated {n['updated']:,} · "
            f"unchanged {n['unchanged']:,} · conflicts {n['conflicts']:,} · skipped {n['skipped']:,}"
        )
        why = ", ".join(f"{k} {v:,}" for k, v in (n.get("skippedWhy") or {}).items())
        if why:
            out.append(f"  left out: {why}")
        for f in n.get("files") or []:
            out.append(f"  {f['path']}: {f['reason']}")
    return "\n".join(out) + "\n"


def show_export(r: dict[str, Any]) -> str:
    s, n = r["sessions"], r["notes"]
    lines = [
        f"wrote {r['path']} ({_mb(r['bytes'])})",
        f"  sessions: {s['count']:,} ({s['messages']:,} messages) · keyed memories: {r['keyed']['count']:,} · "
        f"notes: {n['count']:,}",
    ]
    for x in s.get("skipped") or []:
        lines.append(f"  left out session {x['sessionKey']}: {x['reason']}")
    lines.append(f"  took {r.get('durationMs', 0) / 1000:.1f} s")
    return "\n".join(lines) + "\n"
