"""A sync compares what is on disk against what is indexed (issue 27: the no-op re-sync's per-file work).

The scan builds its file list with as little Python per file as it takes, and the sync reads the stored
content hashes only of the files it must read: these tests hold what that must not change — each file
counted once however it is reached, the scan's order, and an edit that keeps a file's size still seen.
"""

from __future__ import annotations

import os

import pytest

from gateway.memory.index.sources import scan_memory, scan_sessions
from gateway.memory.search.request import SearchRequest
from tests.unit.test_memory import make_cfg, paths, transcript, write


@pytest.fixture
async def manager(tmp_path, open_manager):
    """A MemoryService on make_cfg(tmp_path) with no embedding model (this is about which files)."""
    return await open_manager(make_cfg(tmp_path, **{"memory.embeddings.provider": "none"}))


async def test_a_note_reached_twice_is_indexed_once(manager):
    m = manager
    ws = m.config.workspace_dir
    write(ws / "memory" / "b-bees.md", "The bees swarmed in June.\n")
    os.link(ws / "memory" / "b-bees.md", ws / "memory" / "c-hardlink.md")  # one file, two names
    (ws / "memory" / "a-link.md").symlink_to(ws / "memory" / "b-bees.md")  # and a symlink to it
    write(ws / "memory" / "sub" / "z.md", "Quinces ripen in October.\n")
    write(ws / "MEMORY.md", "# Me\n")
    found = [sf.path for sf in scan_memory(ws)]
    # The first name in the walk's order wins; root files first, then files before sub-folders.
    assert found == ["MEMORY.md", "memory/a-link.md", "memory/sub/z.md"]
    st = await m.sync()
    assert st["indexed"] == 3
    assert paths(await m.search(SearchRequest(query="bees swarmed", mode="fts"))) == ["memory/a-link.md"]


def test_scan_order_and_fields_match_the_files_on_disk(tmp_path):
    cfg = make_cfg(tmp_path)
    ws = cfg.workspace_dir
    for rel in ("memory/b.md", "memory/a.md", "memory/x/c.md", "memory/.hidden/d.md", "memory/e.txt"):
        write(ws / rel, f"text of {rel}\n")
    transcript(cfg, "s2", [("user", "hello")])
    transcript(cfg, "s1", [("user", "hi")])
    mem = scan_memory(ws)
    assert [f.path for f in mem] == ["memory/a.md", "memory/b.md", "memory/x/c.md"]
    for f in mem:
        st = os.stat(f.abs_path)
        assert (f.source, f.session_key, f.size, f.mtime_ns) == ("memory", None, st.st_size, st.st_mtime_ns)
        assert f.abs == ws / f.path
    sess = scan_sessions(cfg.sessions_dir())
    assert [(f.path, f.source, f.session_key) for f in sess] == [
        ("sessions/s1.jsonl", "sessions", "s1"),
        ("sessions/s2.jsonl", "sessions", "s2"),
    ]


async def test_an_edit_that_keeps_the_size_is_indexed_and_a_touch_is_not(manager):
    m = manager
    ws = m.config.workspace_dir
    for i in range(30):
        write(ws / "memory" / f"n{i:02d}.md", f"Note {i:02d} about apricots.\n")
    assert (await m.sync())["indexed"] == 30
    again = await m.sync()
    assert (again["indexed"], again["unchanged"], again["removed"]) == (0, 30, 0)

    note = ws / "memory" / "n07.md"
    before = os.stat(note)
    note.write_text("Note 07 about quinces!.\n")  # the same number of bytes
    os.utime(note, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert os.stat(note).st_size == before.st_size
    os.utime(ws / "memory" / "n08.md", None)  # touched, content unchanged
    st = await m.sync()
    assert st["indexed"] == 1 and st["unchanged"] == 29
    assert paths(await m.search(SearchRequest(query="quinces", mode="fts"))) == ["memory/n07.md"]
    assert (await m.sync())["indexed"] == 0


async def test_a_sync_of_some_sessions_reads_only_theirs(manager, tmp_path):
    """The sync after a chat turn covers that session: it stats its transcript (not the folder's
    listing) and reads its own rows; other files wait for their own sync; the removal guard still
    weighs the whole index."""
    from gateway.memory.index.sources import ScanError

    m = manager
    cfg = m.config
    write(cfg.workspace_dir / "memory" / "note.md", "Apricots in July.\n")
    for key in ("s1", "s2", "s3"):
        transcript(cfg, key, [("user", f"session {key} talks about quinces")])
    assert (await m.sync())["indexed"] == 4

    transcript(cfg, "s1", [("assistant", "and about medlars")])
    transcript(cfg, "s2", [("assistant", "and about medlars too")])
    write(cfg.workspace_dir / "memory" / "note.md", "Apricots in August, and medlars.\n")
    st = await m.orchestrator.sync(memory=False, sessions={"s1"})
    assert (st.indexed, st.unchanged, st.removed) == (1, 0, 0)
    found = {r["path"] for r in (await m.search(SearchRequest(query="medlars", mode="fts")))["results"]}
    assert found == {"sessions/s1.jsonl"}

    # A symlink is not a transcript; a session without one is gone from the index.
    sd = cfg.sessions_dir()
    (sd / "s3.jsonl").unlink()
    (sd / "s3.jsonl").symlink_to(sd / "s2.jsonl")
    st = await m.orchestrator.sync(memory=False, sessions={"s3", "nope"})
    assert (st.indexed, st.removed) == (0, 1)
    assert scan_sessions(sd, {"s1", "s3", "../x"}) == scan_sessions(sd, None)[:1]

    # Both remaining sessions gone at once: half of the 3 files indexed, not more; the guard stays quiet.
    (sd / "s1.jsonl").unlink()
    st = await m.orchestrator.sync(memory=False, sessions={"s1"})
    assert st.removed == 1
    # A sessions folder that is missing while transcripts are indexed stops the sync.
    (sd / "s3.jsonl").unlink()
    moved = sd.rename(tmp_path / "elsewhere")
    try:
        try:
            await m.orchestrator.sync(memory=False, sessions={"s2"})
        except ScanError as exc:
            assert "sessions folder" in str(exc)
        else:
            raise AssertionError("the sync went on without the sessions folder")
    finally:
        moved.rename(sd)
    assert {r["path"] for r in (await m.search(SearchRequest(query="quinces", mode="fts")))["results"]} == {
        "sessions/s2.jsonl"
    }


async def test_a_sync_of_some_sessions_adds_their_change_to_the_counts(tmp_path, open_manager):
    """The sync after a chat turn (which the next turn's recall waits for) does not count the whole
    index: it adds the change of its own files' rows. The counts stay exact; a full sync counts whole."""
    cfg = make_cfg(tmp_path)  # the local model: embedded chunks, so `missing` is counted too
    m = await open_manager(cfg)
    db = m.index.reader

    async def counted() -> dict[str, int]:
        files = await db.scalar("SELECT count(*) FROM files")
        chunks = await db.scalar("SELECT count(*) FROM chunks")
        missing = await db.scalar("SELECT count(*) FROM chunks WHERE embedded = 0")
        return {"files": files, "chunks": chunks, "vectors": chunks - missing, "missing": missing}

    write(cfg.workspace_dir / "memory" / "note.md", "Apricots in July.\n")
    for key in ("s1", "s2"):
        transcript(cfg, key, [("user", f"session {key} talks about quinces")])
    await m.sync()
    assert m.index.counts == await counted() and m.index.counts["files"] == 3

    m.index.counts["files"] += 1000  # were the whole index counted again, this would be gone
    transcript(cfg, "s1", [("assistant", "and about medlars " * 200)] * 6)  # s1 grows by several chunks
    transcript(cfg, "s3", [("user", "a new session about figs")])
    (cfg.sessions_dir() / "s2.jsonl").unlink()
    st = await m.orchestrator.sync(memory=False, sessions={"s1", "s2", "s3"})
    assert (st.indexed, st.removed) == (2, 1)
    want = await counted()
    assert want["chunks"] > 4 and want["files"] == 3
    assert m.index.counts == {**want, "files": want["files"] + 1000}, "not the change of these sessions' rows"

    await m.sync(force=True)  # a full sync counts whole
    assert m.index.counts == await counted()


async def test_a_sync_that_writes_nothing_leaves_the_counts_and_a_forced_one_counts_whole(tmp_path, open_manager):
    """A no-op sync of a big index must not count it whole (1.18M chunks: ~0.1 s of a 2 s budget):
    nothing it did changed a count. A forced sync (the way to repair anything) counts whole."""
    m = await open_manager(make_cfg(tmp_path, **{"memory.embeddings.provider": "none"}))
    for i in range(5):
        write(m.config.workspace_dir / "memory" / f"n{i}.md", f"Note {i} about figs.\n")
    await m.sync()
    right = dict(m.index.counts)
    m.index.counts["files"] += 1000  # were the index counted again, this would be gone
    assert (await m.sync())["unchanged"] == 5
    assert m.index.counts == {**right, "files": right["files"] + 1000}
    await m.sync(force=True)
    assert m.index.counts == right


async def test_a_note_over_a_cap_lowered_since_it_was_indexed_goes_at_the_next_sync(tmp_path, open_manager):
    """The sync keeps only the files whose signature (size, mtime, path) the index does not hold; a note
    indexed under a higher `memory.maxFileBytes` has the same signature as before, yet must go once the
    cap is lowered (the index gives no signature for a note over the cap)."""
    cfg = make_cfg(tmp_path, **{"memory.embeddings.provider": "none"})
    ws = cfg.workspace_dir
    write(ws / "memory" / "big.md", "The pelican ledger.\n" + "Nothing happened today.\n" * 300)
    write(ws / "memory" / "small.md", "A pelican once, in June.\n")
    m = await open_manager(cfg)
    assert (await m.sync())["indexed"] == 2
    await m.close()

    m = await open_manager(make_cfg(tmp_path, **{"memory.embeddings.provider": "none", "memory.maxFileBytes": 4096}))
    st = await m.sync()
    assert (st["indexed"], st["removed"], st["unchanged"]) == (0, 1, 1), st
    assert paths(await m.search(SearchRequest(query="pelican", mode="fts"))) == ["memory/small.md"]
    assert [s["path"] for s in (await m.status())["skipped"]] == ["memory/big.md"]
    assert (await m.sync())["removed"] == 0  # and it stays out


async def test_the_index_is_compared_a_window_of_rows_at_a_time(tmp_path, open_manager, monkeypatch):
    """The files table is read for the comparison a window of rowids at a time (2^17; here 4, so that
    thirty notes and three transcripts span many windows, some of them empty after deletes): every file
    is still compared, by source, by session, and what is gone is found."""
    from gateway.storage.files.memory import store

    monkeypatch.setattr(store, "WINDOW", 4)
    m = await open_manager(make_cfg(tmp_path, **{"memory.embeddings.provider": "none"}))
    cfg = m.config
    notes = [write(cfg.workspace_dir / "memory" / f"n{i:02d}.md", f"Note {i} about plums.\n") for i in range(30)]
    for key in ("s1", "s2", "s3"):
        transcript(cfg, key, [("user", f"session {key} about damsons")])
    assert (await m.sync())["indexed"] == 33
    for note in notes[3:12]:
        note.unlink()
    write(cfg.workspace_dir / "memory" / "n20.md", "Note 20 about greengages now.\n")
    st = await m.sync()
    assert (st["indexed"], st["removed"], st["unchanged"]) == (1, 9, 23), st
    transcript(cfg, "s2", [("assistant", "and sloes")])
    st = await m.orchestrator.sync(memory=False, sessions={"s2", "s3"})
    assert (st.indexed, st.unchanged, st.removed) == (1, 1, 0)
    st = await m.orchestrator.sync(memory=True, sessions=False)
    assert (st.indexed, st.unchanged, st.removed) == (0, 21, 0)
    assert paths(await m.search(SearchRequest(query="greengages", mode="fts"))) == ["memory/n20.md"]
