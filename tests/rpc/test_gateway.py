"""End to end through a real gateway and the real websockets client."""

import asyncio
import contextlib
import time

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.sessions import transcript as tx
from tests.helpers import RpcError, connect_client, wait_for


async def test_wscat_flow_survives_restart(gateway, client):
    session = await client.call("sessions.create", {"label": "first"})
    key = session["sessionKey"]
    assert session["label"] == "first" and session["messageCount"] == 0
    sent = await client.call("chat.send", {"sessionKey": key, "message": "Remember: the boat is blue."})
    assert sent["status"] == "started"
    events = await client.run_to_end(sent["runId"])
    deltas = [e for e in events if e["method"] == "chat.delta"]
    final = events[-1]
    assert final["method"] == "chat.final"
    assert len(deltas) >= 3, "the reply is streamed in several deltas"
    assert [e["params"]["seq"] for e in events] == list(range(1, len(events) + 1))
    content = final["params"]["message"]["content"]
    assert "".join(d["params"]["delta"] for d in deltas) == content
    assert "not a language model" in content and "the boat is blue" in content

    path = gateway.config.sessions_dir() / f"{key}.jsonl"
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert lines[0]["type"] == "session" and lines[0]["sessionKey"] == key and lines[0]["agentId"] == "main"
    assert [(r["message"]["role"], r["runId"]) for r in lines[1:]] == [
        ("user", sent["runId"]),
        ("assistant", sent["runId"]),
    ]
    assert lines[2]["message"]["content"] == content and lines[2]["id"] == final["params"]["message"]["id"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(gateway.config.state_dir.stat().st_mode & 0o777) == "0o700"
    assert oct((gateway.config.sessions_dir() / "sessions.json").stat().st_mode & 0o777) == "0o600"

    await client.close()
    await gateway.restart()
    c2 = await gateway.client(how="header")
    hist = await c2.call("sessions.history", {"sessionKey": key})
    assert [m["role"] for m in hist["messages"]] == ["user", "assistant"]
    assert hist["messages"][0]["content"] == "Remember: the boat is blue." and hist["hasMore"] is False
    assert hist["messages"][1]["runId"] == sent["runId"]
    got = await c2.call("sessions.get", {"sessionKey": key})
    assert got["messageCount"] == 2
    await c2.close()


async def test_three_ways_to_authenticate(gateway):
    c = await connect_client(gateway.url, gateway.token, how="header")
    assert (await c.call("system.health"))["status"] == "ok"
    await c.close()
    async with connect(gateway.url) as ws:
        await ws.send(orjson.dumps({"id": "a", "method": "auth", "params": {"token": gateway.token}}).decode())
        res = orjson.loads(await ws.recv())
        assert res["id"] == "a" and res["result"]["protocol"] == 1
        assert res["result"]["server"]["name"] == "jarvis-gateway" and res["result"]["connectionId"]


async def test_wrong_token_header_is_401(gateway):
    with pytest.raises(InvalidStatus) as exc:
        async with connect(gateway.url, additional_headers={"Authorization": "Bearer nope"}):
            pass
    assert exc.value.response.status_code == 401


@pytest.mark.parametrize(
    "first",
    [
        {"type": "auth", "token": "wrong"},
        {"id": 1, "method": "auth", "params": {"token": "wrong"}},
        {"id": 1, "method": "system.health"},
    ],
)
async def test_unauthenticated_frames_get_32001_and_1008(gateway, first):
    async with connect(gateway.url) as ws:
        await ws.send(orjson.dumps(first).decode())
        msg = orjson.loads(await ws.recv())
        assert msg["error"]["code"] == -32001
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1008


async def test_no_auth_within_deadline_closes_1008(start_gateway):
    gw = await start_gateway(**{"server.authTimeout": 0.3})
    async with connect(gw.url) as ws:
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1008


async def test_preauth_frame_over_64k_closes_1009(gateway):
    async with connect(gateway.url, max_size=None) as ws:
        await ws.send("x" * (65 * 1024))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1009


async def test_wrong_tokens_are_slowed_and_rate_limited_but_the_right_one_always_gets_in(start_gateway):
    # The right token is never slowed like a wrong one: it gets in while wrong ones still wait out their
    # delay (an order, not a time: it fails only if the owner's auth took the whole 3 s delay).
    gw = await start_gateway(**{"server.authFailuresPerMinute": 3, "server.authFailureDelay": 3.0})
    right = orjson.dumps({"type": "auth", "token": gw.token}).decode()

    async def owner_gets_in() -> None:
        async with connect(gw.url) as ws:
            await ws.send(right)
            assert orjson.loads(await ws.recv())["method"] == "auth.ok"

    async with contextlib.AsyncExitStack() as stack:
        wrong = [await stack.enter_async_context(connect(gw.url)) for _ in range(4)]
        started = time.monotonic()
        for ws in wrong[:3]:
            await ws.send('{"type":"auth","token":"bad"}')
        answers = [asyncio.ensure_future(ws.recv()) for ws in wrong[:3]]
        await owner_gets_in()
        assert not any(a.done() for a in answers)  # … while the three wrong ones are still held
        for a in answers:
            assert orjson.loads(await a)["error"]["code"] == -32001
        assert time.monotonic() - started >= 3.0  # every wrong answer is slowed down
        await wrong[3].send('{"type":"auth","token":"bad"}')  # past the budget, wrong tokens are "rate limited"
        limited = asyncio.ensure_future(wrong[3].recv())
        await owner_gets_in()  # … and the owner's right token still gets in, ahead of the refusal
        assert not limited.done()
        err = orjson.loads(await limited)["error"]
        assert err["code"] == -32029 and err["data"]["retryAfterMs"] > 0
    async with connect(gw.url, additional_headers={"Authorization": f"Bearer {gw.token}"}) as ws:
        await ws.send('{"id":1,"method":"system.health"}')
        assert orjson.loads(await ws.recv())["result"]["status"] == "ok"


async def test_origin_allow_list(gateway):
    with pytest.raises(InvalidStatus) as exc:
        async with connect(gateway.url, origin="http://evil.example"):
            pass
    assert exc.value.response.status_code == 403
    async with connect(gateway.url, origin=f"http://localhost:{gateway.gw.port}") as ws:
        await ws.send(orjson.dumps({"type": "auth", "token": gateway.token}).decode())
        assert orjson.loads(await ws.recv())["method"] == "auth.ok"


async def test_bad_input_gets_specific_errors_and_others_are_unaffected(gateway, client):
    other = await gateway.client()
    await client.send_text("{not json")
    err = await asyncio.wait_for(client.raw.get(), 5)
    assert err == {"jsonrpc": "2.0", "id": None, "error": err["error"]} and err["error"]["code"] == -32700
    await client.send_text("[1,2]")
    batch = await asyncio.wait_for(client.raw.get(), 5)
    assert [e["error"]["code"] for e in batch] == [-32600, -32600]
    await client.ws.send(b"\x00\x01binary")
    err = await asyncio.wait_for(client.raw.get(), 5)
    assert err["error"]["code"] == -32600 and "binary" in err["error"]["message"]

    with pytest.raises(RpcError) as exc:
        await client.call("no.such.method")
    assert exc.value.code == -32601
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.list", {"limit": "ten"})
    assert exc.value.code == -32602 and exc.value.data["field"] == "params.limit"
    assert exc.value.message == "params.limit: must be an integer, got string"
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.get", {"sessionKey": "../../etc/passwd"})
    assert exc.value.code == -32602 and "must match" in exc.value.message
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.get", {"sessionKey": "missing"})
    assert exc.value.code == -32004
    with pytest.raises(RpcError) as exc:
        await client.call("chat.send", {"sessionKey": "missing", "message": ""})
    assert exc.value.code == -32602 and exc.value.data["field"] == "params.message"
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.list", [1, 2])
    assert exc.value.code == -32602

    # Still serving this client and the other one.
    assert (await client.call("system.health"))["status"] == "ok"
    assert (await other.call("system.health"))["connections"] == 2
    await other.close()


async def test_a_handler_that_never_waits_answers_with_the_same_errors(client):
    # system.health is a plain function, answered without a task: its errors are the usual ones.
    with pytest.raises(RpcError) as exc:
        await client.call("system.health", {"x": 1})
    assert exc.value.code == -32602 and exc.value.data["field"] == "params.x"
    assert exc.value.message.startswith("params.x: unknown parameter")


async def test_oversized_frame_closes_1009_and_others_go_on(gateway, client):
    other = await gateway.client()
    await client.send_text('{"id":1,"method":"system.health","params":{"x":"' + "y" * (1 << 20) + '"}}')
    await asyncio.wait_for(client._reader, 5)
    assert client.ws.close_code == 1009
    assert (await other.call("system.health"))["status"] == "ok"
    await other.close()


async def test_batches_and_notifications(client):
    await client.send_text(
        orjson.dumps(
            [
                {"id": 1, "method": "system.health"},
                {"method": "system.health"},
                {"id": 2, "method": "nope"},
                {"jsonrpc": "2.0", "id": 3, "method": "sessions.list", "params": {"limit": 1}},
            ]
        ).decode()
    )
    answer = await asyncio.wait_for(client.raw.get(), 5)
    by_id = {a["id"]: a for a in answer}
    assert set(by_id) == {1, 2, 3}, "notifications are not answered"
    assert by_id[1]["result"]["status"] == "ok" and by_id[2]["error"]["code"] == -32601
    assert by_id[3]["result"] == {"sessions": [], "total": 0}
    await client.send_text('{"method":"system.health"}')
    await client.send_text('[{"method":"system.health"}]')
    assert (await client.call("system.health"))["status"] == "ok"
    assert client.raw.empty(), "notifications alone get no answer at all"


async def test_system_methods_schemas_come_from_the_validators(client):
    methods = {m["name"]: m for m in (await client.call("system.methods"))["methods"]}
    assert {
        "system.health",
        "sessions.create",
        "sessions.list",
        "sessions.get",
        "sessions.history",
        "sessions.delete",
        "sessions.subscribe",
        "sessions.unsubscribe",
        "chat.send",
        "chat.abort",
    } <= set(methods)
    send = methods["chat.send"]["params"]
    assert send["required"] == ["sessionKey", "message"]
    assert send["properties"]["message"]["maxLength"] == 100_000
    assert methods["sessions.list"]["params"]["properties"]["limit"]["maximum"] == 500


async def test_sessions_list_get_delete_and_fanout(gateway, client):
    a = await client.call("sessions.create", {"label": "a"})
    b = await client.call("sessions.create", {})
    listed = await client.call("sessions.list", {"limit": 10})
    assert listed["total"] == 2 and [s["sessionKey"] for s in listed["sessions"]] == [b["sessionKey"], a["sessionKey"]]
    page = await client.call("sessions.list", {"limit": 1, "offset": 1})
    assert [s["sessionKey"] for s in page["sessions"]] == [a["sessionKey"]]

    watcher = await gateway.client()
    assert await watcher.call("sessions.subscribe", {"sessionKey": a["sessionKey"]}) == {"subscribed": True}
    sent = await client.call("chat.send", {"sessionKey": a["sessionKey"], "message": "hi"})
    mine = await client.run_to_end(sent["runId"])
    theirs = await watcher.run_to_end(sent["runId"])
    assert [e["params"]["seq"] for e in theirs] == [e["params"]["seq"] for e in mine]
    assert await watcher.call("sessions.unsubscribe", {"sessionKey": a["sessionKey"]}) == {"subscribed": False}
    sent = await client.call("chat.send", {"sessionKey": a["sessionKey"], "message": "again"})
    await client.run_to_end(sent["runId"])
    assert watcher.events.empty(), "no events after unsubscribe"
    await watcher.close()

    deleted = await client.call("sessions.delete", {"sessionKey": a["sessionKey"]})
    assert deleted["deleted"] is True and deleted["trashed"] is True and deleted["expiresAt"] > a["createdAt"]
    assert not (gateway.config.sessions_dir() / f"{a['sessionKey']}.jsonl").exists()
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.get", {"sessionKey": a["sessionKey"]})
    assert exc.value.code == -32004
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.delete", {"sessionKey": a["sessionKey"]})
    assert exc.value.code == -32004


async def test_history_paging(client):
    key = (await client.call("sessions.create"))["sessionKey"]
    for i in range(3):
        sent = await client.call("chat.send", {"sessionKey": key, "message": f"m{i}"})
        await client.run_to_end(sent["runId"])
    full = (await client.call("sessions.history", {"sessionKey": key}))["messages"]
    assert [m["content"] for m in full if m["role"] == "user"] == ["m0", "m1", "m2"]
    last2 = await client.call("sessions.history", {"sessionKey": key, "limit": 2})
    assert last2["hasMore"] is True and last2["messages"] == full[-2:]
    before = await client.call("sessions.history", {"sessionKey": key, "limit": 2, "before": full[-2]["id"]})
    assert before["messages"] == full[-4:-2] and before["hasMore"] is True
    with pytest.raises(RpcError) as exc:
        await client.call("sessions.history", {"sessionKey": key, "before": "nope"})
    assert exc.value.code == -32004


async def test_idempotency_and_one_run_per_session(start_gateway):
    gw = await start_gateway(**{"chat.offlineDeltaDelay": 0.05})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    first = await c.call("chat.send", {"sessionKey": key, "message": "once", "idempotencyKey": "k1"})
    dup = await c.call("chat.send", {"sessionKey": key, "message": "once", "idempotencyKey": "k1"})
    assert dup == {"runId": first["runId"], "status": "duplicate"}
    with pytest.raises(RpcError) as exc:
        await c.call("chat.send", {"sessionKey": key, "message": "twice"})
    assert exc.value.code == -32009 and exc.value.data["runId"] == first["runId"]
    # The socket stays responsive while the run streams.
    assert (await c.call("system.health"))["status"] == "ok"
    events = await c.run_to_end(first["runId"])
    assert events[-1]["method"] == "chat.final"
    hist = await c.call("sessions.history", {"sessionKey": key})
    assert [m["content"] for m in hist["messages"] if m["role"] == "user"] == ["once"]
    await c.close()


async def test_abort_keeps_the_partial_reply(start_gateway):
    gw = await start_gateway(**{"chat.offlineDeltaDelay": 0.1})
    c = await gw.client()
    key = (await c.call("sessions.create"))["sessionKey"]
    sent = await c.call("chat.send", {"sessionKey": key, "message": "long answer please"})
    await c.next_event("chat.delta")
    assert await c.call("chat.abort", {"sessionKey": key, "runId": "other-run"}) == {"aborted": False}
    assert await c.call("chat.abort", {"sessionKey": key}) == {"aborted": True}
    events = await c.run_to_end(sent["runId"])
    aborted = events[-1]
    assert aborted["method"] == "chat.aborted" and aborted["params"]["partial"]
    records = [r.data for r in tx.iter_records(gw.config.sessions_dir() / f"{key}.jsonl")]
    assert records[-1]["aborted"] is True and records[-1]["message"]["content"] == aborted["params"]["partial"]
    assert await c.call("chat.abort", {"sessionKey": key}) == {"aborted": False}
    # A new run may start right away.
    again = await c.call("chat.send", {"sessionKey": key, "message": "next"})
    assert (await c.run_to_end(again["runId"]))[-1]["method"] == "chat.final"
    await c.close()


async def test_torn_transcript_is_repaired_without_losing_lines(gateway, client):
    key = (await client.call("sessions.create"))["sessionKey"]
    sent = await client.call("chat.send", {"sessionKey": key, "message": "before the crash"})
    await client.run_to_end(sent["runId"])
    await client.close()
    await gateway.stop()
    path = gateway.config.sessions_dir() / f"{key}.jsonl"
    with open(path, "ab") as fh:
        fh.write(b'{"type":"message","id":"torn","mess')  # the process died mid-write
    await gateway.start()
    c = await gateway.client()
    hist = await c.call("sessions.history", {"sessionKey": key})
    assert [m["content"] for m in hist["messages"]][0] == "before the crash" and len(hist["messages"]) == 2
    sent = await c.call("chat.send", {"sessionKey": key, "message": "after"})
    await c.run_to_end(sent["runId"])
    raw = path.read_bytes()
    assert b"torn" not in raw and raw.endswith(b"\n")
    assert all(orjson.loads(line) for line in raw.splitlines())
    assert len(raw.splitlines()) == 5
    await c.close()


async def test_connection_limit_refuses_cleanly(start_gateway):
    gw = await start_gateway(**{"server.maxConnections": 2})
    a, b = await gw.client(), await gw.client()
    with pytest.raises(InvalidStatus) as exc:
        async with connect(gw.url):
            pass
    assert exc.value.response.status_code == 503
    await a.close()

    async def one_left() -> bool:  # the gateway has seen a's close: its slot is free
        return (await b.call("system.health"))["connections"] == 1

    await wait_for(one_left)
    c = await gw.client()
    assert (await c.call("system.health"))["connections"] == 2
    await b.close()
    await c.close()


async def test_http_routes(gateway):
    import urllib.error
    import urllib.request

    base = f"http://127.0.0.1:{gateway.gw.port}"

    def get(path):
        try:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    status, headers, body = await asyncio.to_thread(get, "/healthz")
    assert status == 200 and orjson.loads(body) == {"status": "ok"}
    status, headers, body = await asyncio.to_thread(get, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    for path in ("/nope", "/static/../services.py", "/static/%2e%2e/app.py", "/static/"):
        assert (await asyncio.to_thread(get, path))[0] == 404, path
    # The page is ES modules importing each other from /static/: every one must come back as JavaScript.
    from gateway.doors.pages import WEB_DIR

    modules = sorted(p.name for p in WEB_DIR.glob("*.js"))
    assert {"app.js", "state.js", "rpc.js", "render.js"} <= set(modules)
    for name in modules:
        status, headers, _ = await asyncio.to_thread(get, f"/static/{name}")
        assert status == 200 and headers["Content-Type"] == "text/javascript; charset=utf-8", name


async def test_delete_racing_a_send_never_brings_the_transcript_back(gateway, client):
    for _ in range(5):
        key = (await client.call("sessions.create"))["sessionKey"]
        await client.send_text(
            orjson.dumps(
                [
                    {"id": "s", "method": "chat.send", "params": {"sessionKey": key, "message": "racing"}},
                    {"id": "d", "method": "sessions.delete", "params": {"sessionKey": key}},
                ]
            ).decode()
        )
        answer = {a["id"]: a for a in await asyncio.wait_for(client.raw.get(), 5)}
        assert answer["d"]["result"]["deleted"] is True
        if "result" in answer["s"]:
            await client.run_to_end(answer["s"]["result"]["runId"])
        await asyncio.sleep(0.05)
        assert not (gateway.config.sessions_dir() / f"{key}.jsonl").exists()


async def test_a_batch_counts_as_many_requests_in_flight(start_gateway):
    gw = await start_gateway(**{"server.maxInflight": 4})
    c = await gw.client()
    await c.send_text(orjson.dumps([{"id": i, "method": "system.health"} for i in range(5)]).decode())
    err = await asyncio.wait_for(c.raw.get(), 5)
    assert err["error"]["code"] == -32029 and "max 4" in err["error"]["message"]
    await c.send_text(orjson.dumps([{"id": i, "method": "system.health"} for i in range(4)]).decode())
    assert len(await asyncio.wait_for(c.raw.get(), 5)) == 4
    await c.close()
