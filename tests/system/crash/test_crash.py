"""Crash safety: SIGKILL the gateway at random moments, restart it, and check nothing acknowledged
was lost.

Each round starts `jarvis serve` on the same state dir, checks what the previous rounds left,
then either streams replies in three sessions or forces a memory re-index (`memory.sync
{force:true}` over a workspace of many notes) while chatting, and kills the process with SIGKILL
after a random delay. Every third round also tears the tail of a transcript (a half-written line, as
a power cut would leave). After each kill, offline:

- every transcript parses (a torn tail only at the end, and it is cut on the next append);
- every acknowledged user message (chat.send answered) is there exactly once, and every reply whose
  chat.final was received is there exactly once, after its user message;
- sessions.json parses and lists every session whose sessions.create was answered.

At the end (memory on), `memory.sync` must bring the index to exactly what a fresh index of the
same files holds: the same chunks, no duplicates, no orphans.

The suite runs CRASH_ROUNDS (default 4) rounds; `scripts/crash_harness.py` runs the full 20.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from gateway.sessions import transcript as tx
from tests.helpers import ROOT, GatewayProcess, RpcError, connect_client

CONFIG = """[memory]
enabled = {memory}
[memory.embeddings]
provider = "none"
[chat]
offlineDeltaDelay = 0.03
"""


def memory_available() -> bool:
    try:
        import gateway.memory.service  # noqa: F401
        import gateway.methods.memory  # noqa: F401
    except Exception:
        return False
    return True


def write_notes(workspace: Path, n: int) -> None:
    notes = workspace / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    words = "boat river lamp garden orbit violet ledger quartz harbor meadow signal copper".split()
    for i in range(n):
        paras = [
            "\n".join(f"- {' '.join(rng.choices(words, k=12))} note{i} item{j}" for j in range(8)) for _ in range(4)
        ]
        (notes / f"note-{i:04d}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(paras) + "\n")


class Ledger:
    """What the gateway acknowledged: it must all survive any crash."""

    def __init__(self) -> None:
        self.sessions: list[str] = []
        self.users: dict[str, list[tuple[str, str]]] = {}  # key -> [(runId, content)]
        self.finals: dict[str, list[tuple[str, str, str]]] = {}  # key -> [(runId, messageId, content)]

    def check_files(self, sessions_dir: Path) -> dict[str, int]:
        meta = orjson.loads((sessions_dir / "sessions.json").read_bytes())["sessions"]
        torn = 0
        for key in self.sessions:
            assert key in meta, f"acknowledged session {key} lost from sessions.json"
            path = sessions_dir / f"{key}.jsonl"
            data = path.read_bytes()
            lines = data.split(b"\n")
            for line in lines[:-1]:
                orjson.loads(line)  # every complete line parses: no torn line in the middle
            if lines[-1]:
                torn += 1  # a torn tail: allowed, readers skip it, the writer cuts it
            recs = [r.data for r in tx.iter_records(path)]
            assert recs[0]["type"] == "session" and recs[0]["sessionKey"] == key
            msgs = [r for r in recs if r.get("type") == "message"]
            users = Counter((r.get("runId"), r["message"]["content"]) for r in msgs if r["message"]["role"] == "user")
            for run_id, content in self.users.get(key, []):
                assert users[(run_id, content)] == 1, f"user message of run {run_id} seen {users[(run_id, content)]}x"
            ids = Counter(r["id"] for r in msgs)
            assert all(v == 1 for v in ids.values()), "a message id appears twice"
            order = {r["id"]: i for i, r in enumerate(msgs)}
            user_pos = {r.get("runId"): i for i, r in enumerate(msgs) if r["message"]["role"] == "user"}
            for run_id, mid, content in self.finals.get(key, []):
                assert ids[mid] == 1, f"final reply {mid} missing"
                assert msgs[order[mid]]["message"]["content"] == content
                assert user_pos[run_id] < order[mid], "the reply comes after its user message"
        return {"torn": torn}


async def _round(gw: GatewayProcess, ledger: Ledger, rng: random.Random, mode: str) -> dict[str, Any]:
    c = await connect_client(gw.url, gw.token)
    events: dict[str, list[dict[str, Any]]] = {}
    stop = asyncio.Event()

    async def collect() -> None:
        while not stop.is_set():
            try:
                ev = await asyncio.wait_for(c.events.get(), 0.1)
            except TimeoutError:
                continue
            p = ev["params"]
            events.setdefault(p.get("runId", ""), []).append(ev)
            if ev["method"] == "chat.final":
                key = p["sessionKey"]
                ledger.finals.setdefault(key, []).append((p["runId"], p["message"]["id"], p["message"]["content"]))

    collector = asyncio.create_task(collect())
    sent = 0
    try:
        # What earlier rounds acknowledged is readable through the gateway too.
        for key in ledger.sessions:
            hist = await c.call("sessions.history", {"sessionKey": key, "limit": 1000})
            got = Counter((m.get("runId"), m["content"]) for m in hist["messages"] if m["role"] == "user")
            assert all(got[u] == 1 for u in ledger.users.get(key, []))
        while len(ledger.sessions) < 3:
            key = (await c.call("sessions.create", {"label": f"crash {len(ledger.sessions)}"}))["sessionKey"]
            ledger.sessions.append(key)
        if mode == "sync":
            await c.ws.send(orjson.dumps({"id": "sync", "method": "memory.sync", "params": {"force": True}}).decode())
            await asyncio.sleep(rng.uniform(0, 0.05))
        for key in ledger.sessions:
            text = f"round message {rng.random():.12f} " + "words " * rng.randint(1, 40)
            try:
                r = await c.call("chat.send", {"sessionKey": key, "message": text}, timeout=15)
            except RpcError as exc:
                assert exc.code == -32009, exc  # a run left over from before: no, runs die with the process
                continue
            ledger.users.setdefault(key, []).append((r["runId"], text))
            sent += 1
            await asyncio.sleep(rng.uniform(0, 0.08))
        await asyncio.sleep(rng.uniform(0, 0.5 if mode == "chat" else 1.0))
    finally:
        gw.proc.kill()  # SIGKILL, mid-stream or mid-index
        gw.proc.wait(10)
        stop.set()
        await collector
        c._reader.cancel()
    finals = sum(1 for evs in events.values() if any(e["method"] == "chat.final" for e in evs))
    return {"mode": mode, "sent": sent, "finals": finals}


def start(gw: GatewayProcess, n: int) -> None:
    """GatewayProcess.start reads the port from the log: give each start a fresh log."""
    if gw.log.exists():
        gw.log.rename(gw.log.with_name(f"serve.{n}.log"))
    gw.start()


def tear_tail(path: Path) -> None:
    with open(path, "ab") as fh:
        fh.write(b'{"type":"message","id":"torn-by-the-harness","timestamp":"2026-')


def index_rows(db: Path) -> tuple[Counter, dict[str, int], int]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        chunks = Counter(con.execute("SELECT path, start_line, end_line, hash FROM chunks"))
        files = dict(con.execute("SELECT path, chunks FROM files"))
        fts = con.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    finally:
        con.close()
    return chunks, files, fts


async def crash_rounds(
    base: Path, rounds: int, seed: int = 1, notes: int = 150, memory: bool | None = None
) -> dict[str, Any]:
    memory = memory_available() if memory is None else memory
    rng = random.Random(seed)
    state = base / "state"
    state.mkdir(parents=True)
    (state / "config.toml").write_text(CONFIG.format(memory="true" if memory else "false"))
    if memory:
        write_notes(state / "workspace", notes)
    ledger = Ledger()
    sessions_dir = state / "agents" / "main" / "sessions"
    results: dict[str, Any] = {"rounds": [], "memory": memory, "seed": seed}
    gw = GatewayProcess(state, env={"OPENAI_BASE_URL": ""})
    t0 = time.monotonic()
    try:
        for i in range(rounds):
            start(gw, i)
            mode = "sync" if memory and i % 2 == 1 else "chat"
            info = await _round(gw, ledger, rng, mode)
            info.update(ledger.check_files(sessions_dir))
            if i % 3 == 2 and ledger.sessions:
                tear_tail(sessions_dir / f"{ledger.sessions[i % len(ledger.sessions)]}.jsonl")
                info["tornByHarness"] = True
            results["rounds"].append(info)
        # Final: restart, append to every session (repairs torn tails), verify, re-sync memory.
        start(gw, rounds)
        c = await connect_client(gw.url, gw.token)
        for key in ledger.sessions:
            r = await c.call("chat.send", {"sessionKey": key, "message": "after the crashes"})
            ledger.users.setdefault(key, []).append((r["runId"], "after the crashes"))
            evs = await c.run_to_end(r["runId"])
            assert evs[-1]["method"] == "chat.final"
            p = evs[-1]["params"]
            ledger.finals.setdefault(key, []).append((r["runId"], p["message"]["id"], p["message"]["content"]))
        final_check = ledger.check_files(sessions_dir)
        assert final_check["torn"] == 0, "every torn tail was cut on the next append"
        if memory:
            await c.call("memory.sync", {"force": False}, timeout=120)
            status = await c.call("memory.status")
            hits = await c.call("memory.search", {"query": "after the crashes", "k": 10, "mode": "fts"})
            results["memoryStatus"] = {"files": status["files"], "chunks": status["chunks"]}
            assert any(h.get("sessionKey") in ledger.sessions for h in hits["results"]), hits
        await c.close()
        gw.signal()
        gw.wait(30)
        if memory:
            # A fresh index of the very same files, built by the CLI in a copy of the state dir.
            fresh = base / "fresh"
            shutil.copytree(state, fresh, ignore=shutil.ignore_patterns("memory.sqlite*", "serve.log"))
            env = {**os.environ, "JARVIS_STATE_DIR": str(fresh), "OPENAI_BASE_URL": ""}
            env.pop("OPENAI_API_KEY", None)
            t_sync = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", "gateway.cli", "memory", "sync", "--force"],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
                timeout=300,
            )
            results["freshForcedSyncSeconds"] = round(time.monotonic() - t_sync, 2)  # vs. the kill delays
            got_chunks, got_files, got_fts = index_rows(state / "agents" / "main" / "memory.sqlite")
            want_chunks, want_files, want_fts = index_rows(fresh / "agents" / "main" / "memory.sqlite")
            assert all(v == 1 for v in got_chunks.values()), "duplicate chunks"
            assert {p for p, *_ in got_chunks} <= set(got_files), "orphan chunks (no file row)"
            assert got_files == want_files, set(got_files.items()) ^ set(want_files.items())
            assert got_chunks == want_chunks, "the index differs from a fresh index of the same files"
            assert got_fts == want_fts == sum(got_chunks.values())
            results["index"] = {"files": len(got_files), "chunks": sum(got_chunks.values())}
    finally:
        gw.kill()
    results["acknowledged"] = {
        "sessions": len(ledger.sessions),
        "userMessages": sum(len(v) for v in ledger.users.values()),
        "finals": sum(len(v) for v in ledger.finals.values()),
    }
    results["seconds"] = round(time.monotonic() - t0, 1)
    return results


async def test_sigkill_at_random_moments_loses_nothing(tmp_path):
    rounds = int(os.environ.get("CRASH_ROUNDS", "4"))
    res = await crash_rounds(tmp_path, rounds, seed=int(os.environ.get("CRASH_SEED", "1")), notes=60)
    assert len(res["rounds"]) == rounds
    assert res["acknowledged"]["userMessages"] >= rounds, res
    if res["memory"]:
        assert any(r["mode"] == "sync" for r in res["rounds"]) or rounds < 2
