"""Transcript lines of the wrong type, fed to every reader (issue 36, class 4).

A transcript is the user's file: hand-edited, written by an older version, imported. A line whose fields
have unexpected JSON types — a role that is null, a number or an object, an id that is a list, a
timestamp that is a number, tool calls that are a string — is skipped or its field coerced (with a log
line), by every reader alike; never -32603, never a traceback.

Hypothesis draws lines (valid message, tool-call, tool-result, compaction and header records with any of
their fields, or the message's, replaced by any JSON value or removed; now and then a line that is no
object at all), appends them to a session's transcript between two valid messages, and reads the
session back through every reader that has a public door: sessions.history (the web page's call too), a
chat turn (the prompt's history, replayed with its tool calls to an OpenAI-compatible upstream), a
regeneration, sessions.compact, the memory index (memory.sync, memory.search), memory.get of the
transcript, memory.recall (time recall, with and without a query), a /v1 turn into the session, and
sessions.prune / sessions.delete. The two valid messages around the odd lines always read back.

The PostgreSQL engine reads the same files (a local mirror of the rows); `jarvis migrate` carries the
lines there, which tests/contract/test_copy.py and the last test here hold on both engines.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import httpx2 as httpx
import pytest
import structlog
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.fake_openai import FakeOpenAI
from tests.helpers import RpcError, examples
from tests.hostile_values import logged_failures

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["user", "assistant", "tool", "system", "message", "compaction", "", "2026-11-20T10:00:00Z"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
STAMP = "2026-11-20T10:00:00.000Z"


def templates(key: str) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "memory_search", "arguments": '{"query":"x"}'}}
    return [
        {"type": "session", "version": 1, "sessionKey": key, "agentId": "main", "createdAt": STAMP},
        {"type": "message", "id": "m-u", "timestamp": STAMP, "message": {"role": "user", "content": "hello"}},
        {
            "type": "message",
            "id": "m-a",
            "timestamp": STAMP,
            "runId": "r1",
            "memory": [{"path": "MEMORY.md", "startLine": 1, "endLine": 2, "score": 0.5}],
            "message": {"role": "assistant", "content": [{"type": "text", "text": "parts"}], "name": "Jarvis"},
        },
        {
            "type": "message",
            "id": "m-c",
            "timestamp": STAMP,
            "runId": "r1",
            "message": {"role": "assistant", "content": "", "tool_calls": [call]},
        },
        {
            "type": "message",
            "id": "m-t",
            "timestamp": STAMP,
            "runId": "r1",
            "tool": "memory_search",
            "summary": "1 result",
            "error": False,
            "message": {"role": "tool", "tool_call_id": "call_1", "content": "found"},
        },
        {
            "type": "message",
            "id": "m-r",
            "timestamp": STAMP,
            "runId": "r2",
            "replaces": "m-a",
            "regenerates": "m-a",
            "aborted": True,
            "abortReason": "client",
            "truncated": True,
            "remember": False,
            "message": {"role": "assistant", "content": "again"},
        },
        {
            "type": "compaction",
            "id": "c1",
            "timestamp": STAMP,
            "throughId": "m-u",
            "messages": 1,
            "path": "memory/2026-11-20.md",
            "startLine": 1,
            "endLine": 2,
            "summary": "- said hello",
        },
    ]


@st.composite
def odd_line(draw, key: str) -> str:
    if draw(st.integers(0, 9)) == 0:  # no object at all
        return json.dumps(draw(JSON))
    record = json.loads(json.dumps(draw(st.sampled_from(templates(key)))))
    for _ in range(draw(st.integers(1, 3))):
        target = record
        if isinstance(record.get("message"), dict) and draw(st.booleans()):
            target = record["message"]
        name = draw(st.sampled_from(sorted(target) + ["content", "role", "id", "timestamp", "runId"]))
        if draw(st.integers(0, 4)) == 0:
            target.pop(name, None)
        else:
            target[name] = draw(JSON)
    return json.dumps(record)


@pytest.fixture
async def gw(start_gateway):
    with FakeOpenAI() as api:
        gw = await start_gateway(
            memory=True,
            **{
                "server.httpPort": -1,
                "chat.baseUrl": api.base_url,
                "chat.maxRetries": 0,
                "memory.sync.watch": False,
                "memory.sync.sessionDebounceMs": 0,
            },
        )
        c = await gw.client()
        try:
            yield gw, c
        finally:
            await c.close()


async def read_everything(gw, c, key: str) -> None:
    """Every reader of the session's transcript, through its public door."""
    history = await c.call("sessions.history", {"sessionKey": key})
    said = [m["content"] for m in history["messages"]]
    assert "first valid" in said and "last valid" in said, said
    sent = await c.call("chat.send", {"sessionKey": key, "message": "and now?"})
    assert (await c.run_to_end(sent["runId"]))[-1]["method"] in ("chat.final", "chat.error")
    history = await c.call("sessions.history", {"sessionKey": key})
    last = history["messages"][-1]
    if last["role"] == "assistant":
        again = await c.call("chat.regenerate", {"sessionKey": key, "messageId": last["id"]})
        assert (await c.run_to_end(again["runId"]))[-1]["method"] in ("chat.final", "chat.error")
    await c.call("sessions.compact", {"sessionKey": key})
    await c.call("memory.sync", {"force": True})
    await c.call("memory.search", {"query": "valid hello", "sources": ["sessions"]})
    await c.call("memory.get", {"path": f"sessions/{key}.jsonl"})
    await c.call("memory.recall", {"from": "2000-01-01", "sources": ["sessions"]})
    await c.call("memory.recall", {"from": "2000-01-01", "query": "valid", "sources": ["sessions"]})
    async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
        r = await http.post(
            "/v1/chat/completions",
            json={"model": "fake-model", "messages": [{"role": "user", "content": "via v1"}]},
            headers={"Authorization": f"Bearer {gw.token}", "X-Jarvis-Session": key},
        )
        assert r.status_code in (200, 409), r.text  # 409: a run of this session still ends
    await c.call("sessions.prune")


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@example(data=None)
async def test_every_reader_takes_any_json_in_any_field(gw, caplog, data):
    gw, c = gw
    key = f"t-{uuid.uuid4().hex[:8]}"
    await c.call("sessions.create", {"sessionKey": key})
    if data is None:  # issue 36: a hand-edited role of the wrong type broke a reader with -32603
        lines = [
            '{"type":"message","id":"x1","timestamp":"2026-11-20T10:00:00Z","message":{"role":null,"content":"a"}}',
            '{"type":"message","id":"x2","timestamp":7,"message":{"role":7,"content":"b"}}',
            '{"type":"message","id":["x3"],"runId":{"a":1},"message":{"role":{"a":1},"content":"c"}}',
            '{"type":"message","id":"x4","runId":["r"],"message":{"role":"assistant","content":"d","tool_calls":"x"}}',
            '{"type":"message","id":"x5","message":{"role":"assistant","content":"e","tool_calls":[{"id":["c"]}]}}',
        ]
    else:
        lines = data.draw(st.lists(odd_line(key), min_size=1, max_size=4), label="lines")
    first = {"type": "message", "id": "v1", "timestamp": STAMP, "message": {"role": "user", "content": "first valid"}}
    last = {"type": "message", "id": "v2", "timestamp": STAMP, "message": {"role": "user", "content": "last valid"}}
    path = gw.config.sessions_dir() / f"{key}.jsonl"
    with open(path, "a", encoding="utf-8") as fh:  # a hand edit, while the gateway holds nothing of it
        fh.write(json.dumps(first) + "\n" + "".join(line + "\n" for line in lines) + json.dumps(last) + "\n")
    caplog.set_level(logging.ERROR)
    caplog.clear()
    with structlog.testing.capture_logs() as logs:
        try:
            await read_everything(gw, c, key)
        except RpcError as exc:
            raise AssertionError(f"{exc} for lines {lines}") from None
        finally:
            await c.call("sessions.delete", {"sessionKey": key})
    event(f"{len(lines)} odd line(s)")
    assert not logged_failures(logs, caplog.records), (logged_failures(logs, caplog.records), lines)


@settings(max_examples=examples(3), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_migrate_carries_odd_lines_to_postgresql_where_every_reader_takes_them(
    start_gateway, postgres_server, data
):
    """`jarvis migrate` (a reader and a writer of every line) copies transcripts with odd lines whole, and
    the PostgreSQL engine's readers take them as the files engine's do."""
    from gateway.storage import migrate
    from gateway.storage.postgres import create_database

    with FakeOpenAI() as api:
        common = {"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.maxRetries": 0, "memory.sync.watch": False}
        files = await start_gateway(f"files-{uuid.uuid4().hex[:6]}", memory=True, **common)
        c = await files.client()
        keys = [f"m-{i}" for i in range(data.draw(st.integers(1, 4), label="sessions"))]
        for key in keys:
            await c.call("sessions.create", {"sessionKey": key})
            await c.call("chat.send", {"sessionKey": key, "message": "first valid"})
            await c.next_event("chat.final")
            lines = data.draw(st.lists(odd_line(key), min_size=1, max_size=4), label=key)
            with open(files.config.sessions_dir() / f"{key}.jsonl", "a", encoding="utf-8") as fh:
                fh.write("".join(line + "\n" for line in lines) + json.dumps({
                    "type": "message", "id": f"{key}-v2", "timestamp": STAMP,
                    "message": {"role": "user", "content": "last valid"},
                }) + "\n")  # fmt: skip
        await c.close()
        await files.stop()
        url = await create_database(postgres_server, f"o_{uuid.uuid4().hex[:12]}")
        report = await migrate.to_postgres(files.config, url)
        assert report.ok and {e.key for e in report.of(migrate.COPIED)} >= set(keys), report
        pg = await start_gateway(f"pg-{uuid.uuid4().hex[:6]}", memory=True, **common, **{"storage.url": url})
        c = await pg.client()
        with structlog.testing.capture_logs() as logs:
            try:
                for key in keys:
                    await read_everything(pg, c, key)
            finally:
                await c.close()
        assert not logged_failures(logs, []), logged_failures(logs, [])
