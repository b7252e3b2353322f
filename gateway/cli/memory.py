"""`jarvis memory sync|search|status` — the memory methods, run directly on the state dir.
(`set|get|delete|list|similar|recall|learn|set-image|get-image`: see notes.py.)

These open the index themselves (WAL and a busy timeout make that safe while the gateway runs), so they
work whether or not the gateway is up. `status` first asks the running gateway (its dirty flag and sync
runs are live state the index file does not hold) and reads the state dir only when none answers or
with `--direct`. `--json` prints exactly the result object of the matching method (`memory.sync`,
`memory.search`, `memory.status`). `--agent ID` and `--source` work as in notes.py.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from typing import Any

from ..config import Config
from ..errors import Invalid, JarvisError
from . import notes
from .common import print_json
from ..storage import standalone_manager
from ..memory.notes.keyed import snippet_value
from ..memory.service import MODES


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser("memory", help="index, search and inspect memory (on the state dir; status asks a running gateway)",
                              description="Memory index commands; they work on the state dir, while the gateway "
                                          "runs too. `status` asks the running gateway when one answers.",
                              epilog=notes.CATEGORY_TABLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(handler=run, memory_command=None)
    sub = p.add_subparsers(dest="memory_command", metavar="{sync,search,status," + ",".join(notes.COMMANDS) + "}",
                           help="what to do (each has its own --help)")
    s = sub.add_parser("sync", help="bring the index up to date now")
    s.add_argument("--force", action="store_true", help="re-read and re-chunk every file (the cache avoids re-embedding)")
    notes.agent_arg(s)
    s.add_argument("--json", action="store_true", help="print the memory.sync result as JSON")
    s = sub.add_parser("search", help="search memory files and transcripts")
    s.add_argument("query", help="what to look for")
    s.add_argument("--k", type=int, default=6, help="number of results (1..50, default 6)")
    s.add_argument("--mode", choices=MODES, help="hybrid (default), fts or vector")
    s.add_argument("--min-score", type=float, default=0.0, help="drop results below this score (0..1); a chunk that shares no word with "
                   "the query is a hit only if its cosine is at least memory.search.minSimilarity")
    notes.source_arg(s, "default: both")
    notes.agent_arg(s)
    s.add_argument("--json", action="store_true", help="print the memory.search result as JSON")
    s = sub.add_parser("status", help="what the index holds (asks the running gateway when one answers)",
                       description="What the index holds. When a gateway answers at the configured address "
                                   "(with this state dir's token), its own memory.status is shown, so dirty and "
                                   "sync runs are the live ones; otherwise the index is read from the state dir.")
    notes.agent_arg(s)
    s.add_argument("--direct", action="store_true", help="read the state dir even when a gateway is running")
    s.add_argument("--json", action="store_true", help="print the memory.status result as JSON")
    notes.add_commands(sub)


class _Bar:
    """A one-line progress bar on stderr, only when stderr is a terminal and the work is long."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.tty or total <= 0 or (time.monotonic() - self.t0 < 0.5 and done < total):
            return
        width = 30
        fill = int(width * done / total)
        sys.stderr.write(f"\rindexing [{'#' * fill}{'.' * (width - fill)}] {done}/{total} files")
        sys.stderr.flush()
        self.shown = True

    def finish(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def _cli_config(config: Config) -> Config:
    mem = dataclasses.replace(config.memory, sync=dataclasses.replace(config.memory.sync, on_start=False, watch=False))
    return dataclasses.replace(config, memory=mem)


async def _run(args: argparse.Namespace, config: Config) -> int:
    if args.memory_command in notes.COMMANDS:
        return await notes.run(args, _cli_config(config))
    agent = notes.check_agent(args, config)
    if args.memory_command == "status" and not args.direct:
        url = config.ws_url()
        res = await _ask_gateway(config, "memory.status", {"agentId": agent})
        if res is not None:
            if args.json:
                print_json(res)
            else:
                print(f"gateway:    {url} (running; these are its live figures)")
                print(f"index:      {_index_location(config, None, agent)}")
                _print_status(res)
            return 0
    async with standalone_manager(_cli_config(config), agent) as mgr:
        cmd = args.memory_command
        if cmd == "sync":
            bar = _Bar()
            try:
                res = await mgr.sync(force=args.force, progress=bar)
            finally:
                bar.finish()
            if args.json:
                print_json(res)
            else:
                print(f"indexed {res['indexed']}, removed {res['removed']}, unchanged {res['unchanged']} files; "
                      f"embedded {res['chunksEmbedded']} chunks ({res['cacheHits']} from cache) in {res['durationMs']} ms")
                st = await mgr.status()
                if st["vector"].get("missing"):
                    print(f"warning: {st['vector']['missing']} chunks have no vector yet "
                          f"({st['embeddings'].get('error', 'embedding provider failed')}); retried on the next sync",
                          file=sys.stderr)
        elif cmd == "search":
            from ..methods.memory import SEARCH  # the method's own rules, so the CLI errors the same way

            p = SEARCH.validate({"query": args.query, "k": args.k, "minScore": args.min_score,
                                 "sources": notes.sources_of(args), "mode": args.mode})
            res = await mgr.search(p["query"], k=p["k"], min_score=p["minScore"], sources=p["sources"],
                                   mode=p["mode"])
            if args.json:
                print_json(res)
            else:
                if res.get("degraded"):
                    print(f"(degraded: {res['degraded']})", file=sys.stderr)
                if not res["results"]:
                    print("no results")
                for r in res["results"]:
                    span = f"{r['startLine']}" + (f"–{r['endLine']}" if r["endLine"] != r["startLine"] else "")
                    print(f"{r['score']:.3f}  {r['path']}:{span}")
                    for line in snippet_value(r["path"], r["snippet"]).splitlines():
                        print(f"    {line}")
        else:
            res = await mgr.status()
            if args.json:
                print_json(res)
            else:
                if args.direct:
                    print("gateway:    not asked (--direct); read from the state dir")
                else:
                    print(f"gateway:    none answered at {config.ws_url()}; read from the state dir")
                print(f"index:      {_index_location(config, mgr)}")
                _print_status(res)
        return 0


def _index_location(config: Config, mgr: Any, agent: str | None = None) -> str:
    if config.storage.url:
        from ..storage.postgres import redact

        return f"PostgreSQL {redact(config.storage.url)} (shared by the gateways on it)"
    return str(config.memory_db(mgr.agent_id if mgr is not None else agent))


def _print_status(res: dict) -> None:
    e, v = res["embeddings"], res["vector"]
    print(f"files:      {res['files']} (memory {res['sources']['memory']['files']}, "
          f"sessions {res['sources']['sessions']['files']})")
    print(f"chunks:     {res['chunks']} (memory {res['sources']['memory']['chunks']}, "
          f"sessions {res['sources']['sessions']['chunks']})")
    print(f"dirty:      {'yes' if res['dirty'] else 'no'}    last sync: {res['lastSyncAt'] or 'never'}")
    print(f"embeddings: {e['provider']} {e['model']} ({e['dims']} dims)"
          + (f"  error: {e['error']}" if e.get("error") else ""))
    print(f"vectors:    {v['backend']} ({'available' if v['available'] else 'unavailable'}"
          + (f", {v['missing']} missing" if v.get("missing") else "")
          + (f", searched in memory as {v['matrix']}" if v.get("matrix") else "") + ")")
    print(f"fts:        {res['fts']['tokenizer']}    cache: {res['cache']['entries']} embeddings")
    _print_backend_and_ranking(res)


async def _ask_gateway(config: Config, method: str, params: dict) -> Any:
    """The running gateway's answer, or None when no gateway of this state dir answers (nothing listens,
    another gateway that refuses this token, or no token yet). Its errors are raised as JarvisError."""
    from .client import CallError, Connection, GatewayCallError
    from ..errors import NotFound

    if config.server.port == 0:
        return None
    try:
        conn = await Connection.open(config, open_timeout=3)
    except CallError:
        return None
    try:
        return await asyncio.wait_for(conn.call(method, params), 30)
    except GatewayCallError as exc:
        if exc.code == -32004:
            raise NotFound(exc.error_message) from None
        raise JarvisError(exc.error_message) from None
    except (CallError, TimeoutError):
        return None
    finally:
        await conn.close()


def run(args: argparse.Namespace, config: Config) -> int:
    if not getattr(args, "memory_command", None):
        print("usage: jarvis memory {sync,search,status,set,get,delete,list,similar,recall,learn,set-image,get-image} …  (see jarvis memory --help)", file=sys.stderr)
        return 2
    if not config.memory.enabled:
        print("jarvis: memory is disabled (memory.enabled = false)", file=sys.stderr)
        return 1
    try:
        return asyncio.run(_run(args, config))
    except JarvisError as exc:
        print(f"jarvis: {exc.message}", file=sys.stderr)
        return 2 if isinstance(exc, Invalid) else 1


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
