"""Giant notes (issue 29.5): a memory file over `memory.maxFileBytes` is not indexed, is listed in
`memory.status.skipped`, and is indexed again once it shrinks back under the cap. The PostgreSQL index
runs the same scenario (tests/system/postgres/test_memory_bigfile.py)."""

from __future__ import annotations

from tests.helpers import RunningGateway
from tests.rpc.test_memory_scan import SETTINGS

CAP = 4096
BIG = {**SETTINGS, "memory.maxFileBytes": CAP}


def note(size: int) -> str:
    head = "# Huge\n\nThe zanzibar ledger lists every heron we counted.\n"
    filler = "Nothing in particular happened on this line of the log.\n"
    return head + filler * max(0, (size - len(head)) // len(filler))


async def found(c, word: str) -> set[str]:
    res = await c.call("memory.search", {"query": word, "mode": "fts", "sources": ["memory"]})
    return {r["path"] for r in res["results"]}


async def scenario_big_file(gw: RunningGateway) -> None:
    ws = gw.config.workspace_dir
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# About me\n\nMy sailing boat is called Seahorse.\n")
    huge = ws / "memory" / "huge.md"
    huge.write_text(note(3 * CAP))
    size = huge.stat().st_size
    c = await gw.client()
    stats = await c.call("memory.sync", {})
    assert stats["indexed"] == 1, stats
    st = await c.call("memory.status")
    assert st["files"] == 1 and st["skipped"] == [
        {"path": "memory/huge.md", "bytes": size, "reason": f"larger than memory.maxFileBytes ({CAP} bytes)"}
    ], st
    assert await found(c, "zanzibar heron") == set()

    huge.write_text(note(CAP // 2))  # back under the cap: indexed again
    stats = await c.call("memory.sync", {})
    assert stats["indexed"] == 1, stats
    assert "skipped" not in await c.call("memory.status")
    assert await found(c, "zanzibar heron") == {"memory/huge.md"}

    huge.write_text(note(2 * CAP))  # over it again: what was indexed of it goes
    stats = await c.call("memory.sync", {})
    assert stats["removed"] == 1, stats
    st = await c.call("memory.status")
    assert [s["path"] for s in st["skipped"]] == ["memory/huge.md"] and st["files"] == 1
    assert await found(c, "zanzibar heron") == set()
    await c.close()


async def test_file_over_the_cap_is_skipped_and_shown(start_gateway):
    await scenario_big_file(await start_gateway(**BIG))


async def test_time_recall_leaves_out_a_day_file_over_the_cap(start_gateway):
    """memory.recall reads day files and LEARNINGS.md itself: one over the cap is left out there too,
    never loaded whole."""
    gw = await start_gateway(**BIG)
    mem = gw.config.workspace_dir / "memory"
    mem.mkdir(parents=True)
    (mem / "2020-01-10.md").write_text("# 10 January\n\nBought a red kayak at the harbour.\n")
    (mem / "2020-01-11.md").write_text(note(2 * CAP))
    c = await gw.client()
    res = await c.call("memory.recall", {"from": "2020-01-01", "to": "2020-01-31"})
    assert {r["path"] for r in res["results"]} == {"memory/2020-01-10.md"}, res
    (mem / "2020-01-11.md").write_text(note(CAP // 2))
    res = await c.call("memory.recall", {"from": "2020-01-01", "to": "2020-01-31"})
    assert {r["path"] for r in res["results"]} == {"memory/2020-01-10.md", "memory/2020-01-11.md"}, res
    await c.close()


async def test_jarvis_memory_status_names_the_skipped_file(start_gateway, capsys):
    """`jarvis memory status` asks the running gateway, which lists the skipped file."""
    import asyncio

    from tests.helpers import memory_cli

    gw = await start_gateway(**BIG)
    (gw.config.workspace_dir / "memory").mkdir(parents=True)
    (gw.config.workspace_dir / "memory" / "huge.md").write_text(note(3 * CAP))
    c = await gw.client()
    await c.call("memory.sync", {})
    await c.close()
    run = memory_cli(gw.config, capsys)
    code, out = await asyncio.to_thread(run, "memory", "status")
    assert code == 0 and "skipped:    memory/huge.md (" in out and "memory.maxFileBytes" in out, out
