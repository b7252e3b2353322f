"""File names and links in the workspace, files engine (the review of issue 47, findings 1–3): a file whose
name no index can hold — not UTF-8 — stops no sync: it is left out, said once (`memory_file_skipped`, its
name escaped) and listed in memory.status `skipped`, and every other file is indexed. Names with control
characters or longer than the doors write are notes like any other (a second review: leaving them out read
as their deletion). A note is never written through a symlinked folder inside the workspace
(the scan never enters one, so the note would be indexed under another name)."""

from __future__ import annotations

import os

import orjson
import pytest
import structlog
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.memory.layout import shown, unholdable
from tests.helpers import RpcError, examples, wait_for

# A file name as bytes: anything a Linux folder holds (no "/", no NUL), some not UTF-8, some long.
NAME = st.one_of(
    st.binary(min_size=1, max_size=16),
    st.text(min_size=1, max_size=16).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(50, 251).map(lambda n: b"n" * n),
    # long and not ASCII (the cuts inside a character: test_sibling_stem)
    st.integers(50, 126).map(lambda n: "\u00e9".encode() * n),
).map(lambda b: b.replace(b"/", b"_").replace(b"\x00", b"_") + b".md")
NAMES = st.lists(NAME, min_size=1, max_size=6, unique=True)
ODD = [b"caf\xe9.md", b"bell\x07.md", b"x" * 245 + b".md"]  # the first left out, the others notes


def put(folder: bytes, name: bytes, text: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


def expected(rel_folder: str, names: list[bytes]) -> tuple[set[str], set[str]]:
    """(the paths indexed, the names shown as skipped) of `names` in `rel_folder`."""
    paths = [f"{rel_folder}/{os.fsdecode(n)}" for n in names]
    return {p for p in paths if unholdable(p) is None}, {shown(p) for p in paths if unholdable(p) is not None}


async def test_an_odd_file_name_stops_no_sync_and_is_listed_once(start_gateway, tmp_path):
    ws = tmp_path / "ws"
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", "workspace": str(ws)})
    c = await gw.client()
    mem = os.fsencode(ws / "memory")
    for name in ODD:
        put(mem, name, "A note with an odd name.\n")
    put(os.path.join(mem, b"d\xe9j\xe0"), b"inside.md", "Inside an odd folder.\n")
    put(mem, b"ordinary.md", "An ordinary new note about kestrels.\n")
    try:
        with structlog.testing.capture_logs() as logs:
            for _ in range(2):
                await c.call("memory.sync")
        hits = await c.call("memory.search", {"query": "kestrels", "mode": "fts"})
        assert [h["path"] for h in hits["results"]] == ["memory/ordinary.md"]
        held = ["memory/bell\x07.md", "memory/ordinary.md", "memory/" + "x" * 245 + ".md"]
        assert [f["path"] for f in (await c.call("memory.files"))["files"]] == held
        odd = ["memory/caf\\xe9.md", "memory/d\\xe9j\\xe0"]
        skipped = (await c.call("memory.status"))["skipped"]
        assert sorted(s["path"] for s in skipped) == odd
        assert {s["path"]: s["reason"] for s in skipped}["memory/caf\\xe9.md"] == "its name is not UTF-8"
        assert sorted(e["path"] for e in logs if e["event"] == "memory_file_skipped") == odd  # once each
        assert not [e for e in logs if e.get("exc_info") or e.get("log_level") == "error"]
        assert not [e for e in logs if e["event"] == "memory_watcher_failed"]
        # The watcher watches on: a note saved later is found with no memory.sync asked.
        put(mem, b"later.md", "Written later, about herons.\n")

        async def found():
            hits = await c.call("memory.search", {"query": "herons", "mode": "fts"})
            return [h["path"] for h in hits["results"]] == ["memory/later.md"]

        await wait_for(found)
        assert (await c.call("memory.status"))["sync"]["watcher"] == {"mode": "native"}
    finally:
        await c.close()


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(names=NAMES)
@example(names=ODD)
async def test_any_file_names_are_indexed_or_listed_and_the_sync_goes_on(start_gateway, tmp_path, names):
    run = len(list(tmp_path.iterdir()))  # each example a gateway and a workspace of its own
    ws = tmp_path / f"ws-{run}"
    gw = await start_gateway(
        f"state-{run}", memory=True, **{"memory.embeddings.provider": "none", "workspace": str(ws)}
    )
    c = await gw.client()
    mem = os.fsencode(ws / "memory" / "drawn")
    try:
        for name in names:
            put(mem, name, "Some note.\n")
        with structlog.testing.capture_logs() as logs:
            await c.call("memory.sync")
        indexed, odd = expected("memory/drawn", names)
        listed = {f["path"] for f in (await c.call("memory.files"))["files"]}
        assert listed == indexed
        status = await c.call("memory.status")
        assert status["files"] == len(indexed)
        assert {s["path"] for s in status.get("skipped", [])} == odd
        assert {e["path"] for e in logs if e["event"] == "memory_file_skipped"} == odd
        orjson.dumps(status)  # every name shown is JSON
    finally:
        await c.close()
        await gw.stop()


@pytest.mark.parametrize("door", ["memory.write", "memory.get", "memory.history"])
async def test_every_note_door_refuses_a_name_no_scan_can_find(start_gateway, tmp_path, door):
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", "workspace": str(tmp_path / "ws")})
    c = await gw.client()
    try:
        for path in ("memory/nul\x00.md", "nul\x00"):  # (a name that is not UTF-8 cannot be sent: JSON)
            with pytest.raises(RpcError) as ei:
                await c.call(door, {"path": path, "content": "x"} if door == "memory.write" else {"path": path})
            assert ei.value.code == -32602 and "NUL" in ei.value.message, (door, path)
    finally:
        await c.close()


async def test_a_note_named_with_a_control_character_is_a_note_through_every_door(start_gateway, tmp_path):
    ws = tmp_path / "ws"
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", "workspace": str(ws)})
    c = await gw.client()
    path = "memory/tab\there.md"
    try:
        await c.call("memory.write", {"path": path, "content": "Ospreys nest here.\n"})
        await c.call("memory.write", {"path": path, "content": "Ospreys nest here, and kites.\n"})
        assert (await c.call("memory.get", {"path": path}))["text"] == "Ospreys nest here, and kites."
        await c.call("memory.sync")
        assert path in [f["path"] for f in (await c.call("memory.files"))["files"]]
        hits = await c.call("memory.search", {"query": "ospreys kites", "mode": "fts"})
        assert [h["path"] for h in hits["results"]] == [path]
        versions = (await c.call("memory.history", {"path": path}))["versions"]
        assert [v["current"] for v in versions] == [True, False]
        await c.call("memory.restore", {"path": path, "version": versions[1]["version"]})
        assert (ws / "memory" / "tab\there.md").read_text() == "Ospreys nest here.\n"
    finally:
        await c.close()


async def test_a_note_is_never_written_through_a_symlinked_folder_inside_the_workspace(start_gateway, tmp_path):
    ws = tmp_path / "ws"
    gw = await start_gateway(memory=True, **{"memory.embeddings.provider": "none", "workspace": str(ws)})
    (ws / "memory" / "2026").mkdir(parents=True)
    os.symlink("2026", ws / "memory" / "current")
    (ws / "memory" / "zeta.md").write_text("Zeta: the boat is blue.\n")
    os.symlink("zeta.md", ws / "memory" / "alpha.md")
    c = await gw.client()
    try:
        with pytest.raises(RpcError) as ei:
            await c.call("memory.write", {"path": "memory/current/todo.md", "content": "Paint the hull.\n"})
        assert ei.value.code == -32602 and "symlink" in ei.value.message
        assert list((ws / "memory" / "2026").iterdir()) == []
        # The files engine's index is unchanged: a symlinked note inside the workspace is indexed once.
        await c.call("memory.sync")
        assert [f["path"] for f in (await c.call("memory.files"))["files"]] == ["memory/alpha.md"]
    finally:
        await c.close()
