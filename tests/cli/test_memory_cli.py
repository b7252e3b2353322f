"""`jarvis memory …` as a user runs it: the real parser in a subprocess, next to a real gateway process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import orjson

from tests.helpers import ROOT, GatewayProcess


def jarvis(*args, state_dir, env=None, timeout=120):
    full_env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir), **(env or {})}
    full_env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_status_asks_the_running_gateway_and_agent_and_sources_work_everywhere(tmp_path):
    state = tmp_path / "state"
    (state / "workspace" / "memory").mkdir(parents=True)
    (state / "workspace" / "memory" / "garden.md").write_text("# Garden\n\nThe tomatoes go in the greenhouse.\n")
    with GatewayProcess.running(state, '[memory.search]\nmode = "fts"\nvectorBackend = "numpy"\n') as gp:
        port = str(gp.port)
        deadline = time.monotonic() + 60
        while True:  # the gateway's sync on start runs in the background
            live = orjson.loads(jarvis("memory", "status", "--json", "--port", port, state_dir=state).stdout)
            # (and then warms up: numpy searches a matrix in memory, loaded after the sync)
            if live["files"] == 1 and not live["sync"].get("running") and live["vector"].get("matrix"):
                break
            assert time.monotonic() < deadline, live
            time.sleep(0.2)
        direct = orjson.loads(jarvis("memory", "status", "--json", "--direct", "--port", port, state_dir=state).stdout)
        # The sync runs are the gateway's own (it synced on start); a fresh reader of the file has none.
        assert live["sync"]["runs"] >= 1 and direct["sync"]["runs"] == 0
        assert live["files"] == direct["files"] == 1
        r = jarvis("memory", "status", "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[0] == f"gateway:    ws://127.0.0.1:{port}/ (running; these are its live figures)"
        assert live["vector"]["matrix"] == "float32", live["vector"]
        assert "vectors:    numpy (available, searched in memory as float32)" in r.stdout, r.stdout

        # A second agent: created through the gateway, then every memory command takes --agent.
        r = jarvis("call", "sessions.create", '{"agentId":"work"}', "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        r = jarvis(
            "memory",
            "set",
            "standup",
            "The standup is at nine on Mondays.",
            "--agent",
            "work",
            "--port",
            port,
            state_dir=state,
        )
        assert r.returncode == 0, r.stderr
        r = jarvis("memory", "sync", "--agent", "work", "--json", "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        for extra in (["--source", "memory", "--source", "sessions"], ["--source", "memory,sessions"], []):
            r = jarvis(
                "memory",
                "search",
                "standup Mondays",
                "--agent",
                "work",
                "--json",
                *extra,
                "--port",
                port,
                state_dir=state,
            )
            assert r.returncode == 0, (extra, r.stderr)
            paths = [x["path"] for x in orjson.loads(r.stdout)["results"]]
            assert paths and all("garden" not in p for p in paths), paths  # the work agent's memory only
        r = jarvis("memory", "status", "--agent", "work", "--json", "--port", port, state_dir=state)
        assert orjson.loads(r.stdout)["sources"]["memory"]["files"] == 1
        r = jarvis(
            "memory",
            "recall",
            "--agent",
            "work",
            "--source",
            "memory,sessions",
            "--json",
            "--port",
            port,
            state_dir=state,
        )
        assert r.returncode == 0, r.stderr
        r = jarvis(
            "memory",
            "similar",
            "standup",
            "--agent",
            "work",
            "--source",
            "memory",
            "--source",
            "sessions",
            "--json",
            "--port",
            port,
            state_dir=state,
        )
        assert r.returncode == 0, r.stderr
        r = jarvis("memory", "search", "x", "--source", "notes", state_dir=state)
        assert r.returncode == 2 and "each source is one of memory, sessions" in r.stderr
        r = jarvis("memory", "status", "--agent", "nobody", "--port", port, state_dir=state)
        assert r.returncode == 1 and "agent not found: nobody" in r.stderr

    # No gateway any more: status reads the state dir and says so.
    r = jarvis("memory", "status", "--port", port, state_dir=state)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(f"gateway:    none answered at ws://127.0.0.1:{port}/")


def test_the_serve_banner_names_a_token_command_that_works_as_printed(tmp_path):
    import re
    import shlex

    state = tmp_path / "state"
    with GatewayProcess.running(state, "[memory]\nenabled = false\n") as gp:
        log = gp.log.read_text()
    command = re.search(r"print it with `([^`]+)`", log).group(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JARVIS_")}  # nothing but what it says
    done = subprocess.run(shlex.split(command), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    assert done.stdout.strip() == (state / "gateway.token").read_text().strip()


def test_each_command_calls_the_method_the_gateways_when_it_answers_else_the_same_one_in_process(tmp_path):
    state = tmp_path / "state"
    (state / "workspace").mkdir(parents=True)
    bad = [
        ("list", "--limit", "0"),
        ("search", "boat", "--k", "51"),
        ("recall", "--from", "2024-05-03", "--to", "2024-05-01"),
    ]
    with GatewayProcess.running(state, '[memory.search]\nmode = "fts"\n') as gp:
        port = str(gp.port)
        runs = orjson.loads(jarvis("memory", "status", "--json", "--port", port, state_dir=state).stdout)["sync"][
            "runs"
        ]
        r = jarvis("memory", "sync", "--json", "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        live = orjson.loads(jarvis("memory", "status", "--json", "--port", port, state_dir=state).stdout)
        assert live["sync"]["runs"] == runs + 1, "the sync ran in the gateway, not beside it"
        r = jarvis("memory", "set", "boat", "The boat is blue.", "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        through = {args: jarvis("memory", *args, "--port", port, state_dir=state) for args in bad}
    alone = {args: jarvis("memory", *args, "--port", port, state_dir=state) for args in bad}
    # The method validates, on either path, with the same words and exit code (2: invalid params).
    for args in bad:
        assert through[args].returncode == alone[args].returncode == 2, (args, through[args].stderr)
        assert through[args].stderr == alone[args].stderr and "params." in alone[args].stderr, alone[args].stderr
    r = jarvis("memory", "get", "boat", "--json", "--port", port, state_dir=state)
    assert r.returncode == 0 and orjson.loads(r.stdout)["value"] == "The boat is blue.", r.stderr
    r = jarvis("memory", "get", "nothing", "--port", port, state_dir=state)
    assert r.returncode == 1 and "nothing" in r.stderr
    # In process, the sessions folder stays a gateway's: the killed one's lacks its clean-close marker,
    # which tells the next gateway to recount, and the commands (opening the agent's memory) leave it so.
    assert not (state / "agents" / "main" / "sessions" / ".closed-cleanly").exists()


def test_an_image_too_big_for_one_frame_to_the_gateway_is_stored_as_without_one(tmp_path):
    """memory.imageMaxBytes (5 MiB) is above server.maxFrameBytes (1 MiB): a 2 MB image, which the command
    stores without a gateway, went over the running gateway's WebSocket in one frame and the gateway closed
    the connection ("closed the connection", exit 3). It is stored in process, the same method's way."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    state = tmp_path / "state"
    (state / "workspace").mkdir(parents=True)
    image = tmp_path / "harbour.png"
    image.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"tEXt", os.urandom(2_000_000))
        + chunk(b"IEND", b"")
    )
    with GatewayProcess.running(state, '[memory.search]\nmode = "fts"\n') as gp:
        port = str(gp.port)
        r = jarvis(
            "memory",
            "set-image",
            "harbour",
            str(image),
            "--description",
            "the harbour at dawn",
            "--port",
            port,
            state_dir=state,
        )
        assert r.returncode == 0, r.stderr
        assert "saved memory/images/harbour.png" in r.stdout, r.stdout
        r = jarvis(
            "memory", "get-image", "harbour", "--out", str(tmp_path / "back.png"), "--port", port, state_dir=state
        )  # through the gateway: a reply may be bigger (server.maxReplyBytes)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "back.png").read_bytes() == image.read_bytes()
        r = jarvis("memory", "search", "harbour dawn", "--json", "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        assert any("harbour" in x["path"] for x in orjson.loads(r.stdout)["results"]), r.stdout


def test_a_delete_says_how_to_undo_it_and_history_restore_and_the_trash_work_in_process(tmp_path):
    state = tmp_path / "state"
    (state / "workspace").mkdir(parents=True)
    (state / "config.toml").write_text('[memory.search]\nmode = "fts"\n')
    for value in ("The boat is teal.", "The boat is pwned."):
        assert jarvis("memory", "set", "boat", value, state_dir=state).returncode == 0
    r = jarvis("memory", "history", "boat", state_dir=state)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "boat" and "v2  " in r.stdout and "by owner via cli  (current)" in r.stdout
    r = jarvis("memory", "restore", "boat", "--version", "1", state_dir=state)
    assert r.returncode == 0 and r.stdout == "restored boat: version 1 written again\n", r.stderr
    r = jarvis("memory", "delete", "boat", state_dir=state)
    assert r.returncode == 0 and r.stdout.startswith("deleted boat (memory/keyed/general/boat.md): in the trash until")
    undo = r.stdout.splitlines()[-1]
    assert undo == "undo: jarvis memory restore boat"
    r = jarvis("memory", "get", "boat", state_dir=state)  # a newcomer looks for it: where is it?
    assert r.returncode == 1 and "no memory with key 'boat': it is in the trash (deleted " in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith("bring it back with memory.restore {key} (jarvis memory restore boat)")
    r = jarvis("memory", "trash", state_dir=state)
    assert "boat (general): The boat is teal." in r.stdout
    r = jarvis(*undo.split()[2:], state_dir=state)
    assert r.returncode == 0 and r.stdout == "restored boat: back from the trash\n", r.stderr
    r = jarvis("memory", "get", "boat", "--json", state_dir=state)
    assert orjson.loads(r.stdout)["value"] == "The boat is teal."
    r = jarvis("memory", "history", "boat", "--json", state_dir=state)
    assert [v["by"] for v in orjson.loads(r.stdout)["versions"]] == ["cli", "cli", "cli"]
    jarvis("memory", "delete", "boat", state_dir=state)
    r = jarvis("memory", "purge", "--all", state_dir=state)
    assert r.returncode == 0 and r.stdout == "purged 1: boat\n"
    r = jarvis("memory", "purge", state_dir=state)
    assert r.returncode == 2 and "give key, or all: true" in r.stderr


def test_memory_profile_lists_current_facts_and_search_takes_as_of(tmp_path):
    """`jarvis memory profile`: the ledger's facts from a note (in process, on the state dir); a
    correction set with `jarvis memory set profile.<subject>` leads; `--as-of` is memory.search's asOf."""
    notes = tmp_path / "workspace" / "memory"
    notes.mkdir(parents=True)
    (notes / "2025-03-01.md").write_text("# Moving\n\nI live in Leeds, by the canal.\n")
    (notes / "2025-09-01.md").write_text("# Moving again\n\nWe moved to Dundee, got the keys on Friday.\n")
    r = jarvis("memory", "profile", state_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("home: ") and "Dundee" in r.stdout.splitlines()[0], r.stdout
    assert "(since 2025-09-01)" in r.stdout and "was: " in r.stdout and "Leeds" in r.stdout

    assert (
        jarvis("memory", "set", "profile.home", "Broughty Ferry", "--category", "facts", state_dir=tmp_path).returncode
        == 0
    )
    r = jarvis("memory", "profile", "--json", state_dir=tmp_path)
    home = next(f for f in orjson.loads(r.stdout)["facts"] if f["subject"] == "home")
    assert (home["value"], home["source"]) == ("Broughty Ferry", "correction")

    r = jarvis("memory", "search", "Where do I live?", "--as-of", "2025-06-01", "--json", state_dir=tmp_path)
    res = orjson.loads(r.stdout)
    assert res["asOf"] == "2025-06-01T23:59:59.999Z" and "Leeds" in res["results"][0]["snippet"], res
    r = jarvis("memory", "search", "home", "--as-of", "soon", state_dir=tmp_path)
    assert r.returncode == 2 and "asOf" in r.stderr and "ISO 8601" in r.stderr

    # Bounded: the page, the history per fact and the subject are the CLI's flags; past a limit, the rule.
    (notes / "codes.md").write_text("# Codes\n\nThe shed code is 1234.\nThe gate code is 5678.\n")
    r = jarvis("memory", "profile", "--limit", "1", "--history", "0", state_dir=tmp_path)
    assert r.returncode == 0 and r.stdout.count("(since ") == 1, r.stdout
    assert "more: jarvis memory profile --cursor " in r.stdout, r.stdout
    r = jarvis("memory", "profile", "--subject", "code", "--json", state_dir=tmp_path)
    assert {f["subject"] for f in orjson.loads(r.stdout)["facts"]} == {"code:shed", "code:gate"}, r.stdout
    r = jarvis("memory", "profile", "--limit", "501", state_dir=tmp_path)
    assert r.returncode == 2 and "limit" in r.stderr and "<= 500" in r.stderr, r.stderr
