"""`jarvis import` and `jarvis export` as a user runs them: the real parser in a subprocess, with no gateway
(in process, holding the state dir's lock) and beside a running gateway process (which does the work)."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from gateway.cli.portability import progress_line
from gateway.portability.conversation import session_key
from tests.helpers import ROOT, GatewayProcess
from tests.vendor_exports import chatgpt_sample, chatgpt_zip, long_chatgpt


def jarvis(*args, state_dir, timeout=120):
    env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir)}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_import_and_export_without_a_gateway(tmp_path):
    state, other = tmp_path / "state", tmp_path / "other"
    convs, expect = chatgpt_sample()
    export = chatgpt_zip(tmp_path / "chatgpt.zip", convs)

    r = jarvis("import", "chatgpt", str(export), "--dry-run", state_dir=state)
    assert r.returncode == 0, r.stderr
    assert "(dry run: nothing was written)" in r.stdout and "would add 2" in r.stdout
    assert "dates: 2023-03-14 to 2023-04-23" in r.stdout
    assert not (state / "agents" / "main" / "sessions" / "sessions.json").exists()

    r = jarvis("import", "chatgpt", str(export), "--json", state_dir=state)
    assert r.returncode == 0, r.stderr
    report = orjson.loads(r.stdout)
    assert report["conversations"]["added"] == 2 and report["index"]["indexed"] == 2  # searchable at once
    sessions = state / "agents" / "main" / "sessions"
    listed = orjson.loads((sessions / "sessions.json").read_bytes())["sessions"]
    assert set(listed) == {session_key("chatgpt", c["id"]) for c in convs[:2]}
    assert (sessions / ".closed-cleanly").exists(), "closed as a gateway closes it: counters exact"
    trip = [
        orjson.loads(line)
        for line in (sessions / f"{session_key('chatgpt', convs[0]['id'])}.jsonl").read_bytes().splitlines()
    ]
    assert [m["id"] for m in trip[1:]] == [e[0] for e in expect[convs[0]["id"]]]

    r = jarvis("import", "chatgpt", str(export), state_dir=state)
    assert r.returncode == 0 and "unchanged 2" in r.stdout, r.stdout

    out = tmp_path / "me.zip"
    r = jarvis("export", "--out", str(out), state_dir=state)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {out}") and "sessions: 2 (10 messages)" in r.stdout
    r = jarvis("export", "--out", str(out), state_dir=state)
    assert r.returncode == 1 and "exists already" in r.stderr

    r = jarvis("import", "jsonl", str(out), "--agent", "work", "--json", state_dir=other)
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout)["sessions"]["added"] == 2
    for p in sessions.glob("*.jsonl"):
        assert (other / "agents" / "work" / "sessions" / p.name).read_bytes() == p.read_bytes()

    broken = [long_chatgpt("fine", 2).json(), {**long_chatgpt("bad", 2).json(), "create_time": "soon"}]
    (tmp_path / "broken.json").write_bytes(orjson.dumps(broken))
    r = jarvis("import", "chatgpt", str(tmp_path / "broken.json"), state_dir=other)
    assert r.returncode == 1
    assert "conversation 1 (id " in r.stderr and "create_time: must be a number" in r.stderr
    assert "before it stopped:" in r.stderr and "added 1" in r.stderr

    r = jarvis("import", "chatgpt", str(tmp_path / "nothing.zip"), state_dir=other)
    assert r.returncode == 2 and "no such file" in r.stderr
    r = jarvis("import", "claude", str(export), "--folder", "x", state_dir=other)
    assert r.returncode == 2 and "--folder goes with markdown" in r.stderr


def test_import_through_a_running_gateway_and_a_gateway_that_does_not_answer(tmp_path):
    state = tmp_path / "state"
    convs, _ = chatgpt_sample()
    export = chatgpt_zip(tmp_path / "chatgpt.zip", convs)
    with GatewayProcess.running(state, '[memory.search]\nmode = "fts"\n') as gp:
        port = str(gp.port)
        r = jarvis("import", "chatgpt", str(export), "--json", "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        report = orjson.loads(r.stdout)
        assert report["conversations"]["added"] == 2 and report["index"]["indexed"] >= 2
        r = jarvis("memory", "search", "Memmo Alfama", "--json", "--port", port, state_dir=state)
        assert orjson.loads(r.stdout)["results"][0]["sessionKey"] == session_key("chatgpt", convs[0]["id"])
        # A command pointed at a port where nothing answers finds the state dir held: it says so, writes nothing.
        r = jarvis("import", "chatgpt", str(export), "--port", "1", state_dir=state)
        assert r.returncode == 2 and "does not answer" in r.stderr, r.stderr


def test_progress_reads_as_one_line():
    line = progress_line(
        {
            "phase": "reading",
            "bytesRead": 52_000_000,
            "bytesTotal": 208_000_000,
            "conversations": 1200,
            "added": 900,
            "extended": 0,
            "messagesAdded": 24_000,
        }
    )
    assert line == "reading 25% (52.0 MB of 208.0 MB) · 1,200 conversations · 900 added · 24,000 messages"
    assert progress_line({"phase": "indexing"}) == "indexing what came in…"
    assert progress_line({"phase": "sessions", "done": 3, "total": 10}) == "sessions: 3 of 10"
