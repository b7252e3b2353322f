"""Every registered method against hostile params, on both engines, through the WebSocket (issue 36).

The params come from the registry's own schemas (`system.methods`), never from a list kept here: valid
shapes (each property of its declared type, the required ones present) with hostile contents — NUL,
lone surrogates, integers past 64 bits, 1 MB strings, values at and beyond every bound, and now and
then deep nesting where a value should be. Each call goes to a gateway on the files engine and one on
PostgreSQL, which have seen the same calls before it. The properties:

- never -32603, and nothing in either log that says a handler crashed (a traceback, an error line);
- both engines answer alike: the same success, or the same error code naming the same field;
- a refused call changes nothing (the sessions, the keyed memories and the notes read the same after);
- what was accepted reads back as it was given (a label, a keyed memory's value, a note, a message)
  and identically on both engines.

Where a param names something that exists (a session, a keyed memory, a reply), the draw prefers the
few that do, so that calls reach the stores instead of stopping at "not found".
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.helpers import Client, RunningGateway, examples, make_config
from tests.hostile_values import KEYS, MB, NOTES, SESSIONS, Ref, has_surrogate, hostile_for, logged_failures, valid_for

KNOWN_CODES = {-32700, -32600, -32601, -32602, -32001, -32004, -32009, -32029, -32050}
CONFIG = {
    "memory": True,
    "server.maxFrameBytes": 16 * MB,  # 1 MB strings reach the params' validation, not the frame limit
    "server.maxReplyBytes": 16 * MB,
    "memory.sync.watch": False,
    "chat.offlineDeltaDelay": 0.0,
}


@st.composite
def call(draw, methods: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A method and its params: all valid (odd text, names that exist), or each param now and then hostile."""
    name = draw(st.sampled_from(sorted(methods)))
    schema = methods[name]
    hostile = draw(st.booleans())
    params: dict[str, Any] = {}
    for prop, sub in schema.get("properties", {}).items():
        if prop in schema.get("required", []) or draw(st.integers(0, 2)) == 0:
            bad = hostile and draw(st.booleans())
            params[prop] = draw(hostile_for(prop, sub) if bad else valid_for(prop, sub))
    return name, params


# ---- one call on one engine -----------------------------------------------------------------------------
class Engine:
    def __init__(self, name: str, gw: RunningGateway, client: Client):
        self.name, self.gw, self.c = name, gw, client

    async def resolve(self, params: dict[str, Any]) -> dict[str, Any]:
        out = dict(params)
        for k, v in params.items():
            if v == Ref("lastReply"):
                key = params.get("sessionKey") if isinstance(params.get("sessionKey"), str) else SESSIONS[0]
                try:
                    history = await self.c.call("sessions.history", {"sessionKey": key, "limit": 5})
                    replies = [m["id"] for m in history["messages"] if m["role"] == "assistant"]
                except Exception:
                    replies = []
                out[k] = replies[-1] if replies else "no-reply-yet"
        return out

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request, the frame written as any JSON client would (a lone surrogate as
        an escape, an integer past 64 bits as its digits)."""
        req_id = next(self.c._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.c._pending[req_id] = fut
        frame = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}
        await self.c.ws.send(json.dumps(frame, ensure_ascii=has_surrogate(params)))
        if not has_surrogate(params):
            return await asyncio.wait_for(fut, 60)
        # JSON text with a lone surrogate's escape is no valid UTF-8 text: -32700, id null
        self.c._pending.pop(req_id, None)
        return await asyncio.wait_for(self.c.raw.get(), 60)

    async def state(self) -> Any:
        """What a refused call must leave as it was: sessions, keyed memories, notes."""
        sessions = (await self.c.call("sessions.list", {"limit": 500}))["sessions"]
        keyed = (await self.c.call("memory.list", {"limit": 500}))["memories"]
        files = (await self.c.call("memory.files"))["files"]
        return (
            sorted((s["sessionKey"], s.get("label"), s.get("model"), s.get("systemPrompt")) for s in sessions),
            sorted((m["key"], m["category"], m.get("preview"), m["updated"]) for m in keyed),
            sorted((f["path"], f["size"]) for f in files),
        )

    async def settle(self, result: Any) -> None:
        """A started run ends before the next call (a second send would find the session busy)."""
        if isinstance(result, dict) and result.get("status") == "started":
            await self.c.run_to_end(result["runId"], timeout=30)
        await self.c.call("sessions.list", {"limit": 1})  # everything this call queued is answered


async def one_call(engine: Engine, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """(answer, state before, state after) of `method(params)` on one engine."""
    params = await engine.resolve(params)
    before = await engine.state()
    answer = await engine.request(method, params)
    await engine.settle(answer.get("result"))
    after = await engine.state()
    return answer, before, after


def outcome(answer: dict[str, Any]) -> tuple[Any, ...]:
    if "result" in answer:
        return ("ok",)
    err = answer["error"]
    return (err["code"], (err.get("data") or {}).get("field"))


def keyed_value(text: str) -> str:
    """A keyed memory's value as memory.set keeps it: "\n" line ends, no blank lines around it."""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")


def line_view(text: str) -> str:
    """`text` as memory.get shows a file of it: its lines ("\n"-ended; a "\r" before one, as in "\r\n",
    is the line end's) joined by "\n"."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return "\n".join(line.rstrip("\r") for line in lines)


async def read_back(engine: Engine, method: str, params: dict[str, Any], result: Any) -> Any:
    """What an accepted call stored, read back through the protocol (None: nothing to read back)."""
    agent = {"agentId": params["agentId"]} if params.get("agentId") else {}
    if method in ("sessions.create", "sessions.update"):
        s = await engine.c.call("sessions.get", {**agent, "sessionKey": result["sessionKey"]})
        for name in ("label", "model", "systemPrompt"):
            if isinstance(params.get(name), str) and params[name]:
                assert s.get(name) == params[name], (engine.name, name, s.get(name), params[name])
        return {k: s.get(k) for k in ("label", "model", "systemPrompt", "messageCount")}
    if method == "memory.set":
        m = await engine.c.call("memory.get", {**agent, "key": params["key"]})
        assert m["value"] == result["value"] == keyed_value(params["value"]), (engine.name, m["value"], result)
        return {k: m[k] for k in ("key", "category", "value")}
    if method == "memory.write":
        m = await engine.c.call("memory.get", {**agent, "path": params["path"], "lines": 10_000})
        assert m["text"] == line_view(params["content"]), (engine.name, m["text"][:80], params["content"][:80])
        return m["text"]
    if method == "memory.learn":
        return (await engine.c.call("memory.get", {**agent, "path": "LEARNINGS.md", "lines": 10_000}))["text"]
    if method == "chat.send":
        history = await engine.c.call("sessions.history", {**agent, "sessionKey": params["sessionKey"]})
        mine = [m["content"] for m in history["messages"] if m["role"] == "user"]
        if result["status"] != "duplicate":  # an idempotencyKey seen before: nothing was sent again
            assert mine and mine[-1] == params["message"], (engine.name, mine[-1:], params["message"][:80])
        return mine  # the replies may differ: each engine's search recalls in its own order
    if method == "memory.setImage":
        m = await engine.c.call("memory.getImage", {**agent, "key": params["key"]})
        return {k: m.get(k) for k in ("mimeType", "description", "bytes", "image")}
    return None


# ---- the gateways ---------------------------------------------------------------------------------------
@pytest.fixture
async def engines(tmp_path, postgres_url):
    started: list[RunningGateway] = []
    out: list[Engine] = []
    try:
        for name, extra in (("files", {}), ("postgres", {"storage.url": postgres_url})):
            gw = RunningGateway(make_config(tmp_path / name, **CONFIG, **extra))
            await gw.start()
            started.append(gw)
            c = await gw.client()
            for key in SESSIONS:
                await c.call("sessions.create", {"sessionKey": key, "label": key})
            for key in KEYS:
                await c.call("memory.set", {"key": key, "value": f"{key} is remembered"})
            for path in NOTES:
                await c.call("memory.write", {"path": path, "content": f"# {path}\n\nA note.\n"})
            sent = await c.call("chat.send", {"sessionKey": SESSIONS[0], "message": "hello there"})
            await c.run_to_end(sent["runId"])
            out.append(Engine(name, gw, c))
        yield out
    finally:
        for e in out:
            await e.c.close()
        for gw in started:
            await gw.stop()


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_every_method_takes_hostile_params_alike_on_both_engines(engines, caplog, data):
    files, pg = engines
    methods = {m["name"]: m["params"] for m in (await files.c.call("system.methods"))["methods"]}
    assert methods == {m["name"]: m["params"] for m in (await pg.c.call("system.methods"))["methods"]}
    method, params = data.draw(call(methods), label="call")
    print(
        "CALL",
        method,
        repr(params)[:300],
        files.c.ws.close_code,
        pg.c.ws.close_code,
        files.c.ws.close_reason,
        pg.c.ws.close_reason,
        flush=True,
    )
    caplog.set_level(logging.ERROR)
    caplog.clear()
    with structlog.testing.capture_logs() as logs:
        answers = [await one_call(engine, method, params) for engine in engines]
    event(f"{method}: {outcome(answers[0][0])[0]}")
    for engine, (answer, before, after) in zip(engines, answers):
        if "error" in answer:
            err = answer["error"]
            assert err["code"] in KNOWN_CODES, (engine.name, method, err)
            if err["code"] == -32602:
                assert str((err.get("data") or {}).get("field", "")).startswith("params"), err
            if before is not None:
                assert after == before, (engine.name, method, "a refused call changed what is stored")
    assert outcome(answers[0][0]) == outcome(answers[1][0]), (method, answers[0][0], answers[1][0])
    if "result" in answers[0][0]:
        stored = [await read_back(e, method, await e.resolve(params), a[0]["result"]) for e, a in zip(engines, answers)]
        assert stored[0] == stored[1], (method, stored)
    assert not logged_failures(logs, caplog.records), logged_failures(logs, caplog.records)
