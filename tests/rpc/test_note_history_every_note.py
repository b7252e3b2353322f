"""memory.history and memory.restore {path} reach every note the record keeps versions of, on both engines
(issue 47's review, findings 5–7): LEARNINGS.md and memory.md (which memory.write does not write) have a
readable history and can be restored; `current` marks the version that is the note's text now and none
once the note is deleted; a note the record took up to memory.maxFileBytes restores whole, though
memory.write's cap is smaller. Every door (WebSocket, HTTP, MCP, the CLI) calls the same methods."""

from __future__ import annotations

import pytest

from gateway.memory.notes.files import MAX_NOTE_BYTES
from tests.helpers import RpcError, wait_for


@pytest.fixture(params=["files", "postgres"])
def engine(request):
    return {"storage.url": request.getfixturevalue("postgres_url")} if request.param == "postgres" else {}


@pytest.fixture
async def gateway(engine, start_gateway, tmp_path):
    return await start_gateway(memory=True, workspace=str(tmp_path / "ws"), **engine)


async def _history(c, path: str) -> list[tuple[int, bool, str]]:
    vs = (await c.call("memory.history", {"path": path}))["versions"]
    out = []
    for v in vs:
        whole = await c.call("memory.history", {"path": path, "version": v["version"]})
        out.append((v["version"], v["current"], whole["version"]["content"]))
    return out


async def test_learnings_and_memory_md_have_a_history_and_restore(gateway, tmp_path):
    """memory.learn's file: its text now is a version on both engines (PostgreSQL records each sync's
    text; the files engine each restore's, and the text now)."""
    c = await gateway.client()
    ws = tmp_path / "ws"
    await c.call("memory.learn", {"category": "preferences", "text": "Prefers metric units."})
    await c.call("memory.sync")
    first = (ws / "LEARNINGS.md").read_text()
    [(now, current, text)] = await _history(c, "LEARNINGS.md")
    assert current is True and text == first
    await c.call("memory.restore", {"path": "LEARNINGS.md", "version": now})  # the same text: no new version
    await c.call("memory.learn", {"category": "preferences", "text": "Prefers short answers."})
    (ws / "memory.md").write_text("lower-case root note\n")
    await c.call("memory.sync")
    h = await _history(c, "LEARNINGS.md")
    assert h[0][1] is True and "short answers" in h[0][2]
    assert h[-1][2] == first and [cur for _, cur, _ in h].count(True) == 1
    assert await _history(c, "memory.md") == [(1, True, "lower-case root note\n")]

    back = await c.call("memory.restore", {"path": "LEARNINGS.md", "version": h[-1][0]})
    assert back["restoredFrom"] == h[-1][0] and back["path"] == "LEARNINGS.md"
    assert (ws / "LEARNINGS.md").read_text() == first
    assert (await _history(c, "LEARNINGS.md"))[0][1:] == (True, first)
    with pytest.raises(RpcError) as err:  # writing stays memory.learn's
        await c.call("memory.write", {"path": "LEARNINGS.md", "content": "x\n"})
    assert err.value.code == -32602 and err.value.data["field"] == "params.path"
    with pytest.raises(RpcError) as err:
        await c.call("memory.history", {"path": "memory/keyed/general/a.md"})
    assert err.value.code == -32602 and "memory.set" in err.value.message
    await c.close()


async def test_a_deleted_note_has_no_current_version_and_can_be_restored(gateway, tmp_path):
    c = await gateway.client()
    ws = tmp_path / "ws"
    for text in ("zeta one\n", "zeta two\n"):
        await c.call("memory.write", {"path": "memory/zeta.md", "content": text})
    assert [(v, cur) for v, cur, _ in await _history(c, "memory/zeta.md")] == [(2, True), (1, False)]
    (ws / "memory" / "zeta.md").unlink()

    async def gone():
        await c.call("memory.sync")
        h = await _history(c, "memory/zeta.md")
        return h if not any(cur for _, cur, _ in h) else None

    assert [(v, t) for v, _, t in await wait_for(gone)] == [(2, "zeta two\n"), (1, "zeta one\n")]
    back = await c.call("memory.restore", {"path": "memory/zeta.md", "version": 1})
    assert back["restoredFrom"] == 1 and (ws / "memory" / "zeta.md").read_text() == "zeta one\n"
    assert (await _history(c, "memory/zeta.md"))[0][1:] == (True, "zeta one\n")
    await c.close()


async def test_a_note_bigger_than_memory_writes_cap_restores_whole(gateway, tmp_path):
    c = await gateway.client()
    ws = tmp_path / "ws"
    big = ("The boat is moored at pier seven. " * 30 + "\n") * 400  # ~400 KB: over memory.write's cap
    assert len(big.encode()) > MAX_NOTE_BYTES
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "memory" / "big.md").write_text(big)  # saved by an editor: the record takes it
    await c.call("memory.sync")
    await c.call("memory.write", {"path": "memory/big.md", "content": "cut short\n"})
    h = (await c.call("memory.history", {"path": "memory/big.md"}))["versions"]
    assert h[-1]["bytes"] == len(big.encode()) and h[0]["current"] is True
    back = await c.call("memory.restore", {"path": "memory/big.md", "version": h[-1]["version"]})
    assert back["restoredFrom"] == h[-1]["version"] and back["size"] == len(big.encode())
    assert (ws / "memory" / "big.md").read_text() == big
    await c.close()


async def test_the_cli_reads_and_restores_a_deleted_learnings_md(gateway, tmp_path, capsys):
    """`jarvis memory history|restore --path` (in process on the same state dir, the gateway stopped): the
    same methods, so LEARNINGS.md deleted by hand is listed with no current version and comes back."""
    import argparse
    import asyncio
    import dataclasses

    import structlog

    from gateway.cli import memory as cli

    c = await gateway.client()
    ws = tmp_path / "ws"
    await c.call("memory.learn", {"category": "preferences", "text": "Prefers metric units."})
    await c.call("memory.sync")
    kept = (ws / "LEARNINGS.md").read_text()
    await c.call("memory.restore", {"path": "LEARNINGS.md", "version": 1})  # the files engine records it
    (ws / "LEARNINGS.md").unlink()

    async def gone():
        await c.call("memory.sync")
        vs = (await c.call("memory.history", {"path": "LEARNINGS.md"}))["versions"]
        return vs if not any(v["current"] for v in vs) else None

    await wait_for(gone)
    await c.close()
    await gateway.stop()
    config = dataclasses.replace(gateway.config, server=dataclasses.replace(gateway.config.server, port=0))

    async def jarvis(*argv: str) -> tuple[int, str]:
        parser = argparse.ArgumentParser()
        cli.add_commands(parser.add_subparsers(dest="command"))
        args = parser.parse_args(list(argv))
        capsys.readouterr()
        with structlog.testing.capture_logs():
            code = await asyncio.to_thread(args.handler, args, config)
        out = capsys.readouterr()
        return code, out.out + out.err

    code, out = await jarvis("memory", "history", "--path", "LEARNINGS.md")
    assert code == 0 and out.startswith("LEARNINGS.md\nv1 ") and "(current)" not in out, out
    code, out = await jarvis("memory", "restore", "--path", "LEARNINGS.md", "--version", "1")
    assert code == 0 and "version 1 written again" in out, out
    assert (ws / "LEARNINGS.md").read_text() == kept
    code, out = await jarvis("memory", "history", "--path", "LEARNINGS.md")
    assert code == 0 and "(current)" in out.splitlines()[1], out


async def test_a_version_memory_write_took_restores_under_a_smaller_max_file_bytes(engine, start_gateway, tmp_path):
    """memory.maxFileBytes below memory.write's cap: a version memory.write took restores (the larger of
    the two caps), as before the restore took maxFileBytes alone."""
    gw = await start_gateway(memory=True, workspace=str(tmp_path / "ws"), **{"memory.maxFileBytes": 100_000}, **engine)
    c = await gw.client()
    try:
        text = "The kite is red. " * 9_000 + "\n"  # ~153 KB: over maxFileBytes, under memory.write's cap
        assert 100_000 < len(text.encode()) <= MAX_NOTE_BYTES
        await c.call("memory.write", {"path": "memory/kite.md", "content": text})
        await c.call("memory.write", {"path": "memory/kite.md", "content": "short\n"})
        back = await c.call("memory.restore", {"path": "memory/kite.md", "version": 1})
        assert back["restoredFrom"] == 1 and back["size"] == len(text.encode())
        assert (tmp_path / "ws" / "memory" / "kite.md").read_text() == text
    finally:
        await c.close()
