"""Links and odd names in one gateway's folder, with notes on PostgreSQL (issue 47; the review's findings
1–3). A note is its folder's by NAME: a symlinked file, or a path through a symlinked folder, is no note of
that folder (the reconcile neither takes it in nor reads its absence as a deletion, and the mirror never
writes through it); each name of a hard link is a note of its own. A link is one machine's arrangement:
it never deletes, renames or moves a note in the database or in another gateway's folder. A file whose
name no record can hold (not UTF-8) is left out, said once and listed in memory.status `skipped`; every
other file goes on. A name with a control character is a note like any other (a second review: a gateway
that left such names out took the notes older gateways had recorded under them for deleted)."""

from __future__ import annotations

import contextlib
import os

import structlog
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.helpers import examples, wait_for
from tests.rpc.test_memory_names import NAMES, ODD, expected, put
from tests.system.postgres.test_notes_safety import _rows
from tests.system.postgres.test_notes_shared import _reads, two

ZETA = "Zeta: the boat is blue.\n"


async def _settled(writer, reader_folder, n: int) -> None:
    """A marker note written through `writer` has reached `reader_folder`: every notification before it
    (a deletion, a rename) has been acted on there too (notifications arrive in order)."""
    text = f"Marker {n}.\n"
    await writer.call("memory.write", {"path": f"memory/marker-{n}.md", "content": text})
    await wait_for(_reads(reader_folder / "memory" / f"marker-{n}.md", text))


@contextlib.asynccontextmanager
async def _pair(start_gateway, postgres_url, tmp_path, *, zeta: bool = False):
    """A client of each of two gateways on one database (test_notes_shared.two; both notes mirrors started by
    memory.status), closed after. `zeta`: memory/zeta.md written through A, in B's folder, after B's sync."""
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        await ca.call("memory.status")
        await cb.call("memory.status")
        if zeta:
            await ca.call("memory.write", {"path": "memory/zeta.md", "content": ZETA})
            await wait_for(_reads(tmp_path / "workspace-b" / "memory" / "zeta.md", ZETA))
            await cb.call("memory.sync")
        yield ca, cb
    finally:
        await ca.close()
        await cb.close()


async def test_a_symlink_to_a_note_on_b_deletes_it_nowhere(start_gateway, postgres_url, tmp_path):
    async with _pair(start_gateway, postgres_url, tmp_path, zeta=True) as (ca, cb):
        mem_a, mem_b = tmp_path / "workspace-a" / "memory", tmp_path / "workspace-b" / "memory"
        os.symlink("zeta.md", mem_b / "alpha.md")  # B's person: an alias, sorted before its target
        for _ in range(2):
            await cb.call("memory.sync")
        await _settled(cb, tmp_path / "workspace-a", 1)
        assert await _rows(postgres_url) == ["memory/marker-1.md", "memory/zeta.md"]
        assert await _rows(postgres_url, "SELECT path FROM note_tombstones") == []
        assert (mem_a / "zeta.md").read_text() == ZETA and not (mem_a / "alpha.md").exists()
        assert (mem_b / "zeta.md").read_text() == ZETA and (mem_b / "alpha.md").is_symlink()
        assert [f["path"] for f in (await cb.call("memory.files"))["files"]] == ["memory/marker-1.md", "memory/zeta.md"]
        # The index both gateways share holds the note by its name, not B's alias of it.
        await ca.call("memory.sync")
        hits = await ca.call("memory.search", {"query": "boat blue", "mode": "fts"})
        assert [h["path"] for h in hits["results"]] == ["memory/zeta.md"]
        versions = (await ca.call("memory.history", {"path": "memory/zeta.md"}))["versions"]
        assert [(v["version"], v["current"]) for v in versions] == [(1, True)]


async def test_a_hard_link_on_b_is_a_second_note_and_deletes_none(start_gateway, postgres_url, tmp_path):
    async with _pair(start_gateway, postgres_url, tmp_path, zeta=True) as (ca, cb):
        mem_a, mem_b = tmp_path / "workspace-a" / "memory", tmp_path / "workspace-b" / "memory"
        os.link(mem_b / "zeta.md", mem_b / "alpha.md")
        for _ in range(2):
            await cb.call("memory.sync")
        await _settled(cb, tmp_path / "workspace-a", 1)
        assert await _rows(postgres_url) == ["memory/alpha.md", "memory/marker-1.md", "memory/zeta.md"]
        assert await _rows(postgres_url, "SELECT path FROM note_tombstones") == []
        assert (mem_a / "zeta.md").read_text() == ZETA and (mem_a / "alpha.md").read_text() == ZETA
        # A write of one name through A changes that note only.
        await ca.call("memory.write", {"path": "memory/zeta.md", "content": "Zeta: the boat is red.\n"})
        await wait_for(_reads(mem_b / "zeta.md", "Zeta: the boat is red.\n"))
        await cb.call("memory.sync")
        await _settled(cb, tmp_path / "workspace-a", 2)
        assert (mem_a / "alpha.md").read_text() == ZETA and (mem_b / "alpha.md").read_text() == ZETA
        assert "memory/zeta.md" in await _rows(postgres_url)


async def test_a_symlinked_folder_on_b_renames_no_note(start_gateway, postgres_url, tmp_path):
    async with _pair(start_gateway, postgres_url, tmp_path) as (ca, cb):
        mem_a, mem_b = tmp_path / "workspace-a" / "memory", tmp_path / "workspace-b" / "memory"
        (mem_b / "2026").mkdir(parents=True)
        os.symlink("2026", mem_b / "current")  # B's person: memory/current -> memory/2026
        await cb.call("memory.sync")
        with structlog.testing.capture_logs() as logs:
            await ca.call("memory.write", {"path": "memory/current/todo.md", "content": "Paint the hull.\n"})
            await _settled(ca, tmp_path / "workspace-b", 1)
            for _ in range(2):
                await cb.call("memory.sync")
            await _settled(cb, tmp_path / "workspace-a", 2)
        assert await _rows(postgres_url) == ["memory/current/todo.md", "memory/marker-1.md", "memory/marker-2.md"]
        assert await _rows(postgres_url, "SELECT path FROM note_tombstones") == []
        assert (mem_a / "current" / "todo.md").read_text() == "Paint the hull.\n"
        assert list((mem_b / "2026").iterdir()) == []  # never written through B's link
        # The index every gateway shares keeps it: B's sync does not take a link here for a note gone.
        hits = await cb.call("memory.search", {"query": "paint the hull", "mode": "fts"})
        assert [h["path"] for h in hits["results"]] == ["memory/current/todo.md"]
        refused = [e for e in logs if e["event"] == "note_left_out_of_the_record"]
        assert [e["path"] for e in refused] == ["memory/current/todo.md"] and "symlink" in refused[0]["reason"]
        # A file put in B's real folder is a note by its own name.
        (mem_b / "2026" / "plan.md").write_text("Plan.\n")
        await cb.call("memory.sync")
        await wait_for(_reads(mem_a / "2026" / "plan.md", "Plan.\n"))
        assert "memory/2026/plan.md" in await _rows(postgres_url)


BAD_NAMES = ODD


async def test_a_note_named_with_a_control_character_survives_every_gateways_sync(
    start_gateway, postgres_url, tmp_path
):
    path, text = "memory/bell\x07.md", "A bell rings at noon.\n"
    async with _pair(start_gateway, postgres_url, tmp_path) as (ca, cb):
        await ca.call("memory.write", {"path": path, "content": text})
        await wait_for(_reads(tmp_path / "workspace-b" / "memory" / "bell\x07.md", text))
        for c in (cb, ca, cb):
            await c.call("memory.sync")
        await _settled(ca, tmp_path / "workspace-b", 1)
        assert path in await _rows(postgres_url)
        assert (tmp_path / "workspace-b" / "memory" / "bell\x07.md").read_text() == text
        versions = (await cb.call("memory.history", {"path": path}))["versions"]
        assert [v["current"] for v in versions] == [True]


async def test_a_file_name_no_record_can_hold_stops_no_sync_and_no_other_note(start_gateway, postgres_url, tmp_path):
    async with _pair(start_gateway, postgres_url, tmp_path) as (ca, cb):
        mem_b = tmp_path / "workspace-b" / "memory"
        mem_b.mkdir(parents=True, exist_ok=True)
        for name in BAD_NAMES:
            with open(os.path.join(os.fsencode(mem_b), name), "w") as f:
                f.write("A note with an odd name.\n")
        os.makedirs(os.path.join(os.fsencode(mem_b), b"d\xe9j\xe0"))
        with open(os.path.join(os.fsencode(mem_b), b"d\xe9j\xe0", b"inside.md"), "w") as f:
            f.write("Inside an odd folder.\n")
        (mem_b / "ordinary.md").write_text("An ordinary new note about kestrels.\n")
        with structlog.testing.capture_logs() as logs:
            for _ in range(2):
                await cb.call("memory.sync")
        await wait_for(_reads(tmp_path / "workspace-a" / "memory" / "ordinary.md", ordinary_text()))
        await wait_for(_reads(tmp_path / "workspace-a" / "memory" / "bell\x07.md", "A note with an odd name.\n"))
        held = ["memory/bell\x07.md", "memory/ordinary.md", "memory/" + "x" * 245 + ".md"]
        assert await _rows(postgres_url) == held
        hits = await cb.call("memory.search", {"query": "kestrels", "mode": "fts"})
        assert [h["path"] for h in hits["results"]] == ["memory/ordinary.md"]
        shown = ["memory/caf\\xe9.md", "memory/d\\xe9j\\xe0"]
        skipped = (await cb.call("memory.status"))["skipped"]
        assert sorted(s["path"] for s in skipped) == sorted(shown)
        said = [e for e in logs if e["event"] == "memory_file_skipped"]
        assert sorted(e["path"] for e in said) == sorted(shown)  # once each, over two syncs
        assert not [e for e in logs if e.get("log_level") == "error" or e.get("exc_info")]
        assert not [e for e in logs if e["event"] in ("memory_watcher_failed", "memory_notes_reconcile_failed")]


_PAIRS: dict[str, tuple] = {}  # the two gateways of a property test, started at its first example


@settings(max_examples=examples(10), deadline=None, suppress_health_check=list(HealthCheck))
@given(names=NAMES)
@example(names=ODD)
async def test_any_file_names_on_b_reach_a_or_are_listed_and_no_sync_stops(
    start_gateway, postgres_url, tmp_path, names
):
    if str(tmp_path) not in _PAIRS:
        _PAIRS[str(tmp_path)] = await two(start_gateway, postgres_url, tmp_path)
    a, b = _PAIRS[str(tmp_path)]
    ca, cb = await a.client(), await b.client()
    run = len(_PAIRS) + sum(1 for _ in (tmp_path / "workspace-b").glob("memory/drawn-*"))
    try:
        await ca.call("memory.status")
        for name in names:
            put(os.fsencode(tmp_path / "workspace-b" / "memory" / f"drawn-{run}"), name, "Some note.\n")
        with structlog.testing.capture_logs() as logs:
            await cb.call("memory.sync")
        notes, odd = expected(f"memory/drawn-{run}", names)
        rows = await _rows(postgres_url)
        assert {r for r in rows if r.startswith(f"memory/drawn-{run}/")} == notes
        for rel in notes:
            await wait_for(_reads(tmp_path / "workspace-a" / rel, "Some note.\n"))
        assert {e["path"] for e in logs if e["event"] == "memory_file_skipped"} == odd
        assert not [e for e in logs if e["event"] == "memory_notes_reconcile_failed"]
    finally:
        await ca.close()
        await cb.close()


# What a person may do on B inside one folder of notes n0.md, n1.md and sub/s.md: an alias (a symlink) of
# a note, a second name (a hard link), a linked folder (to sub/), and A then writing a note through that
# folder's name. Names sort before, between and after the notes'.
LINKS = st.lists(
    st.one_of(
        st.tuples(st.just("symlink"), st.sampled_from(["a.md", "n05.md", "z.md"]), st.integers(0, 1)),
        st.tuples(st.just("hardlink"), st.sampled_from(["b.md", "n07.md", "y.md"]), st.integers(0, 1)),
        st.tuples(st.just("dirlink"), st.sampled_from(["cur", "m", "zz"]), st.booleans()),
        st.tuples(st.just("replace"), st.sampled_from(["n0.md", "n1.md"]), st.just(0)),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=examples(8), deadline=None, suppress_health_check=list(HealthCheck))
@given(links=LINKS)
@example(links=[("symlink", "a.md", 1), ("hardlink", "b.md", 0), ("dirlink", "cur", True)])
@example(links=[("hardlink", "b.md", 0), ("replace", "n0.md", 0)])
async def test_no_arrangement_of_links_on_b_deletes_renames_or_moves_a_note(
    start_gateway, postgres_url, tmp_path, links
):
    if str(tmp_path) not in _PAIRS:
        _PAIRS[str(tmp_path)] = await two(start_gateway, postgres_url, tmp_path)
    a, b = _PAIRS[str(tmp_path)]
    ca, cb = await a.client(), await b.client()
    wa, wb = tmp_path / "workspace-a", tmp_path / "workspace-b"
    run = sum(1 for _ in wb.glob("memory/h-*"))
    top = f"memory/h-{run}"
    try:
        await cb.call("memory.status")
        notes = {f"{top}/n0.md": f"Note q{run}n0.\n", f"{top}/n1.md": f"Note q{run}n1.\n", f"{top}/sub/s.md": "Sub.\n"}
        for rel, text in notes.items():
            await ca.call("memory.write", {"path": rel, "content": text})
        for rel, text in notes.items():
            await wait_for(_reads(wb / rel, text))
        names, twins = set(), set()  # a hard link's second name: a note of its own (of the same text)
        for kind, name, arg in links:
            where = wb / top / name
            if kind == "replace":  # a note's file made an alias of the other note
                if not where.is_symlink():
                    where.unlink()
                    os.symlink("n1.md" if name == "n0.md" else "n0.md", where)
                continue
            if os.path.lexists(where):
                continue
            if kind == "symlink":
                os.symlink(f"n{arg}.md", where)
            elif kind == "hardlink":
                os.link(wb / top / f"n{arg}.md", where)
                names.add(f"{top}/{name}")
                twins.add(arg)
            else:
                os.symlink("sub", where)
                if arg:  # A writes a note through the linked folder's name
                    rel = f"{top}/{name}/w.md"
                    notes[rel] = "Written through A.\n"
                    await ca.call("memory.write", {"path": rel, "content": notes[rel]})
        for _ in range(2):
            await cb.call("memory.sync")
        await _settled(cb, wa, 100 + run)
        rows = {r for r in await _rows(postgres_url) if r.startswith(top + "/")}
        assert rows == notes.keys() | names
        assert not [p for p in await _rows(postgres_url, "SELECT path FROM note_tombstones") if p.startswith(top)]
        for rel, text in notes.items():
            assert (wa / rel).read_text() == text, rel
        for i in {0, 1} - twins:  # still in the index every gateway shares, after B's syncs (a twin's
            # text is found once, under either name)
            hits = await cb.call("memory.search", {"query": f"q{run}n{i}", "mode": "fts"})
            assert [h["path"] for h in hits["results"]] == [f"{top}/n{i}.md"]
        in_sub = [p.name for p in (wb / top / "sub").iterdir() if not p.name.startswith(".")]
        assert in_sub == ["s.md"]  # never written through B's linked folder
    finally:
        await ca.close()
        await cb.close()


def ordinary_text() -> str:
    return "An ordinary new note about kestrels.\n"
