"""admin.export and the imports of this project's own formats (admin.import jsonl) and of a markdown vault,
through real gateways: the archive is readable without Jarvis (zipfile and JSON only), and it brings the
same memory back on another machine and on the other engine (the same search results)."""

from __future__ import annotations

import hashlib
import zipfile

import orjson
import pytest

from gateway.portability.archive import file_name
from tests.helpers import RpcError
from tests.vendor_exports import chatgpt_sample, chatgpt_zip, claude_sample, claude_zip

QUERIES = [
    "Memmo Alfama hotel room",
    "ferry to Cacilhas",
    "Sungold tomatoes planted",
    "weekly running distance chart",
    "favourite tea",
    "violin lessons on Tuesdays",
]


async def filled(gw, tmp_path):
    """A gateway's main agent with imported conversations, a chat, keyed memories and notes."""
    c = await gw.client()
    convs, _ = chatgpt_sample()
    await c.call("admin.import", {"source": "chatgpt", "path": str(chatgpt_zip(tmp_path / "g.zip", convs))})
    await c.call("admin.import", {"source": "claude", "path": str(claude_zip(tmp_path / "c.zip", claude_sample()[0]))})
    s = await c.call("sessions.create", {"label": "tea"})
    run = await c.call("chat.send", {"sessionKey": s["sessionKey"], "message": "My favourite tea is a smoky lapsang."})
    await c.run_to_end(run["runId"])
    await c.call("memory.set", {"key": "violin", "value": "Violin lessons on Tuesdays at 6pm.", "category": "tasks"})
    ws = gw.config.agent_workspace("main")
    (ws / "memory").mkdir(exist_ok=True)
    (ws / "MEMORY.md").write_text("# Me\n\nI live in Porto. Ünïcödé notes.\n")
    (ws / "memory" / "2024-05-02.md").write_text("# 2024-05-02\n\nPlanted basil next to the Sungold.\n")
    await c.call("memory.sync", {})
    return c


async def results(c) -> dict[str, list[tuple]]:
    out = {}
    for q in QUERIES:
        hits = (await c.call("memory.search", {"query": q, "k": 4}))["results"]
        out[q] = [(h["path"], h["startLine"], h["endLine"], h["snippet"], h.get("date")) for h in hits]
    return out


async def test_an_export_is_readable_without_jarvis_and_brings_the_same_memory_back_elsewhere(start_gateway, tmp_path):
    gw = await start_gateway("one", memory=True)
    c = await filled(gw, tmp_path)
    before = await results(c)
    out = tmp_path / "me.zip"
    summary = await c.call("admin.export", {"path": str(out)})
    assert summary["sessions"]["count"] == 5 and summary["keyed"] == {"count": 1, "trashed": 0, "versions": True}
    assert summary["notes"]["count"] == 2 and summary["path"] == str(out) and out.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "me.zip.partial").exists()

    # Readable with nothing but zipfile and JSON: every file as the manifest says, transcripts byte for byte.
    with zipfile.ZipFile(out) as zf:
        manifest = orjson.loads(zf.read("manifest.json"))
        assert manifest["format"] == "jarvis-export" and manifest["version"] == 1 and manifest["agentId"] == "main"
        for f in manifest["files"]:
            data = zf.read(f["path"])
            assert len(data) == f["bytes"] and hashlib.sha256(data).hexdigest() == f["sha256"]
        taken: set[str] = set()
        for p in sorted(gw.config.sessions_dir("main").glob("*.jsonl")):
            assert zf.read(f"sessions/{file_name(p.stem, taken)}.jsonl") == p.read_bytes()
        index = [orjson.loads(line) for line in zf.read("sessions/index.jsonl").splitlines()]
        assert {m["sessionKey"] for m in index} == {p.stem for p in gw.config.sessions_dir("main").glob("*.jsonl")}
        keyed = [orjson.loads(line) for line in zf.read("keyed.jsonl").splitlines()]
        assert [(k["key"], k["category"], k["value"]) for k in keyed] == [
            ("violin", "tasks", "Violin lessons on Tuesdays at 6pm.")
        ]
        names = zf.namelist()
        assert "notes/MEMORY.md" in names and "notes/memory/2024-05-02.md" in names
        assert not [n for n in names if n.startswith("notes/memory/keyed/")], "keyed memories are keyed.jsonl"
        assert b"jarvis import jsonl" in zf.read("README.md")

    # Another machine, same engine: the same search results, to the score.
    gw2 = await start_gateway("two", memory=True)
    c2 = await gw2.client()
    dry = await c2.call("admin.import", {"source": "jsonl", "path": str(out), "dryRun": True})
    assert dry["sessions"]["added"] == 5 and dry["keyed"]["added"] == 1 and dry["notes"]["added"] == 2
    assert (await c2.call("sessions.list"))["total"] == 0
    report = await c2.call("admin.import", {"source": "jsonl", "path": str(out)})
    assert report["sessions"]["added"] == 5 and report["keyed"]["added"] == 1 and report["notes"]["added"] == 2
    assert report["manifest"]["agentId"] == "main" and report["index"]["indexed"] > 0
    for p in gw.config.sessions_dir("main").glob("*.jsonl"):
        assert (gw2.config.sessions_dir("main") / p.name).read_bytes() == p.read_bytes()
    one = {s["sessionKey"]: s for s in (await c.call("sessions.list"))["sessions"]}
    two = {s["sessionKey"]: s for s in (await c2.call("sessions.list"))["sessions"]}
    assert one == two
    full_one = await c.call("memory.search", {"query": "Memmo Alfama hotel room", "k": 4})
    full_two = await c2.call("memory.search", {"query": "Memmo Alfama hotel room", "k": 4})
    assert full_one["results"] == full_two["results"]
    assert await results(c2) == before

    again = await c2.call("admin.import", {"source": "jsonl", "path": str(out)})
    assert again["sessions"]["unchanged"] == 5 and again["keyed"]["unchanged"] == 1
    assert again["notes"]["unchanged"] == 2 and again["index"] is None


async def test_files_to_postgresql_round_trip_gives_the_same_search_results(start_gateway, tmp_path, postgres_url):
    gw = await start_gateway("files", memory=True)
    c = await filled(gw, tmp_path)
    before = await results(c)
    out = tmp_path / "me.zip"
    await c.call("admin.export", {"path": str(out)})

    pg = await start_gateway("pg", memory=True, **{"storage.url": postgres_url})
    c2 = await pg.client()
    report = await c2.call("admin.import", {"source": "jsonl", "path": str(out)})
    assert report["sessions"]["added"] == 5 and report["keyed"]["added"] == 1 and report["notes"]["added"] == 2
    after = await results(c2)

    def alike(hits: list[tuple]) -> list[tuple]:
        """A PostgreSQL gateway's keyed memory file is a mirror of its row, whose front matter names the
        row's version: one line more, so other line numbers. Everything else is the same."""
        return [(p, snip, date) for p, _a, _b, snip, date in hits]

    for q in QUERIES:  # the same hits, in the same order, with the same snippets and dates
        assert alike(after[q]) == alike(before[q]), q
        assert [h[1:3] for h in after[q] if "/keyed/" not in h[0]] == [
            h[1:3] for h in before[q] if "/keyed/" not in h[0]
        ]
    got = await c2.call("memory.get", {"path": "memory/keyed/tasks/violin.md"})
    assert "Violin lessons on Tuesdays" in got["text"]
    assert (await c2.call("admin.import", {"source": "jsonl", "path": str(out)}))["sessions"]["unchanged"] == 5

    # And back: the PostgreSQL gateway's export holds the same transcripts, byte for byte.
    back = tmp_path / "back.zip"
    await c2.call("admin.export", {"path": str(back)})
    with zipfile.ZipFile(out) as a, zipfile.ZipFile(back) as b:
        sessions = [n for n in a.namelist() if n.startswith("sessions/") and n != "sessions/index.jsonl"]
        assert sorted(sessions) == sorted(
            n for n in b.namelist() if n.startswith("sessions/") and n != "sessions/index.jsonl"
        )
        for n in sessions:
            assert a.read(n) == b.read(n), n
        assert orjson.loads(b.read("manifest.json"))["engine"] == "postgresql"


async def test_transcripts_import_by_file_and_folder_and_carry_on_where_they_are_a_prefix(start_gateway, tmp_path):
    gw = await start_gateway()
    c = await gw.client()
    folder = tmp_path / "sessions"
    folder.mkdir()
    head = {
        "type": "session",
        "version": 1,
        "sessionKey": "trip",
        "agentId": "main",
        "createdAt": "2024-01-01T10:00:00.000Z",
    }
    msgs = [
        {
            "type": "message",
            "id": f"m{i}",
            "timestamp": f"2024-01-01T10:0{i}:00.000Z",
            "message": {"role": r, "content": t},
        }
        for i, (r, t) in enumerate([("user", "Book the ferry"), ("assistant", "Booked for 9am."), ("user", "Thanks")])
    ]
    lines = [orjson.dumps(r) for r in [head, *msgs]]
    (folder / "trip.jsonl").write_bytes(b"\n".join(lines[:3]) + b"\n")
    (folder / "sessions.json").write_bytes(
        orjson.dumps({"version": 1, "sessions": {"trip": {"label": "Ferry", "model": "m1"}}})
    )
    # A file from `jarvis sessions export KEY --format jsonl`: history messages, no header.
    (folder / "notes-2024.jsonl").write_bytes(
        orjson.dumps({"id": "h1", "role": "user", "content": "Buy stamps", "timestamp": "2024-02-01T08:00:00.000Z"})
        + b"\n"
    )
    report = await c.call("admin.import", {"source": "jsonl", "path": str(folder)})
    assert report["sessions"]["added"] == 2 and report["sessions"]["messagesAdded"] == 3
    trip = await c.call("sessions.get", {"sessionKey": "trip"})
    assert trip["label"] == "Ferry" and trip["model"] == "m1" and trip["messageCount"] == 2
    assert trip["updatedAt"] == "2024-01-01T10:01:00.000Z"
    stamps = await c.call("sessions.history", {"sessionKey": "notes-2024"})
    assert [(m["id"], m["content"]) for m in stamps["messages"]] == [("h1", "Buy stamps")]

    # The same transcript, grown by a line: the line is appended; nothing else changes.
    one = tmp_path / "trip.jsonl"
    one.write_bytes(b"\n".join(lines) + b"\n")
    report = await c.call("admin.import", {"source": "jsonl", "path": str(one)})
    assert report["sessions"] == {
        "found": 1,
        "added": 0,
        "extended": 1,
        "unchanged": 0,
        "skipped": 0,
        "messagesAdded": 1,
        "skippedSessions": [],
    }
    assert (await c.call("sessions.get", {"sessionKey": "trip"}))["messageCount"] == 3
    assert (gw.config.sessions_dir("main") / "trip.jsonl").read_bytes().splitlines() == lines
    # One that differs is left as it is, and said so.
    other = [orjson.dumps(head), orjson.dumps({**msgs[0], "message": {"role": "user", "content": "Something else"}})]
    one.write_bytes(b"\n".join(other) + b"\n")
    report = await c.call("admin.import", {"source": "jsonl", "path": str(one)})
    assert report["sessions"]["skipped"] == 1 and "other messages" in report["sessions"]["skippedSessions"][0]["reason"]
    # A line that is not JSON is named, file and line.
    one.write_bytes(lines[0] + b"\nnot json\n")
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "jsonl", "path": str(one)})
    assert "trip.jsonl: line 2: is not JSON" in err.value.message


async def test_a_vault_is_copied_under_memory_kept_as_it_is_and_never_over_an_edit(start_gateway, tmp_path):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    vault = tmp_path / "My Vault"
    (vault / ".obsidian").mkdir(parents=True)
    (vault / ".obsidian" / "app.json").write_text("{}")
    (vault / "daily").mkdir()
    (vault / "logseq" / "bak").mkdir(parents=True)
    (vault / "logseq" / "bak" / "old.md").write_text("a backup")
    note = "---\ntags: [boats]\ncreated: 2022-06-01\n---\n# Sailing\n\nMy dinghy is a [[Laser]] called *Pelican*. ⛵\n"
    (vault / "Sailing.md").write_text(note)
    (vault / "daily" / "2022-06-02.md").write_text("- Rigged [[Pelican]] for the first time.\n")
    (vault / "pic.png").write_bytes(b"\x89PNG")
    (vault / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    report = await c.call("admin.import", {"source": "markdown", "path": str(vault)})
    assert report["folder"] == "memory/My Vault" and report["added"] == 2 and report["found"] == 4
    assert report["skippedWhy"] == {"not markdown (.png)": 1, "not UTF-8 text": 1}
    ws = gw.config.agent_workspace("main")
    assert (ws / "memory" / "My Vault" / "Sailing.md").read_text() == note
    assert (
        not (ws / "memory" / "My Vault" / "logseq").exists() and not (ws / "memory" / "My Vault" / ".obsidian").exists()
    )
    hits = (await c.call("memory.search", {"query": "dinghy called Pelican", "k": 2}))["results"]
    assert hits[0]["path"] == "memory/My Vault/Sailing.md"

    assert (await c.call("admin.import", {"source": "markdown", "path": str(vault)}))["unchanged"] == 2
    (vault / "Sailing.md").write_text(note + "\nSold it in 2023.\n")
    (vault / "daily" / "2022-06-02.md").write_text("- Rigged it again.\n")
    (ws / "memory" / "My Vault" / "daily" / "2022-06-02.md").write_text("- My own edit here.\n")
    report = await c.call("admin.import", {"source": "markdown", "path": str(vault)})
    assert report["updated"] == 1 and report["conflicts"] == 1
    assert report["files"] == [
        {"path": "latin1.md", "reason": "not UTF-8 text"},
        {"path": "daily/2022-06-02.md", "reason": "changed here and in the source: left as it is here"},
    ]
    assert (ws / "memory" / "My Vault" / "daily" / "2022-06-02.md").read_text() == "- My own edit here.\n"
    assert (ws / "memory" / "My Vault" / "Sailing.md").read_text().endswith("Sold it in 2023.\n")

    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "markdown", "path": str(vault), "folder": "../escape"})
    assert err.value.data["field"] == "params.folder"
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "markdown", "path": str(vault), "folder": "keyed"})
    assert "keyed/" in err.value.message


async def test_an_export_never_overwrites_and_never_leaves_half_a_file(start_gateway, tmp_path):
    gw = await start_gateway()
    c = await gw.client()
    taken = tmp_path / "taken.zip"
    taken.write_text("mine")
    with pytest.raises(RpcError) as err:
        await c.call("admin.export", {"path": str(taken)})
    assert "exists already" in err.value.message and taken.read_text() == "mine"
    with pytest.raises(RpcError) as err:
        await c.call("admin.export", {"path": str(tmp_path / "nowhere" / "x.zip")})
    assert "does not exist" in err.value.message
    with pytest.raises(RpcError) as err:
        await c.call("admin.export", {"agentId": "ghost", "path": str(tmp_path / "g.zip")})
    assert err.value.code == -32004
    assert not list(tmp_path.glob("*.partial"))


async def test_paths_are_taken_only_from_a_caller_on_the_gateways_machine(start_gateway, tmp_path):
    """The methods read and write files where the gateway runs: a remote caller with the token may not
    name them. (A caller at another address, through the one path of a call as the WebSocket door would.)"""
    from gateway.calls import Call, Door
    from gateway.errors import Invalid

    gw = await start_gateway()
    services = gw.gw.services

    class Remote:
        connection_id, subscriptions, closing = "r", set(), False
        peer = "192.0.2.7"

        def deliver(self, event):
            pass

    for method, params in (
        ("admin.import", {"source": "jsonl", "path": str(tmp_path)}),
        ("admin.export", {"path": str(tmp_path / "x.zip")}),
    ):
        with pytest.raises(Invalid) as err:
            await services.calls.perform(Call(Door.WEBSOCKET, method, params, connection=Remote()))
        assert "only from a caller on that machine" in str(err.value)
    assert not (tmp_path / "x.zip").exists()


async def test_a_client_elsewhere_uploads_an_export_in_pieces_and_imports_it(start_gateway, tmp_path):
    """The web page's way in: admin.upload pieces in order (any caller: the file travels, no path is named),
    then admin.import {upload}; the upload is gone afterwards, whatever came of the import."""
    import base64

    from gateway.portability import uploads

    gw = await start_gateway()
    c = await gw.client()
    convs, _ = chatgpt_sample()
    data = chatgpt_zip(tmp_path / "chatgpt.zip", convs).read_bytes()
    piece = 4096
    first = await c.call(
        "admin.upload", {"name": "My ChatGPT export.zip", "offset": 0, "data": base64.b64encode(data[:piece]).decode()}
    )
    up = first["uploadId"]
    assert first["bytes"] == piece
    folder = gw.config.state_dir / "uploads" / up
    assert folder.stat().st_mode & 0o777 == 0o700 and (folder / "My ChatGPT export.zip").stat().st_mode & 0o777 == 0o600
    with pytest.raises(RpcError) as err:  # a piece sent again
        await c.call("admin.upload", {"uploadId": up, "offset": 0, "data": base64.b64encode(data[:piece]).decode()})
    assert err.value.data["field"] == "params.offset" and f"must be {piece}" in err.value.message
    for at in range(piece, len(data), piece):
        res = await c.call(
            "admin.upload", {"uploadId": up, "offset": at, "data": base64.b64encode(data[at : at + piece]).decode()}
        )
    assert res["bytes"] == len(data)
    report = await c.call("admin.import", {"source": "chatgpt", "upload": up})
    assert report["conversations"]["added"] == 2 and report["path"] == "My ChatGPT export.zip"
    assert not folder.exists()
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "chatgpt", "upload": up})
    assert err.value.code == -32004

    # A bad export through an upload: named as the person named it; the upload is gone too.
    broken = await c.call(
        "admin.upload", {"name": "conversations.json", "offset": 0, "data": base64.b64encode(b'[{"x": 1}').decode()}
    )
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "chatgpt", "upload": broken["uploadId"]})
    assert err.value.message.startswith("conversations.json: ")
    assert not (gw.config.state_dir / "uploads" / broken["uploadId"]).exists()

    for params, field in (
        ({"name": "notes.txt", "offset": 0, "data": ""}, "params.name"),
        ({"offset": 0, "data": ""}, "params.name"),
        ({"name": "a.zip", "offset": 0, "data": "not base64!"}, "params.data"),
        (
            {"name": "a.zip", "offset": 0, "data": base64.b64encode(b"x" * (uploads.PIECE_BYTES + 1)).decode()},
            "params.data",
        ),
        ({"source": "chatgpt", "path": str(tmp_path), "upload": up}, None),
    ):
        method = "admin.import" if "source" in params else "admin.upload"
        with pytest.raises(RpcError) as err:
            await c.call(method, params)
        assert err.value.code == -32602 and (field is None or err.value.data["field"] == field), err.value.message
    held = [
        await c.call("admin.upload", {"name": f"{i}.zip", "offset": 0, "data": ""}) for i in range(uploads.MAX_OPEN)
    ]
    with pytest.raises(RpcError) as err:
        await c.call("admin.upload", {"name": "one-more.zip", "offset": 0, "data": ""})
    assert err.value.code == -32009 and "uploads are under way" in err.value.message
    assert len(held) == uploads.MAX_OPEN


WINDOWS_REFUSES = set('<>:"/\\|?*')


async def _versions_and_trash(c) -> tuple[list, list]:
    history = await c.call("memory.history", {"key": "kayak"})
    trash = (await c.call("memory.trash", {}))["memories"]
    return (
        [(v["version"], v["value"], v["by"], v["principal"]) for v in history["versions"]],
        [(t["key"], t["preview"], t["deletedAt"]) for t in trash],
    )


async def test_an_export_carries_versions_and_the_trash_in_names_every_platform_unpacks(start_gateway, tmp_path):
    await _carries_versions(start_gateway, tmp_path)


async def test_an_export_carries_versions_and_the_trash_into_postgresql(start_gateway, tmp_path, postgres_url):
    await _carries_versions(start_gateway, tmp_path, **{"storage.url": postgres_url})


async def _carries_versions(start_gateway, tmp_path, **extra):
    """`jarvis export` then `jarvis import jsonl` (admin.export, admin.import): a keyed memory's earlier
    versions and the trash come back; session files are named so Windows and a case-insensitive disk can
    unpack every one (no ':', no device name, no two names alike but for case)."""
    gw = await start_gateway("one", memory=True, **{"memory.search.mode": "fts"})
    c = await gw.client()
    for key in ("openai:3f2a", "hook:daily", "Trip", "trip", "con", "aux.notes"):
        await c.call("sessions.create", {"sessionKey": key, "label": key})
    for value in ("The kayak is yellow.", "The kayak is orange."):
        await c.call("memory.set", {"key": "kayak", "value": value})
    await c.call("memory.set", {"key": "old.boat", "value": "The old boat was blue."})
    await c.call("memory.delete", {"key": "old.boat"})
    before = await _versions_and_trash(c)
    assert len(before[0]) == 2 and before[1][0][0] == "old.boat"
    out = tmp_path / "me.zip"
    summary = await c.call("admin.export", {"path": str(out)})
    assert summary["keyed"] == {"count": 1, "trashed": 1, "versions": True}
    with zipfile.ZipFile(out) as zf:
        names = [n for n in zf.namelist() if n.startswith("sessions/") and n != "sessions/index.jsonl"]
        stems = [n[len("sessions/") : -len(".jsonl")] for n in names]
        assert not [n for n in names if WINDOWS_REFUSES & set(n[len("sessions/") :])], names
        assert not [s for s in stems if s.split(".")[0].lower() in ("con", "prn", "aux", "nul")], stems
        assert len({s.casefold() for s in stems}) == len(stems) == 6, stems
        assert "openai%3A3f2a" in stems
        keyed = {k["key"]: k for k in map(orjson.loads, zf.read("keyed.jsonl").splitlines())}
        assert [v["value"] for v in keyed["kayak"]["versions"]] == ["The kayak is yellow.", "The kayak is orange."]
        assert keyed["old.boat"]["deletedAt"] and "deletedAt" not in keyed["kayak"]

    gw2 = await start_gateway("two", memory=True, **{"memory.search.mode": "fts", **extra})
    c2 = await gw2.client()
    report = await c2.call("admin.import", {"source": "jsonl", "path": str(out)})
    assert report["sessions"]["added"] == 6 and report["keyed"]["added"] == 2, report
    assert {s["sessionKey"] for s in (await c2.call("sessions.list"))["sessions"]} == {
        "openai:3f2a",
        "hook:daily",
        "Trip",
        "trip",
        "con",
        "aux.notes",
    }
    assert await _versions_and_trash(c2) == before
    again = await c2.call("admin.import", {"source": "jsonl", "path": str(out)})
    assert again["keyed"]["unchanged"] == 2 and again["sessions"]["unchanged"] == 6, again
