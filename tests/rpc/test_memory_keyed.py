"""Keyed memories end to end through the WebSocket: set/get/list/delete/similar, searchable at once,
durable across restarts, validated, and private to their agent. Also: the embedding cache is pruned to
cacheMaxEntries after a rebuild."""

from __future__ import annotations

import stat

import pytest

from tests.helpers import RpcError, memory_cli


async def rpc_error(c, method, params) -> RpcError:
    with pytest.raises(RpcError) as ei:
        await c.call(method, params)
    return ei.value


async def fts(c, query, **kw):
    res = await c.call("memory.search", {"query": query, "mode": "fts", **kw})
    return [r["path"] for r in res["results"]]


async def test_set_get_list_update_delete_and_search_at_once(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    ws = gw.config.workspace_dir

    made = await c.call(
        "memory.set", {"key": "favorite-color", "value": "Navy blue, never orange.", "category": "preferences"}
    )
    assert made["key"] == "favorite-color" and made["category"] == "preferences" and made["replaced"] is False
    assert made["path"] == "memory/keyed/preferences/favorite-color.md"
    f = ws / made["path"]
    assert f.is_file() and stat.S_IMODE(f.stat().st_mode) == 0o600
    text = f.read_text()
    assert (
        text.startswith("---\nkey: favorite-color\ncategory: preferences\n")
        and "\n# favorite-color\n\nNavy blue" in text
    )
    assert made["path"] in await fts(c, "navy orange"), "searchable as soon as memory.set answers"

    got = await c.call("memory.get", {"key": "favorite-color"})
    assert got["value"] == "Navy blue, never orange." and got["category"] == "preferences"
    assert got["created"] == made["created"]

    # Path reads keep working exactly as before.
    lines = await c.call("memory.get", {"path": made["path"], "from": 1, "lines": 2})
    assert lines["text"] == "---\nkey: favorite-color" and lines["truncated"] is True and lines["nextFrom"] == 3

    await c.call("memory.set", {"key": "dentist", "value": "Dr. Okafor, Tuesdays.", "category": "people"})
    await c.call("memory.set", {"key": "wifi", "value": "The guest network is called Heron."})
    listed = await c.call("memory.list", {})
    assert listed["total"] == 3 and [m["key"] for m in listed["memories"]] == ["wifi", "dentist", "favorite-color"]
    assert listed["memories"][0]["category"] == "general" and listed["memories"][0]["preview"].startswith("The guest")
    assert (await c.call("memory.list", {"category": "people"}))["memories"][0]["key"] == "dentist"
    page = await c.call("memory.list", {"limit": 1, "offset": 1})
    assert page["total"] == 3 and [m["key"] for m in page["memories"]] == ["dentist"]

    # An update replaces the entry (the old words leave search); without a category it keeps its own.
    upd = await c.call("memory.set", {"key": "favorite-color", "value": "Forest green."})
    assert upd["replaced"] is True and upd["category"] == "preferences" and upd["created"] == made["created"]
    assert made["path"] in await fts(c, "forest green")
    assert made["path"] not in await fts(c, "navy orange")
    # Another category moves it: still one entry per key.
    moved = await c.call("memory.set", {"key": "favorite-color", "value": "Forest green.", "category": "facts"})
    assert moved["movedFrom"] == "preferences" and not f.exists()
    assert (await c.call("memory.list", {}))["total"] == 3
    assert await fts(c, "forest green") == ["memory/keyed/facts/favorite-color.md"]

    deleted = await c.call("memory.delete", {"key": "favorite-color"})
    expires = deleted.pop("expiresAt")
    assert deleted == {
        "deleted": True,
        "key": "favorite-color",
        "category": "facts",
        "path": "memory/keyed/facts/favorite-color.md",
        "trashed": True,
    }
    assert expires > moved["updated"]
    assert await fts(c, "forest green") == [], "gone from search as soon as memory.delete answers"
    assert (await rpc_error(c, "memory.get", {"key": "favorite-color"})).code == -32004
    await c.close()

    await gw.restart()
    c = await gw.client()
    assert (await c.call("memory.get", {"key": "dentist"}))["value"] == "Dr. Okafor, Tuesdays."
    assert (await c.call("memory.list", {}))["total"] == 2
    assert "memory/keyed/people/dentist.md" in await fts(c, "Okafor")
    await c.close()


async def test_bad_input_is_refused_clearly(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    for method, params, field, words in (
        ("memory.get", {"key": "nope"}, None, "no memory with key"),
        ("memory.delete", {"key": "nope"}, None, "no memory with key"),
        ("memory.similar", {"key": "nope"}, None, "no memory with key"),
        ("memory.set", {"key": "../etc/passwd", "value": "x"}, "params.key", "must match"),
        ("memory.set", {"key": ".hidden", "value": "x"}, "params.key", "must match"),
        ("memory.set", {"key": "a/b", "value": "x"}, "params.key", "must match"),
        ("memory.set", {"key": "k" * 129, "value": "x"}, "params.key", "at most 128"),
        ("memory.set", {"key": "ok", "value": "x", "category": "gossip"}, "params.category", "must be one of"),
        ("memory.set", {"key": "ok", "value": "\n\n"}, "params.value", "blank"),
        ("memory.list", {"category": "gossip"}, "params.category", "must be one of"),
        ("memory.get", {}, "params.path", "exactly one of path or key"),
        ("memory.get", {"key": "ok", "path": "MEMORY.md"}, "params.key", "exactly one of path or key"),
        ("memory.get", {"path": "../secret.md"}, "params.path", "'..'"),
    ):
        err = await rpc_error(c, method, params)
        if field is None:
            assert err.code == -32004, (method, params, err.message)
        else:
            assert err.code == -32602 and err.data.get("field") == field, (method, params, err.message)
        assert words in err.message, (method, params, err.message)
    assert not (gw.config.workspace_dir / "memory" / "keyed" / "general" / "ok.md").exists()
    await c.close()


async def test_similar_uses_the_stored_text_and_leaves_the_entry_out(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    await c.call("memory.set", {"key": "boat", "value": "My sailing boat Seahorse is moored at the harbour in Kiel."})
    await c.call("memory.set", {"key": "mooring", "value": "The harbour mooring for the sailing boat costs 40 euros."})
    await c.call("memory.set", {"key": "cake", "value": "Grandma bakes plum cake with cinnamon on Sundays."})
    res = await c.call("memory.similar", {"key": "boat", "k": 3})
    paths = [r["path"] for r in res["results"]]
    assert res["key"] == "boat" and res["mode"] == "vector", "vectors are available with the local embedder"
    assert "memory/keyed/general/boat.md" not in paths
    assert paths[0] == "memory/keyed/general/mooring.md"
    await c.close()


async def test_agents_never_see_each_others_keyed_memories(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    await c.call("sessions.create", {"agentId": "work"})
    await c.call("memory.set", {"agentId": "work", "key": "vpn", "value": "The office VPN gateway is Albatross."})
    await c.call("memory.set", {"key": "vpn", "value": "Home router password hint: the cat."})
    assert (await c.call("memory.get", {"key": "vpn", "agentId": "work"}))["value"].startswith("The office")
    assert (await c.call("memory.get", {"key": "vpn"}))["value"].startswith("Home router")
    work_ws = gw.config.agent_workspace("work")
    assert (work_ws / "memory/keyed/general/vpn.md").is_file()
    assert await fts(c, "Albatross") == []
    assert await fts(c, "Albatross", agentId="work") == ["memory/keyed/general/vpn.md"]
    await c.call("memory.delete", {"key": "vpn", "agentId": "work"})
    assert (await c.call("memory.get", {"key": "vpn"}))["value"].startswith("Home router")
    assert (await c.call("memory.list", {"agentId": "work"}))["total"] == 0
    assert (await rpc_error(c, "memory.list", {"agentId": "nobody"})).code == -32004
    await c.close()


async def test_embedding_cache_is_pruned_after_a_rebuild(start_gateway, tmp_path):
    from tests.fake_openai import FakeOpenAI

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(12):
        (ws / "memory" / f"note{i}.md").write_text(
            f"# Note {i}\n\nThe topic of note {i} is item{i} and thing{i * 7}.\n"
        )
    with FakeOpenAI() as api:  # a remote provider: the local one is not cached
        provider = {
            "memory.embeddings.provider": "openai",
            "memory.embeddings.baseUrl": api.base_url,
            "memory.embeddings.apiKey": "test",
            "memory.embeddings.model": "fake-a",
        }
        gw = await start_gateway(
            memory=True, workspace=str(ws), **provider, **{"memory.embeddings.cacheMaxEntries": 1000}
        )
        c = await gw.client()
        await c.call("memory.sync", {})
        before = await c.call("memory.status")
        assert before["cache"]["entries"] >= 12
        await c.close()
        await gw.stop()

        # New chunking settings: the index is rebuilt, and the rebuilt cache keeps at most 5 entries.
        gw2 = await start_gateway(
            memory=True,
            workspace=str(ws),
            **provider,
            **{"memory.embeddings.cacheMaxEntries": 5, "memory.chunking.tokens": 300},
        )
        c = await gw2.client()
        await c.call("memory.sync", {})
        st = await c.call("memory.status")
        assert "rebuilding" not in st and st["sources"]["memory"]["files"] == 12
        assert st["cache"]["entries"] == 5
        await c.close()


def test_cli_keyed_learn_recall_and_images(tmp_path, capsys):
    """`jarvis memory …` runs the same features on the state dir; --json prints the method's result."""
    import base64

    import orjson

    from gateway.config import load_config

    cfg = load_config({"stateDir": str(tmp_path / "state")}, env={})
    run = memory_cli(cfg, capsys)

    code, out = run("memory", "set", "pet", "Our dog Biscuit is a beagle.", "--category", "facts", "--json")
    assert code == 0 and orjson.loads(out)["path"] == "memory/keyed/facts/pet.md"
    code, out = run("memory", "get", "pet")
    assert code == 0 and "Biscuit" in out
    code, out = run("memory", "list", "--json")
    assert code == 0 and orjson.loads(out)["total"] == 1
    code, out = run("memory", "search", "beagle", "--json")
    assert orjson.loads(out)["results"][0]["path"] == "memory/keyed/facts/pet.md"
    code, out = run("memory", "learn", "tools", "Check the weather tool before planning hikes", "--json")
    assert code == 0 and orjson.loads(out)["status"] == "added"
    code, out = run("memory", "recall", "--from", "1h", "--json")
    assert {r["path"] for r in orjson.loads(out)["results"]} == {"memory/keyed/facts/pet.md", "LEARNINGS.md"}
    img = tmp_path / "a.jpg"
    img.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 20)
    code, out = run("memory", "set-image", "snap", str(img), "--description", "a snapshot")
    assert code == 0 and "memory/images/snap.jpg" in out
    code, out = run("memory", "get-image", "snap", "--out", str(tmp_path / "b.jpg"), "--json")
    assert code == 0 and base64.b64decode(orjson.loads(out)["image"]) == img.read_bytes()
    assert (tmp_path / "b.jpg").read_bytes() == img.read_bytes()
    code, out = run("memory", "delete", "pet")
    assert code == 0 and "deleted pet" in out
    assert run("memory", "get", "pet")[0] == 1, "not found"
    assert run("memory", "learn", "gossip", "x")[0] == 2, "invalid params"
    assert run("memory", "recall", "--from", "2d", "--to", "3d")[0] == 2


async def test_backup_copies_keyed_memories_learnings_images_and_agent_workspaces(start_gateway, tmp_path):
    import base64

    from gateway.cli.backup import backup_state

    gw = await start_gateway(memory=True)
    c = await gw.client()
    await c.call("memory.set", {"key": "pet", "value": "Biscuit the beagle"})
    await c.call("memory.learn", {"category": "tools", "text": "Use the map tool for directions"})
    jpeg = b"\xff\xd8\xff\xe0" + b"\x00" * 16
    await c.call("memory.setImage", {"key": "snap", "image": base64.b64encode(jpeg).decode()})
    await c.call("sessions.create", {"agentId": "work"})
    await c.call("memory.set", {"agentId": "work", "key": "vpn", "value": "Albatross"})
    await c.close()
    dest = tmp_path / "backup"
    backup_state(gw.config, dest)
    for rel in (
        "memory/keyed/general/pet.md",
        "LEARNINGS.md",
        "memory/images/snap.md",
        "agents/work/memory/keyed/general/vpn.md",
    ):
        assert (dest / "workspace" / rel).read_bytes() == (gw.config.workspace_dir / rel).read_bytes(), rel
    assert (dest / "workspace" / "memory/images/snap.jpg").read_bytes() == jpeg
