"""`jarvis memory set|get|delete|list|history|restore|trash|purge|similar|recall|learn|set-image|get-image`
— the keyed-memory, version, trash, recall, learnings and image methods, through cli/dispatch.py like
sync/search/status (the running gateway's when one answers, else in process on the state dir).

A delete says how to undo it (`jarvis memory restore KEY`); `history` lists a keyed memory's (or with
`--path`, a note's) versions and `restore KEY --version N` writes one again.

`--json` prints exactly the result of the matching method; `--agent ID` picks the agent (default: main);
`--source memory,sessions` (or the flag repeated) limits similar and recall like search.
"""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import MemoryConfig
from ..errors import Invalid, NotFound
from ..memory.notes.keyed import CATEGORIES, MAX_VALUE_CHARS
from ..memory.notes.learnings import SECTIONS
from .common import print_json, read_stdin

if TYPE_CHECKING:  # pragma: no cover
    from .dispatch import Methods

COMMANDS = (
    "set",
    "get",
    "delete",
    "list",
    "history",
    "restore",
    "trash",
    "purge",
    "similar",
    "recall",
    "learn",
    "set-image",
    "get-image",
)


SOURCES = ("memory", "sessions")


def agent_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default=None, metavar="ID", help="agent id (default: main)")


def _sources(text: str) -> list[str]:
    out = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in out if s not in SOURCES]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"{text!r}: each source is one of {', '.join(SOURCES)}")
    return out


def source_arg(p: argparse.ArgumentParser, default_doc: str) -> None:
    p.add_argument(
        "--source",
        dest="source",
        action="extend",
        type=_sources,
        metavar="SOURCE",
        help=f"memory or sessions; repeat it or separate with commas for both ({default_doc})",
    )


def sources_of(args: argparse.Namespace) -> list[str] | None:
    """The --source values, each once, in order; None when none was given."""
    return list(dict.fromkeys(args.source)) if getattr(args, "source", None) else None


KEY_HELP = "the memory's name: letters, digits, '.', '_', '-'; at most 128 characters"
SET_CATEGORY_HELP = (
    "the keyed memory's group, one of "
    + ", ".join(CATEGORIES)
    + " (default general; kept as memory/keyed/<category>/<key>.md)"
)
LEARN_CATEGORY_HELP = "the LEARNINGS.md section: " + ", ".join(f"{k} ({v})" for k, v in SECTIONS.items())
CATEGORY_TABLE = f"""two kinds of category, side by side:
  memory set --category   what a fact is about; one file per key under memory/keyed/<category>/
                          {", ".join(CATEGORIES)}
  memory learn SECTION    how to work with you; a dated line in a section of LEARNINGS.md
                          {", ".join(SECTIONS)}
A fact about you ("my boat is blue") is a keyed memory; a lesson for the assistant ("answer in
bullet points") is a learning."""


def add_commands(sub: Any) -> None:
    def cmd(name: str, help_: str, epilog: str | None = None) -> argparse.ArgumentParser:
        s = sub.add_parser(
            name, help=help_, description=help_, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        agent_arg(s)
        s.add_argument("--json", action="store_true", help="print the method's result as JSON")
        return s

    s = cmd("set", "create or replace a keyed memory (memory.set)", CATEGORY_TABLE)
    s.add_argument("key", help=KEY_HELP)
    s.add_argument("value", help="the text; '-' reads it from stdin")
    s.add_argument("--category", choices=CATEGORIES, metavar="CATEGORY", help=SET_CATEGORY_HELP)
    s = cmd("get", "show a keyed memory (memory.get {key})")
    s.add_argument("key", help=KEY_HELP)
    s = cmd("delete", "delete a keyed memory: to the trash, restorable (memory.delete)")
    s.add_argument("key", help=KEY_HELP)
    s = cmd("history", "the versions of a keyed memory, or of a note (memory.history)")
    s.add_argument("key", nargs="?", help=KEY_HELP + " (or give --path)")
    s.add_argument("--path", help="a note instead: MEMORY.md, memory.md, LEARNINGS.md or memory/….md")
    s.add_argument("--version", type=int, help="with --path: print that version's text")
    s = cmd(
        "restore",
        "bring a keyed memory back from the trash, or write an older version again (memory.restore)",
    )
    s.add_argument("key", nargs="?", help=KEY_HELP + " (or give --path)")
    s.add_argument("--path", help="a note instead, deleted or not (needs --version)")
    s.add_argument("--version", type=int, help="the version to write again (see `jarvis memory history`)")
    s = cmd("trash", "keyed memories in the trash, most recently deleted first (memory.trash)")
    s.add_argument("--limit", type=int, default=50, help="at most this many (1..500, default 50)")
    s.add_argument("--offset", type=int, default=0, help="skip this many first (default 0)")
    s = cmd("purge", "remove keyed memories from the trash for good (memory.purge)")
    s.add_argument("key", nargs="?", help="the trashed memory (or --all)")
    s.add_argument("--all", action="store_true", help="empty the whole trash")
    s = cmd("list", "list keyed memories (memory.list)")
    s.add_argument(
        "--category",
        choices=CATEGORIES,
        metavar="CATEGORY",
        help="only this keyed-memory category: " + ", ".join(CATEGORIES),
    )
    s.add_argument("--limit", type=int, default=50, help="at most this many (1..500, default 50)")
    s.add_argument("--offset", type=int, default=0, help="skip this many first (default 0)")
    s = cmd("similar", "memories similar to a keyed memory (memory.similar)")
    s.add_argument("key", help=KEY_HELP)
    s.add_argument("--k", type=int, default=5, help="number of results (1..50, default 5)")
    source_arg(s, "default: memory")
    s = cmd("recall", "memories and messages from a period (memory.recall)")
    s.add_argument("--from", dest="from_", metavar="WHEN", help="2026-11-20, 2026-11-20T10:00Z, 7d, 24h, 2w, today …")
    s.add_argument("--to", metavar="WHEN", help="end of the period (default: now), same forms as --from")
    s.add_argument(
        "--category",
        choices=CATEGORIES,
        metavar="CATEGORY",
        help="only keyed memories of this category: " + ", ".join(CATEGORIES),
    )
    s.add_argument("--query", help="rank what the period holds by this text")
    s.add_argument("--k", type=int, default=10, help="number of results (1..100, default 10)")
    source_arg(s, "default: both")
    s = cmd("learn", "record a learning in LEARNINGS.md (memory.learn)", CATEGORY_TABLE)
    s.add_argument("category", metavar="SECTION", help=LEARN_CATEGORY_HELP)
    s.add_argument("text", help="the learning, one line (at most 1000 characters)")
    s = cmd("set-image", "store an image file with a description (memory.setImage)")
    s.add_argument("key", help=KEY_HELP)
    s.add_argument("file", type=Path, help="the image file (PNG or JPEG)")
    s.add_argument("--description", help="what the image shows (indexed, so search finds the image)")
    s = cmd("get-image", "show a stored image's details, or write it out (memory.getImage)")
    s.add_argument("key", help=KEY_HELP)
    s.add_argument("--out", type=Path, help="write the image bytes to this file")


async def run(args: argparse.Namespace, m: "Methods", agent: str) -> int:
    """One of COMMANDS, through the method of that name (`m.call`, cli/dispatch.py), for `agent`."""
    c = args.memory_command
    base = {"agentId": agent}
    if c == "set":
        value = read_stdin(4 * MAX_VALUE_CHARS, "the value", "value") if args.value == "-" else args.value
        res = await m.call("memory.set", {**base, "key": args.key, "value": value, "category": args.category})
        text = f"{'replaced' if res['replaced'] else 'saved'} {res['key']} ({res['category']}) → {res['path']}"
    elif c == "get":
        res = await m.call("memory.get", {**base, "key": args.key})
        text = f"{res['key']} ({res['category']}, updated {res['updated']})\n{res['value']}"
    elif c == "delete":
        res = await m.call("memory.delete", {**base, "key": args.key})
        text = (
            f"deleted {res['key']} ({res['path']}): in the trash until {res['expiresAt'][:10]}\n"
            f"undo: jarvis memory restore {res['key']}" + (f" --agent {args.agent}" if args.agent else "")
        )
    elif c == "history":
        res = await m.call("memory.history", {**base, "key": args.key, "path": args.path, "version": args.version})
        text = _history_text(res)
    elif c == "restore":
        res = await m.call("memory.restore", {**base, "key": args.key, "path": args.path, "version": args.version})
        what = res.get("key") or res.get("path")
        how = f"version {res['restoredFrom']} written again" if "restoredFrom" in res else "back from the trash"
        text = f"restored {what}: {how}"
    elif c == "trash":
        res = await m.call("memory.trash", {**base, "limit": args.limit, "offset": args.offset})
        text = (
            "\n".join(
                f"{x['deletedAt'][:16].replace('T', ' ')}  {x['key']} ({x['category']}): {x['preview']}"
                f"  [until {x['expiresAt'][:10]}]"
                for x in res["memories"]
            )
            or "the trash is empty"
        )
    elif c == "purge":
        res = await m.call("memory.purge", {**base, "key": args.key, "all": args.all})
        text = f"purged {len(res['purged'])}: {', '.join(res['purged'])}" if res["purged"] else "nothing to purge"
    elif c == "list":
        res = await m.call(
            "memory.list", {**base, "category": args.category, "limit": args.limit, "offset": args.offset}
        )
        text = (
            "\n".join(f"{x['updated'][:10]}  {x['category']:<11} {x['key']}: {x['preview']}" for x in res["memories"])
            or "no keyed memories"
        )
    elif c == "similar":
        res = await m.call("memory.similar", {**base, "key": args.key, "k": args.k, "sources": sources_of(args)})
        text = (
            "\n".join(f"{r['score']:.3f}  {r['path']}:{r['startLine']}-{r['endLine']}" for r in res["results"])
            or "no results"
        )
    elif c == "recall":
        res = await m.call(
            "memory.recall",
            {
                **base,
                "from": args.from_,
                "to": args.to,
                "category": args.category,
                "query": args.query,
                "k": args.k,
                "sources": sources_of(args),
            },
        )
        text = (
            "\n".join(
                f"{r['timestamp']}  {r['path']}:{r['startLine']}  {' '.join(r['snippet'].split())[:120]}"
                for r in res["results"]
            )
            or "nothing in that period"
        )
    elif c == "learn":
        res = await m.call("memory.learn", {**base, "category": args.category, "text": args.text})
        e = res["entry"]
        text = f"{res['status']}: [{e['date']}] {e['text']} ({e['section']}, LEARNINGS.md:{e['line']})"
    elif c == "set-image":
        try:
            limit = (m.config.memory if m.config is not None else MemoryConfig()).image_max_bytes
            data = _read_bounded(args.file, limit)
        except OSError as exc:
            raise NotFound(f"{args.file}: {exc.strerror or exc}") from None
        res = await m.call(
            "memory.setImage",
            {**base, "key": args.key, "image": base64.b64encode(data).decode("ascii"), "description": args.description},
        )
        text = f"saved {res['imagePath']} ({res['mimeType']}, {res['bytes']} bytes)"
    else:
        res = await m.call("memory.getImage", {**base, "key": args.key})
        if args.out is not None:
            args.out.write_bytes(base64.b64decode(res["image"]))
        text = (
            f"{res['imagePath']} ({res['mimeType']}, {res['bytes']} bytes)"
            + (f"\n{res['description']}" if res["description"] else "")
            + (f"\nwritten to {args.out}" if args.out is not None else "")
        )
    if args.json:
        print_json(res)
    else:
        print(text)
    return 0


def author(v: dict[str, Any]) -> str:
    """Who wrote a version and how: "by owner via cli", "by phone via mcp"; what is unknown left out (an
    older write kept no principal; an edit by hand no door)."""
    who, door = v.get("principal"), v.get("by")
    if who and door:
        return f"by {who} via {door}"
    return f"by {who}" if who else f"via {door}" if door else "by unknown"


def _history_text(res: dict[str, Any]) -> str:
    if "version" in res:  # one version of a note, whole
        return res["version"]["content"]
    lines = []
    for v in res["versions"]:
        what = v["value"] if "value" in v else v["preview"]
        now = "  (current)" if v.get("current") else ""
        lines.append(
            f"v{v['version']}  {v['at'][:19].replace('T', ' ')}  {author(v)}{now}\n    {' '.join(what.split())[:200]}"
        )
    head = f"{res.get('key') or res.get('path')}" + (" (in the trash)" if res.get("trashed") else "")
    return "\n".join([head, *lines])


def _read_bounded(path: Path, limit: int) -> bytes:
    """The file's bytes, refused past `limit` (memory.imageMaxBytes) before it is read whole."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Invalid(f"{path} is more than {limit:,} bytes, the most memory.imageMaxBytes lets an image be", "image")
    return data
