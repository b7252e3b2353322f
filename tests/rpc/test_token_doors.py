"""One token rule on every door (issue 36, class 2): the same token string, presented at the WebSocket's
upgrade header, its auth frame, its `auth` method, and the HTTP API's /v1 and /mcp, gets the same
answer everywhere — accepted exactly when, less the spaces and tabs around it, it is the token. A
configured token that breaks the rule (auth.TOKEN_RULE) never gets that far: config refuses it.
"""

from __future__ import annotations

import asyncio
import base64
import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect

from gateway.auth import TOKEN_RULE, TokenError, read_token_file, token_problem
from gateway.config import ConfigError, load_config
from tests.helpers import examples

TOKEN = "tok-EN_123.abc~!XYZ/+="

BLANKS = st.sampled_from([" ", "\t", "  \t", "\n", "\r", "\x0b", "\x0c", "\xa0", "\u2003", "\u3000", "\ufeff", "\x00"])
ODD = st.characters(codec="utf-8", exclude_categories=["Cs"])


@st.composite
def presented(draw) -> str:
    """Strings a client might present: the token with blanks around it, with a character changed,
    added or removed, in another case or width, cut short; or anything at all."""
    kind = draw(st.sampled_from(["around", "inside", "case", "width", "cut", "any", "exact"]))
    if kind == "exact":
        return TOKEN
    if kind == "around":
        return draw(st.lists(BLANKS, max_size=3).map("".join)) + TOKEN + draw(st.lists(BLANKS, max_size=3).map("".join))
    if kind == "inside":
        i = draw(st.integers(0, len(TOKEN)))
        ch = draw(st.one_of(BLANKS, ODD))
        return TOKEN[:i] + ch + TOKEN[i + draw(st.integers(0, 1)) :]
    if kind == "case":
        return TOKEN.swapcase()
    if kind == "width":  # fullwidth forms: the same letters to NFKC, other bytes on the wire
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in TOKEN)
    if kind == "cut":
        return TOKEN[: draw(st.integers(0, len(TOKEN) - 1))]
    return draw(st.text(ODD, max_size=40))


async def _http_status(host: str, port: int, request: bytes) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
        return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else 0
    finally:
        writer.close()


def _header(token: str) -> bytes | None:
    """The Authorization header a client sends for `token` (UTF-8, as curl from a terminal would); None
    when HTTP cannot carry it at all (a line break would end the header)."""
    if "\r" in token or "\n" in token:
        return None
    return b"Authorization: Bearer " + token.encode("utf-8") + b"\r\n"


async def door_answers(gw, token: str) -> dict[str, bool]:
    """door → whether `token` got in there."""
    out: dict[str, bool] = {}
    host, port = "127.0.0.1", gw.gw.port
    header = _header(token)
    if header is not None:
        key = base64.b64encode(os.urandom(16))
        upgrade = (
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n" + header + b"\r\n"
        )
        out["ws header"] = await _http_status(host, port, upgrade) == 101
        http_port = gw.gw.http.port
        for path in ("/v1/models", "/mcp"):
            request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() + header + b"Connection: close\r\n\r\n"
            status = await _http_status(host, http_port, request)
            out[path] = status not in (401, 400, 429, 0)
    for door, frame in (
        ("ws frame", {"type": "auth", "token": token}),
        ("ws auth method", {"jsonrpc": "2.0", "id": 1, "method": "auth", "params": {"token": token}}),
    ):
        async with connect(gw.url, max_size=None, compression=None, open_timeout=10) as ws:
            await ws.send(orjson.dumps(frame).decode())
            answer = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            out[door] = answer.get("method") == "auth.ok" or "result" in answer
    return out


@pytest.fixture
async def gw(start_gateway):
    return await start_gateway(
        **{
            "token": TOKEN,
            "server.httpPort": -1,
            "server.authFailureDelay": 0,
            "server.authFailuresPerMinute": 1_000_000,
        }
    )


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(candidate=presented())
async def test_every_door_gives_the_same_answer_to_the_same_token(gw, candidate):
    answers = await door_answers(gw, candidate)
    expected = candidate.strip(" \t") == TOKEN
    assert answers == dict.fromkeys(answers, expected), (candidate, answers)


@pytest.mark.parametrize(
    "token,rule",
    [
        (" " + TOKEN, "it holds a space"),
        (TOKEN + "\t", "it holds a tab"),
        ("ünïcödé-token-1234567", "it holds the character U+00FC"),
        ("tok\x00" + TOKEN, "U+0000"),
        ("short", "must be at least 16 characters"),
        ("x" * 513, "must be at most 512 characters"),
    ],
)
def test_a_configured_token_that_breaks_the_rule_is_refused_wherever_it_is_set(tmp_path, token, rule):
    for how in ("config", "env", "flag"):
        if how == "config":
            (tmp_path / "config.toml").write_text(f"token = {orjson.dumps(token).decode()}\n")
            args: tuple = ({"stateDir": str(tmp_path)}, {})
        elif how == "env":
            (tmp_path / "config.toml").unlink(missing_ok=True)
            args = ({"stateDir": str(tmp_path)}, {"JARVIS_GATEWAY_TOKEN": token})
        else:
            args = ({"stateDir": str(tmp_path), "token": token}, {})
        with pytest.raises(ConfigError, match="token: ") as exc:
            load_config(*args)
        assert rule in str(exc.value)
    path = tmp_path / "gateway.token"
    path.write_text(token.strip() + "\n")
    if token.strip() == token:
        with pytest.raises(TokenError, match="gateway.token: the token"):
            read_token_file(path)
    assert token_problem(token) is not None and TOKEN_RULE


def test_the_token_file_is_held_to_the_rule_at_start_and_on_change(tmp_path):
    from gateway.auth import TokenStore

    path = tmp_path / "gateway.token"
    path.write_text("  " + TOKEN + "  \n")  # blanks around a token in its file: the file's, not the token's
    store = TokenStore(None, path)
    assert store.load() == TOKEN and store.check(TOKEN)
    path.write_text("ünïcödé-token-1234567\n")  # edited by hand into one the HTTP doors could never match
    assert store.current() == TOKEN  # refused (logged); the previous token stays
    assert not store.check("ünïcödé-token-1234567")
    fresh = TokenStore(None, path)
    with pytest.raises(TokenError, match="U\\+00FC"):
        fresh.load()
