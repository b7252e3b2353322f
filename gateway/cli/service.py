"""`jarvis service install|uninstall|status` (the systemd user unit of cli/systemd.py) and `jarvis backup`.

jarvis service install [--dry-run]    render systemd/jarvis-gateway.service for this installation,
                                      write ~/.config/systemd/user/jarvis-gateway.service,
                                      systemctl --user daemon-reload && enable --now jarvis-gateway
jarvis service uninstall [--dry-run]  disable --now, remove the unit file, daemon-reload (state is kept)
jarvis service status [--dry-run]     systemctl --user status jarvis-gateway
jarvis backup DEST                    a consistent copy of the state dir, also while the gateway runs
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..config import Config
from .systemd import (
    EXIT_ERROR,
    EXIT_OK,
    UNIT_FILE,
    UNIT_NAME,
    Plan,
    ServiceError,
    _run,
    _write_unit,
    env_file,
    find_jarvis,
    render_unit,
    require_user_systemd,
    unit_dir,
)
from .common import _common


LINGER_NOTE = (
    "By default systemd stops your user services when your last session ends (e.g. you log out of ssh).\n"
    "To keep the gateway running without a login, and start it at boot, enable lingering once:\n"
    "    loginctl enable-linger $USER     (may ask for your password or need sudo)\n"
)


def cmd_install(args: argparse.Namespace, config: Config) -> int:
    jarvis = find_jarvis()
    unit_path = unit_dir() / UNIT_FILE
    plan = Plan(
        [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "--now", UNIT_NAME]],
        unit_path,
        render_unit(config, jarvis),
    )
    if args.dry_run:
        plan.show()
        print("# and to keep it running without a login session:\nloginctl enable-linger $USER")
        return EXIT_OK
    require_user_systemd()
    # ReadWritePaths= must exist when the service starts, or systemd refuses to start it.
    from ..fsutil import ensure_private_dir

    ensure_private_dir(config.state_dir)
    config.workspace_dir.mkdir(parents=True, exist_ok=True)
    _write_unit(unit_path, plan.unit_text or "")
    print(f"wrote {unit_path}")
    for cmd in plan.commands:
        _run(cmd)
    print(
        f"\nJarvis Gateway is installed and started as the user service {UNIT_NAME}.\n"
        f"  status:  systemctl --user status {UNIT_NAME}\n"
        f"  logs:    journalctl --user -u {UNIT_NAME} -f\n"
        f"  secrets: put OPENAI_API_KEY=… into {env_file()} (mode 0600), then "
        f"systemctl --user restart {UNIT_NAME}\n"
    )
    print(LINGER_NOTE, end="")
    return EXIT_OK


def cmd_uninstall(args: argparse.Namespace, config: Config) -> int:
    unit_path = unit_dir() / UNIT_FILE
    plan = Plan(
        [["systemctl", "--user", "disable", "--now", UNIT_NAME], ["systemctl", "--user", "daemon-reload"]], unit_path
    )
    if args.dry_run:
        plan.show()
        return EXIT_OK
    require_user_systemd()
    _run(plan.commands[0])
    unit_path.unlink(missing_ok=True)
    print(f"removed {unit_path}")
    _run(plan.commands[1])
    print(f"The state directory {config.state_dir} was left as it is.")
    return EXIT_OK


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    cmd = ["systemctl", "--user", "status", UNIT_NAME, "--no-pager", "--lines=20"]
    if args.dry_run:
        Plan([cmd]).show()
        return EXIT_OK
    require_user_systemd()
    unit_path = unit_dir() / UNIT_FILE
    if not unit_path.exists():
        print(f"{UNIT_NAME} is not installed (no {unit_path}); run `jarvis service install`.")
        return EXIT_ERROR
    done = subprocess.run(cmd)
    print(f"\nlogs: journalctl --user -u {UNIT_NAME} -f")
    return EXIT_OK if done.returncode == 0 else EXIT_ERROR  # systemctl status: 3 = not running


def _service(args: argparse.Namespace, config: Config) -> int:
    actions = {"install": cmd_install, "uninstall": cmd_uninstall, "status": cmd_status}
    try:
        return actions[args.action](args, config)
    except ServiceError as exc:
        print(f"jarvis service {args.action}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _backup(args: argparse.Namespace, config: Config) -> int:
    from .backup import BackupError, backup_state

    try:
        report = backup_state(config, Path(args.dest))
    except BackupError as exc:
        print(f"jarvis backup: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(report.summary())
    return EXIT_OK


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "service",
        help="install, remove or inspect the systemd user service",
        description="Run the gateway as a systemd user service (see docs/operations.md).",
    )
    p.add_argument(
        "action",
        choices=("install", "uninstall", "status"),
        help="install: write the unit and enable --now; uninstall: disable and remove it "
        "(state is kept); status: systemctl --user status",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the rendered unit and the commands instead of running them"
    )
    _common(p)
    p.set_defaults(handler=_service)

    p = sub.add_parser(
        "backup",
        help="copy the state dir consistently (also while the gateway runs)",
        description="Copy config.toml, gateway.token, session metadata and transcripts, the "
        "memory files and the memory index (SQLite online backup) into DEST, "
        "a new directory. Restore: see docs/operations.md.",
    )
    p.add_argument("dest", help="a directory that does not exist yet (or is empty)")
    _common(p)
    p.set_defaults(handler=_backup)
