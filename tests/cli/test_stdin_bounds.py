"""What a client can make the CLI hold (issue 43.7): a message or value read from standard input is
refused past what its method takes before more of it is read — a 200 MB message used to be read whole,
encoded and sent (990 MB, 5 s) before the gateway closed the connection on it."""

from __future__ import annotations

import orjson

from gateway.memory.notes.keyed import MAX_VALUE_CHARS
from gateway.methods.chat import MESSAGE_CHARS
from tests.cli.test_chat_cli import jarvis, offline  # noqa: F401 - the fixture

BIG = "a" * (8 * MESSAGE_CHARS)  # past any bound below: 800,000 bytes


def test_a_message_past_the_bound_is_refused_before_it_is_sent(offline):  # noqa: F811
    state, port = offline.state_dir, str(offline.port)
    r = jarvis("chat", "--new", "--port", port, "-", state_dir=state, input=BIG)
    assert r.returncode == 2, r.stderr
    assert f"more than {4 * MESSAGE_CHARS:,} bytes" in r.stderr and "message" in r.stderr
    sessions = orjson.loads(jarvis("call", "sessions.list", "--port", port, state_dir=state).stdout)["sessions"]
    assert all(s["messageCount"] == 0 for s in sessions)


def test_an_overlong_line_of_a_piped_chat_is_skipped_and_the_next_is_sent(offline):  # noqa: F811
    state, port = offline.state_dir, str(offline.port)
    r = jarvis("chat", "--new", "--port", port, state_dir=state, input=BIG + "\nThe heron nests by the mill.\n")
    assert r.returncode == 0, r.stderr  # the exit code is the last turn's, as for any refused line
    assert f"more than {MESSAGE_CHARS:,} characters" in r.stderr
    assert "You wrote: “The heron nests by the mill.”" in r.stdout and r.stdout.count("offline responder") == 1


def test_a_value_past_the_bound_is_refused_in_process_and_nothing_is_written(tmp_path):
    state = tmp_path / "state"
    r = jarvis("memory", "set", "boat", "-", state_dir=state, input=BIG)
    assert r.returncode == 2, r.stderr
    assert f"more than {4 * MAX_VALUE_CHARS:,} bytes" in r.stderr
    r = jarvis("memory", "get", "boat", state_dir=state)
    assert r.returncode != 0


def test_an_image_past_memory_image_max_bytes_is_refused_before_it_is_read(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.toml").write_text("[memory]\nimageMaxBytes = 1024\n")
    big = tmp_path / "big.png"
    big.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 4096)
    r = jarvis("memory", "set-image", "pic", str(big), state_dir=state)
    assert r.returncode == 2, r.stderr
    assert "more than 1,024 bytes" in r.stderr and "imageMaxBytes" in r.stderr
