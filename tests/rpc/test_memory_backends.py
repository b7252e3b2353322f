"""Search backends, sync triggers and ranking options through a real gateway over WebSocket.

QMD is played by a small fake `qmd` executable (a Python script written into tmp_path) that speaks the
documented CLI: `collection add`, `update`, `embed`, and `search|vsearch|query <q> --json -n K -c NAME`.
What it does is chosen by the file `mode` next to it: ok | fail (exit 1) | hang (sleep past the timeout)
| garbage (not JSON). Every call is appended to `calls.log`."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.helpers import RunningGateway, make_config, wait_for

FAKE_QMD = r"""#!__PYTHON__
import json, os, re, sys, time
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
with open(os.path.join(here, "calls.log"), "a") as fh:
    fh.write(" ".join(args) + "\n")
mode = open(os.path.join(here, "mode")).read().strip()
if args[:2] == ["collection", "add"]:
    open(os.path.join(here, "workspace"), "w").write(args[2])
    sys.exit(0)
if args[0] in ("update", "embed", "status"):
    sys.exit(0)
if mode == "fail":
    sys.stderr.write("qmd: index is locked\n")
    sys.exit(1)
if mode == "hang":
    open(os.path.join(here, "hang.pid"), "w").write(str(os.getpid()))
    time.sleep(30)
if mode == "garbage":
    print("<html>502 Bad Gateway</html>")
    sys.exit(0)
query, name = args[1], args[args.index("-c") + 1]
n = int(args[args.index("-n") + 1])
ws = open(os.path.join(here, "workspace")).read()
words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 3]
out = []
for root, _, files in os.walk(ws):
    for f in sorted(files):
        if not f.endswith(".md"):
            continue
        full = os.path.join(root, f)
        rel = os.path.relpath(full, ws)
        for no, line in enumerate(open(full), start=1):
            hits = sum(1 for w in words if w in line.lower())
            if hits:
                out.append({"docid": "#abc123", "score": round(hits / len(words), 2), "file": "qmd://%s/%s" % (name, rel),
                            "title": f, "snippet": "@@ -%d,1 @@ (0 before, 0 after)\n%s" % (no, line.rstrip("\n"))})
print(json.dumps(sorted(out, key=lambda r: -r["score"])[:n]))
"""


@pytest.fixture
def fake_qmd(tmp_path: Path):
    d = tmp_path / "bin"
    d.mkdir()
    exe = d / "qmd"
    exe.write_text(FAKE_QMD.replace("__PYTHON__", sys.executable))
    exe.chmod(0o755)
    (d / "mode").write_text("ok")
    (d / "calls.log").write_text("")

    class Fake:
        path = exe

        def mode(self, m: str) -> None:
            (d / "mode").write_text(m)

        def calls(self, sub: str | None = None) -> list[str]:
            lines = (d / "calls.log").read_text().splitlines()
            return [c for c in lines if sub is None or c.split(" ")[0] == sub]

        def hang_pid(self) -> int:
            return int((d / "hang.pid").read_text())

    return Fake()


async def until(pred, timeout: float = 10.0) -> None:
    async def loop():
        while not await pred():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), timeout)


@pytest.fixture
async def gateway(tmp_path: Path):
    started: list[RunningGateway] = []

    async def start(**overrides):
        ws = tmp_path / "state" / "workspace"
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        (ws / "MEMORY.md").write_text("# Notes\n\nThe wifi password is hunter2.\nThe boat is called Seagull.\n")
        cfg = make_config(
            tmp_path / "state",
            memory=True,
            **{"memory.embeddings.provider": "none", "memory.sync.watch": False, **overrides},
        )
        g = await RunningGateway(cfg).start()
        started.append(g)
        return g, await g.client()

    yield start
    for g in started:
        await g.stop()


def qmd_config(fake, **kw):
    return {
        "memory.backend.kind": "qmd",
        "memory.backend.qmd.command": str(fake.path),
        "memory.backend.retryBackoffMs": 1,
        **kw,
    }


async def test_qmd_backend_answers_and_is_kept_up_to_date(gateway, fake_qmd, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_qmd.path.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    g, c = await gateway(**{"memory.backend.kind": "qmd", "memory.backend.qmd.command": "qmd"})  # found on PATH

    async def updated():
        return bool(fake_qmd.calls("update")) and bool(fake_qmd.calls("embed"))

    await until(updated)  # the on-start sync was followed by qmd update + embed
    assert fake_qmd.calls("collection")[0].split(" ")[3:] == ["--name", "jarvis-main", "--mask", "**/*.md"]
    res = await c.call("memory.search", {"query": "wifi password", "mode": "fts", "sources": ["memory"]})
    top = dict(res["results"][0])
    # The ledger (memory/ledger/) knows this line states a code: the hit says so, dated.
    fact = top.pop("fact")
    assert (fact["subject"], fact["value"]) == ("code:wifi", "hunter2") and fact["since"]
    assert top == {
        "path": "MEMORY.md",
        "source": "memory",
        "startLine": 3,
        "endLine": 3,
        "score": 1.0,
        "snippet": "The wifi password is hunter2.",
    }
    assert "degraded" not in res
    # k 6 asks the backend for 5 spare results (memory/service.py POOL_SPARE), arranged, then cut to 6.
    assert fake_qmd.calls("search")[-1] == "search wifi password --json -n 11 -c jarvis-main"
    st = await c.call("memory.status")
    assert st["backend"]["kind"] == "qmd" and st["backend"]["collection"] == "jarvis-main"
    assert st["backend"]["circuit"] == {"state": "closed", "failures": 0}
    await c.call("memory.search", {"query": "boat name", "mode": "hybrid"})
    assert fake_qmd.calls("query")  # hybrid → qmd query


async def test_failures_retry_then_fall_back_and_open_the_circuit(gateway, fake_qmd):
    g, c = await gateway(
        **qmd_config(
            fake_qmd,
            **{
                "memory.backend.retries": 2,
                "memory.backend.breakerFailures": 3,
                "memory.backend.breakerOpenSeconds": 1.5,
            },
        )
    )
    fake_qmd.mode("fail")
    for _ in range(3):
        before = len(fake_qmd.calls("search"))
        res = await c.call("memory.search", {"query": "wifi password", "mode": "fts"})
        assert len(fake_qmd.calls("search")) - before == 3  # one try + two retries
        assert res["results"][0]["path"] == "MEMORY.md"  # answered by the built-in index
        assert "hunter2" in res["results"][0]["snippet"]
        assert "qmd failed (qmd search exited with 1: qmd: index is locked)" in res["degraded"]
    st = (await c.call("memory.status"))["backend"]
    assert st["circuit"]["state"] == "open" and st["circuit"]["failures"] == 3
    assert st["lastError"] == "qmd search exited with 1: qmd: index is locked" and st["fallbacks"] == 3
    before = len(fake_qmd.calls("search"))
    res = await c.call("memory.search", {"query": "wifi password", "mode": "fts"})
    assert len(fake_qmd.calls("search")) == before  # open: straight to the fallback
    assert "circuit open" in res["degraded"] and res["results"][0]["path"] == "MEMORY.md"

    async def half_open():
        return (await c.call("memory.status"))["backend"]["circuit"]["state"] == "half-open"

    await until(half_open)
    fake_qmd.mode("ok")
    res = await c.call("memory.search", {"query": "wifi password", "mode": "fts"})
    assert "degraded" not in res and res["embeddings"]["provider"] == "qmd"
    assert (await c.call("memory.status"))["backend"]["circuit"] == {"state": "closed", "failures": 0}


async def test_a_hanging_qmd_is_killed_after_the_timeout(gateway, fake_qmd):
    # 2 s, not less: the fake is a Python script, and on a loaded machine its start alone can take longer
    # than a short timeout — killed before it wrote its pid, it leaves nothing to check the reaping by.
    g, c = await gateway(**qmd_config(fake_qmd, **{"memory.backend.retries": 0, "memory.backend.qmd.timeoutMs": 2000}))
    fake_qmd.mode("hang")
    res = await c.call("memory.search", {"query": "boat", "mode": "fts"})
    assert "qmd search timed out after 2 s" in res["degraded"]
    assert res["results"][0]["path"] == "MEMORY.md"
    with pytest.raises(ProcessLookupError):
        os.kill(fake_qmd.hang_pid(), 0)  # killed and reaped


async def test_garbage_output_falls_back(gateway, fake_qmd):
    g, c = await gateway(**qmd_config(fake_qmd, **{"memory.backend.retries": 1}))
    fake_qmd.mode("garbage")
    res = await c.call("memory.search", {"query": "boat", "mode": "fts"})
    assert "qmd returned output that is not JSON" in res["degraded"]
    assert res["results"][0]["path"] == "MEMORY.md"
    st = await c.call("memory.status")
    assert st["backend"]["circuit"]["failures"] == 1


async def test_a_missing_qmd_command_falls_back(gateway, tmp_path):
    g, c = await gateway(
        **{
            "memory.backend.kind": "qmd",
            "memory.backend.retries": 0,
            "memory.backend.qmd.command": str(tmp_path / "no-such-qmd"),
        }
    )
    res = await c.call("memory.search", {"query": "boat", "mode": "fts"})
    assert "cannot run" in res["degraded"] and res["results"][0]["path"] == "MEMORY.md"


async def test_qmd_and_transcript_results_are_spread_over_files(gateway, fake_qmd, tmp_path):
    """QMD answers for the notes, the built-in index for transcripts; the merged list is spread over
    files like the built-in one (fileDiversity), so lines of one note do not crowd out a transcript."""
    g, c = await gateway(**qmd_config(fake_qmd, **{"memory.sync.sessionDebounceMs": 50}))
    (tmp_path / "state" / "workspace" / "MEMORY.md").write_text(
        "".join(f"Cabin wifi password, try number {i}.\n" for i in range(4))
    )
    key = (await c.call("sessions.create"))["sessionKey"]
    await c.run_to_end(
        (await c.call("chat.send", {"sessionKey": key, "message": "The cabin wifi password is moose."}))["runId"]
    )

    async def indexed():
        res = await c.call("memory.search", {"query": "cabin wifi password", "mode": "fts", "sources": ["sessions"]})
        return bool(res["results"])

    await until(indexed)
    res = await c.call("memory.search", {"query": "cabin wifi password", "mode": "fts", "k": 3})
    # All equally good; the ledger's current statement of the code leads, the others just under it.
    assert [round(r["score"], 3) for r in res["results"]] == [1.0, 1.0, 1.0], "all equally good"
    # Spread over both files; equally good hits come newest first (search/timeline.py): the turn said
    # after the note was written leads.
    assert [r["path"] for r in res["results"]] == [f"sessions/{key}.jsonl", "MEMORY.md", "MEMORY.md"]


async def test_builtin_is_the_default_backend(gateway, fake_qmd, monkeypatch):
    """With a working qmd on PATH and no backend configured, searches still go to the built-in index."""
    monkeypatch.setenv("PATH", f"{fake_qmd.path.parent}{os.pathsep}{os.environ['PATH']}")
    g, c = await gateway()
    st = await c.call("memory.status")
    assert st["backend"] == {"kind": "builtin"}
    assert st["ranking"] == {"mmr": False, "mmrLambda": 0.7, "timeDecay": False, "halfLifeDays": 30.0}
    res = await c.call("memory.search", {"query": "wifi password"})
    assert res["results"][0]["path"] == "MEMORY.md" and "qmd" not in res.get("degraded", "")
    assert fake_qmd.calls() == []  # qmd was never asked


# ---- sync triggers ---------------------------------------------------------------------------------


async def test_fifty_concurrent_syncs_run_at_most_two(gateway):
    g, c = await gateway(**{"memory.sync.onStart": False})
    before = (await c.call("memory.status"))["sync"]
    results = await asyncio.gather(*(c.call("memory.sync", {"force": i % 10 == 0}) for i in range(50)))
    after = (await c.call("memory.status"))["sync"]
    assert after["requests"] - before["requests"] == 50
    assert 1 <= after["runs"] - before["runs"] <= 2
    assert sum(r["indexed"] for r in results) >= 1


async def test_session_start_syncs_a_dirty_index(gateway):
    g, c = await gateway(**{"memory.sync.onStart": False, "memory.sync.onSearch": False})
    assert (await c.call("memory.status"))["dirty"] is True
    await c.call("sessions.create", {})

    async def synced():
        st = await c.call("memory.status")
        return not st["dirty"] and st["sync"]["runs"] >= 1 and not st["sync"]["running"]

    await until(synced)
    st = await c.call("memory.status")
    assert st["sync"]["lastReasons"] == ["session-start"] and st["sources"]["memory"]["files"] == 1


@pytest.mark.parametrize("on", [True, False])
async def test_session_start_trigger_can_be_turned_off(gateway, on):
    """The same dirty index, the trigger on or off: only 'on' asks for a sync when a session starts."""
    g, c = await gateway(
        **{"memory.sync.onStart": False, "memory.sync.onSearch": False, "memory.sync.onSessionStart": on}
    )
    assert (await c.call("memory.status"))["dirty"] is True
    await c.call("sessions.create", {})
    st = await c.call("memory.status")  # the trigger requests synchronously, or never
    assert st["sync"]["requests"] == (1 if on else 0)
    if on:  # the sync it asked for, done (off: none was asked for, so none can come)

        async def synced() -> dict | None:
            st = await c.call("memory.status")
            return st if st["sync"]["runs"] >= 1 and not st["sync"]["running"] and not st["sync"]["pending"] else None

        st = await wait_for(synced, timeout=60)
    assert st["dirty"] is (not on)
    assert ("session-start" in st["sync"]["lastReasons"]) is on


async def test_interval_sync_fires(gateway):
    g, c = await gateway(**{"memory.sync.onStart": False, "memory.sync.intervalMinutes": 0.001})

    async def ran():
        return "interval" in (await c.call("memory.status"))["sync"]["lastReasons"]

    await until(ran)
    assert (await c.call("memory.status"))["sync"]["intervalMinutes"] == 0.001


@pytest.mark.parametrize("force", [True, False])
async def test_flush_sync_is_forced_when_configured(gateway, tmp_path, force):
    g, c = await gateway(**{"memory.sync.onStart": False, "memory.sync.forceOnFlush": force})
    day = tmp_path / "state" / "workspace" / "memory" / "2026-11-22.md"
    day.write_text("- planned a trip to Lisbon\n")
    await c.call("memory.sync")
    st = day.stat()
    day.write_text("- planned a trip to Oporto\n")  # same size; the same mtime below
    os.utime(day, ns=(st.st_atime_ns, st.st_mtime_ns))
    await g.gw.memory.sync_after_flush("s1")
    res = await c.call("memory.search", {"query": "Oporto", "mode": "fts"})
    assert bool(res["results"]) is force  # without force, the stat shortcut keeps the stale text
    assert "flush" in (await c.call("memory.status"))["sync"]["lastReasons"]


# ---- ranking -----------------------------------------------------------------------------------------


async def test_time_decay_prefers_recent_day_files_and_spares_evergreen_ones(gateway, tmp_path):
    mem = tmp_path / "state" / "workspace" / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    (mem / "2019-03-01.md").write_text("- the kayak is red and lives in the garage\n")
    (mem / f"{today}.md").write_text("- the kayak is red and lives in the garage now\n")
    g, c = await gateway(**{"memory.search.timeDecay": True, "memory.search.halfLifeDays": 30})
    res = await c.call("memory.search", {"query": "red kayak garage", "mode": "fts", "k": 3})
    paths = [r["path"] for r in res["results"]]
    assert paths[0] == f"memory/{today}.md"
    old = (
        next(r for r in res["results"] if r["path"] == "memory/2019-03-01.md")
        if "memory/2019-03-01.md" in paths
        else None
    )
    assert old is None or old["score"] < 0.01
    res = await c.call("memory.search", {"query": "wifi password", "mode": "fts"})
    assert res["results"][0]["path"] == "MEMORY.md" and res["results"][0]["score"] == 1.0  # never decays


async def test_mmr_removes_an_exact_duplicate(gateway, tmp_path):
    mem = tmp_path / "state" / "workspace" / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    text = "- the kayak is red and lives in the garage\n"
    (mem / "a.md").write_text(text)
    (mem / "b.md").write_text(text)
    (mem / "c.md").write_text("- a red bicycle stands next to the kayak shed\n")
    g, c = await gateway(**{"memory.search.mmr": True, "memory.search.mmrLambda": 0.5})
    res = await c.call("memory.search", {"query": "red kayak garage", "mode": "fts", "k": 2})
    paths = {r["path"] for r in res["results"]}
    assert len(paths & {"memory/a.md", "memory/b.md"}) == 1 and "memory/c.md" in paths
