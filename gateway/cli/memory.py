"""`jarvis memory sync|search|status|profile` — the memory methods from a terminal.
(`set|get|delete|list|history|restore|trash|purge|similar|recall|learn|set-image|get-image`: see notes.py.)

Each calls the method of that name through cli/dispatch.py: the running gateway's when one of this state
dir answers (so `status` shows its live dirty flag and sync runs), else the same handler in this process
on the state dir; `status --direct` reads the state dir even while a gateway runs. The method validates
the params; `--json` prints exactly its result (`memory.sync`, `memory.search`, `memory.status`).
`--agent ID` and `--source` work as in notes.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
import time
from typing import Any, AsyncIterator

from ..config import Config
from ..errors import Invalid, JarvisError
from ..memory.ledger.profile import HISTORY_LIMIT, HISTORY_MAX, PROFILE_LIMIT, PROFILE_MAX
from ..memory.present import cli_lines
from ..memory.service import MODES
from . import notes
from .client import CallError
from .common import print_json
from .dispatch import methods


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "memory",
        help="index, search and inspect memory (through the running gateway, else on the state dir)",
        description="Memory commands: each calls the memory.* method of its name — the running "
        "gateway's when one of this state dir answers, else the same method in "
        "this process on the state dir.",
        epilog=notes.CATEGORY_TABLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(handler=run, memory_command=None)
    sub = p.add_subparsers(
        dest="memory_command",
        metavar="{sync,search,status,profile," + ",".join(notes.COMMANDS) + "}",
        help="what to do (each has its own --help)",
    )
    s = sub.add_parser("sync", help="bring the index up to date now")
    s.add_argument(
        "--force", action="store_true", help="re-read and re-chunk every file (the cache avoids re-embedding)"
    )
    notes.agent_arg(s)
    s.add_argument("--json", action="store_true", help="print the memory.sync result as JSON")
    s = sub.add_parser("search", help="search memory files and transcripts")
    s.add_argument("query", help="what to look for")
    s.add_argument("--k", type=int, default=6, help="number of results (1..50, default 6)")
    s.add_argument("--mode", choices=MODES, help="hybrid (default), fts or vector")
    s.add_argument(
        "--min-score",
        type=float,
        default=0.0,
        help="drop results below this score (0..1); a chunk that shares no word with "
        "the query is a hit only if its cosine is at least memory.search.minSimilarity",
    )
    s.add_argument(
        "--as-of",
        metavar="WHEN",
        help="memory as it stood then (ISO date or datetime): nothing said after it, the value valid then first",
    )
    notes.source_arg(s, "default: both")
    notes.agent_arg(s)
    s.add_argument("--json", action="store_true", help="print the memory.search result as JSON")
    s = sub.add_parser(
        "profile",
        help="what Jarvis believes about you now: current facts, since when, evidence and history",
        description="The ledger's current facts (memory.profile): each subject's value, since when, where "
        "it was said, and its earlier values. Correct one with `jarvis memory set profile.<subject> "
        "VALUE` (a keyed memory: versioned, undoable); delete that key to undo the correction.",
    )
    notes.agent_arg(s)
    s.add_argument(
        "--limit",
        type=int,
        default=PROFILE_LIMIT,
        help=f"facts a page (default {PROFILE_LIMIT}, at most {PROFILE_MAX})",
    )
    s.add_argument("--subject", help="only this subject (home, code:shed) or family (code)")
    s.add_argument("--cursor", help="the page after the one that printed this cursor")
    s.add_argument(
        "--history",
        type=int,
        default=HISTORY_LIMIT,
        help=f"earlier values a fact (default {HISTORY_LIMIT}, at most {HISTORY_MAX})",
    )
    s.add_argument("--json", action="store_true", help="print the memory.profile result as JSON")
    s = sub.add_parser(
        "status",
        help="what the index holds (the running gateway's live figures when one answers)",
        description="What the index holds. When a gateway answers at the configured address "
        "(with this state dir's token), its own memory.status is shown, so dirty and "
        "sync runs are the live ones; otherwise (or with --direct) the index is read "
        "from the state dir.",
    )
    notes.agent_arg(s)
    s.add_argument("--direct", action="store_true", help="read the state dir even when a gateway is running")
    s.add_argument("--json", action="store_true", help="print the memory.status result as JSON")
    notes.add_commands(sub)


@contextlib.asynccontextmanager
async def _elapsed(what: str) -> AsyncIterator[None]:
    """`what… Ns` on stderr while the work runs, only when stderr is a terminal and the work is long
    (the method answers once, at the end: wherever it runs, there is no progress to show but time)."""

    async def tick() -> None:
        t0 = time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            sys.stderr.write(f"\r{what}… {time.monotonic() - t0:.0f} s")
            sys.stderr.flush()

    task = asyncio.create_task(tick()) if sys.stderr.isatty() else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _cli_config(config: Config) -> Config:
    mem = dataclasses.replace(config.memory, sync=dataclasses.replace(config.memory.sync, on_start=False, watch=False))
    return dataclasses.replace(config, memory=mem)


async def _run(args: argparse.Namespace, config: Config) -> int:
    cmd = args.memory_command
    agent = getattr(args, "agent", None) or config.agent_id  # named: in process, no default agent is open
    async with methods(_cli_config(config), direct=cmd == "status" and args.direct) as m:
        if cmd in notes.COMMANDS:
            return await notes.run(args, m, agent)
        base = {"agentId": agent}
        if cmd == "sync":
            async with _elapsed("syncing memory"):
                res = await m.call("memory.sync", {**base, "force": args.force})
            if args.json:
                print_json(res)
            else:
                print(
                    f"indexed {res['indexed']}, removed {res['removed']}, unchanged {res['unchanged']} files; "
                    f"embedded {res['chunksEmbedded']} chunks ({res['cacheHits']} from cache) in {res['durationMs']} ms"
                )
                st = await m.call("memory.status", base)
                if st["vector"].get("missing"):
                    print(
                        f"warning: {st['vector']['missing']} chunks have no vector yet "
                        f"({st['embeddings'].get('error', 'embedding provider failed')}); retried on the next sync",
                        file=sys.stderr,
                    )
        elif cmd == "search":
            res = await m.call(
                "memory.search",
                {
                    **base,
                    "query": args.query,
                    "k": args.k,
                    "minScore": args.min_score,
                    "sources": notes.sources_of(args),
                    "mode": args.mode,
                    **({"asOf": args.as_of} if args.as_of else {}),
                },
            )
            if args.json:
                print_json(res)
            else:
                if res.get("degraded"):
                    print(f"(degraded: {res['degraded']})", file=sys.stderr)
                if not res["results"]:
                    print("no results")
                for r in res["results"]:
                    print("\n".join(cli_lines(r)))
        elif cmd == "profile":
            page = {"limit": args.limit, "history": args.history}
            page.update({k: v for k, v in (("subject", args.subject), ("cursor", args.cursor)) if v is not None})
            res = await m.call("memory.profile", {**base, **page})
            if args.json:
                print_json(res)
            else:
                _print_profile(res)
        else:
            res = await m.call("memory.status", base)
            if args.json:
                print_json(res)
            else:
                if m.gateway is not None:
                    print(f"gateway:    {m.gateway} (running; these are its live figures)")
                elif args.direct:
                    print("gateway:    not asked (--direct); read from the state dir")
                else:
                    print(f"gateway:    none answered at {config.ws_url()}; read from the state dir")
                print(f"index:      {_index_location(config, agent)}")
                _print_status(res)
        return 0


def _index_location(config: Config, agent: str | None) -> str:
    if config.storage.url:
        from ..storage.postgres import redact

        return f"PostgreSQL {redact(config.storage.url)} (shared by the gateways on it)"
    return str(config.memory_db(agent))


def _print_status(res: dict) -> None:
    e, v = res["embeddings"], res["vector"]
    print(
        f"files:      {res['files']} (memory {res['sources']['memory']['files']}, "
        f"sessions {res['sources']['sessions']['files']})"
    )
    print(
        f"chunks:     {res['chunks']} (memory {res['sources']['memory']['chunks']}, "
        f"sessions {res['sources']['sessions']['chunks']})"
    )
    print(f"dirty:      {'yes' if res['dirty'] else 'no'}    last sync: {res['lastSyncAt'] or 'never'}")
    print(
        f"embeddings: {e['provider']} {e['model']} ({e['dims']} dims)"
        + (f"  error: {e['error']}" if e.get("error") else "")
    )
    print(
        f"vectors:    {v['backend']} ({'available' if v['available'] else 'unavailable'}"
        + (f", {v['missing']} missing" if v.get("missing") else "")
        + (f", searched in memory as {v['matrix']}" if v.get("matrix") else "")
        + ")"
    )
    print(f"fts:        {res['fts']['tokenizer']}    cache: {res['cache']['entries']} embeddings")
    _print_backend_and_ranking(res)


def _print_profile(res: dict) -> None:
    """One block per fact: `subject: value (since day)`, where it was said, then its earlier values."""
    if not res["facts"]:
        print("nothing yet: statements about you are collected as your conversations and notes are indexed")
    for f in res["facts"]:
        ev = f["evidence"]
        fixed = " (your correction)" if f.get("source") == "correction" else ""
        print(f"{f['subject']}: {f['value']}  (since {f['since'][:10]}){fixed}")
        print(f"    {ev['path']}:{ev['startLine']}-{ev['endLine']}")
        for h in reversed(f["history"]):
            until = (h.get("until") or "")[:10]
            print(f"    was: {h['value'] or '(ended)'}  ({h['from'][:10]} → {until})")
        if f.get("historyOmitted"):
            print(f"    … {f['historyOmitted']} older value(s) not shown (--history)")
    if res.get("nextCursor"):
        print(f"more: jarvis memory profile --cursor {res['nextCursor']}")


def run(args: argparse.Namespace, config: Config) -> int:
    if not getattr(args, "memory_command", None):
        print(
            "usage: jarvis memory {sync,search,status,profile,set,get,delete,list,similar,recall,learn,set-image,get-image} …  (see jarvis memory --help)",
            file=sys.stderr,
        )
        return 2
    if not config.memory.enabled:
        print("jarvis: memory is disabled (memory.enabled = false)", file=sys.stderr)
        return 1
    try:
        return asyncio.run(_run(args, config))
    except JarvisError as exc:
        print(f"jarvis: {exc.message}", file=sys.stderr)
        return 2 if isinstance(exc, Invalid) else 1
    except CallError as exc:  # the gateway went away mid-call
        print(f"jarvis: {exc}", file=sys.stderr)
        return exc.exit_code


def _print_backend_and_ranking(res: dict) -> None:
    b = res.get("backend") or {}
    line = f"backend:    {b.get('kind', 'builtin')}"
    circuit = b.get("circuit")
    if isinstance(circuit, dict):
        line += f"    circuit: {circuit.get('state')} ({circuit.get('failures', 0)} failures)"
    print(line)
    r = res.get("ranking") or {}
    mmr = f"mmr λ {r['mmrLambda']}" if r.get("mmr") else "mmr off"
    decay = f"time decay, half-life {r['halfLifeDays']:g} d" if r.get("timeDecay") else "time decay off"
    print(f"ranking:    {mmr}, {decay}")
    s = res.get("sync") or {}
    every = f"every {s['intervalMinutes']:g} min" if s.get("intervalMinutes") else "no interval"
    print(f"sync:       {'running' if s.get('running') else 'idle'}, {s.get('runs', 0)} runs, {every}")
    if s.get("lastError"):
        print(f"last sync failed at {s['lastError']['at']}: {s['lastError']['error']}")
    for f in res.get("skipped") or ():
        print(f"skipped:    {f['path']} ({f['bytes']:,} bytes): {f['reason']}")
