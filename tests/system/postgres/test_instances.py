"""Several gateways on one PostgreSQL database (storage.url): one service behind any of them.

Each gateway has its own state dir (its local mirrors and memory index) and port; they share only the
database, a real PostgreSQL started by the `postgres_url` fixture.
"""

from __future__ import annotations

import contextlib
import signal

import pytest

from tests.helpers import GatewayProcess, RpcError, connect_client, wait_for


async def pair(start_gateway, postgres_url, **overrides):
    """Gateways A and B on one database."""
    common = {"storage.url": postgres_url, **overrides}
    a = await start_gateway("a", **{"storage.instanceId": "a", **common})
    b = await start_gateway("b", **{"storage.instanceId": "b", **common})
    return a, b


async def test_a_session_made_on_one_gateway_is_served_by_the_other(start_gateway, postgres_url):
    a, b = await pair(start_gateway, postgres_url)
    ca, cb = await a.client(), await b.client()
    try:
        assert (await cb.call("system.health"))["storage"] == {
            "engine": "postgresql",
            "instance": "b",
            "eventsDropped": 0,
        }
        key = (await ca.call("sessions.create", {"label": "shared"}))["sessionKey"]
        listed = await cb.call("sessions.list")
        assert [s["sessionKey"] for s in listed["sessions"]] == [key] and listed["total"] == 1
        # A turn on each gateway; both transcripts are one.
        for c in (ca, cb):
            run = await c.call("chat.send", {"sessionKey": key, "message": f"hello from {c is ca and 'a' or 'b'}"})
            events = await c.run_to_end(run["runId"])
            assert events[-1]["method"] == "chat.final"
        for c in (ca, cb):
            history = await c.call("sessions.history", {"sessionKey": key})
            texts = [m["content"] for m in history["messages"] if m["role"] == "user"]
            assert texts == ["hello from a", "hello from b"]
            assert (await c.call("sessions.get", {"sessionKey": key}))["messageCount"] == 4
        # A label set on B shows on A; a delete on A is a delete on B.
        await cb.call("sessions.update", {"sessionKey": key, "label": "renamed"})
        assert (await ca.call("sessions.get", {"sessionKey": key}))["label"] == "renamed"
        await ca.call("sessions.delete", {"sessionKey": key})
        with pytest.raises(RpcError) as ei:
            await cb.call("sessions.get", {"sessionKey": key})
        assert ei.value.code == -32004
        mirror = b.config.sessions_dir() / f"{key}.jsonl"

        async def mirror_gone():
            return not mirror.exists()

        await wait_for(mirror_gone)
    finally:
        await ca.close()
        await cb.close()


async def test_an_agent_made_through_a_is_served_by_b(start_gateway, postgres_url):
    # B has never seen the agent (no folder in its state dir): the database says it exists.
    a, b = await pair(start_gateway, postgres_url)
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create", {"agentId": "work", "label": "standup"}))["sessionKey"]
        listed = await cb.call("sessions.list", {"agentId": "work"})
        assert [(s["sessionKey"], s["label"]) for s in listed["sessions"]] == [(key, "standup")]
        with pytest.raises(RpcError) as ei:
            await cb.call("sessions.list", {"agentId": "nobody"})
        assert ei.value.code == -32004
    finally:
        await ca.close()
        await cb.close()


async def test_a_subscriber_on_b_receives_a_run_started_on_a(start_gateway, postgres_url):
    a, b = await pair(start_gateway, postgres_url)
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await cb.call("sessions.subscribe", {"sessionKey": key})
        run = await ca.call("chat.send", {"sessionKey": key, "message": "tell me about the red boat"})
        on_a = await ca.run_to_end(run["runId"])
        on_b = await cb.run_to_end(run["runId"])
        assert [e["method"] for e in on_b] == [e["method"] for e in on_a]
        assert [e["params"]["seq"] for e in on_b] == list(range(1, len(on_b) + 1))
        assert on_b[-1]["method"] == "chat.final"
        assert on_b[-1]["params"]["message"] == on_a[-1]["params"]["message"]
    finally:
        await ca.close()
        await cb.close()


async def test_one_run_per_session_and_idempotency_hold_across_gateways(start_gateway, postgres_url):
    # A slow offline reply, so that the run on A is still going when B is asked.
    a, b = await pair(start_gateway, postgres_url, **{"chat.offlineDeltaDelay": 0.05})
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        first = await ca.call(
            "chat.send", {"sessionKey": key, "message": "a long question " * 20, "idempotencyKey": "k-1"}
        )
        again = await cb.call(
            "chat.send", {"sessionKey": key, "message": "a long question " * 20, "idempotencyKey": "k-1"}
        )
        assert again == {"runId": first["runId"], "status": "duplicate"}
        with pytest.raises(RpcError) as ei:
            await cb.call("chat.send", {"sessionKey": key, "message": "and another"})
        assert ei.value.code == -32009 and ei.value.data["runId"] == first["runId"]
        # chat.abort on B stops A's run; A records the partial reply and every subscriber hears it.
        await cb.call("sessions.subscribe", {"sessionKey": key})
        assert (await cb.call("chat.abort", {"sessionKey": key})) == {"aborted": True}
        on_a = await ca.run_to_end(first["runId"])
        on_b = await cb.run_to_end(first["runId"])
        assert on_a[-1]["method"] == on_b[-1]["method"] == "chat.aborted"

        async def free():
            try:
                return await cb.call("chat.send", {"sessionKey": key, "message": "now?"})
            except RpcError as exc:
                if exc.code == -32009:  # A's release may not have committed yet
                    return None
                raise

        second = await wait_for(free)
        assert (await cb.run_to_end(second["runId"]))[-1]["method"] == "chat.final"
    finally:
        await ca.close()
        await cb.close()


async def test_a_memory_made_through_a_is_found_through_b(start_gateway, postgres_url):
    a, b = await pair(
        start_gateway,
        postgres_url,
        memory=True,
        **{"memory.embeddings.provider": "none", "memory.sync.sessionDebounceMs": 50},
    )
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        run = await ca.call("chat.send", {"sessionKey": key, "message": "My sister Alejandra keeps bees in Oaxaca."})
        await ca.run_to_end(run["runId"])

        async def found():
            res = await cb.call("memory.search", {"query": "Alejandra bees", "sources": ["sessions"]})
            return res["results"]

        results = await wait_for(found)
        assert results[0]["path"] == f"sessions/{key}.jsonl" and "Oaxaca" in results[0]["snippet"]
    finally:
        await ca.close()
        await cb.close()


async def test_killing_a_mid_run_leaves_b_serving_and_the_run_aborted(start_gateway, postgres_url, tmp_path):
    state = tmp_path / "killed"
    state.mkdir()
    (state / "config.toml").write_text(
        '[storage]\ninstanceId = "doomed"\n[chat]\nofflineDeltaDelay = 0.2\n[memory]\nenabled = false\n'
    )
    proc = GatewayProcess(state, env={"OPENAI_BASE_URL": "", "JARVIS_DATABASE_URL": postgres_url}).start()
    b = await start_gateway("b", **{"storage.url": postgres_url, "storage.instanceId": "b"})
    ca = await connect_client(proc.url, proc.token)
    cb = await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await cb.call("sessions.subscribe", {"sessionKey": key})
        run = await ca.call("chat.send", {"sessionKey": key, "message": "explain the tides " * 10})
        first = await cb.next_event("chat.delta")  # B sees the run streaming from A
        assert first["params"]["runId"] == run["runId"]
        proc.signal(signal.SIGKILL)
        proc.wait()
        # B notices the dead gateway, ends its run for every subscriber and in the transcript.
        aborted = await cb.next_event("chat.aborted", timeout=30)
        assert aborted["params"]["runId"] == run["runId"] and aborted["params"]["partial"].startswith(
            first["params"]["delta"]
        )
        history = (await cb.call("sessions.history", {"sessionKey": key}))["messages"]
        assert [m["role"] for m in history] == ["user", "assistant"]
        assert history[0]["content"].startswith("explain the tides")  # acknowledged, so kept
        assert history[1].get("aborted") is True
        follow = await cb.call("chat.send", {"sessionKey": key, "message": "still there?"})
        assert (await cb.run_to_end(follow["runId"]))[-1]["method"] == "chat.final"
    finally:
        await cb.close()
        with contextlib.suppress(Exception):
            await ca.close()
        proc.kill()


async def test_a_wrong_database_url_is_a_clear_error(tmp_path):
    from gateway.app import Gateway
    from gateway.errors import Unavailable
    from tests.helpers import make_config

    gw = Gateway(make_config(tmp_path / "s", **{"storage.url": "postgresql://nobody:secret@127.0.0.1:1/none"}))
    with pytest.raises(Unavailable) as ei:
        await gw.start()
    await gw.shutdown()
    assert "PostgreSQL unreachable at postgresql://nobody:***@127.0.0.1:1/none" in ei.value.message
    assert "secret" not in ei.value.message


async def test_a_lost_listener_reconnects_and_catches_up(start_gateway, postgres_url):
    import asyncpg

    a, b = await pair(start_gateway, postgres_url)
    ca, cb = await a.client(), await b.client()
    try:
        key = (await ca.call("sessions.create"))["sessionKey"]
        await cb.call("sessions.subscribe", {"sessionKey": key})
        admin = await asyncpg.connect(postgres_url)
        try:  # the database drops B's LISTEN connection (a restart, a network blip)
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'jarvis:b:listen'"
            )
        finally:
            await admin.close()
        assert killed == 1
        # What A appends while B is not listening reaches B's mirror once B listens again.
        run = await ca.call("chat.send", {"sessionKey": key, "message": "written while B was deaf"})
        await ca.run_to_end(run["runId"])
        mirror = b.config.sessions_dir() / f"{key}.jsonl"

        async def caught_up():
            return mirror.exists() and "written while B was deaf" in mirror.read_text()

        await wait_for(caught_up)
        # And events flow again.
        run = await ca.call("chat.send", {"sessionKey": key, "message": "and now?"})
        assert (await cb.run_to_end(run["runId"]))[-1]["method"] == "chat.final"
    finally:
        await ca.close()
        await cb.close()


def test_serve_with_an_unreachable_database_says_so_and_exits_1(tmp_path):
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    env = {
        **os.environ,
        "JARVIS_STATE_DIR": str(tmp_path / "s"),
        "OPENAI_BASE_URL": "",
        "JARVIS_DATABASE_URL": "postgresql://me:hunter2@127.0.0.1:1/db",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "jarvis: cannot start: PostgreSQL unreachable at postgresql://me:***@127.0.0.1:1/db" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "hunter2" not in proc.stderr + proc.stdout


async def test_a_database_that_goes_away_is_a_retryable_error_and_service_resumes(start_gateway, postgres_url):
    import asyncpg

    a = await start_gateway("a", **{"storage.url": postgres_url, "storage.instanceId": "a"})
    c = await a.client()
    name = postgres_url.split("?")[0].rsplit("/", 1)[1]
    admin_url = postgres_url.replace(f"/{name}", "/postgres")
    admin = await asyncpg.connect(admin_url)
    try:
        key = (await c.call("sessions.create"))["sessionKey"]
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
        with pytest.raises(RpcError) as ei:
            await c.call("sessions.get", {"sessionKey": key})
        assert ei.value.code == -32050 and ei.value.data["retryable"] is True
        assert "the database cannot be reached" in ei.value.message
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')

        async def back():
            try:
                return await c.call("sessions.get", {"sessionKey": key})
            except RpcError as exc:
                if exc.code == -32050:
                    return None
                raise

        assert (await wait_for(back))["sessionKey"] == key
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()
        await c.close()
