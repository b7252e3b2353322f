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
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


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
    (tmp_path / "config.toml").write_text(
        "[server]\nport = 'x'\nprot = 1\n[memory.search]\nmode = 'magic'\n")
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
    with GatewayProcess.running(state, "[memory.search]\nmode = \"fts\"\n") as gp:
        r = jarvis("memory", "status", "--direct", "--port", str(gp.port), state_dir=state)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first == "gateway:    not asked (--direct); read from the state dir", r.stdout
