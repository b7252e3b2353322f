"""`jarvis token create|list|revoke` and `jarvis audit`: in process on a state dir, and through a running
gateway (the CLI's one path), with the token shown once and only its hash kept."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys

import orjson

from tests.helpers import ROOT, GatewayProcess


def jarvis(*args, state_dir, port=None):
    env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir)}
    extra = ["--port", str(port)] if port else []
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args, *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_token_create_list_revoke_in_process(tmp_path):
    state = tmp_path / "state"
    r = jarvis(
        "token",
        "create",
        "phone",
        "--agent",
        "main",
        "--scope",
        "read,chat",
        "--expires",
        "30d",
        "--json",
        state_dir=state,
    )
    assert r.returncode == 0, r.stderr
    made = orjson.loads(r.stdout)
    token, p = made["token"], made["principal"]
    assert len(token) >= 43 and p["name"] == "phone" and p["agents"] == ["main"] and p["scopes"] == ["read", "chat"]
    stored = (state / "principals.jsonl").read_text()
    assert token not in stored and hashlib.sha256(token.encode()).hexdigest() in stored  # the hash only
    assert oct((state / "principals.jsonl").stat().st_mode & 0o777) == "0o600"
    r = jarvis("token", "list", state_dir=state)
    assert r.returncode == 0 and re.search(r"^phone\s+main\s+read,chat\s", r.stdout, re.M), r.stdout
    assert token not in r.stdout
    r = jarvis("token", "create", "phone", "--agent", "main", "--scope", "read", state_dir=state)
    assert r.returncode == 1 and "exists" in r.stderr
    r = jarvis("token", "create", "x", "--agent", "main", "--scope", "root", state_dir=state)
    assert r.returncode == 2 and "unknown scope 'root'" in r.stderr
    r = jarvis("token", "create", "x", "--agent", "main", "--scope", "read", "--expires", "yesterday", state_dir=state)
    assert r.returncode == 2 and "expires" in r.stderr
    r = jarvis("token", "revoke", "owner", state_dir=state)
    assert r.returncode == 2 and "rotate" in r.stderr  # the owner is the last admin
    r = jarvis("token", "revoke", "phone", state_dir=state)
    assert r.returncode == 0, r.stderr
    r = jarvis("token", "revoke", "phone", state_dir=state)
    assert r.returncode == 1 and "no principal named 'phone'" in r.stderr
    listed = orjson.loads(jarvis("token", "list", "--json", state_dir=state).stdout)["principals"]
    assert [(p["name"], bool(p.get("revoked"))) for p in listed] == [("owner", False), ("phone", True)]


def test_a_hand_edited_principal_file_keeps_the_good_lines(tmp_path):
    state = tmp_path / "state"
    assert jarvis("token", "create", "tablet", "--agent", "*", "--scope", "read", state_dir=state).returncode == 0
    path = state / "principals.jsonl"
    path.write_text("garbage {\n" + path.read_text() + '{"name": "bad name!", "tokenHash": "00"}\n')
    listed = orjson.loads(jarvis("token", "list", "--json", state_dir=state).stdout)["principals"]
    assert [p["name"] for p in listed] == ["owner", "tablet"]


def test_token_commands_go_through_a_running_gateway(tmp_path):
    state = tmp_path / "state"
    with GatewayProcess.running(state) as gp:
        r = jarvis(
            "token", "create", "laptop", "--agent", "main", "--scope", "admin", "--json", state_dir=state, port=gp.port
        )
        assert r.returncode == 0, r.stderr
        names = [
            p["name"]
            for p in orjson.loads(jarvis("token", "list", "--json", state_dir=state, port=gp.port).stdout)["principals"]
        ]
        assert names == ["owner", "laptop"]
        r = jarvis("audit", "--json", state_dir=state, port=gp.port)
        assert r.returncode == 0 and "entries" in orjson.loads(r.stdout)


def test_a_principal_token_given_to_the_cli_acts_as_that_principal_in_process(tmp_path):
    """`jarvis …` with no gateway answering: a principal's token (JARVIS_GATEWAY_TOKEN) is that
    principal, its scopes and agents, as through the gateway; without one the state dir's holder is the
    owner."""
    state = tmp_path / "state"
    r = jarvis("token", "create", "ro", "--agent", "main", "--scope", "read", "--json", state_dir=state)
    assert r.returncode == 0, r.stderr
    token = orjson.loads(r.stdout)["token"]
    env = {**os.environ, "JARVIS_STATE_DIR": str(state), "JARVIS_GATEWAY_TOKEN": token, "JARVIS_MEMORY_ENABLED": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "token", "create", "sneaky", "--agent", "*", "--scope", "admin"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "needs the 'admin' scope" in r.stderr, (r.returncode, r.stderr)
    r = jarvis("token", "list", "--json", state_dir=state)
    assert [p["name"] for p in orjson.loads(r.stdout)["principals"]] == ["owner", "ro"]
    audit = orjson.loads(jarvis("audit", "--json", state_dir=state).stdout)["entries"]
    assert [(e["principal"], e["method"], e["door"], e["ok"]) for e in audit] == [
        ("owner", "principals.create", "cli", True),
        ("ro", "principals.create", "cli", False),
    ]


def _as(token: str, *args, state_dir, port=None):
    env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir), "JARVIS_GATEWAY_TOKEN": token}
    extra = ["--port", str(port)] if port else []
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args, *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


REFUSED = "gateway refused the connection: HTTP 401 (wrong token?)"


def test_a_token_the_gateway_refuses_is_refused_in_process_too(tmp_path):
    """Issue 43 item 5: before, `JARVIS_GATEWAY_TOKEN=<revoked or unknown> jarvis memory set x y` wrote (exit
    0) and the audit said `owner` — the gateway's 401 made the command run in process, where an unknown
    token was the owner. Now a refused token exits 3 with the words `jarvis chat` says, with a gateway
    running and without one, and nothing is written; a command given no token is still the owner."""
    state = tmp_path / "state"
    r = jarvis("token", "create", "old", "--agent", "main", "--scope", "read,write", "--json", state_dir=state)
    revoked = orjson.loads(r.stdout)["token"]
    assert jarvis("token", "revoke", "old", state_dir=state).returncode == 0
    unknown = "x" * 43
    # A state dir whose gateway token is only configured (JARVIS_GATEWAY_TOKEN, no gateway.token yet: the
    # deployment of docs/operations.md): that token is the gateway's own, so it is the owner in process,
    # as the gateway would take it; a revoked principal's token is refused all the same.
    assert not (state / "gateway.token").exists()
    r = _as(revoked, "memory", "set", "hijacked", "by a refused token", state_dir=state)
    assert r.returncode == 3 and REFUSED in r.stderr, r.stderr
    commands = [
        ("memory", "set", "hijacked", "by a refused token"),
        ("token", "create", "sneaky", "--agent", "*", "--scope", "admin"),
        ("audit",),
    ]
    with GatewayProcess.running(state) as gp:  # it writes gateway.token: the state dir's own token
        for token in (revoked, unknown):
            for command in [*commands, ("sessions", "list")]:
                r = _as(token, *command, state_dir=state, port=gp.port)
                assert r.returncode == 3 and REFUSED in r.stderr, ("gateway", command, r.returncode, r.stderr)
        r = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "chat", "hello", "--port", str(gp.port)],
            cwd=ROOT,
            env={**os.environ, "JARVIS_STATE_DIR": str(state), "JARVIS_GATEWAY_TOKEN": unknown},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 3 and r.stderr.strip() == f"jarvis chat: {REFUSED}", "the same words as jarvis chat"
    for token in (revoked, unknown):
        for command in commands:
            r = _as(token, *command, state_dir=state)  # no gateway: in process
            assert r.returncode == 3 and REFUSED in r.stderr, ("in process", command, r.returncode, r.stderr)
    # Nothing was written, and the audit names no one acting for a refused token.
    r = jarvis("memory", "get", "hijacked", state_dir=state)
    assert r.returncode == 1, r.stdout
    audit = orjson.loads(jarvis("audit", "--json", state_dir=state).stdout)["entries"]
    assert [(e["principal"], e["method"]) for e in audit] == [
        ("owner", "principals.create"),
        ("owner", "principals.revoke"),
    ]
    # The state dir's own token, given explicitly, is the owner; so is a command given none.
    own = (state / "gateway.token").read_text().strip()
    assert _as(own, "memory", "set", "mine", "by the owner", state_dir=state).returncode == 0
    assert jarvis("memory", "get", "mine", state_dir=state).returncode == 0


def test_an_admin_of_one_agent_makes_no_wider_key_in_process_either(tmp_path):
    """Issue 43 item 1 at the CLI door (in process, the state dir's principals): an admin of main is
    refused '*', another agent and proxy, with the rule in the message; a key within it is made."""
    state = tmp_path / "state"
    r = jarvis("token", "create", "adm", "--agent", "main", "--scope", "admin", "--json", state_dir=state)
    adm = orjson.loads(r.stdout)["token"]
    for agent, scope, says in (
        ("*", "read", "'*'"),
        ("side", "read", "'side'"),
        ("main", "chat,proxy", "'proxy'"),
    ):
        r = _as(adm, "token", "create", "wide", "--agent", agent, "--scope", scope, "--new-agent", state_dir=state)
        assert r.returncode == 1 and says in r.stderr, (agent, scope, r.stderr)
    r = _as(adm, "token", "create", "kid", "--agent", "main", "--scope", "read,chat", state_dir=state)
    assert r.returncode == 0, r.stderr
    names = [p["name"] for p in orjson.loads(jarvis("token", "list", "--json", state_dir=state).stdout)["principals"]]
    assert names == ["owner", "adm", "kid"]


def test_jarvis_audit_says_who_answered_a_confirmation_and_who_allowed_a_call(capsys):
    from gateway.cli.access import _show_audit

    at = "2030-01-01T00:00:00.000Z"
    _show_audit(
        {
            "entries": [
                {
                    "at": at,
                    "principal": "writer",
                    "method": "chat.confirm",
                    "door": "websocket",
                    "agent": "main",
                    "target": "run-1",
                    "ok": True,
                    "allow": True,
                    "runPrincipal": "phone",
                },
                {
                    "at": at,
                    "principal": "phone",
                    "method": "memory.delete",
                    "door": "tool",
                    "agent": "main",
                    "target": "boat",
                    "ok": True,
                    "confirmedBy": "writer",
                },
            ]
        }
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("chat.confirm [main] run-1 (allowed for phone's run)")
    assert out[1].endswith("memory.delete [main] boat (allowed by writer)")
