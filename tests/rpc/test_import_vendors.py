"""admin.import of ChatGPT and Claude exports through a real gateway: each conversation becomes a session
whose transcript is checked line by line (the original ids, roles, text and times, the header's mark),
found by memory.search with its real date; importing again adds nothing, a newer export only what is
new; a malformed or truncated export names the conversation and the field and keeps what came before."""

from __future__ import annotations

import asyncio
import zipfile
from pathlib import Path

import orjson
import pytest

from gateway.portability.conversation import session_key
from tests.helpers import RpcError
from tests.vendor_exports import (
    ChatGPTConversation,
    T0,
    chatgpt_sample,
    chatgpt_zip,
    claude_sample,
    claude_zip,
    long_chatgpt,
)


def transcript_lines(gateway, key: str) -> list[dict]:
    path = gateway.config.sessions_dir("main") / f"{key}.jsonl"
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [orjson.loads(line) for line in data.splitlines()]


def check_transcript(gateway, source: str, conv: dict, expected: list[tuple[str, str, str, str]]) -> None:
    cid = conv.get("conversation_id") or conv.get("uuid")
    lines = transcript_lines(gateway, session_key(source, cid))
    head, messages = lines[0], lines[1:]
    assert head["type"] == "session" and head["sessionKey"] == session_key(source, cid)
    assert head["imported"]["source"] == source and head["imported"]["conversationId"] == cid
    assert head["imported"]["title"] == (conv.get("title") or conv.get("name") or None)
    got = [(m["id"], m["message"]["role"], m["message"]["content"], m["timestamp"]) for m in messages]
    assert got == expected
    assert all(m["type"] == "message" for m in messages)


async def test_a_chatgpt_export_imports_line_by_line_and_again_adds_nothing(start_gateway, tmp_path):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    convs, expect = chatgpt_sample()
    export = chatgpt_zip(tmp_path / "chatgpt-export.zip", convs)

    dry = await c.call("admin.import", {"source": "chatgpt", "path": str(export), "dryRun": True})
    assert dry["conversations"] == {"found": 3, "added": 2, "extended": 0, "unchanged": 0, "skipped": 1}
    assert dry["messages"]["added"] == 10 and dry["index"] is None
    assert dry["dateRange"] == {"from": expect[convs[0]["id"]][0][3], "to": expect[convs[1]["id"]][-1][3]}
    assert dry["skippedMessages"]["on another branch (an edit or a regenerated answer)"] == 3
    assert dry["skippedConversations"] == [
        {"index": 2, "id": convs[2]["id"], "title": None, "reason": "no messages to import"}
    ]
    assert (await c.call("sessions.list"))["total"] == 0, "a dry run writes nothing"

    report = await c.call("admin.import", {"source": "chatgpt", "path": str(export)})
    assert report["conversations"]["added"] == 2 and report["messages"]["added"] == 10
    assert report["index"]["indexed"] >= 2
    progress = []
    while not c.events.empty():
        ev = c.events.get_nowait()
        if ev["method"] == "admin.import.progress":
            progress.append(ev["params"])
    assert progress and progress[-1]["phase"] == "indexing" and progress[0]["agentId"] == "main"
    for conv in convs[:2]:
        check_transcript(gw, "chatgpt", conv, expect[conv["id"]])

    trip = await c.call("sessions.get", {"sessionKey": session_key("chatgpt", convs[0]["id"])})
    assert trip["label"] == "Voyage à Lisbonne 🇵🇹" and trip["messageCount"] == 5
    assert trip["createdAt"] == "2023-03-14T09:26:53.589Z" and trip["updatedAt"] == expect[convs[0]["id"]][-1][3]
    history = await c.call("sessions.history", {"sessionKey": trip["sessionKey"]})
    assert [m["content"] for m in history["messages"]][-1] == "Merci ! My hotel is the Memmo Alfama, room 407."

    hits = (await c.call("memory.search", {"query": "Memmo Alfama hotel room", "k": 3}))["results"]
    assert hits and hits[0]["sessionKey"] == trip["sessionKey"]
    assert hits[0]["date"] == expect[convs[0]["id"]][-1][3], "found with the date it was said"
    chat = await c.call("sessions.create", {})
    run = await c.call(
        "chat.send", {"sessionKey": chat["sessionKey"], "message": "Which hotel room did I have in Lisbon?"}
    )
    final = (await c.run_to_end(run["runId"]))[-1]["params"]
    assert final["memory"][0]["path"] == f"sessions/{trip['sessionKey']}.jsonl"
    assert final["memory"][0]["date"] == expect[convs[0]["id"]][-1][3], "recalled in chat with its real date"
    assert '2023-03-14 · session "Voyage à Lisbonne' in final["message"]["content"]

    before = {p.name: p.read_bytes() for p in gw.config.sessions_dir("main").glob("*.jsonl")}
    await c.call("sessions.delete", {"sessionKey": chat["sessionKey"]})
    before.pop(f"{chat['sessionKey']}.jsonl")
    again = await c.call("admin.import", {"source": "chatgpt", "path": str(export)})
    assert again["conversations"] == {"found": 3, "added": 0, "extended": 0, "unchanged": 2, "skipped": 1}
    assert again["messages"]["added"] == 0 and again["index"] is None
    assert {p.name: p.read_bytes() for p in gw.config.sessions_dir("main").glob("*.jsonl")} == before


async def test_a_newer_export_adds_only_new_conversations_and_new_turns(start_gateway, tmp_path):
    gw = await start_gateway()
    c = await gw.client()
    convs, expect = chatgpt_sample()
    await c.call("admin.import", {"source": "chatgpt", "path": str(chatgpt_zip(tmp_path / "old.zip", convs))})

    # Later: the trip conversation went on; the runs one was continued on another branch; one is new.
    newer, _ = chatgpt_sample()
    mapping = newer[0]["mapping"]
    last = newer[0]["current_node"]
    add = {
        "new-1": ("user", "Which tram goes up to the castle?", 1_680_000_000.0),
        "new-2": ("assistant", "Tram 28, or the 737 bus.", 1_680_000_060.0),
    }
    for node, (role, text, when) in add.items():
        mapping[node] = {
            "id": node,
            "message": {
                "id": node,
                "author": {"role": role, "name": None, "metadata": {}},
                "create_time": when,
                "update_time": None,
                "content": {"content_type": "text", "parts": [text]},
                "status": "finished_successfully",
                "end_turn": None,
                "weight": 1.0,
                "metadata": {},
                "recipient": "all",
                "channel": None,
            },
            "parent": last,
            "children": [],
        }
        mapping[last]["children"].append(node)
        last = node
    newer[0]["current_node"] = last
    runs = newer[1]
    old_path_end = runs["current_node"]
    first_user = next(
        n
        for n, v in runs["mapping"].items()
        if v["message"]
        and v["message"]["author"]["role"] == "user"
        and v["message"]["content"]["content_type"] == "multimodal_text"
    )
    branch = "branch-1"
    runs["mapping"][branch] = {**runs["mapping"][old_path_end], "id": branch, "parent": first_user, "children": []}
    runs["mapping"][branch]["message"] = {
        **runs["mapping"][old_path_end]["message"],
        "id": branch,
        "author": {"role": "assistant", "name": None, "metadata": {}},
        "content": {"content_type": "text", "parts": ["A different answer, on a new branch."]},
        "create_time": 1_690_000_000.0,
    }
    runs["mapping"][first_user]["children"].append(branch)
    runs["current_node"] = branch
    fresh = ChatGPTConversation("fresh", "Brand new", T0.timestamp() + 86400 * 400)
    q = fresh.text("user", "Is the kettle descaled?")
    newer.append(fresh.json())

    report = await c.call("admin.import", {"source": "chatgpt", "path": str(chatgpt_zip(tmp_path / "new.zip", newer))})
    assert report["conversations"] == {"found": 4, "added": 1, "extended": 2, "unchanged": 0, "skipped": 1}
    assert report["messages"]["added"] == 2 + 1 + 1
    assert [b["id"] for b in report["branched"]] == [runs["id"]]

    trip_expect = expect[convs[0]["id"]] + [
        ("new-1", "user", "Which tram goes up to the castle?", "2023-03-28T10:40:00.000Z"),
        ("new-2", "assistant", "Tram 28, or the 737 bus.", "2023-03-28T10:41:00.000Z"),
    ]
    check_transcript(gw, "chatgpt", newer[0], trip_expect)
    assert (await c.call("sessions.get", {"sessionKey": session_key("chatgpt", convs[0]["id"])}))["messageCount"] == 7
    runs_lines = transcript_lines(gw, session_key("chatgpt", runs["id"]))
    assert len(runs_lines) == 1 + len(expect[runs["id"]]) + 1
    assert runs_lines[-1]["id"] == branch and runs_lines[-1]["timestamp"] == "2023-07-22T04:26:40.000Z"
    check_transcript(gw, "chatgpt", newer[3], [(q, "user", "Is the kettle descaled?", expect_iso(fresh, q))])


def expect_iso(c: ChatGPTConversation, node: str) -> str:
    from tests.vendor_exports import iso

    return iso(c.time_of(node))


async def test_a_claude_export_imports_its_branch_with_attachments_and_times(start_gateway, tmp_path):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    convs, expect = claude_sample()
    report = await c.call("admin.import", {"source": "claude", "path": str(claude_zip(tmp_path / "claude.zip", convs))})
    assert report["conversations"]["added"] == 2 and report["messages"]["added"] == 6
    assert report["skippedMessages"] == {"on another branch (an edit or a retried answer)": 2, "empty": 1}
    for conv in convs:
        check_transcript(gw, "claude", conv, expect[conv["uuid"]])
    hits = (await c.call("memory.search", {"query": "when did I plant the Sungold tomatoes", "k": 3}))["results"]
    assert hits[0]["sessionKey"] == session_key("claude", convs[0]["uuid"])
    assert hits[0]["date"] == expect[convs[0]["uuid"]][-1][3]


async def test_a_conversation_of_thousands_of_turns_imports_whole(start_gateway, tmp_path):
    gw = await start_gateway()
    c = await gw.client()
    long = long_chatgpt("long", 3000)
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([long.json()]))
    report = await c.call("admin.import", {"source": "chatgpt", "path": str(path)}, timeout=60)
    assert report["messages"]["added"] == 3000
    lines = transcript_lines(gw, session_key("chatgpt", long.id))
    assert len(lines) == 3001
    assert lines[1]["message"]["content"] == "Turn 0 of long: question about item 0?"
    assert lines[-1]["message"]["content"] == "Turn 2999 of long: answer 2999."
    stamps = [m["timestamp"] for m in lines[1:]]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3000


@pytest.mark.parametrize("source", ["chatgpt", "claude"])
async def test_a_malformed_conversation_names_itself_and_the_field_and_keeps_what_came_before(
    start_gateway, tmp_path, source
):
    gw = await start_gateway()
    c = await gw.client()
    if source == "chatgpt":
        convs = [long_chatgpt(f"ok{i}", 4).json() for i in range(3)] + [long_chatgpt("bad", 4).json()]
        bad = convs[3]
        node = next(n for n, v in bad["mapping"].items() if v["message"] and v["message"]["author"]["role"] == "user")
        bad["mapping"][node]["message"]["create_time"] = "yesterday"
        field = f"mapping.{node}.message.create_time"
        title = bad["title"]
    else:
        convs, _ = claude_sample()
        convs = convs + [claude_sample()[0][0]]
        convs[2] = {**convs[2], "uuid": "bad-one", "name": "Broken"}
        convs[2]["chat_messages"] = [dict(m) for m in convs[2]["chat_messages"]]
        convs[2]["chat_messages"][1]["sender"] = 7
        field = "chat_messages[1].sender"
        title = "Broken"
    convs.append(convs[0] | {"id": "after", "conversation_id": "after", "uuid": "after"})
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps(convs))
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": source, "path": str(path)})
    bad_index = len(convs) - 2
    e = err.value
    assert e.code == -32602
    assert f"conversation {bad_index}" in e.message and field in e.message and repr(title) in e.message
    assert e.data["conversation"]["index"] == bad_index and e.data["exportField"] == field
    assert e.data["done"]["conversations"]["added"] == bad_index
    keys = {s["sessionKey"] for s in (await c.call("sessions.list"))["sessions"]}
    assert len(keys) == bad_index and session_key(source, "after") not in keys

    # Fixed, the same export goes on where it stopped.
    if source == "chatgpt":
        bad["mapping"][node]["message"]["create_time"] = 1_700_000_000.5
    else:
        convs[2]["chat_messages"][1]["sender"] = "assistant"
    path.write_bytes(orjson.dumps(convs))
    report = await c.call("admin.import", {"source": source, "path": str(path)})
    assert report["conversations"]["added"] == 2 and report["conversations"]["unchanged"] == bad_index


async def test_a_truncated_export_keeps_every_conversation_before_the_cut(start_gateway, tmp_path):
    gw = await start_gateway()
    c = await gw.client()
    convs = [long_chatgpt(f"c{i}", 6).json() for i in range(5)]
    data = orjson.dumps(convs)
    cut = data.index(convs[3]["id"].encode()) + 10  # inside conversation 3
    for name, blob in (("cut.json", data[:cut]), ("cut.zip", None)):
        path = tmp_path / name
        if blob is not None:
            path.write_bytes(blob)
        else:  # a zip whose member stops short: the download broke off
            full = tmp_path / "full.zip"
            chatgpt_zip(full, convs, extra=False)
            path.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
        with pytest.raises(RpcError) as err:
            await c.call("admin.import", {"source": "chatgpt", "path": str(path)})
        assert err.value.code == -32602, err.value.message
        if blob is not None:
            assert "ends inside conversation 3" in err.value.message
            assert err.value.data["done"]["conversations"]["added"] == 3
        else:
            assert "zip" in err.value.message
    assert (await c.call("sessions.list"))["total"] == 3


async def test_the_wrong_vendor_and_not_an_export_are_named(start_gateway, tmp_path):
    gw = await start_gateway()
    c = await gw.client()
    convs, _ = claude_sample()
    path = claude_zip(tmp_path / "claude.zip", convs)
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "chatgpt", "path": str(path)})
    assert "looks like a Claude export" in err.value.message and "`jarvis import claude " in err.value.message
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "claude", "path": str(other)})
    assert "no conversations.json in this zip" in err.value.message
    for bad, why in (("{}", "expected a JSON array"), ("", "empty"), ("[1]", "not a JSON object")):
        (tmp_path / "x.json").write_text(bad)
        with pytest.raises(RpcError) as err:
            await c.call("admin.import", {"source": "chatgpt", "path": str(tmp_path / "x.json")})
        assert why in err.value.message
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "chatgpt", "path": "relative/export.zip"})
    assert err.value.data["field"] == "params.path" and "absolute" in err.value.message
    with pytest.raises(RpcError) as err:
        await c.call("admin.import", {"source": "chatgpt", "path": str(tmp_path / "missing.zip")})
    assert "no such file" in err.value.message


async def test_one_import_at_a_time_per_agent_and_the_gateway_answers_meanwhile(start_gateway, tmp_path):
    from tests.vendor_exports import generated_export

    gw = await start_gateway()
    c = await gw.client()
    other = await gw.client()
    path = tmp_path / "conversations.json"
    path.write_bytes(generated_export(1500, turns=10))
    first = asyncio.create_task(c.call("admin.import", {"source": "chatgpt", "path": str(path)}, timeout=120))
    await c.next_event("admin.import.progress", timeout=30)
    with pytest.raises(RpcError) as err:
        await other.call("admin.import", {"source": "chatgpt", "path": str(path)})
    assert err.value.code == -32009 and "under way" in err.value.message
    meanwhile, slowest = 0, 0.0  # health answers that came while the import was still under way
    while not first.done():
        t = asyncio.get_running_loop().time()
        await other.call("system.health")
        slowest = max(slowest, asyncio.get_running_loop().time() - t)
        meanwhile += not first.done()
        await asyncio.sleep(0.02)  # pacing only: the loop ends on the import's end, an event
    assert (await first)["conversations"]["added"] == 1500
    # an order, not a time: answers came between the import's steps (one that held the loop throughout
    # would let none through); the deadline only catches a hang, far above any machine's noise
    assert meanwhile >= 3 and slowest < 10, (meanwhile, slowest)


async def test_an_import_whose_caller_leaves_stops_and_running_it_again_resumes(start_gateway, tmp_path):
    from tests.helpers import wait_for
    from tests.vendor_exports import generated_export

    gw = await start_gateway()
    path = tmp_path / "conversations.json"
    path.write_bytes(generated_export(3000, turns=4))
    first = await gw.client()
    task = asyncio.create_task(first.call("admin.import", {"source": "chatgpt", "path": str(path)}, timeout=120))
    await first.next_event("admin.import.progress", timeout=30)
    await first.close()  # Ctrl-C: the import stops at its next batch
    with pytest.raises((ConnectionError, asyncio.CancelledError)):  # its answer never comes
        await task
    second = await gw.client()

    async def resumed():
        try:
            return await second.call("admin.import", {"source": "chatgpt", "path": str(path)}, timeout=120)
        except RpcError as exc:
            assert exc.code == -32009, exc.message  # the first one is still winding down
            return None

    report = await wait_for(resumed, timeout=60, interval=0.1)
    c = report["conversations"]
    assert 0 < c["unchanged"] < 3000 and c["added"] + c["unchanged"] == 3000, c
    assert (await second.call("sessions.list"))["total"] == 3000
    lines = {p.name: p.read_bytes().count(b"\n") for p in gw.config.sessions_dir("main").glob("*.jsonl")}
    assert len(lines) == 3000 and set(lines.values()) == {5}, "every conversation whole, none twice"


def _kinds(tmp_path) -> dict[str, Path]:
    """One file of each kind a newcomer may hand `jarvis import`, and one of random bytes."""
    d = tmp_path / "kinds"
    d.mkdir()
    (d / "t.jsonl").write_text(
        '{"type":"session","sessionKey":"s1","agentId":"main","createdAt":"2024-01-01T00:00:00Z"}\n'
        '{"type":"message","id":"m1","timestamp":"2024-01-01T00:00:00Z","message":{"role":"user","content":"hi"}}\n'
    )
    (d / "vault").mkdir()
    (d / "vault" / "Rezepte für Ärger.md").write_text("# Rezepte\n\nÄpfel, Öl, Süßes.\n")
    (d / "random.bin").write_bytes(bytes(range(256)) * 4)
    return {
        "chatgpt": chatgpt_zip(d / "chatgpt.zip", chatgpt_sample()[0]),
        "claude": claude_zip(d / "claude.zip", claude_sample()[0]),
        "jsonl": d / "t.jsonl",
        "markdown": d / "vault",
        "random": d / "random.bin",
    }


async def test_every_import_kind_recognises_the_others_files(start_gateway, tmp_path):
    """`jarvis import KIND PATH` with another kind's file (ChatGPT, Claude, jsonl, a markdown folder) says what
    the file looks like and the command that takes it; random bytes are said to be binary, in hex, never
    decoded into mojibake. Nothing is written."""
    gw = await start_gateway(memory=True, **{"memory.search.mode": "fts"})
    c = await gw.client()
    files = _kinds(tmp_path)
    for kind in ("chatgpt", "claude", "jsonl", "markdown"):
        for other, path in files.items():
            if other == kind:
                continue
            with pytest.raises(RpcError) as err:
                await c.call("admin.import", {"source": kind, "path": str(path), "dryRun": True})
            said = err.value.message
            assert err.value.code == -32602, said
            if other == "random":
                assert "binary data, not text (its first bytes: 00 01 02 03 04 05 06 07)" in said, (kind, said)
            else:
                assert f"`jarvis import {other}" in said, (kind, other, said)
            assert "\\x" not in said and "\ufffd" not in said and "Ã" not in said, said
    assert (await c.call("sessions.list"))["total"] == 0
    for kind, path in files.items():  # and each kind's own file still imports
        if kind != "random":
            report = await c.call("admin.import", {"source": kind, "path": str(path), "dryRun": True})
            assert report["source"] == kind
