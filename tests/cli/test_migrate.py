"""`jarvis migrate --to postgresql://… | sqlite` as a user runs it: the real CLI in a subprocess, a
state dir written by the file engine itself, and a real PostgreSQL (the `postgres_url` fixture)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import orjson

from gateway.sessions import transcript as tx
from gateway.storage.files.sessions import FileSessionStore as SessionStore
from gateway.storage.postgres import redact
from tests.helpers import ROOT

TORN = b'{"type":"message","id":"half-writ'  # a write cut short by a crash: no newline
SETTINGS = {"alpha": {"model": "llama3.1:8b", "systemPrompt": "Answer like a gardener."}}  # a session's own

# agent → [(sessionKey, label, [(role, content), …])]
SESSIONS = {
    "main": [
        (
            "alpha",
            "Garden plans",
            [
                ("user", "Where do the tomatoes go?"),
                ("assistant", "In the greenhouse: Tomaten 🍅 und Gurken — ü, ß, 漢字."),
            ],
        ),
        ("beta", None, [("user", "Remind me: the boat is blue."), ("assistant", "Noted: the boat is blue.")] * 3),
        ("torn", "A crash mid-write", [("user", "This one was cut short."), ("assistant", "So it was.")]),
        ("empty", "Nothing said yet", []),
    ],
    "work": [
        ("daily:standup", "Standup", [("user", "The standup is at nine on Mondays."), ("assistant", "x" * 100_000)]),
        ("retro", "Retro", [("user", "What went well?")]),
    ],
}


def jarvis(*args: str, state_dir: Path, env: dict[str, str] | None = None, timeout: int = 120):
    full_env = {**os.environ, "JARVIS_STATE_DIR": str(state_dir), **(env or {})}
    for name in ("OPENAI_API_KEY", "JARVIS_DATABASE_URL"):
        if name not in (env or {}):
            full_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def ajarvis(*args: str, **kw):
    return await asyncio.to_thread(jarvis, *args, **kw)


async def make_state(state: Path) -> None:
    """Two agents' sessions, written by the file engine (SessionStore), then one torn last line."""
    for agent, sessions in SESSIONS.items():
        store = SessionStore(state / "agents" / agent / "sessions", agent)
        await store.open()
        for key, label, messages in sessions:
            await store.create(label=label, key=key, settings=SETTINGS.get(key))
            for i, (role, content) in enumerate(messages):
                await store.append_messages(
                    key, tx.message_record(f"{key}-{i}", role, content, timestamp=f"2024-05-01T10:{i:02d}:00.000Z")
                )
        if agent == "main":  # a record that is not a message (compaction writes such)
            await store.append_records("beta", {"type": "compaction", "summary": "the boat is blue", "upTo": 4})
        await store.close()
    with open(state / "agents" / "main" / "sessions" / "torn.jsonl", "ab") as fh:
        fh.write(TORN)


def transcripts(state: Path) -> dict[str, bytes]:
    """agent/key → the transcript's complete lines (the bytes a migration copies)."""
    out = {}
    for path in sorted((state / "agents").glob("*/sessions/*.jsonl")):
        data = path.read_bytes()
        out[f"{path.parent.parent.name}/{path.stem}"] = data[: data.rfind(b"\n") + 1]
    return out


def metadata(state: Path) -> dict[str, dict]:
    out = {}
    for path in sorted((state / "agents").glob("*/sessions/sessions.json")):
        for key, meta in orjson.loads(path.read_bytes())["sessions"].items():
            out[f"{path.parent.parent.name}/{key}"] = meta
    return out


async def database(url: str) -> dict[str, tuple[dict, bytes]]:
    """agent/key → (the sessions row, the transcript as bytes) straight from the tables."""
    conn = await asyncpg.connect(url)
    try:
        out = {}
        for s in await conn.fetch("SELECT * FROM sessions ORDER BY agent_id, session_key"):
            rows = await conn.fetch(
                "SELECT seq, line FROM transcript_lines WHERE agent_id = $1 AND session_key = $2 ORDER BY seq",
                s["agent_id"],
                s["session_key"],
            )
            assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
            out[f"{s['agent_id']}/{s['session_key']}"] = (dict(s), b"".join(r["line"].encode() + b"\n" for r in rows))
        return out
    finally:
        await conn.close()


async def test_files_to_postgresql_and_back_is_byte_identical_and_running_it_again_changes_nothing(
    tmp_path, postgres_url
):
    src, back = tmp_path / "src", tmp_path / "back"
    await make_state(src)
    want, meta = transcripts(src), metadata(src)
    assert len(want) == 6 and (src / "agents/main/sessions/torn.jsonl").read_bytes().endswith(TORN)

    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "schema: applied 0001_sessions, 0002_runs_and_idempotency" in out
    assert "OK: 6 sessions copied and checked" in out and "Traceback" not in r.stderr
    table = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split() and line.split()[0] in ("agent", "main", "work", "all")
    }
    assert table["main"][1:3] == ["4", "4"] and table["work"][1:3] == ["2", "2"] and table["all"][-1] == "OK"
    assert f"main/torn: {len(TORN)} bytes" in out  # the torn tail is reported, not copied
    assert "memory indexes: not copied" in out
    assert f"files in {src} → {redact(postgres_url)}" in out  # the URL as shown: never with its password

    db = await database(postgres_url)
    assert {k: v[1] for k, v in db.items()} == want
    for name, (row, data) in db.items():
        assert row["line_count"] == data.count(b"\n")
        own = {"model": row["model"], "systemPrompt": row["system_prompt"]} if row["model"] else {}
        assert {
            "sessionKey": row["session_key"],
            "label": row["label"],
            "createdAt": row["created_at"],
            "updatedAt": row["updated_at"],
            "messageCount": row["message_count"],
            **own,
        } == meta[name]
    assert db["main/alpha"][0]["model"] == "llama3.1:8b", "a session's own settings are copied"

    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=back)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: 6 sessions copied and checked" in r.stdout
    assert transcripts(back) == want and metadata(back) == meta
    for path in (back / "agents").rglob("*"):
        assert path.stat().st_mode & 0o077 == 0, path
    # The file engine opens what was written without a recount (the counters are exact) and reads it.
    store = SessionStore(back / "agents" / "main" / "sessions")
    await store.open()
    assert (await store.get("beta"))["messageCount"] == 6
    first = (await store.history("alpha", 10, None))["messages"][0]
    assert first["content"] == "Where do the tomatoes go?"
    await store.close()

    # Again, both ways: everything is there already, nothing is written.
    stamps = {p: p.stat().st_mtime_ns for p in (back / "agents").rglob("*") if p.is_file()}
    r = await ajarvis("migrate", "--to", "sqlite", state_dir=back, env={"JARVIS_DATABASE_URL": postgres_url})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: 0 sessions copied and checked (line count and SHA-256 equal on both sides), 6 there already" in r.stdout
    assert {p: p.stat().st_mtime_ns for p in (back / "agents").rglob("*") if p.is_file()} == stamps
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "schema: applied" not in r.stdout and "OK: 0 sessions copied" in r.stdout and "6 there already" in r.stdout
    assert await database(postgres_url) == db


async def test_a_gateway_on_the_migrated_database_serves_the_sessions_history(tmp_path, start_gateway, postgres_url):
    await make_state(tmp_path / "src")
    before = await start_gateway("src")  # the file engine, serving the state dir as it was
    c = await before.client()
    want = {}
    for agent, sessions in SESSIONS.items():
        listed = await c.call("sessions.list", {"agentId": agent})
        want[agent] = (
            listed,
            {key: await c.call("sessions.history", {"agentId": agent, "sessionKey": key}) for key, _, _ in sessions},
        )
    await c.close()
    await before.stop()
    assert [m["content"] for m in want["main"][1]["torn"]["messages"]] == ["This one was cut short.", "So it was."]

    r = await ajarvis("migrate", "--to", postgres_url, state_dir=tmp_path / "src")
    assert r.returncode == 0, r.stdout + r.stderr
    # A new gateway with a state dir of its own: all it serves comes from the database.
    after = await start_gateway("fresh", **{"storage.url": postgres_url})
    c = await after.client()
    try:
        for agent, sessions in SESSIONS.items():
            assert await c.call("sessions.list", {"agentId": agent}) == want[agent][0]
            for key, _, _ in sessions:
                assert await c.call("sessions.history", {"agentId": agent, "sessionKey": key}) == want[agent][1][key]
        # And it carries on from there.
        run = await c.call("chat.send", {"sessionKey": "torn", "message": "And after the move?"})
        assert (await c.run_to_end(run["runId"]))[-1]["method"] == "chat.final"
        history = await c.call("sessions.history", {"sessionKey": "torn"})
        assert [m["content"] for m in history["messages"]][:3] == [
            "This one was cut short.",
            "So it was.",
            "And after the move?",
        ]
    finally:
        await c.close()
    await after.stop()

    # Back into the files of that gateway's state dir, which holds its local mirrors (<key>.jsonl with
    # no sessions.json): a mirror equal to the rows, or holding their first part, is taken over.
    fresh = tmp_path / "fresh"
    mirror = fresh / "agents/main/sessions/alpha.jsonl"
    data = mirror.read_bytes()
    mirror.write_bytes(data[: data.index(b"\n") + 1])
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=fresh)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "an unlisted transcript holding its first part (a mirror) was brought up to date" in r.stdout
    assert "its transcript was there unlisted" in r.stdout
    db = await database(postgres_url)
    assert transcripts(fresh) == {k: v[1] for k, v in db.items()} and mirror.read_bytes() == data
    assert set(metadata(fresh)) == set(db)


async def test_a_session_that_differs_at_the_destination_is_refused_and_left_unchanged(tmp_path, postgres_url):
    src = tmp_path / "src"
    await make_state(src)
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 0, r.stdout + r.stderr
    # Into PostgreSQL: the database's "alpha" was renamed meanwhile; the state dir's "retro" grew.
    conn = await asyncpg.connect(postgres_url)
    await conn.execute("UPDATE sessions SET label = 'Renamed' WHERE agent_id = 'main' AND session_key = 'alpha'")
    await conn.close()
    store = SessionStore(src / "agents" / "work" / "sessions", "work")
    await store.open()
    await store.append_messages("retro", tx.message_record("late", "user", "One more thing."))
    await store.close()
    db = await database(postgres_url)
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "conflict    main/alpha" in r.stdout and "label 'Renamed' there, 'Garden plans' here" in r.stdout
    assert "conflict    work/retro" in r.stdout and "2 lines, sha256" in r.stdout and "3 lines, sha256" in r.stdout
    assert "FAILED: 2 in conflict, 0 failed" in r.stdout and "nothing at the destination was overwritten" in r.stdout
    assert await database(postgres_url) == db

    # Into files: a state dir that has its own "beta" already.
    other = tmp_path / "other"
    store = SessionStore(other / "agents" / "main" / "sessions")
    await store.open()
    await store.create(label="Someone else's", key="beta")
    await store.close()
    before = (other / "agents/main/sessions/beta.jsonl").read_bytes(), metadata(other)
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=other)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "conflict    main/beta" in r.stdout and "FAILED: 1 in conflict" in r.stdout
    assert (other / "agents/main/sessions/beta.jsonl").read_bytes() == before[0]
    assert metadata(other)["main/beta"] == before[1]["main/beta"]
    assert transcripts(other)["main/alpha"] == transcripts(src)["main/alpha"]  # the others were copied


async def test_more_sessions_than_the_destination_may_hold_are_refused_before_any_is_copied(tmp_path, postgres_url):
    """sessions.max is per agent; the check counts what is there already and what would be new (a session
    there already, identical, is not counted twice), so a migration is refused whole or runs whole."""
    src = tmp_path / "src"
    await make_state(src)  # main: 4 sessions, work: 2
    (src / "config.toml").write_text("[sessions]\nmax = 3\n")
    for dry in ((), ("--dry-run",)):
        r = await ajarvis("migrate", "--to", postgres_url, *dry, state_dir=src)
        assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
        assert r.stderr == (
            "jarvis: sessions.max is 3 at the destination: agent 'main' would hold 4 (4 to copy, 0 there "
            "already); raise sessions.max (config.toml [sessions] max) or delete sessions there, then run this "
            "again; nothing was copied\n"
        )
    assert await database(postgres_url) == {}

    (src / "config.toml").write_text("[sessions]\nmax = 4\n")
    for _ in range(2):  # the second time all 6 are there already: nothing new, nothing over
        r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
        assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: 0 sessions copied and checked" in r.stdout and "6 there already" in r.stdout

    # Into files: a state dir whose main agent has 2 sessions of its own.
    other = tmp_path / "other"
    store = SessionStore(other / "agents" / "main" / "sessions")
    await store.open()
    for key in ("x1", "x2"):
        await store.create(key=key)
    await store.close()
    (other / "config.toml").write_text("[sessions]\nmax = 5\n")
    before = transcripts(other), metadata(other)
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=other)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "sessions.max is 5 at the destination: agent 'main' would hold 6 (4 to copy, 2 there already)" in r.stderr
    assert (transcripts(other), metadata(other)) == before
    assert not (other / "agents" / "work").exists()


async def test_dry_run_writes_nothing_and_says_what_would_be_copied(tmp_path, postgres_url):
    src = tmp_path / "src"
    await make_state(src)
    # Plain "postgresql": the URL from storage.url / JARVIS_DATABASE_URL (no password on the command line).
    r = await ajarvis(
        "migrate", "--to", "postgresql", "--dry-run", state_dir=src, env={"JARVIS_DATABASE_URL": postgres_url}
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"→ {redact(postgres_url)}  (dry run: nothing written)" in r.stdout
    assert "schema: would apply 0001_sessions, 0002_runs_and_idempotency" in r.stdout
    assert "dry run: 6 sessions would be copied, 0 there already" in r.stdout
    conn = await asyncpg.connect(postgres_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('jarvis_migrations')") is None
    finally:
        await conn.close()
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 0
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, "--dry-run", state_dir=tmp_path / "back")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dry run: 6 sessions would be copied" in r.stdout
    assert not (tmp_path / "back" / "agents").exists()


async def test_many_sessions_show_progress_on_stderr(tmp_path, postgres_url):
    sessions = tmp_path / "src" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    listed = {}
    for n in range(120):
        key = f"s{n:03d}"
        listed[key] = {
            "sessionKey": key,
            "label": None,
            "createdAt": "2024-05-01T10:00:00.000Z",
            "updatedAt": "2024-05-01T10:00:00.000Z",
            "messageCount": 0,
        }
        header = tx.header(key, "main", "2024-05-01T10:00:00.000Z")
        (sessions / f"{key}.jsonl").write_bytes(orjson.dumps(header) + b"\n")
    (sessions / "sessions.json").write_bytes(orjson.dumps({"version": 1, "sessions": listed}))
    (sessions / ".closed-cleanly").touch()
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=tmp_path / "src")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "copying 0/120 sessions" in r.stderr and "copying 120/120 sessions" in r.stderr
    assert "verifying 120/120 sessions" in r.stderr
    assert "OK: 120 sessions copied and checked" in r.stdout
    assert len(r.stdout.splitlines()) < 15  # a summary, not a line per session (--verbose lists them)
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, "-v", state_dir=tmp_path / "back")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("copied      main/s") == 120


async def test_a_running_gateway_a_wrong_url_and_bad_usage_are_refused_clearly(tmp_path, start_gateway, postgres_url):
    gw = await start_gateway("src")
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=tmp_path / "src")
    assert r.returncode == 2 and f"another gateway (pid {os.getpid()}) is serving" in r.stderr, r.stderr
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=tmp_path / "src")
    assert r.returncode == 2 and "another gateway" in r.stderr
    await gw.stop()
    conn = await asyncpg.connect(postgres_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('jarvis_migrations')") is None  # untouched
    finally:
        await conn.close()

    cases = [
        (
            ("--to", "postgresql://jarvis:s3cret@127.0.0.1:1/jarvis"),
            3,
            "PostgreSQL unreachable at postgresql://jarvis:***@127.0.0.1:1/jarvis",
        ),
        (("--to", postgres_url.replace("/t_", "/missing_", 1)), 3, 'database "missing_'),
        (("--to", "sqlite", "--from", "postgresql://jarvis:s3cret@127.0.0.1:1/jarvis"), 3, "PostgreSQL unreachable"),
        (("--to", "mysql://jarvis:s3cret@db/jarvis"), 2, "--to: give a postgresql:// URL or sqlite"),
        (("--to", "sqlite"), 2, "give --from postgresql://… or set storage.url"),
        (("--to", "postgresql"), 2, "takes storage.url (JARVIS_DATABASE_URL), which is not set"),
        (("--to", postgres_url, "--from", postgres_url), 2, "--from goes with --to sqlite"),
        (("--to", "sqlite", "--from", postgres_url), 1, "holds no Jarvis sessions"),
    ]
    for args, code, message in cases:
        r = await ajarvis("migrate", *args, state_dir=tmp_path / "src")
        assert (r.returncode, message in r.stderr) == (code, True), (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and "s3cret" not in r.stdout + r.stderr, r.stderr
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=tmp_path / "nowhere")
    assert r.returncode == 2 and "no state dir at" in r.stderr and not (tmp_path / "nowhere").exists()


async def test_a_line_postgresql_cannot_hold_fails_its_session_only(tmp_path, postgres_url):
    src = tmp_path / "src"
    await make_state(src)
    with open(src / "agents/main/sessions/alpha.jsonl", "ab") as fh:
        fh.write(b'{"type":"note","text":"\xff\xfe"}\n')  # not UTF-8: no gateway writes it, a disk might
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "failed      main/alpha" in r.stdout and "line 4 is not UTF-8 text" in r.stdout
    assert "FAILED: 0 in conflict, 1 failed" in r.stdout and "5 sessions copied and checked" in r.stdout
    assert "main/alpha" not in await database(postgres_url)


async def test_counters_of_a_state_dir_not_closed_cleanly_are_recounted_as_the_gateway_would(tmp_path, postgres_url):
    src = tmp_path / "src"
    await make_state(src)
    # Its gateway was killed before writing the last counters: no clean-close marker, a stale count.
    sessions = src / "agents" / "work" / "sessions"
    (sessions / ".closed-cleanly").unlink()
    listed = orjson.loads((sessions / "sessions.json").read_bytes())
    listed["sessions"]["daily:standup"].update(messageCount=1, updatedAt="2024-05-01T10:00:00.000Z")
    listed["sessions"]["../escape"] = {"sessionKey": "../escape", "createdAt": "x", "updatedAt": "x"}
    (sessions / "sessions.json").write_bytes(orjson.dumps(listed))
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "failed      work/../escape" in r.stdout and "not a valid session key" in r.stdout
    row = (await database(postgres_url))["work/daily:standup"][0]
    assert (row["message_count"], row["updated_at"]) == (2, "2024-05-01T10:01:00.000Z")
    store = SessionStore(sessions, "work")  # the file engine's own recount agrees
    await store.open()
    assert (await store.get("daily:standup"))["messageCount"] == 2
    await store.close()


async def test_a_database_that_refuses_midway_is_a_clear_error(tmp_path, postgres_url):
    # A role that may connect but not create the schema: the migrations fail, with no traceback.
    import uuid

    role = f"r_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f"CREATE ROLE {role} LOGIN")
    finally:
        await conn.close()
    url = postgres_url.replace("//postgres:@", f"//{role}:@", 1)
    assert url != postgres_url
    await make_state(tmp_path / "src")
    r = await ajarvis("migrate", "--to", url, state_dir=tmp_path / "src")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"PostgreSQL at {redact(url)}: permission denied for schema public" in r.stderr
    assert "run the command again to go on" in r.stderr and "Traceback" not in r.stderr


def files_keyed(state: Path, agent: str = "main"):
    """The files engine's keyed memories of `agent` in the state dir `state`."""
    from gateway.storage.files.engine import FilesStorage
    from tests.helpers import make_config

    return FilesStorage(make_config(state)).keyed(agent)


async def test_keyed_memories_go_both_ways_with_their_times_and_a_different_one_is_a_conflict(tmp_path, postgres_url):
    src, back = tmp_path / "src", tmp_path / "back"
    await make_state(src)
    await files_keyed(src).set("boat", "The boat is blue.", "facts")
    await files_keyed(src, "work").set("standup", "Nine on Mondays.", None)
    want = {e.key: e.full() for e in await files_keyed(src).entries()}

    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "keyed memories: 2 (2 copied, 0 identical, 0 in conflict, 0 failed)" in r.stdout
    conn = await asyncpg.connect(postgres_url)
    try:
        rows = {
            (x["agent_id"], x["key"]): (x["category"], x["value"], x["created"], x["updated"])
            for x in await conn.fetch("SELECT * FROM keyed_memories")
        }
    finally:
        await conn.close()
    boat = want["boat"]
    assert rows == {
        ("main", "boat"): ("facts", "The boat is blue.", boat["created"], boat["updated"]),
        ("work", "standup"): (
            "general",
            "Nine on Mondays.",
            rows[("work", "standup")][2],
            rows[("work", "standup")][3],
        ),
    }

    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=back)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {e.key: e.full() for e in await files_keyed(back).entries()} == want
    assert (await files_keyed(back, "work").get("standup")).value == "Nine on Mondays."
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=back)
    assert r.returncode == 0 and "keyed memories: 2 (0 copied, 2 identical" in r.stdout, r.stdout

    await files_keyed(src).set("boat", "The boat is red now.", None)
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "conflict    keyed main/boat (facts)" in r.stdout and "FAILED: 1 in conflict" in r.stdout
    conn = await asyncpg.connect(postgres_url)
    try:
        assert await conn.fetchval("SELECT value FROM keyed_memories WHERE key = 'boat'") == "The boat is blue."
    finally:
        await conn.close()


async def test_a_session_list_that_is_not_json_is_a_clear_error_naming_the_file(tmp_path, postgres_url):
    src = tmp_path / "src"
    await make_state(src)
    (src / "agents/work/sessions/sessions.json").write_bytes(b'{"sessions": {"retro": ')
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{src / 'agents/work/sessions/sessions.json'} is not valid JSON" in r.stderr, r.stderr
    assert "restore it from a backup" in r.stderr and "Traceback" not in r.stderr


async def test_the_trash_and_versions_go_both_ways(tmp_path, start_gateway, postgres_url):
    """Versions of keyed memories, trashed keyed memories and trashed sessions: files → PostgreSQL →
    files, each where it was (live or in the trash), whole; a second run finds them identical."""
    src = await start_gateway("src", memory=True)
    c = await src.client()
    for value in ("The boat is teal.", "The boat is white."):
        await c.call("memory.set", {"key": "boat", "value": value, "category": "facts"})
    await c.call("memory.set", {"key": "old", "value": "An old fact."})
    await c.call("memory.delete", {"key": "old"})
    keys = []
    for label in ("kept", "binned"):
        key = (await c.call("sessions.create", {"label": label}))["sessionKey"]
        await c.run_to_end((await c.call("chat.send", {"sessionKey": key, "message": f"the {label} one"}))["runId"])
        keys.append(key)
    await c.call("sessions.delete", {"sessionKey": keys[1]})

    async def seen(c) -> dict:
        return {
            "sessions": (await c.call("sessions.list"))["sessions"],
            "trash": [
                {k: v for k, v in s.items() if k != "expiresAt"} for s in (await c.call("sessions.trash"))["sessions"]
            ],
            "keyedTrash": [m["key"] for m in (await c.call("memory.trash"))["memories"]],
            "boat": (await c.call("memory.history", {"key": "boat"}))["versions"],
            "old": (await c.call("memory.history", {"key": "old"}))["versions"],
        }

    want = await seen(c)
    await c.close()
    await src.stop()

    r = await ajarvis("migrate", "--to", postgres_url, state_dir=tmp_path / "src")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "keyed memories: 2 (2 copied" in r.stdout
    mid = await start_gateway("mid", memory=True, **{"storage.url": postgres_url})
    c = await mid.client()
    assert await seen(c) == want
    await c.close()
    await mid.stop()

    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=tmp_path / "back")
    assert r.returncode == 0, r.stdout + r.stderr
    back = await start_gateway("back", memory=True)
    c = await back.client()
    assert await seen(c) == want
    restored = await c.call("sessions.restore", {"sessionKey": keys[1]})
    assert restored["label"] == "binned"
    await c.close()
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=tmp_path / "src")
    assert r.returncode == 0 and "0 copied" in r.stdout and "2 identical" in r.stdout, r.stdout


def files_notes(state: Path, agent: str = "main"):
    """The files engine's notes of `agent` in the state dir `state` (its workspace folder)."""
    from gateway.storage.files.engine import FilesStorage
    from tests.helpers import make_config

    return FilesStorage(make_config(state)).notes(agent)


async def test_notes_go_both_ways_with_their_versions_and_a_different_one_is_a_conflict(tmp_path, postgres_url):
    """Issue 47: MEMORY.md, day files and notes with the versions memory.write kept, files → PostgreSQL
    → files; again, nothing changes; a note edited since is a conflict, left as the database has it."""
    from tests.helpers import make_config

    src, back = tmp_path / "src", tmp_path / "back"
    await make_state(src)
    notes = files_notes(src)
    await notes.write("MEMORY.md", "# Me\nI sail.\n", "websocket", "owner")
    await notes.write("MEMORY.md", "# Me\nI sail and row.\n", "mcp", "phone")
    day = make_config(src).agent_workspace("main") / "memory" / "2026-11-20.md"
    day.parent.mkdir(parents=True, exist_ok=True)
    day.write_text("# 2026-11-20\n\n## Harbour\nThe harbour master is Ines.\n")  # a compaction's flush
    want = {c.path: [v.full() for v in c.versions] for c in await notes.copies()}
    assert set(want) == {"MEMORY.md", "memory/2026-11-20.md"}

    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "notes: 2 (2 copied, 0 identical, 0 in conflict, 0 failed)" in r.stdout, r.stdout
    conn = await asyncpg.connect(postgres_url)
    try:
        rows = {(x["path"], x["version"]): x["content"] for x in await conn.fetch("SELECT * FROM note_versions")}
    finally:
        await conn.close()
    assert rows[("MEMORY.md", 1)] == "# Me\nI sail.\n" and rows[("MEMORY.md", 2)] == "# Me\nI sail and row.\n"

    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=back)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {c.path: [v.full() for v in c.versions] for c in await files_notes(back).copies()} == want
    assert (make_config(back).agent_workspace("main") / "MEMORY.md").read_text() == "# Me\nI sail and row.\n"
    r = await ajarvis("migrate", "--to", "sqlite", "--from", postgres_url, state_dir=back)
    assert r.returncode == 0 and "notes: 2 (0 copied, 2 identical" in r.stdout, r.stdout

    (make_config(src).agent_workspace("main") / "MEMORY.md").write_text("# Me\nI only row now.\n")
    r = await ajarvis("migrate", "--to", postgres_url, state_dir=src)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "conflict    note main/MEMORY.md" in r.stdout and "another text is there" in r.stdout, r.stdout
    conn = await asyncpg.connect(postgres_url)
    try:
        assert await conn.fetchval("SELECT content FROM notes WHERE path = 'MEMORY.md'") == "# Me\nI sail and row.\n"
    finally:
        await conn.close()
