"""Config layering and validation; the CLI as a user runs it."""

import os
import subprocess
import sys

import orjson
import pytest

from gateway.config import ConfigError, load_config
from tests.helpers import ROOT, GatewayProcess, connect_client


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


def test_layers_file_then_env_then_flags(tmp_path):
    (tmp_path / "config.toml").write_text('[server]\nport = 1111\nhost = "127.0.0.2"\n[chat]\nmodel = "from-file"\n')
    cfg = load_config({"stateDir": str(tmp_path)}, env={"JARVIS_PORT": "2222", "JARVIS_CHAT_MODEL": "from-env"})
    assert (cfg.server.host, cfg.server.port, cfg.chat.model) == ("127.0.0.2", 2222, "from-env")
    cfg = load_config({"stateDir": str(tmp_path), "server.port": 3333}, env={"JARVIS_PORT": "2222"})
    assert cfg.server.port == 3333
    assert cfg.chat_provider == "offline"
    assert load_config({"stateDir": str(tmp_path)}, env={"OPENAI_BASE_URL": "http://x/v1"}).chat_provider == "openai"
    assert cfg.workspace_dir == tmp_path / "workspace" and cfg.memory_db() == tmp_path / "agents/main/memory.sqlite"


@pytest.mark.parametrize(
    "toml,key",
    [
        ("[server]\nport = 'x'\n", "server.port: must be an integer"),
        ("[server]\nport = 70000\n", "server.port: must be <= 65535"),
        ("[server]\nprot = 1\n", "server.prot: unknown key, did you mean 'port'?"),
        ("[chat]\nhistroyMessages = 5\n", "chat.histroyMessages: unknown key, did you mean 'historyMessages'?"),
        ("[chat]\nbaseURL = 'http://x/v1'\n", "chat.baseURL: unknown key, did you mean 'baseUrl'?"),
        ("[chat]\ndiscoverPorts = [11434, 0]\n", "chat.discoverPorts[1]: must be >= 1"),
        ("[chat]\ndiscoverPorts = ['x']\n", "chat.discoverPorts[0]: must be an integer"),
        ("[chat]\ndiscoverPorts = 11434\n", "chat.discoverPorts: must be a list of at most 64 port numbers"),
        ("[memory.search]\nmode = 'magic'\n", "memory.search.mode: must be one of"),
        ("server = 3\n", "server: must be a table"),
        ("[memory.chunking]\ntokens = 100\noverlap = 100\n", "memory.chunking.overlap"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_invalid_config_names_the_key(tmp_path, toml, key):
    (tmp_path / "config.toml").write_text(toml)
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("(", r"\(")):
        load_config({"stateDir": str(tmp_path)}, env={})


def test_an_unknown_key_far_from_any_says_only_what_is_known(tmp_path):
    (tmp_path / "config.toml").write_text("[chat]\nzzzz = 1\n")
    with pytest.raises(ConfigError) as err:
        load_config({"stateDir": str(tmp_path)}, env={})
    assert "did you mean" not in str(err.value) and "(known here: " in str(err.value)


def test_discovery_settings_from_the_environment(tmp_path):
    cfg = load_config({"stateDir": str(tmp_path)}, env={"JARVIS_CHAT_DISCOVER": "false"})
    assert cfg.chat.discover is False and not cfg.discovers
    cfg = load_config({"stateDir": str(tmp_path), "chat.discoverPorts": "11434, 8080"}, env={})
    assert cfg.chat.discover_ports == [11434, 8080] and cfg.discovers
    assert not load_config({"stateDir": str(tmp_path)}, env={"OPENAI_BASE_URL": "http://x/v1"}).discovers
    assert not load_config({"stateDir": str(tmp_path), "chat.provider": "offline"}, env={}).discovers


def test_cli_invalid_config_exits_2_with_the_key(tmp_path):
    r = jarvis("serve", state_dir=tmp_path, env={"JARVIS_PORT": "many"})
    assert r.returncode == 2 and "server.port: must be an integer" in r.stderr


def test_cli_token_call_follow_and_rotate(tmp_path):
    (tmp_path / "config.toml").write_text("[memory]\nenabled = false\n")
    gp = GatewayProcess(tmp_path).start()
    try:
        port = str(gp.port)
        token = jarvis("token", state_dir=tmp_path).stdout.strip()
        assert token == gp.token and len(token) >= 32
        assert oct((tmp_path / "gateway.token").stat().st_mode & 0o777) == "0o600"
        r = jarvis("call", "sessions.create", '{"label":"cli"}', "--port", port, state_dir=tmp_path)
        assert r.returncode == 0, r.stderr
        key = orjson.loads(r.stdout)["sessionKey"]
        r = jarvis(
            "call",
            "chat.send",
            orjson.dumps({"sessionKey": key, "message": "from cli"}).decode(),
            "--follow",
            "--port",
            port,
            state_dir=tmp_path,
        )
        assert r.returncode == 0, r.stderr
        assert '"method": "chat.delta"' in r.stdout and r.stdout.rstrip().endswith("}")
        assert '"method": "chat.final"' in r.stdout
        r = jarvis("call", "sessions.get", '{"sessionKey":"nope"}', "--port", port, state_dir=tmp_path)
        assert r.returncode == 1 and "-32004" in r.stderr
        r = jarvis("call", "sessions.get", "{bad", "--port", port, state_dir=tmp_path)
        assert r.returncode == 2 and "not valid JSON" in r.stderr

        new = jarvis("token", "--rotate", state_dir=tmp_path).stdout.strip()
        assert new != token
        r = jarvis("call", "system.health", "--port", port, state_dir=tmp_path)
        assert r.returncode == 0, "the running gateway accepts the rotated token"
        log = gp.log.read_text()
        assert token not in log and new not in log, "tokens never reach the log"
    finally:
        gp.signal()
        assert gp.wait(20) == 0


def test_cli_call_without_gateway_exits_3_and_says_how_to_start_it(tmp_path):
    jarvis("token", state_dir=tmp_path)
    r = jarvis("call", "system.health", "--port", "1", state_dir=tmp_path)
    assert r.returncode == 3 and r.stderr.strip().splitlines() == [
        "jarvis: the gateway is not running at ws://127.0.0.1:1/ (connection refused): start it with "
        "`jarvis serve` (./scripts/serve in a checkout), or point at a running one with --url"
    ]
    assert "Errno" not in r.stderr


async def test_wrong_token_after_rotation_is_refused(tmp_path):
    (tmp_path / "config.toml").write_text("[memory]\nenabled = false\n")
    gp = GatewayProcess(tmp_path).start()
    try:
        old = gp.token
        jarvis("token", "--rotate", state_dir=tmp_path)
        with pytest.raises(AssertionError):
            await connect_client(gp.url, old)
        c = await connect_client(gp.url, gp.token)
        assert (await c.call("system.health"))["status"] == "ok"
        await c.close()
    finally:
        gp.kill()


def test_memory_commands_take_the_shared_flags_after_the_subcommand(tmp_path):
    ws = tmp_path / "notes"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "garden.md").write_text("# Garden\n\nThe tomatoes go in the greenhouse in May.\n")
    other = tmp_path / "elsewhere"  # JARVIS_STATE_DIR points here; the flag must win
    r = jarvis("memory", "sync", "--state-dir", str(tmp_path / "state"), "--workspace", str(ws), state_dir=other)
    assert r.returncode == 0, r.stderr
    r = jarvis(
        "memory",
        "search",
        "tomatoes greenhouse",
        "--json",
        "--state-dir",
        str(tmp_path / "state"),
        "--workspace",
        str(ws),
        state_dir=other,
    )
    assert r.returncode == 0, r.stderr
    result = orjson.loads(r.stdout)
    assert result["results"][0]["path"] == "memory/garden.md" and result["mode"] == "hybrid"
    assert (tmp_path / "state" / "agents" / "main" / "memory.sqlite").exists() and not other.exists()


def test_config_prints_toml_that_loads_back_to_the_same_config(tmp_path):
    import dataclasses
    import tomllib

    state, ws = tmp_path / "state", tmp_path / "notes"
    state.mkdir()
    (state / "config.toml").write_text(
        '[server]\nallowedOrigins = ["http://my-laptop:18789"]\nshutdownGrace = 7.5\n'
        '[chat]\nsystemPrompt = "Say \\"hi\\"\\nthen\\tstop \\\\ ok"\n[memory.search]\nmmr = true\nrrfK = 30\n'
        "[memory.backend.qmd]\ntimeoutMs = 500\n"
    )
    env = {"JARVIS_PORT": "28789", "JARVIS_CHAT_MODEL": "llama3.2", "OPENAI_API_KEY": "", "JARVIS_CHAT_DISCOVER": ""}
    r = jarvis("config", "--workspace", str(ws), state_dir=state, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = r.stdout
    assert f"# state dir in use: {state}" in out
    settings = [line for line in out.splitlines() if line and not line.startswith(("#", "["))]
    for line in settings:
        key, value = (part.strip() for part in line.split("=", 1))
        assert "_" not in key, f"snake_case key: {line}"
        assert not any(lit in value.split("  #")[0] for lit in ("True", "False", "None", "PosixPath")), line
    parsed = tomllib.loads(out)
    assert parsed["server"]["port"] == 28789 and parsed["chat"]["model"] == "llama3.2"
    assert parsed["workspace"] == str(ws) and parsed["memory"]["backend"]["qmd"]["timeoutMs"] == 500

    # Fed back as config.toml (with nothing from the environment) it is the same configuration.
    again = tmp_path / "again"
    again.mkdir()
    (again / "config.toml").write_text(out)
    from gateway.config import load_config

    original = load_config({"stateDir": str(state), "workspace": str(ws)}, env=env)
    reloaded = load_config({"stateDir": str(again)}, env={})
    assert dataclasses.replace(reloaded, state_dir=original.state_dir) == original

    # Without a workspace setting, the default one is shown as a comment, never `workspace = null`.
    r = jarvis("config", state_dir=state)
    assert f'# workspace = "{state / "workspace"}"' in r.stdout and "null" not in r.stdout

    r = jarvis("config", "--json", state_dir=state, env={"JARVIS_GATEWAY_TOKEN": "sk-secret-0123456789"})
    assert r.returncode == 0, r.stderr
    data = orjson.loads(r.stdout)
    assert data["stateDir"] == str(state) and data["workspace"] == str(state / "workspace")
    assert data["server"]["allowedOrigins"] == ["http://my-laptop:18789"] and data["memory"]["search"]["rrfK"] == 30
    assert data["token"] == "(set)" and "sk-secret" not in r.stdout
    r = jarvis("config", state_dir=state, env={"JARVIS_GATEWAY_TOKEN": "sk-secret-0123456789"})
    assert "# token = (set, hidden)" in r.stdout and "sk-secret" not in r.stdout


def test_config_defaults_lists_every_key_with_its_default_and_doc(tmp_path):
    import tomllib

    from gateway.config import describe

    r = jarvis("config", "--defaults", state_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "port = 18789  # 0 picks a free port; allowed: 0 to 65535" in r.stdout.splitlines()
    lines = r.stdout.splitlines()  # each number's bounds as declared, beside its default
    assert (
        "pingInterval = 20.0  # seconds between keepalive pings (and to wait for the pong); 0 disables them; "
        "allowed: 0 (off) or at least 1" in lines
    )
    mode = next(line for line in r.stdout.splitlines() if line.startswith('mode = "hybrid"  # '))
    assert mode.endswith("; one of hybrid, fts, vector")  # what it does, then its choices
    tomllib.loads(r.stdout)
    r = jarvis("config", "--defaults", "--json", state_dir=tmp_path)
    data = orjson.loads(r.stdout)
    assert set(data) == {key for key, _, _ in describe()} - {"stateDir"}
    defaults = {key: default for key, default, _ in describe()}
    assert data["memory.search.rrfK"]["default"] == defaults["memory.search.rrfK"]
    assert data["server.allowedOrigins"] == {"default": [], "doc": "extra browser Origins allowed to connect"}
    assert (data["server.port"]["min"], data["server.port"]["max"]) == (0, 65535)
    assert data["server.pingInterval"]["onFrom"] == 1.0 and "max" not in data["server.pingInterval"]
