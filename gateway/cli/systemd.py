"""The systemd user unit: render it for this installation (every setting that came from flags or the
environment, LimitNOFILE, placeholders systemd cannot misread), find where it goes, run systemctl.

The `jarvis service install|uninstall|status` and `jarvis backup` commands built on this are in
gateway/cli/service.py. Every command checks first that a user systemd is reachable and says so
plainly (exit 1) when it is not; `--dry-run` prints the unit and the commands instead.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config

UNIT_NAME = "jarvis-gateway"
UNIT_FILE = f"{UNIT_NAME}.service"
# gateway/jarvis-gateway.service links to systemd/ in a checkout and is a copy in a wheel.
TEMPLATE = Path(__file__).parent.parent / UNIT_FILE
EXIT_OK, EXIT_ERROR = 0, 1
# On SIGTERM the gateway gives running chats server.shutdownGrace, then up to 5 s to save the replies it
# aborted, up to 5 s for sockets to close and up to 5 s for the server to wind down, then closes the
# index. systemd must wait longer.
STOP_MARGIN_S = 25


class ServiceError(Exception):
    """Something the operator must fix; the message says what."""


# ---- rendering ---------------------------------------------------------------------------------
def find_jarvis() -> Path:
    """The absolute path of this installation's `jarvis` executable."""
    beside_python = Path(sys.executable).parent / "jarvis"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return beside_python.absolute()
    found = shutil.which("jarvis")
    if found:
        return Path(found).absolute()
    raise ServiceError(
        f"cannot find the `jarvis` executable of this installation (looked beside {sys.executable} and on "
        "PATH); install the package into its virtualenv first, e.g. `pip install .` or ./scripts/serve"
    )


def unit_dir() -> Path:
    """Where systemd looks for the user's own units: $XDG_CONFIG_HOME/systemd/user."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "systemd" / "user"


def _unit_path_value(path: Path) -> str:
    text = str(path)
    if any(c.isspace() or c in "\"'\\" for c in text):
        raise ServiceError(
            f"{text}: paths with spaces, quotes or backslashes cannot go into the unit file; "
            "use a plain path (e.g. --state-dir ~/.jarvis)"
        )
    return text.replace("%", "%%")  # '%' starts a systemd specifier


def _is_within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


# Settings with an environment variable of their own go into the unit as Environment= lines when a
# flag or the environment sets them; secrets never do (they belong in ~/.config/jarvis/env).
SECRET_VARS = ("JARVIS_GATEWAY_TOKEN", "OPENAI_API_KEY")


def env_file() -> Path:
    return Path.home() / ".config" / "jarvis" / "env"


def _env_file_keys(path: Path) -> set[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return set()
    keys = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            keys.add(line.split("=", 1)[0].strip().removeprefix("export ").strip())
    return keys


def _setting(config: Config, dotted: str) -> Any:
    obj: Any = config
    for part in dotted.split("."):
        obj = getattr(obj, _snake(part))
    return obj


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def unit_settings(config: Config) -> tuple[dict[str, str], list[str]]:
    """What `jarvis serve` in this shell would use but the service, reading only config.toml and
    ~/.config/jarvis/env, would not: (Environment= variables for the unit, extra `serve` flags).

    A setting counts when its effective value differs from what config.toml alone gives. Secrets that
    differ raise ServiceError unless the env file sets them (the service then reads them there)."""
    from ..config import ENV_VARS, load_config

    file_only = load_config({"stateDir": str(config.state_dir)}, env={})
    variables: dict[str, str] = {}
    in_env_file = _env_file_keys(env_file())
    for var, key in ENV_VARS.items():
        if key == "stateDir":
            continue  # always written: Environment=JARVIS_STATE_DIR=
        value, base = _setting(config, key), _setting(file_only, key)
        if key == "workspace":
            value, base = config.workspace_dir, file_only.workspace_dir
        if value == base:
            continue
        if var in SECRET_VARS:
            if var in in_env_file:
                continue
            raise ServiceError(
                f"{var} is set in this shell, so `jarvis serve` here would use it, but the service would not: "
                f"secrets never go into the unit file. Put it into {env_file()} (mode 0600), e.g.\n"
                f"    install -d -m 700 {env_file().parent} && echo '{var}=…' >> {env_file()} "
                f"&& chmod 600 {env_file()}\n"
                f"or unset it for this command (env -u {var} jarvis service install)"
            )
        if isinstance(value, Path):
            text = _unit_path_value(value.expanduser().absolute())
        else:
            text = _unit_env_value(var, str(value))
        variables[var] = text
    flags = ["--log-format", config.log_format if config.log_format != "auto" else "json"]
    if config.log_level != file_only.log_level:
        flags += ["--log-level", config.log_level]
    return variables, flags


def _unit_env_value(var: str, value: str) -> str:
    if any(c in value for c in "\"'\\\n") or any(c.isspace() for c in value):
        raise ServiceError(
            f"{var}={value!r}: values with spaces, quotes or backslashes cannot go into the unit "
            f"file; put {var} into {env_file()} instead"
        )
    return value.replace("%", "%%")


def render_unit(config: Config, jarvis: Path, template: Path = TEMPLATE) -> str:
    """The unit text for this installation: template placeholders replaced by absolute paths, and
    every setting that came from flags or the environment written into the unit."""
    try:
        text = template.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ServiceError(
            f"unit template not found at {template}; install jarvis from a source checkout "
            f"(pip install -e .) so that systemd/{UNIT_FILE} is available"
        ) from None
    state_dir = config.state_dir.expanduser().absolute()
    writable = [state_dir]
    workspace = config.workspace_dir.expanduser().absolute()
    if not _is_within(workspace, state_dir):
        writable.append(workspace)
    variables, flags = unit_settings(config)
    values = {
        "{{JARVIS}}": _unit_path_value(jarvis),
        "{{SERVE_ARGS}}": " ".join(flags),
        "{{STATE_DIR}}": _unit_path_value(state_dir),
        "{{ENVIRONMENT}}": "\n".join(f"Environment={k}={v}" for k, v in variables.items()),
        "{{READ_WRITE_PATHS}}": " ".join(_unit_path_value(p) for p in writable),
        "{{TIMEOUT_STOP_SEC}}": str(math.ceil(config.server.shutdown_grace) + STOP_MARGIN_S),
    }
    # The template's leading comment explains the placeholders to people editing it by hand.
    _, _, body = text.partition("\n\n")
    text = (
        f"# Rendered by `jarvis service install` from {UNIT_FILE} for {values['{{JARVIS}}']}.\n"
        "# Re-run `jarvis service install` after moving the installation or the state directory.\n"
        "# Settings given to `install` by flags or environment are the Environment= lines below;\n"
        "# the others come from <stateDir>/config.toml.\n"
        "# Secrets (OPENAI_API_KEY=…) go into ~/.config/jarvis/env (mode 0600), not here.\n\n" + body
    )
    for placeholder, value in values.items():
        if placeholder == "{{ENVIRONMENT}}" and not value:
            text = text.replace(placeholder + "\n", "")
        text = text.replace(placeholder, value)
    return text


# ---- systemctl ---------------------------------------------------------------------------------
@dataclass
class Plan:
    """What a command will do: shown as is by --dry-run, run otherwise."""

    commands: list[list[str]]
    unit_path: Path | None = None
    unit_text: str | None = None

    def show(self) -> None:
        if self.unit_text is not None:
            print(f"# would write {self.unit_path}:")
            print(self.unit_text.rstrip("\n"))
            print()
        elif self.unit_path is not None:
            print(f"# would remove {self.unit_path}")
        print("# would run:")
        for cmd in self.commands:
            print(shlex.join(cmd))


def require_user_systemd() -> None:
    """Raise ServiceError unless `systemctl --user` exists and can reach the user's service manager."""
    if shutil.which("systemctl") is None:
        raise ServiceError(
            "systemctl not found: this system does not run systemd, so there is no user "
            "service manager; run `jarvis serve` under your own supervisor instead"
        )
    try:
        probe = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        raise ServiceError("`systemctl --user` did not answer within 15 s") from None
    if probe.returncode != 0:
        why = (probe.stderr or probe.stdout).strip().splitlines()
        raise ServiceError(
            "cannot reach your user's systemd (`systemctl --user` failed: "
            f"{why[-1] if why else f'exit {probe.returncode}'}). Log in through a session that starts "
            "`systemd --user` (ssh or a desktop login, not `su`/`sudo -u`; XDG_RUNTIME_DIR must be set), "
            "or in a container without systemd run `jarvis serve` under your own supervisor"
        )


def _run(cmd: list[str]) -> None:
    print(f"$ {shlex.join(cmd)}", flush=True)
    done = subprocess.run(cmd)
    if done.returncode != 0:
        raise ServiceError(f"`{shlex.join(cmd)}` failed with exit code {done.returncode}")


def _write_unit(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
