"""A SIGKILL mid-delete loses nothing: sessions and keyed memories are being deleted and restored (the
trash) when the gateway is killed; after a restart every one of them is either live or in the trash,
exactly once, whole (every message, every version), and what a delete or restore acknowledged stands.
Then each crash window of the files engine's moves, made on disk as a crash leaves it, is finished by
the next open."""

from __future__ import annotations

import asyncio
import os
import random

import orjson

from gateway.storage.files.sessions import FileSessionStore
from tests.contract.test_sessions import msg
from tests.helpers import GatewayProcess, connect_client

CONFIG = """[memory]
enabled = true
[memory.embeddings]
provider = "none"
[chat]
offlineDeltaDelay = 0.001
"""


async def _where(c, keys: list[str]) -> dict[str, str]:
    live = {s["sessionKey"] for s in (await c.call("sessions.list", {"limit": 500}))["sessions"]}
    trash = [s["sessionKey"] for s in (await c.call("sessions.trash", {"limit": 500}))["sessions"]]
    assert len(trash) == len(set(trash)) and not (live & set(trash)), "in both places, or twice"
    return {k: "live" if k in live else "trash" if k in trash else "lost" for k in keys}


async def _keyed_where(c, keys: list[str]) -> dict[str, str]:
    live = {m["key"] for m in (await c.call("memory.list", {"limit": 500}))["memories"]}
    trash = [m["key"] for m in (await c.call("memory.trash", {"limit": 500}))["memories"]]
    assert len(trash) == len(set(trash)) and not (live & set(trash))
    return {k: "live" if k in live else "trash" if k in trash else "lost" for k in keys}


async def _churn(c, key: str, n: int, acked: dict[str, str]) -> None:
    """Move session `key` and keyed memory k<n> to the other side: live to the trash, or back."""
    where = (await _where(c, [key]))[key]
    method = "sessions.delete" if where == "live" else "sessions.restore"
    await c.call(method, {"sessionKey": key})
    acked[key] = "trash" if method == "sessions.delete" else "live"
    kk = f"k{n}"
    kwhere = (await _keyed_where(c, [kk]))[kk]
    await c.call("memory.delete" if kwhere == "live" else "memory.restore", {"key": kk})
    acked[kk] = "trash" if kwhere == "live" else "live"


async def test_sigkill_while_deleting_and_restoring_loses_nothing(tmp_path):
    rng = random.Random(int(os.environ.get("CRASH_SEED", "3")))
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.toml").write_text(CONFIG)
    gw = GatewayProcess(state, env={"OPENAI_BASE_URL": ""})
    said: dict[str, str] = {}
    values: dict[str, list[str]] = {}
    acked: dict[str, str] = {}  # what an answered delete or restore says it is
    try:
        gw.start()
        c = await connect_client(gw.url, gw.token)
        for i in range(10):
            key = (await c.call("sessions.create", {"label": f"s{i}"}))["sessionKey"]
            said[key] = f"session {i} says {rng.random():.9f}"
            await c.run_to_end((await c.call("chat.send", {"sessionKey": key, "message": said[key]}))["runId"])
            values[f"k{i}"] = [f"first value of k{i}", f"second value of k{i}"]
            for v in values[f"k{i}"]:
                await c.call("memory.set", {"key": f"k{i}", "value": v})
        for round_ in range(3):
            keys = list(said)
            rng.shuffle(keys)

            tasks = [asyncio.create_task(_churn(c, k, n, acked)) for n, k in enumerate(keys)]
            await asyncio.sleep(rng.uniform(0.02, 0.3))
            gw.proc.kill()  # SIGKILL, with deletes and restores in flight
            gw.proc.wait(10)
            await asyncio.gather(*tasks, return_exceptions=True)  # cut short by the kill, or done
            c._reader.cancel()
            gw.log.rename(gw.log.with_name(f"serve.{round_}.log"))
            gw.start()
            c = await connect_client(gw.url, gw.token)
            where = await _where(c, list(said))
            kwhere = await _keyed_where(c, list(values))
            assert "lost" not in where.values() and "lost" not in kwhere.values(), (where, kwhere)
            # Answered before the kill: it stands (each key is moved once a round).
            for key, state_ in {**where, **kwhere}.items():
                if key in acked:
                    assert state_ == acked[key], (key, state_, acked[key])
            for key, place in where.items():  # whole: restored, every message is there
                if place == "trash":
                    await c.call("sessions.restore", {"sessionKey": key})
                hist = await c.call("sessions.history", {"sessionKey": key})
                assert [m["content"] for m in hist["messages"] if m["role"] == "user"] == [said[key]]
            for key, place in kwhere.items():
                if place == "trash":
                    await c.call("memory.restore", {"key": key})
                h = await c.call("memory.history", {"key": key})
                assert [v["value"] for v in h["versions"]] == values[key][::-1]
            acked.clear()
        await c.close()
    finally:
        gw.kill()


async def test_every_crash_window_of_a_files_delete_or_restore_is_finished_on_open(tmp_path):
    """The steps: delete = move the transcript, write the trash entry, write sessions.json; restore =
    write sessions.json, move the transcript back, drop the entry. Stopped after each, the next open
    makes it what sessions.json says, with the transcript whole."""
    sessions_dir = tmp_path / "agents" / "main" / "sessions"
    trash_dir = tmp_path / "agents" / "main" / "trash"

    async def fresh() -> FileSessionStore:
        s = FileSessionStore(sessions_dir)
        await s.open()
        return s

    s = await fresh()
    await s.create(key="w")
    await s.append_messages("w", msg("user", "keep me", "2030-01-01T00:00:00.000Z"))
    await s.flush()
    data = (sessions_dir / "w.jsonl").read_bytes()
    meta = await s.get("w")
    await s.close()
    listed = orjson.loads((sessions_dir / "sessions.json").read_bytes())
    (trash_dir / "sessions").mkdir(parents=True)

    def trash_file(entries: dict) -> None:
        (trash_dir / "sessions.json").write_bytes(orjson.dumps({"version": 1, "trash": entries}))

    entry = {**meta, "deletedAt": "2030-02-01T00:00:00.000Z"}
    windows = {
        # delete, after moving the transcript: still listed → live, transcript back
        "delete moved": ("live", True, None),
        # delete, after the trash entry too: still listed → live, entry dropped
        "delete entry": ("live", True, entry),
        # restore, after writing sessions.json (moved and entry still there) → live
        "restore listed": ("live", True, entry),
        # restore, after moving it back (entry still there) → live, entry dropped
        "restore moved": ("live", False, entry),
        # purge, after dropping the entry (the transcript still in the trash, not listed) → gone
        "purge entry": ("gone", True, None),
    }
    for name, (want, in_trash_dir, trash_entry) in windows.items():
        keep_listed = want == "live"
        sessions = dict(listed["sessions"]) if keep_listed else {}
        (sessions_dir / "sessions.json").write_bytes(
            orjson.dumps({"version": 1, "generation": 99, "sessions": sessions})
        )
        live_file, moved = sessions_dir / "w.jsonl", trash_dir / "sessions" / "w.jsonl"
        for f in (live_file, moved):
            f.unlink(missing_ok=True)
        (moved if in_trash_dir else live_file).write_bytes(data)
        trash_file({"w": trash_entry} if trash_entry else {})
        s = await fresh()
        try:
            if want == "live":
                assert await s.get("w") == meta, name
                assert live_file.read_bytes() == data and not moved.exists(), name
                assert await s.trash() == [], name
            else:
                assert not await s.exists("w") and await s.trash() == [] and not moved.exists(), name
        finally:
            await s.close()
