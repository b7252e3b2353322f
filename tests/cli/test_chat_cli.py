"""`jarvis chat` and `jarvis call … --follow [--text]`, run as the real CLI against a real gateway process."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import time

import orjson
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, GatewayProcess, connect_client


def jarvis(*args, state_dir, env=None, input=None, timeout=60):
    full_env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir), **(env or {})}
    full_env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        env=full_env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def offline(tmp_path):
    """A gateway with memory on and one note in the workspace, answering with the offline responder."""
    state = tmp_path / "state"
    (state / "workspace" / "memory").mkdir(parents=True)
    (state / "workspace" / "memory" / "boat.md").write_text("# Boat\n\nMy sailing boat is painted blue.\n")
    with GatewayProcess.running(
        state, "[chat]\nofflineDeltaDelay = 0.001\n[memory.sync]\nsessionDebounceMs = 100\n"
    ) as gp:
        yield gp


def test_one_message_streams_the_reply_then_the_sources_and_the_session_continues(offline):
    state, port = offline.state_dir, str(offline.port)
    r = jarvis("chat", "What colour is my sailing boat?", "--new", "--port", port, state_dir=state)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("I am Jarvis's offline responder"), r.stdout
    assert "You wrote: “What colour is my sailing boat?”" in r.stdout
    assert not r.stdout.lstrip().startswith("{"), "plain text, not JSON"
    assert re.fullmatch(r"sources: memory/boat\.md:(\d+|\d+–\d+)", lines[-1]), r.stdout  # "3" or "1–3", never "3-3"
    assert "\x1b[" not in r.stdout, "no colour when stdout is not a terminal"
    key = (state / "chat-session").read_text().strip()

    # Without --session or --new, the next message goes to the same session.
    r = jarvis("chat", "And the sails?", "--port", port, state_dir=state)
    assert r.returncode == 0, r.stderr
    r = jarvis("call", "sessions.get", orjson.dumps({"sessionKey": key}).decode(), "--port", port, state_dir=state)
    session = orjson.loads(r.stdout)
    assert session["messageCount"] == 4
    assert session["label"] == "What colour is my sailing boat?", "a new session is named after its first message"

    # --new starts another one; --session picks one explicitly.
    r = jarvis("chat", "Something else entirely", "--new", "--port", port, state_dir=state)
    assert r.returncode == 0, r.stderr
    assert (state / "chat-session").read_text().strip() != key
    r = jarvis("chat", "Back to the boat", "--session", key, "--port", port, state_dir=state)
    assert r.returncode == 0, r.stderr
    r = jarvis("call", "sessions.get", orjson.dumps({"sessionKey": key}).decode(), "--port", port, state_dir=state)
    assert orjson.loads(r.stdout)["messageCount"] == 6

    r = jarvis("chat", "hello", "--session", "no-such-session", "--port", port, state_dir=state)
    assert r.returncode == 1 and "no session no-such-session" in r.stderr

    # A transcript is cited by its session's name and date, not by sessions/<uuid>.jsonl.
    deadline = time.monotonic() + 30
    while True:
        r = jarvis("chat", "Something else entirely, again", "--new", "--port", port, state_dir=state)
        sources = r.stdout.splitlines()[-1]
        if "session “Something else entirely”" in sources:
            break
        assert time.monotonic() < deadline, r.stdout
        time.sleep(0.3)
    assert re.search(r"session “Something else entirely”, \d{4}-\d\d-\d\d \((line \d+|lines \d+–\d+)\)", sources), (
        sources
    )
    assert ".jsonl" not in sources


def test_interactive_prompt_reads_messages_from_stdin(offline):
    state, port = offline.state_dir, str(offline.port)
    r = jarvis(
        "chat",
        "--new",
        "--port",
        port,
        state_dir=state,
        input="The heron nests by the mill.\n\n/new\nA second session starts here.\n",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("I am Jarvis's offline responder") == 2
    assert "You wrote: “The heron nests by the mill.”" in r.stdout
    assert "You wrote: “A second session starts here.”" in r.stdout
    r = jarvis("call", "sessions.list", "--port", port, state_dir=state)
    labels = sorted(s["label"] for s in orjson.loads(r.stdout)["sessions"])
    assert labels == ["A second session starts here.", "The heron nests by the mill."]


def test_a_failing_provider_is_a_non_zero_exit_that_names_the_endpoint(tmp_path):
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    state = tmp_path / "state"
    with GatewayProcess.running(
        state, "[memory]\nenabled = false\n[chat]\nmaxRetries = 0\n", env={"OPENAI_BASE_URL": dead}
    ) as gp:
        port = str(gp.port)
        r = jarvis("chat", "hello?", "--new", "--port", port, state_dir=state)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert f"chat provider unreachable at {dead}: connection refused" in r.stderr

        key = orjson.loads(jarvis("call", "sessions.create", "--port", port, state_dir=state).stdout)["sessionKey"]
        send = orjson.dumps({"sessionKey": key, "message": "hello?"}).decode()
        r = jarvis("call", "chat.send", send, "--follow", "--port", port, state_dir=state)
        assert r.returncode == 1 and '"method": "chat.error"' in r.stdout
        assert f"chat provider unreachable at {dead}" in r.stderr
        r = jarvis("call", "chat.send", send, "--follow", "--text", "--port", port, state_dir=state)
        assert r.returncode == 1 and "{" not in r.stdout
        assert "chat.error" in r.stderr


def test_follow_text_prints_the_reply_as_plain_text(tmp_path):
    state = tmp_path / "state"
    with (
        FakeOpenAI() as api,
        GatewayProcess.running(state, "[memory]\nenabled = false\n", env={"OPENAI_BASE_URL": api.base_url}) as gp,
    ):
        api.reply = "Plain words from the model."
        port = str(gp.port)
        key = orjson.loads(jarvis("call", "sessions.create", "--port", port, state_dir=state).stdout)["sessionKey"]
        send = orjson.dumps({"sessionKey": key, "message": "hi"}).decode()
        r = jarvis("call", "chat.send", send, "--follow", "--text", "--port", port, state_dir=state)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "Plain words from the model.\n"
        r = jarvis("call", "system.health", "--text", "--port", port, state_dir=state)
        assert r.returncode == 2 and "--text goes with --follow" in r.stderr


async def test_an_aborted_reply_exits_non_zero(tmp_path):
    state = tmp_path / "state"
    with GatewayProcess.running(state, "[memory]\nenabled = false\n[chat]\nofflineDeltaDelay = 0.5\n") as gp:
        c = await connect_client(gp.url, gp.token)
        try:
            key = (await c.call("sessions.create", {}))["sessionKey"]
            env = {**os.environ, "JARVIS_STATE_DIR": str(state)}
            for argv in (
                ["chat", "a slow reply please", "--session", key],
                ["call", "chat.send", orjson.dumps({"sessionKey": key, "message": "slow"}).decode(), "--follow"],
            ):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "gateway.cli",
                    *argv,
                    "--port",
                    str(gp.port),
                    cwd=ROOT,
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                deadline = time.monotonic() + 30
                while not (await c.call("chat.abort", {"sessionKey": key}))["aborted"]:
                    assert time.monotonic() < deadline, "the run never started"
                    await asyncio.sleep(0.05)
                out, err = await asyncio.wait_for(proc.communicate(), 30)
                assert proc.returncode == 1, (argv[0], out, err)
                assert b"aborted" in err
        finally:
            await c.close()


def test_each_memory_tool_call_shows_as_one_line(tmp_path):
    state = tmp_path / "state"
    with FakeOpenAI() as api:
        api.script(
            ("tools", [("memory_set", {"key": "boat.colour", "value": "The boat is dark green."})]),
            ("tools", [("memory_search", {"query": "boat colour"})]),
        )
        api.reply = "Your boat is dark green."
        with GatewayProcess.running(
            state, "[memory.recall]\nenabled = false\n", env={"OPENAI_BASE_URL": api.base_url}
        ) as gp:
            r = jarvis("chat", "Remember my boat is dark green", "--new", "--port", str(gp.port), state_dir=state)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == '💾 memory_set "boat.colour" → stored boat.colour'
    assert re.fullmatch(r'🔎 memory_search "boat colour" → \d+ results?', lines[1]), lines
    assert lines[2] == "Your boat is dark green."
    assert lines[3].startswith("sources: memory/keyed/general/boat.colour.md:")


def test_slash_commands_are_commands_not_messages(offline):
    state, port = offline.state_dir, str(offline.port)
    other = orjson.loads(
        jarvis("call", "sessions.create", '{"label":"other"}', "--port", port, state_dir=state).stdout
    )["sessionKey"]
    r = jarvis(
        "chat",
        "--new",
        "--port",
        port,
        state_dir=state,
        input=f"/help\nhello there\n/session\n/session {other}\n/bogus\n//etc is a path\n/quit\nnever sent\n",
    )
    assert r.returncode == 0, r.stderr
    assert "/session [KEY]" in r.stderr and "/quit" in r.stderr  # the help
    assert "unknown command /bogus" in r.stderr
    assert "(now in session “other”" in r.stderr
    assert r.stdout.count("I am Jarvis's offline responder") == 2
    assert "/help" not in r.stdout and "never sent" not in r.stdout
    sessions = orjson.loads(jarvis("call", "sessions.list", "--port", port, state_dir=state).stdout)["sessions"]
    assert sorted(s["label"] for s in sessions) == ["hello there", "other"], "no session named /help"
    history = orjson.loads(
        jarvis(
            "call", "sessions.history", orjson.dumps({"sessionKey": other}).decode(), "--port", port, state_dir=state
        ).stdout
    )["messages"]
    assert [m["content"] for m in history if m["role"] == "user"] == ["/etc is a path"]
    assert (state / "chat-session").read_text().strip() == other, "the next `jarvis chat` continues there"
    r = jarvis("chat", "--session", "no-such", "--port", port, state_dir=state, input="/session no-such\n")
    assert r.returncode == 1


def test_model_and_system_prompt_flags_are_kept_with_the_session(tmp_path):
    state = tmp_path / "state"
    with (
        FakeOpenAI() as api,
        GatewayProcess.running(
            state, '[memory]\nenabled = false\n[chat]\nmodel = "fake-model"\n', env={"OPENAI_BASE_URL": api.base_url}
        ) as gp,
    ):
        port = str(gp.port)
        r = jarvis(
            "chat", "hi", "--new", "-m", "fake-small", "-s", "Answer in one word.", "--port", port, state_dir=state
        )
        assert r.returncode == 0, r.stderr
        body = api.requests[-1]["body"]
        assert body["model"] == "fake-small" and body["messages"][0]["content"].startswith("Answer in one word.")
        key = (state / "chat-session").read_text().strip()
        session = orjson.loads(
            jarvis(
                "call", "sessions.get", orjson.dumps({"sessionKey": key}).decode(), "--port", port, state_dir=state
            ).stdout
        )
        assert (session["model"], session["systemPrompt"]) == ("fake-small", "Answer in one word.")
        # The next message in that session keeps them without the flags; --model "" resets the model.
        r = jarvis("chat", "and again", "--port", port, state_dir=state)
        assert r.returncode == 0 and api.requests[-1]["body"]["model"] == "fake-small"
        r = jarvis("chat", "once more", "--model", "", "--port", port, state_dir=state)
        assert r.returncode == 0 and api.requests[-1]["body"]["model"] == "fake-model"
        assert api.requests[-1]["body"]["messages"][0]["content"].startswith("Answer in one word.")


def test_the_sources_line_is_dim_on_a_terminal_unless_no_color(offline):
    import pty

    state, port = offline.state_dir, str(offline.port)

    def on_a_terminal(env):
        leader, follower = pty.openpty()
        full_env = {**os.environ, "JARVIS_STATE_DIR": str(state), **env}
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "chat", "What colour is my sailing boat?", "--new", "--port", port],
            cwd=ROOT,
            env=full_env,
            stdout=follower,
            stderr=subprocess.PIPE,
        )
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            out += chunk
        os.close(leader)
        assert proc.wait(30) == 0, proc.stderr.read()
        return out.decode()

    env = {k: "" for k in ("NO_COLOR",)}
    out = on_a_terminal(env)
    assert "\x1b[2msources: memory/boat.md:" in out and out.rstrip().endswith("\x1b[0m"), repr(out)
    out = on_a_terminal({"NO_COLOR": "1"})
    assert "sources: memory/boat.md:" in out and "\x1b[" not in out, repr(out)


def test_session_shows_the_label_and_count_as_they_are_now(offline):
    """`/session` after a turn: the label the first message gave the session and its messages so far, not
    what was known when the session was opened."""
    state, port = offline.state_dir, str(offline.port)
    r = jarvis("chat", "--new", "--port", port, state_dir=state, input="the heron nests by the mill\n/session\n")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\(in session “the heron nests by the mill” \([\w-]+, 2 messages\)\)", r.stderr), r.stderr


def test_follow_into_a_reader_that_stops_early_is_no_error(offline):
    """`jarvis call … --follow | head -1`: the reader closing the pipe ends the command quietly, exit 0."""
    state, port = offline.state_dir, str(offline.port)
    key = orjson.loads(jarvis("call", "sessions.create", "--port", port, state_dir=state).stdout)["sessionKey"]
    send = orjson.dumps({"sessionKey": key, "message": "tell me about the boat"}).decode()
    env = {**os.environ, "JARVIS_STATE_DIR": str(state)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "call", "chat.send", send, "--follow", "--port", port],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == b"{"
    proc.stdout.close()  # what `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0 and err == "", err


def test_a_delete_the_model_wants_is_asked_y_n_and_denied_where_no_one_can_answer(tmp_path):
    state = tmp_path / "state"
    with FakeOpenAI() as api:
        delete = ("tools", [("memory_delete", {"key": "boat.colour"})])
        api.script(delete)
        api.reply = "Done."
        with GatewayProcess.running(
            state, "[memory.recall]\nenabled = false\n", env={"OPENAI_BASE_URL": api.base_url}
        ) as gp:
            port = str(gp.port)
            value = '{"key":"boat.colour","value":"The boat is dark green.","category":"facts"}'
            assert jarvis("call", "memory.set", value, "--port", port, state_dir=state).returncode == 0
            # One message, stdin not a terminal: no one to ask, denied at once.
            r = jarvis("chat", "Forget my boat", "--new", "--port", port, state_dir=state, input="")
            assert r.returncode == 0, r.stderr
            assert (
                'the model wants to delete boat.colour (facts): "The boat is dark green." (memory_delete)' in r.stderr
            )
            assert "no one to ask (stdin is not a terminal): denied" in r.stderr
            assert r.stdout.splitlines()[0] == '🗑️ memory_delete "boat.colour" → denied'
            # The interactive prompt reads the answer from stdin: y.
            api.script(delete)
            r = jarvis("chat", "--new", "--port", port, state_dir=state, input="Forget my boat\ny\n")
            assert r.returncode == 0, r.stderr
            assert "Allow it? [y/N]" in r.stderr
            assert '🗑️ memory_delete "boat.colour" → deleted boat.colour' in r.stdout
            gone = jarvis("call", "memory.trash", "--port", port, state_dir=state)
            assert [m["key"] for m in orjson.loads(gone.stdout)["memories"]] == ["boat.colour"]
