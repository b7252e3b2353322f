"""`jarvis service install|uninstall|status`, run as the real CLI in a subprocess with its own HOME.

Nothing here can touch the machine's real user systemd: --dry-run runs nothing, and the runs that do
try systemctl point it at an empty runtime dir and a bus that does not exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

VENV_JARVIS = Path(sys.executable).parent / "jarvis"


def jarvis(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JARVIS_", "XDG_", "DBUS_", "OPENAI_"))}
    base.update(
        {
            "HOME": str(home),
            "XDG_RUNTIME_DIR": str(runtime),
            "DBUS_SESSION_BUS_ADDRESS": f"unix:path={tmp_path / 'no-such-bus'}",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
    )


@pytest.fixture
def installed_jarvis():
    if not VENV_JARVIS.is_file():
        pytest.skip(f"{VENV_JARVIS} missing: install the package (./scripts/test does `pip install -e .`)")
    return VENV_JARVIS


def test_install_dry_run_shows_the_unit_for_this_installation_and_the_commands(tmp_path, installed_jarvis):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "config.toml").write_text("[server]\nshutdownGrace = 12\n")
    done = jarvis(tmp_path, "service", "install", "--dry-run", "--state-dir", str(state))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    unit_path = tmp_path / "home" / ".config" / "systemd" / "user" / "jarvis-gateway.service"
    assert f"# would write {unit_path}:" in out
    lines = out.splitlines()
    assert f"ExecStart={installed_jarvis} serve --log-format json" in lines
    assert f"Environment=JARVIS_STATE_DIR={state}" in lines
    assert f"ReadWritePaths={state}" in lines  # the workspace lives inside the state dir
    assert "TimeoutStopSec=37" in lines  # shutdownGrace 12 s + 25 s for closing sockets and the index
    assert "Type=notify" in lines and "WatchdogSec=30" in lines
    commands = lines[lines.index("# would run:") + 1 :]
    assert commands[:2] == ["systemctl --user daemon-reload", "systemctl --user enable --now jarvis-gateway"]
    assert "loginctl enable-linger $USER" in commands
    assert not unit_path.exists() and not (tmp_path / "home" / ".config").exists()


def test_a_workspace_outside_the_state_dir_is_made_writable_too(tmp_path, installed_jarvis):
    state, notes = tmp_path / "state", tmp_path / "notes"
    done = jarvis(tmp_path, "service", "install", "--dry-run", "--state-dir", str(state), "--workspace", str(notes))
    assert done.returncode == 0, done.stderr
    assert f"ReadWritePaths={state} {notes}" in done.stdout.splitlines()


def test_settings_from_flags_and_environment_go_into_the_unit(tmp_path, installed_jarvis):
    state, notes = tmp_path / "state", tmp_path / "notes"
    state.mkdir(mode=0o700)
    (state / "config.toml").write_text('[chat]\nmodel = "from-config"\n[server]\nhost = "127.0.0.1"\n')
    done = jarvis(
        tmp_path,
        "service",
        "install",
        "--dry-run",
        "--state-dir",
        str(state),
        "--port",
        "28789",
        "--workspace",
        str(notes),
        "--log-level",
        "debug",
        env={"JARVIS_HOST": "0.0.0.0", "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "JARVIS_CHAT_MODEL": "llama3.2"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for line in (
        f"Environment=JARVIS_STATE_DIR={state}",
        f"Environment=JARVIS_WORKSPACE={notes}",
        "Environment=JARVIS_PORT=28789",
        "Environment=JARVIS_HOST=0.0.0.0",
        "Environment=OPENAI_BASE_URL=http://127.0.0.1:11434/v1",
        "Environment=JARVIS_CHAT_MODEL=llama3.2",
        f"ExecStart={installed_jarvis} serve --log-format json --log-level debug",
        "LimitNOFILE=8192",
    ):
        assert line in lines, line
    assert not any("{{" in line for line in lines if not line.startswith("#")), "a placeholder was left"

    # What config.toml already says is not repeated; a value equal to config.toml's is not a change.
    done = jarvis(
        tmp_path, "service", "install", "--dry-run", "--state-dir", str(state), env={"JARVIS_CHAT_MODEL": "from-config"}
    )
    assert done.returncode == 0, done.stderr
    assert [ln for ln in done.stdout.splitlines() if ln.startswith("Environment=")] == [
        f"Environment=JARVIS_STATE_DIR={state}",
        "Environment=PYTHONUNBUFFERED=1",
    ]

    if shutil.which("systemd-analyze"):
        unit = tmp_path / "jarvis-gateway.service"
        text = done.stdout.split(":\n", 1)[1].split("\n# would run:", 1)[0]
        unit.write_text(text)
        runtime = tmp_path / "runtime"
        verify = subprocess.run(
            ["systemd-analyze", "--user", "verify", str(unit)],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
            timeout=60,
        )
        complaints = [ln for ln in (verify.stdout + verify.stderr).splitlines() if unit.name in ln]
        assert verify.returncode == 0 and not complaints, verify.stdout + verify.stderr


def test_a_secret_from_the_environment_is_refused_unless_the_env_file_has_it(tmp_path, installed_jarvis):
    state = tmp_path / "state"
    done = jarvis(
        tmp_path, "service", "install", "--dry-run", "--state-dir", str(state), env={"OPENAI_API_KEY": "sk-test-secret"}
    )
    assert done.returncode == 1
    assert "OPENAI_API_KEY is set in this shell" in done.stderr and ".config/jarvis/env" in done.stderr
    assert "sk-test-secret" not in done.stdout + done.stderr
    env_file = tmp_path / "home" / ".config" / "jarvis" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text("OPENAI_API_KEY=sk-test-secret\n")
    done = jarvis(
        tmp_path, "service", "install", "--dry-run", "--state-dir", str(state), env={"OPENAI_API_KEY": "sk-test-secret"}
    )
    assert done.returncode == 0, done.stderr
    assert "sk-test-secret" not in done.stdout


def test_install_refuses_a_state_dir_that_cannot_go_into_a_unit_file(tmp_path, installed_jarvis):
    done = jarvis(tmp_path, "service", "install", "--dry-run", "--state-dir", str(tmp_path / "my state"))
    assert done.returncode == 1
    assert "paths with spaces" in done.stderr and "my state" in done.stderr


def test_uninstall_and_status_dry_run_list_their_commands(tmp_path):
    done = jarvis(tmp_path, "service", "uninstall", "--dry-run")
    assert done.returncode == 0, done.stderr
    unit_path = tmp_path / "home" / ".config" / "systemd" / "user" / "jarvis-gateway.service"
    assert done.stdout.splitlines() == [
        f"# would remove {unit_path}",
        "# would run:",
        "systemctl --user disable --now jarvis-gateway",
        "systemctl --user daemon-reload",
    ]
    done = jarvis(tmp_path, "service", "status", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "systemctl --user status jarvis-gateway --no-pager --lines=20" in done.stdout.splitlines()


def test_install_without_a_reachable_user_systemd_fails_clearly_and_writes_nothing(tmp_path, installed_jarvis):
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed (the next test covers that case)")
    done = jarvis(tmp_path, "service", "install", "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 1
    assert done.stderr.startswith("jarvis service install: cannot reach your user's systemd"), done.stderr
    assert "jarvis serve" in done.stderr  # says what to do instead
    assert not (tmp_path / "home" / ".config").exists()


def test_every_service_action_without_systemctl_fails_clearly(tmp_path, installed_jarvis):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    for action in ("install", "uninstall", "status"):
        done = jarvis(tmp_path, "service", action, env={"PATH": str(empty_bin)})
        assert done.returncode == 1, (action, done.stdout, done.stderr)
        assert done.stderr.startswith(f"jarvis service {action}: systemctl not found"), done.stderr
    assert not (tmp_path / "home" / ".config").exists()
