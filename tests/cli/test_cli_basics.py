"""What a newcomer meets first: bare `jarvis`, `--help` everywhere, config errors, refusals that say
one thing. The real parser, as a process, next to a real gateway where one is needed."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from gateway.cli import build_parser
from tests.helpers import ROOT, GatewayProcess


def jarvis(*args, state_dir, env=None, timeout=60):
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


def undocumented(parser: argparse.ArgumentParser, path: str = "jarvis") -> list[str]:
    """Every sub-command, positional and option without a help text, named by its command line."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            if not action.help:
                missing.append(f"{path} {action.metavar or action.dest}")
            for name, child in action.choices.items():
                if not helps.get(name):
                    missing.append(f"{path} {name}")
                missing += undocumented(child, f"{path} {name}")
        elif not action.help and action.dest != "help":
            missing.append(f"{path} {action.option_strings[0] if action.option_strings else action.dest}")
    return missing


def test_every_command_positional_and_option_has_help_text():
    assert undocumented(build_parser()) == []


def test_bare_jarvis_prints_help_and_exits_0(tmp_path):
    r = jarvis(state_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: jarvis") and "serve" in r.stdout and r.stderr == ""


def test_memory_set_and_learn_explain_both_kinds_of_category_side_by_side(tmp_path):
    for cmd in ("set", "learn"):
        r = jarvis("memory", cmd, "--help", state_dir=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "memory set --category" in r.stdout and "memory learn SECTION" in r.stdout, r.stdout
        assert "general, preferences, facts" in r.stdout and "preferences, corrections, patterns, tools" in r.stdout


def test_a_config_file_with_several_errors_lists_them_all(tmp_path):
    (tmp_path / "config.toml").write_text("[server]\nport = 'x'\nprot = 1\n[memory.search]\nmode = 'magic'\n")
    r = jarvis("config", state_dir=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0] == "jarvis: invalid configuration (3 errors):", r.stderr
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["server.port", "server.prot", "memory.search.mode"]
    # One error keeps its one line.
    (tmp_path / "config.toml").write_text("[server]\nport = 'x'\n")
    r = jarvis("config", state_dir=tmp_path)
    assert r.returncode == 2 and r.stderr == "jarvis: invalid configuration: server.port: must be an integer\n"


def test_a_refused_second_serve_prints_only_its_one_message(tmp_path):
    state = tmp_path / "state"
    with GatewayProcess.running(state, "[memory]\nenabled = false\n"):
        r = jarvis("serve", "--port", "0", state_dir=state, env={"OPENAI_BASE_URL": ""})
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1, r.stderr  # no JSON "gateway stopping" lines before it
    assert r.stderr.startswith("jarvis: ") and "gateway" in r.stderr and r.stdout == ""


def test_memory_status_direct_does_not_say_none_answered(tmp_path):
    state = tmp_path / "state"
    with GatewayProcess.running(state, '[memory.search]\nmode = "fts"\n') as gp:
        r = jarvis("memory", "status", "--direct", "--port", str(gp.port), state_dir=state)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first == "gateway:    not asked (--direct); read from the state dir", r.stdout


def test_the_gateway_log_names_the_chat_model_and_endpoint_and_each_sync_run(tmp_path):
    import time

    import orjson

    state = tmp_path / "state"
    (state / "workspace" / "memory").mkdir(parents=True)
    (state / "workspace" / "memory" / "boat.md").write_text("# Boat\n\nMy sailing boat is painted blue.\n")
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "JARVIS_CHAT_MODEL": "llama-3.1-8b"}
    with GatewayProcess.running(state, '[memory.search]\nmode = "fts"\n', env=env) as gp:
        deadline = time.monotonic() + 60
        while True:  # the sync on start runs in the background
            lines = [orjson.loads(x) for x in gp.log.read_text().splitlines() if x.startswith("{")]
            if any(x["event"] == "memory_sync_finished" for x in lines):
                break
            assert time.monotonic() < deadline, gp.log.read_text()
            time.sleep(0.1)
        # The CLI's own commands keep the library's log lines off stdout: --json stays JSON.
        r = jarvis("memory", "sync", "--json", "--force", state_dir=state)
        assert r.returncode == 0, r.stderr
        assert orjson.loads(r.stdout)["indexed"] >= 1
    ready = next(x for x in lines if x["event"] == "gateway ready")
    assert (ready["chat"], ready["chat_model"], ready["chat_url"]) == (
        "openai",
        "llama-3.1-8b",
        "http://127.0.0.1:9/v1",
    )
    started = next(x for x in lines if x["event"] == "memory_sync_started")
    finished = next(x for x in lines if x["event"] == "memory_sync_finished")
    assert started["memory"] is True and started["reasons"]
    assert finished["files_indexed"] == 1 and finished["chunks_embedded"] >= 1 and finished["seconds"] >= 0


def test_memory_search_shows_a_keyed_memorys_value_not_its_front_matter(tmp_path):
    r = jarvis(
        "memory",
        "set",
        "favorite-color",
        "Navy blue, like the sea at dusk.",
        "--category",
        "preferences",
        state_dir=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    r = jarvis("memory", "search", "navy blue sea", "--source", "memory", state_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    head, *snippet = r.stdout.splitlines()
    assert head.endswith("memory/keyed/preferences/favorite-color.md:1–9"), r.stdout
    assert snippet == ["    Navy blue, like the sea at dusk."], r.stdout
    # --json is the method's result: the wire shows the value too (every reader of a hit does).
    r = jarvis("memory", "search", "navy blue sea", "--source", "memory", "--json", state_dir=tmp_path)
    import orjson

    assert orjson.loads(r.stdout)["results"][0]["snippet"] == "Navy blue, like the sea at dusk."


def leaves(parser: argparse.ArgumentParser, path: str = "jarvis"):
    """(command line, parser) of every command that runs something (no sub-command of its own to pick)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and parser.get_default("handler") is not None:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from leaves(child, f"{path} {name}")


def test_every_client_command_takes_token():
    """docs/protocol.md speaks of `--token`: every command that talks to a gateway takes it (not `serve`, whose
    token is its own, nor `jarvis token`, which prints it)."""
    without = [
        path
        for path, p in leaves(build_parser())
        if not any("--token" in a.option_strings for a in p._actions)
        and path not in ("jarvis serve", "jarvis token")
        and not path.startswith(("jarvis service", "jarvis backup", "jarvis config", "jarvis migrate"))
    ]
    assert without == []


def test_token_flag_reaches_a_gateway_whose_token_is_in_no_file(tmp_path):
    token = "a-token-only-the-environment-knows-1234"
    with GatewayProcess.running(tmp_path, "[memory]\nenabled = false\n", env={"JARVIS_GATEWAY_TOKEN": token}) as gp:
        port = str(gp.port)
        r = jarvis("sessions", "list", "--port", port, "--token", token, state_dir=tmp_path)
        assert r.returncode == 0, r.stderr
        r = jarvis("call", "system.health", "--port", port, "--token", token, state_dir=tmp_path)
        assert r.returncode == 0 and '"status"' in r.stdout, r.stderr
        r = jarvis("call", "system.health", "--port", port, "--token", "x" * 32, state_dir=tmp_path)
        assert r.returncode == 3 and "wrong token?" in r.stderr
        r = jarvis("call", "system.health", "--port", port, "--token", "short", state_dir=tmp_path)
        assert r.returncode == 2 and "token:" in r.stderr
