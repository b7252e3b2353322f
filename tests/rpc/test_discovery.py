"""Local model discovery (chat.discover): with no chat model configured, the gateway chats with a model
server it finds on this machine's loopback. The server is tests/fake_openai.py standing where Ollama would
listen: on a port of `chat.discoverPorts` (a free one here, so nothing else on this machine answers)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import orjson

from gateway.sessions.transcript import OFFLINE_PREAMBLE
from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, GatewayProcess, RunningGateway, make_config, wait_for


def _port(api: FakeOpenAI) -> int:
    return int(api.base_url.rsplit(":", 1)[1].split("/")[0])


def _dead_port() -> int:
    return int(FakeOpenAI.closed_url().rsplit(":", 1)[1].split("/")[0])


def discovering(tmp_path, *ports: int, **overrides):
    return make_config(tmp_path / "state", **{"chat.discover": True, "chat.discoverPorts": list(ports), **overrides})


async def _reply(client, text: str = "hello") -> str:
    key = (await client.call("sessions.create", {}))["sessionKey"]
    res = await client.call("chat.send", {"sessionKey": key, "message": text})
    events = await client.run_to_end(res["runId"])
    final = events[-1]
    assert final["method"] == "chat.final", final
    return final["params"]["message"]["content"]


async def test_a_server_on_loopback_is_found_and_chats(tmp_path):
    with FakeOpenAI() as api:
        api.models = ["nomic-embed-text", "llama3.2"]  # an embedding model cannot chat: the next one is used
        api.reply = "Hi from the local model."
        gw = await RunningGateway(discovering(tmp_path, _dead_port(), _port(api))).start()
        try:
            client = await gw.client()
            models = await client.call("chat.models")  # asks again, and waits for the answer
            assert models["default"] == "llama3.2"
            assert [m["id"] for m in models["models"]] == ["nomic-embed-text", "llama3.2"]
            health = await client.call("system.health")
            assert health["chat"] == {
                "provider": "openai",
                "model": "llama3.2",
                "baseUrl": api.base_url,
                "discovered": True,
                "server": "a model server",
            }
            assert await _reply(client) == "Hi from the local model."
            chats = [r["body"] for r in api.requests if r["path"] == "/v1/chat/completions"]
            assert chats and chats[-1]["model"] == "llama3.2"
            await client.close()
        finally:
            await gw.stop()


async def test_ollama_answering_only_its_own_tags_route_is_found(tmp_path):
    with FakeOpenAI() as api:
        api.models = None  # /v1/models: 404
        api.ollama_tags = ["nomic-embed-text:latest", "qwen2.5:7b"]
        gw = await RunningGateway(discovering(tmp_path, _port(api))).start()
        try:
            client = await gw.client()
            await client.call("chat.models")
            chat = (await client.call("system.health"))["chat"]
            assert (chat["model"], chat["server"], chat["discovered"]) == ("qwen2.5:7b", "Ollama", True)
            assert await _reply(client) == api.reply
            await client.close()
        finally:
            await gw.stop()


async def test_a_server_that_goes_away_falls_back_with_the_reason_and_comes_back(tmp_path):
    api = FakeOpenAI().__enter__()
    port = _port(api)
    gw = await RunningGateway(discovering(tmp_path, port)).start()
    try:
        client = await gw.client()
        await client.call("chat.models")
        assert await _reply(client) == api.reply
        api.__exit__(None, None, None)  # the person quits Ollama

        text = await _reply(client, "still there?")
        assert text.startswith(
            f"{OFFLINE_PREAMBLE}: the model server found at http://127.0.0.1:{port}/v1 stopped answering "
            "(connection refused)."
        ), text
        chat = (await client.call("system.health"))["chat"]
        assert chat["provider"] == "offline" and chat["discovered"] is False
        assert "stopped answering" in chat["reason"]

        api = FakeOpenAI(port=port).__enter__()  # and starts it again
        api.reply = "Back again."
        assert (await client.call("chat.models"))["default"] == "fake-large"
        assert (await client.call("system.health"))["chat"]["discovered"] is True
        assert await _reply(client, "and now?") == "Back again."
        await client.close()
    finally:
        await gw.stop()
        api.__exit__(None, None, None)


async def test_nothing_answering_says_where_it_looked(tmp_path):
    dead = _dead_port()
    gw = await RunningGateway(discovering(tmp_path, dead)).start()
    try:
        client = await gw.client()
        assert (await client.call("chat.models"))["default"] == "offline-responder"
        chat = (await client.call("system.health"))["chat"]
        assert chat["reason"] == f"no model server answered on loopback ports {dead}"
        text = await _reply(client)
        assert text.startswith(f"{OFFLINE_PREAMBLE}: no model server answered on loopback ports {dead}."), text
        await client.close()
    finally:
        await gw.stop()


async def test_a_configured_model_wins_and_discover_false_turns_it_off(tmp_path):
    with FakeOpenAI() as api:
        closed = FakeOpenAI.closed_url()
        configured = discovering(tmp_path / "a", _port(api), **{"chat.baseUrl": closed, "chat.model": "mine"})
        off = discovering(tmp_path / "b", _port(api), **{"chat.discover": False})
        for cfg, expected in (
            (configured, {"provider": "openai", "model": "mine", "baseUrl": closed, "discovered": False}),
            (off, {"provider": "offline", "model": "offline-responder", "baseUrl": None, "discovered": False}),
        ):
            gw = await RunningGateway(cfg).start()
            try:
                client = await gw.client()
                await client.call("chat.models")
                assert (await client.call("system.health"))["chat"] == expected
                await client.close()
            finally:
                await gw.stop()
        assert not [r for r in api.requests if r["path"] in ("/v1/models", "/api/tags")]  # never asked


def _jarvis(state, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        env={**os.environ, "JARVIS_STATE_DIR": str(state), "OPENAI_BASE_URL": "", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_newcomer_sees_the_model_before_and_after_the_first_start(tmp_path):
    """As the README says: `jarvis models` before anything ran, then `./scripts/serve` (`jarvis serve`)."""
    state = tmp_path / "state"
    state.mkdir()
    on = {"JARVIS_CHAT_DISCOVER": "true"}  # (tests/conftest.py turns discovery off for every other test)
    with FakeOpenAI() as api:
        api.models = ["llama3.2"]
        (state / "config.toml").write_text(f"[chat]\ndiscoverPorts = [{_port(api)}]\n[memory]\nenabled = false\n")
        r = _jarvis(state, "models", env=on)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [
            f"chat: llama3.2 on a model server at {api.base_url} (found on this machine)",
            "(no gateway running: looked from here, as `jarvis serve` will)",
            "* llama3.2",
        ]
        assert not (state / "gateway.token").exists()  # looking is no start

        with GatewayProcess.running(state, env=on) as gp:
            lines: list[dict] = []

            async def discovered() -> bool:
                lines[:] = [orjson.loads(x) for x in gp.log.read_text().splitlines() if x.startswith("{")]
                return any(x["event"] == "chat model discovered" for x in lines)

            asyncio.run(wait_for(discovered))
            found = next(x for x in lines if x["event"] == "chat model discovered")
            assert (found["chat_url"], found["chat_model"]) == (api.base_url, "llama3.2")
            said = re.findall(r"^chat: .*$", gp.log.read_text(), re.M)
            assert said and said[0].startswith("chat: "), gp.log.read_text()
            r = _jarvis(state, "models", "--port", str(gp.port), "--json", env=on)
            out = orjson.loads(r.stdout)
            assert out["gateway"] and out["chat"]["discovered"] and out["default"] == "llama3.2"
            r = _jarvis(state, "chat", "hi", "--new", "--port", str(gp.port), env=on)
            assert r.returncode == 0 and r.stdout.startswith(api.reply), r.stderr
            said = _interactive_chat(state, gp.port)  # `jarvis chat` at a terminal greets with the model
            assert f"chat: llama3.2 on a model server at {api.base_url} (found on this machine)" in said, said


def _interactive_chat(state, port: int) -> str:
    """`jarvis chat` with a terminal for stdin, left at once with /quit: what it said on stderr."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "chat", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, "JARVIS_STATE_DIR": str(state), "NO_COLOR": "1"},
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(master, b"/quit\n")
        _out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    return err


async def test_a_server_that_comes_and_goes_holds_a_bounded_number_of_clients(tmp_path):
    from gateway.chat.discovered import RETIRED_KEPT, DiscoveredProvider

    port = _dead_port()
    provider = DiscoveredProvider(discovering(tmp_path, port))
    try:
        for _ in range(RETIRED_KEPT + 3):
            with FakeOpenAI(port=port):
                await provider.list_models()
                assert provider.describe()["discovered"] is True
            said = [
                item.text
                async for item in provider.stream([{"role": "user", "content": "hi"}])
                if hasattr(item, "text")
            ]
            assert provider.offline_now and "stopped answering" in "".join(said)  # gone: the offline responder says so
        assert len(provider._old) <= RETIRED_KEPT
    finally:
        await provider.close()
