"""The wire of memory.search, written down: a fixed corpus, ~60 searches of different kinds through every
door that answers one (the WebSocket's memory.search, MCP's memory_search tool, a chat turn's recalled
`memory` and the offline responder's reply), each answer's JSON one line of the output.

Run it on two trees and compare the files: a change that only moves or types code leaves them identical.

    .venv/bin/python scripts/search_wire.py --out /tmp/after.jsonl
    git archive main | tar -x -C /tmp/main-tree && cp scripts/search_wire.py /tmp/main-tree/scripts/ \\
        && (cd /tmp/main-tree && /path/to/.venv/bin/python scripts/search_wire.py --out /tmp/before.jsonl)
    cmp /tmp/before.jsonl /tmp/after.jsonl

The corpus: the priya scenario's transcripts (shared/bench/livedin; --scenario for another) with their own
dates, memory files with fixed modification times, keyed memories; embeddings are the local model's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.memory.notes.keyed import render  # noqa: E402
from gateway.sessions.transcript import append_sync, header, message_record  # noqa: E402
from gateway.timeutil import parse_iso, to_iso  # noqa: E402

SCENARIO = ROOT.parent / "shared" / "bench" / "livedin" / "priya.json"  # a development person, never a held-out one
STAMP = 1_735_689_600  # 2025-01-01T00:00:00Z: every memory file's modification time
NOTES = {
    "MEMORY.md": "# About me\n\nMy sailing boat is called Seahorse.\nThe boat is moored at Largs marina, berth 17.\n",
    "memory/2025-03-02.md": "# 2 March\n\nPaid the marina fee: 412 pounds. The harbour master is Morag.\n",
    "memory/2025-05-11.md": "# 11 May\n\nNew code for the back gate: 7340. The old one (4826) no longer works.\n",
    "memory/projects.md": "# Projects\n\n- rewrite the gateway's memory index\n- learn to splice rope\n"
    "- repaint the hull in dark green before summer\n",
    "memory/people.md": "# People\n\nAunt Jo lives in Dundee. Her birthday is on 14 August.\n"
    "Sam (my brother) moved to Leeds in 2024 and works as a nurse.\n",
}
KEYED = {"boat.colour": "dark green", "home.city": "Glasgow", "dog.name": "Biscuit"}
EXTRA = [
    {"query": "boat"},
    {"query": "Seahorse", "mode": "fts"},
    {"query": "what is my boat called", "mode": "vector"},
    {"query": "marina fee", "k": 2},
    {"query": "marina fee", "k": 10, "minScore": 0.3},
    {"query": "back gate code"},
    {"query": "back gate code", "sources": ["memory"]},
    {"query": "back gate code", "sources": ["sessions"]},
    {"query": "Aunt Jo birthday", "mode": "hybrid", "k": 3},
    {"query": "where does my brother live"},
    {"query": "dog"},
    {"query": "colour of the hull"},
    {"query": "splice rope", "mode": "fts", "k": 1},
    {"query": "nothing here matches zyzzyva"},
    {"query": '"berth 17"'},
    {"query": "Largs OR Dundee", "mode": "fts"},
    {"query": "what happened last week"},
    {"query": "where did I live in 2023", "asOf": "2024-01-01T00:00:00Z"},
    {"query": "Where do I live now?", "asOf": "2025-06-01T00:00:00Z", "k": 3},
]
MCP_QUERIES = ["boat", "back gate code", "Aunt Jo birthday", "where does my brother live", "dog name"]
CHAT = ["What is my sailing boat called?", "What's the code of the back gate?", "Where do I live now?"]


def write_corpus(workspace: Path, sessions_dir: Path, scenario: dict) -> None:
    for rel, text in NOTES.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        os.utime(path, (STAMP, STAMP))
    for key, value in KEYED.items():  # as memory.set writes them, at a fixed time
        path = workspace / "memory" / "keyed" / "general" / f"{key}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(render(key, "general", value, "2025-01-01T00:00:00.000Z", "2025-01-01T00:00:00.000Z"))
        os.utime(path, (STAMP, STAMP))
    sessions_dir.mkdir(parents=True, exist_ok=True)
    for n, session in enumerate(scenario["sessions"]):
        start = parse_iso(session["date"])
        assert start is not None
        key = f"wire-{n}"
        recs = [header(key, "main", to_iso(start))]
        for t, turn in enumerate(session["turns"]):
            when = to_iso(start + timedelta(seconds=45 * t))
            recs.append(message_record(f"s{n}t{t}", turn["role"], turn["content"], timestamp=when))
        append_sync(sessions_dir / f"{key}.jsonl", recs)


def _today(m: re.Match[bytes]) -> bytes:
    """A timestamp of this run's chat turns (today's), written as one token; the corpus's are kept."""
    return b'"<this run>"' if m.group(0)[1:11] == datetime.now(timezone.utc).date().isoformat().encode() else m.group(0)


def _read(req: urllib.request.Request) -> bytes:
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def dump(kind: str, ask: Any, answer: Any) -> bytes:
    return orjson.dumps({"door": kind, "ask": ask, "answer": answer}) + b"\n"


async def run(out: Path, scenario_path: Path) -> int:
    import gateway
    from gateway.app import Gateway
    from gateway.config import load_config
    from tests.helpers import connect_client

    scenario = json.loads(scenario_path.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="lifecycle-wire-") as tmp:
        cfg = load_config(
            {
                "stateDir": str(Path(tmp) / "state"),
                "server.port": 0,
                "server.httpPort": -1,
                "memory.enabled": True,
                "memory.sync.onSearch": True,
                "chat.offlineDeltaDelay": 0,
                "chat.discover": False,
            },
            env={},
        )
        write_corpus(cfg.workspace_dir, cfg.sessions_dir("main"), scenario)
        gw = Gateway(cfg)
        await gw.start()
        lines: list[bytes] = []
        try:
            c = await connect_client(gw.url, cfg.token or cfg.token_file.read_text().strip())
            await c.call("memory.sync", {"force": True})
            for _ in range(200):  # the vector matrix loaded: searches before it score through SQL
                if (await c.call("memory.status"))["vector"].get("matrix"):
                    break
                await asyncio.sleep(0.05)
            asks = [{"query": q["q"]} for q in scenario["questions"]] + EXTRA
            asks += [{**a, "k": 4, "mode": "fts"} for a in asks[:8]]
            for ask in asks:
                lines.append(dump("ws", ask, await c.call("memory.search", ask)))
            token = cfg.token or cfg.token_file.read_text().strip()
            headers = {
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            }
            for i, q in enumerate(MCP_QUERIES):
                body = {
                    "jsonrpc": "2.0",
                    "id": i + 1,
                    "method": "tools/call",
                    "params": {"name": "memory_search", "arguments": {"query": q}},
                }
                req = urllib.request.Request(gw.http.url() + "/mcp", orjson.dumps(body), headers, method="POST")
                lines.append(dump("mcp", q, orjson.loads(await asyncio.to_thread(_read, req))))
            keys: list[str] = []
            for message in CHAT:  # last: each turn's transcript joins the corpus
                keys.append((await c.call("sessions.create", {"label": "wire"}))["sessionKey"])
                sent = await c.call("chat.send", {"sessionKey": keys[-1], "message": message})
                final = (await c.run_to_end(sent["runId"]))[-1]["params"]
                content = final["message"]["content"]
                line = dump("chat", message, {"memory": final.get("memory"), "content": content})
                # The turns' own transcripts (recalled by the next ones) have this run's keys and times.
                for n, key in enumerate(keys):
                    line = line.replace(key.encode(), f"chat-{n}".encode())
                lines.append(re.sub(rb'"\d{4}-\d\d-\d\dT[^"]*Z"', _today, line))
            await c.close()
        finally:
            await gw.shutdown()
    out.write_bytes(b"".join(lines))
    print(f"the tree: {Path(gateway.__file__).parent.parent}")
    print(f"{len(lines)} answers → {out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scenario", type=Path, default=SCENARIO)
    args = ap.parse_args()
    return asyncio.run(run(args.out, args.scenario))


if __name__ == "__main__":
    sys.exit(main())
