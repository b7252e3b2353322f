"""Issue 43's key attacks, tried against a real gateway: what each reached. Prints one line per attack and
writes JSON (--out), so a checkout before the fixes and one after can be compared side by side:

    .venv/bin/python scripts/redteam_keys.py --out after.json
    git archive <before> gateway | tar -x -C /tmp/before && \
        PYTHONPATH=/tmp/before .venv/bin/python scripts/redteam_keys.py --out before.json

Each attack speaks only the wire (WebSocket JSON-RPC, /v1 over HTTP, the `jarvis` command), so it runs
against any version of the gateway package that PYTHONPATH puts first. The chat model is a local fake
that speaks the OpenAI wire format (tests/fake_openai.py); nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx2 as httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests/ of this checkout; `gateway` from PYTHONPATH when given, before it

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.helpers import RunningGateway, connect_client, make_config  # noqa: E402


async def _ok(c: Any, method: str, params: dict[str, Any]) -> tuple[bool, Any]:
    msg = await c.request(method, params)
    return ("result" in msg), msg.get("result", msg.get("error"))


async def escalation(gw: RunningGateway) -> dict[str, Any]:
    owner = await gw.client()
    for agent in ("main", "side"):
        await owner.call("sessions.create", {"agentId": agent, "sessionKey": f"{agent}-s"})
    await owner.call("memory.set", {"agentId": "side", "key": "side.secret", "value": "side's secret"})
    adm = (await owner.call("principals.create", {"name": "adm", "agents": "main", "scopes": "admin"}))["token"]
    a = await connect_client(gw.url, adm, "frame")
    made, res = await _ok(a, "principals.create", {"name": "wide", "agents": "*", "scopes": "admin,proxy"})
    out: dict[str, Any] = {"created_every_agent_admin_proxy": made}
    if made:
        w = await connect_client(gw.url, res["token"], "frame")
        read, _ = await _ok(w, "memory.get", {"agentId": "side", "key": "side.secret"})
        out["new_token_read_other_agents_memory"] = read
        await w.close()
    entries = (await a.call("audit.list", {"limit": 10000}))["entries"]
    out["own_audit_entries_of_other_agents"] = sum(1 for e in entries if e.get("agent") not in (None, "main"))
    await a.close()
    await owner.close()
    return out


async def bystander(gw: RunningGateway, api: FakeOpenAI) -> dict[str, Any]:
    owner = await gw.client()
    await owner.call("memory.set", {"key": "keep.me", "value": "owner's memory"})
    tok = (await owner.call("principals.create", {"name": "guest", "agents": "main", "scopes": "read,chat"}))["token"]
    guest = await connect_client(gw.url, tok, "frame")
    key = "owner-run"
    await owner.call("sessions.create", {"sessionKey": key})
    await guest.call("sessions.subscribe", {"sessionKey": key})
    api.script(("tools", [("memory_delete", {"key": "keep.me"})]))
    api.reply = "done"
    sent = await owner.call("chat.send", {"sessionKey": key, "message": "tidy"})
    asked = (await guest.next_event("chat.confirm", timeout=20))["params"]
    taken, _ = await _ok(guest, "chat.confirm", {"runId": asked["runId"], "callId": asked["callId"], "allow": True})
    if not taken:
        await owner.call("chat.confirm", {"runId": asked["runId"], "callId": asked["callId"], "allow": False})
    await owner.run_to_end(sent["runId"])
    deleted = "error" in await owner.request("memory.get", {"key": "keep.me"})
    audit = (await owner.call("audit.list", {"limit": 10000}))["entries"]
    named = any(e.get("principal") == "guest" and e["method"] == "chat.confirm" for e in audit)
    await guest.close()
    await owner.close()
    return {"bystander_answer_taken": taken, "owner_memory_deleted": deleted, "audit_names_the_answerer": named}


def _cli(gw: RunningGateway, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JARVIS_STATE_DIR": str(gw.config.state_dir), "JARVIS_GATEWAY_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args, "--port", str(gw.config.server.port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=gw.config.state_dir,  # not a checkout: `-m gateway.cli` finds the package PYTHONPATH names
    )


async def cli_refused_token(gw: RunningGateway) -> dict[str, Any]:
    r = await asyncio.to_thread(_cli, gw, "y" * 43, "memory", "set", "hijacked", "x")
    owner = await gw.client()
    written = "result" in await owner.request("memory.get", {"key": "hijacked"})
    audit = (await owner.call("audit.list", {"limit": 10000}))["entries"]
    who = [e["principal"] for e in audit if e.get("target") == "hijacked"]
    await owner.close()
    out: dict[str, Any] = {"gateway_running": {"exit": r.returncode, "written": written, "audit_says": who}}
    # No gateway answering (the state dir has its gateway.token): the command runs in process.
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "JARVIS_STATE_DIR": tmp, "JARVIS_PORT": "1", "JARVIS_MEMORY_ENABLED": "0"}
        run = [sys.executable, "-m", "gateway.cli"]
        await asyncio.to_thread(subprocess.run, [*run, "token"], env=env, capture_output=True, timeout=60, cwd=tmp)
        r = await asyncio.to_thread(
            subprocess.run,
            [*run, "token", "create", "sneaky", "--agent", "*", "--scope", "admin"],
            env={**env, "JARVIS_GATEWAY_TOKEN": "y" * 43},
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=60,
        )
        audit = Path(tmp, "audit.jsonl")
        lines = [orjson.loads(x) for x in audit.read_bytes().splitlines()] if audit.exists() else []
        out["in_process"] = {
            "exit": r.returncode,
            "principal_made": r.returncode == 0,
            "audit_says": [e["principal"] for e in lines],
        }
    return out


async def recipes(gw: RunningGateway, api: FakeOpenAI) -> dict[str, Any]:
    owner = await gw.client()
    phone = (await owner.call("principals.create", {"name": "phone", "agents": "main", "scopes": "read,chat"}))["token"]
    p = await connect_client(gw.url, phone, "frame")
    phone_session, _ = await _ok(p, "sessions.create", {})
    await p.close()
    await owner.call("memory.set", {"key": "owner.pin", "value": "The owner's PIN is zebracrossing 4321."})
    await owner.call("memory.sync", {})
    web = (await owner.call("principals.create", {"name": "webui", "agents": "main", "scopes": "chat,proxy"}))["token"]
    before_main = (await owner.call("sessions.list"))["total"]
    out: dict[str, Any] = {"phone_key_sessions_create": phone_session}
    async with httpx.AsyncClient(base_url=gw.http_url, timeout=30) as http:
        auth = {"Authorization": f"Bearer {web}"}
        out["proxy_key_get_models_status"] = (await http.get("/v1/models", headers=auth)).status_code
        n = len(api.requests)
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "title: my PIN zebracrossing?"}]}
        await http.post("/v1/chat/completions", headers=auth, json=body)
        sent = orjson.dumps([q["body"] for q in api.requests[n:]]).decode()
        out["anonymous_request_recalled_owner_memory"] = "4321" in sent
        out["anonymous_request_wrote_owner_agent"] = (await owner.call("sessions.list"))["total"] > before_main
        weird = "Zoë"
        digest = hashlib.sha256(weird.encode()).hexdigest()[:24]
        await http.post("/v1/chat/completions", headers=auth, json={**body, "user": weird})
        await http.post("/v1/chat/completions", headers=auth, json={**body, "user": digest})
    audit = (await owner.call("audit.list", {"limit": 10000}))["entries"]
    out["v1_audit_entries_of_the_proxy_key"] = sum(1 for e in audit if e["principal"] == "webui")
    # Before: "Zoë" was user.<digest>, the very agent a user literally named <digest> lands in.
    shared = await owner.request("sessions.list", {"agentId": f"user.{digest}"})
    out["sessions_of_two_users_in_one_agent"] = shared["result"]["total"] if "result" in shared else 0
    made, _ = await _ok(owner, "principals.create", {"name": "kid", "agents": "nosuch", "scopes": "read"})
    exists = "result" in await owner.request("sessions.list", {"agentId": "nosuch"})
    out["token_create_unknown_agent_made_it"] = made and exists
    await owner.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()
    import gateway

    results: dict[str, Any] = {"gateway": str(Path(gateway.__file__).parent)}
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as api:
        cfg = {"server.httpPort": -1, "chat.baseUrl": api.base_url, "chat.model": "fake-model"}
        gw = RunningGateway(make_config(Path(tmp) / "s", memory=True, **cfg, **{"chat.confirmSeconds": 20}))
        await gw.start()
        try:
            results["escalation"] = await escalation(gw)
            results["bystander"] = await bystander(gw, api)
            results["cli"] = await cli_refused_token(gw)
            results["recipes"] = await recipes(gw, api)
        finally:
            await gw.stop()
    for name, got in results.items():
        print(f"{name}: {got}")
    if args.out:
        args.out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    asyncio.run(main())
