#!/usr/bin/env python3
"""Codex CLI against a real gateway, on each route: what docs/openai-endpoint.md's Codex CLI section says.

    .venv/bin/python scripts/codex_e2e.py --codex PATH [--route offline|translate|all] [--out FILE]

PATH is the `codex` that `npm install -g --prefix DIR @openai/codex` puts in DIR/bin (tested with 0.171).
For each route, a fresh `jarvis serve` — with no upstream (the offline responder), or with
tests/fake_openai.py as an upstream that has no /v1/responses (as Ollama), scripted to call tools — and a
CODEX_HOME of its own whose custom provider (`wire_api = "responses"`) points at it. In a fresh folder:

  1. codex exec -m gpt-5.5 "add hello.txt"      translated: the model calls apply_patch (a freeform custom
                                                tool, a function upstream): hello.txt must be written
  2. codex exec -m gpt-5-codex "close the agent" translated: the model calls close_agent of the namespace
                                                multi_agent_v1: Codex must run it, not answer "unsupported call"
  3. codex exec resume --last "and another thing"
  4. sessions.list: two sessions (the runs share only Codex's developer and environment messages),
     labelled by what was asked; the resume's turn in the second

Prints each check; writes JSON (default bench-results/codex-e2e.json); exits 1 when a check fails. Needs
no network: Codex talks to the gateway only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.helpers import GatewayProcess  # noqa: E402

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello world\n*** End Patch\n"
PROVIDER = """model_provider = "jarvis"
[model_providers.jarvis]
name = "Jarvis"
base_url = "{url}/v1"
env_key = "JARVIS_TOKEN"
wire_api = "responses"
"""


def codex(binary: str, home: Path, folder: Path, token: str, *args: str) -> tuple[int, str]:
    env = {**os.environ, "CODEX_HOME": str(home), "JARVIS_TOKEN": token}
    done = subprocess.run(
        [binary, "exec", "--skip-git-repo-check", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout + done.stderr


def sessions(gw: GatewayProcess) -> list[dict[str, Any]]:
    env = {**os.environ, "JARVIS_STATE_DIR": str(gw.state_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "call", "--port", str(gw.port), "sessions.list", "{}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return json.loads(out)["sessions"]


def run_route(binary: str, route: str) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str = "") -> None:
        checks.append({"route": route, "check": name, "ok": ok, "detail": detail[-600:]})
        print(f"[{route}] {'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f"\n{detail[-600:]}"))

    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as api:
        api.responses_route = False
        api.reply = "All done here."
        home, folder, state = Path(tmp, "codex-home"), Path(tmp, "project"), Path(tmp, "state")
        for d in (home, folder, state):
            d.mkdir()
        config = f'[chat]\nbaseUrl = "{api.base_url}"\nmodel = "fake-model"\n' if route == "translate" else ""
        with GatewayProcess.running(state, config) as gw:
            assert gw.http_url is not None, "the gateway did not report its HTTP API listener"
            (home / "config.toml").write_text(PROVIDER.format(url=gw.http_url))
            translated = route == "translate"

            api.script(("tools", [("apply_patch", {"input": PATCH})]))
            rc, out = codex(
                binary, home, folder, gw.token, "-m", "gpt-5.5", "--sandbox", "workspace-write", "add hello.txt"
            )
            check("exec with apply_patch, tool_search, web_search answered", rc == 0, out)
            if translated:
                written = (folder / "hello.txt").read_text() if (folder / "hello.txt").exists() else ""
                check("apply_patch called through chat completions wrote hello.txt", written == "hello world\n", out)
            api.script(("tools", [("close_agent", {"target": "nope"})]))
            rc, out = codex(binary, home, folder, gw.token, "-m", "gpt-5-codex", "close the agent")
            check("exec with the namespace multi_agent_v1 answered", rc == 0, out)
            if translated:
                check("close_agent ran as the namespace's function", "unsupported call" not in out, out)
            rc, out = codex(
                binary, home, folder, gw.token, "-m", "gpt-5-codex", "resume", "--last", "and another thing"
            )
            check("exec resume --last answered", rc == 0, out)
            found = {s.get("label"): s for s in sessions(gw)}
            check(
                "two runs in one folder are two sessions, labelled by what was asked",
                set(found) == {"add hello.txt", "close the agent"},
                json.dumps(list(found)),
            )
            resumed = found.get("close the agent", {}).get("messageCount", 0)
            check("the resume went on in the second run's session", resumed >= 4, f"messageCount {resumed}")
    return checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--codex", required=True, help="the codex binary (npm @openai/codex)")
    ap.add_argument("--route", choices=["offline", "translate", "all"], default="all")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "codex-e2e.json"))
    args = ap.parse_args()
    version = subprocess.run([args.codex, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    print(version)
    checks = []
    for route in ("offline", "translate") if args.route == "all" else (args.route,):
        checks += run_route(args.codex, route)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"codex": version, "checks": checks}, indent=2))
    failed = [c for c in checks if not c["ok"]]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed; wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
