"""README "Use a local model": the config it shows, run as written against the fake OpenAI-compatible server
(tests/fake_openai.py) standing in for Ollama, with `jarvis chat` as the README says to check it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import orjson

from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, GatewayProcess

OLLAMA = "http://127.0.0.1:11434/v1"


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Use a local model\n", 1)[1].split("\n## ", 1)[0]


def jarvis(*args, state_dir):
    env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir)}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_readme_config_for_a_local_model_works(tmp_path):
    section = readme_section()
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    assert OLLAMA in toml
    state = tmp_path / "state"
    (state / "workspace").mkdir(parents=True)
    (state / "workspace" / "MEMORY.md").write_text("# Me\n\nMy bicycle is a green Dutch roadster.\n")
    with FakeOpenAI() as api:
        api.reply = "Your bicycle is green."
        with GatewayProcess.running(state, toml.replace(OLLAMA, api.base_url)) as gp:
            r = jarvis("chat", "What colour is my bicycle?", "--new", "--port", str(gp.port), state_dir=state)
            assert r.returncode == 0, r.stderr
            assert r.stdout.startswith("Your bicycle is green.\n")
            assert "sources: MEMORY.md:" in r.stdout  # recalled through the server's embeddings
            health = orjson.loads(jarvis("call", "system.health", "--port", str(gp.port), state_dir=state).stdout)
            assert health["chat"] == {
                "provider": "openai",
                "model": "llama3.2",
                "baseUrl": api.base_url,
                "discovered": False,  # configured: a configured model always wins
            }
        chats = [q["body"] for q in api.requests if q["path"] == "/v1/chat/completions"]
        embeds = [q["body"] for q in api.requests if q["path"] == "/v1/embeddings"]
        assert chats and all(b["model"] == "llama3.2" for b in chats)
        assert embeds and all(b["model"] == "nomic-embed-text" for b in embeds)


def test_the_readme_environment_variant(tmp_path):
    """(The error when the server is down is checked word for word in test_chat_cli.py.)"""
    section = readme_section()
    line = re.search(r"`(OPENAI_BASE_URL=\S+ JARVIS_CHAT_MODEL=\S+) \./scripts/serve`", section).group(1)
    env = dict(pair.split("=", 1) for pair in line.split())
    assert env["OPENAI_BASE_URL"] == OLLAMA
    state = tmp_path / "state"
    with FakeOpenAI() as api:
        env["OPENAI_BASE_URL"] = api.base_url
        with GatewayProcess.running(state, "[memory]\nenabled = false\n[chat]\nmaxRetries = 0\n", env=env) as gp:
            port = str(gp.port)
            r = jarvis("chat", "hello", "--new", "--port", port, state_dir=state)
            assert r.returncode == 0 and r.stdout.startswith(api.reply), r.stderr
            health = orjson.loads(jarvis("call", "system.health", "--port", port, state_dir=state).stdout)
            assert health["chat"] == {
                "provider": "openai",
                "model": "llama3.2",
                "baseUrl": api.base_url,
                "discovered": False,
            }


async def test_an_unreachable_embedding_server_is_named_with_the_reason(tmp_path):
    import socket

    from tests.helpers import RunningGateway, make_config

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    state = tmp_path / "state"
    (state / "workspace").mkdir(parents=True)
    (state / "workspace" / "MEMORY.md").write_text("# Me\n\nI live by the sea.\n")
    gw = RunningGateway(
        make_config(
            state,
            memory=True,
            **{
                "memory.embeddings.provider": "openai",
                "memory.embeddings.baseUrl": dead,
                "memory.embeddings.model": "nomic-embed-text",
                "memory.embeddings.maxRetries": 0,
            },
        )
    )
    await gw.start()
    try:
        c = await gw.client()
        await c.call("memory.sync", {})
        status = await c.call("memory.status")
        assert f"embedding server unreachable at {dead}: connection refused" in status["embeddings"]["error"]
        await c.close()
    finally:
        await gw.stop()
