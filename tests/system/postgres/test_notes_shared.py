"""Notes on PostgreSQL (issue 47, part 1): MEMORY.md, LEARNINGS.md and memory/**/*.md live in the
database with their versions; each gateway's own workspace folder is a working mirror. A note written
through any door of any gateway reaches every gateway's folder; a note edited on disk (a person's
editor, seen by the watcher) is taken into the database, versioned and mirrored to the others; two edits
of one note at once both survive, the later current and the earlier a version."""

from __future__ import annotations

import asyncio

from tests.helpers import wait_for


async def two(start_gateway, postgres_url, tmp_path):
    def cfg(name: str) -> dict:
        return {
            "storage.url": postgres_url,
            "storage.instanceId": name,
            "memory": True,
            "workspace": str(tmp_path / f"workspace-{name}"),
        }

    return await start_gateway("a", **cfg("a")), await start_gateway("b", **cfg("b"))


def _reads(path, text: str):
    async def check():
        try:
            return path.read_text(encoding="utf-8") == text
        except OSError:
            return False

    return check


async def test_a_note_written_through_a_is_in_bs_folder_and_found_there(start_gateway, postgres_url, tmp_path):
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        text = "# About me\nMy sailing boat is called Kestrel and is moored at Pier 7.\n"
        await ca.call("memory.write", {"path": "MEMORY.md", "content": text})  # indexed before it answers
        # B opens its memory afterwards, into an empty folder while notes of it are indexed: a folder B
        # never mirrored into is a new one (not a share that is not mounted), so it gets every note.
        await cb.call("memory.status")
        await wait_for(_reads(tmp_path / "workspace-b" / "MEMORY.md", text))
        day = "# 2026-11-20\n\n## Harbour\nThe harbour master is called Ines.\n"
        await ca.call("memory.write", {"path": "memory/2026-11-20.md", "content": day})
        await wait_for(_reads(tmp_path / "workspace-b" / "memory" / "2026-11-20.md", day))

        await cb.call("memory.sync")
        found = await cb.call("memory.search", {"query": "what is the boat called", "sources": ["memory"]})
        assert found["results"][0]["path"] == "MEMORY.md"
        history = await cb.call("memory.history", {"path": "MEMORY.md"})
        assert [(v["version"], v["by"], v["principal"]) for v in history["versions"]] == [(1, "websocket", "owner")]
    finally:
        await ca.close()
        await cb.close()


async def test_an_edit_on_disk_at_b_is_versioned_and_mirrored_to_a(start_gateway, postgres_url, tmp_path):
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        await cb.call("memory.status")
        note = "memory/garden.md"
        await ca.call("memory.write", {"path": note, "content": "Tomatoes first.\n"})
        at_b = tmp_path / "workspace-b" / "memory" / "garden.md"
        await wait_for(_reads(at_b, "Tomatoes first.\n"))
        at_b.write_text("Tomatoes first, then beans.\n")  # the person's editor on B's machine
        await wait_for(_reads(tmp_path / "workspace-a" / "memory" / "garden.md", "Tomatoes first, then beans.\n"))

        async def versioned():
            versions = (await ca.call("memory.history", {"path": note}))["versions"]
            return versions if len(versions) == 2 else None

        versions = await wait_for(versioned)
        assert [(v["version"], v["by"], v["current"]) for v in versions] == [(2, "file", True), (1, "websocket", False)]
        old = await ca.call("memory.history", {"path": note, "version": 1})
        assert old["version"]["content"] == "Tomatoes first.\n"
    finally:
        await ca.close()
        await cb.close()


async def test_two_edits_of_one_note_at_once_both_survive(start_gateway, postgres_url, tmp_path):
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        await cb.call("memory.status")
        note = "memory/plans.md"
        await ca.call("memory.write", {"path": note, "content": "Plan: paint the boat.\n"})
        at_b = tmp_path / "workspace-b" / "memory" / "plans.md"
        await wait_for(_reads(at_b, "Plan: paint the boat.\n"))
        # At once: B's person edits the file while A's client writes the same note.
        at_b.write_text("Plan: paint the boat blue.\n")
        await asyncio.gather(
            ca.call("memory.write", {"path": note, "content": "Plan: sell the boat.\n"}),
            cb.call("memory.sync"),
        )

        async def settled():
            versions = (await ca.call("memory.history", {"path": note}))["versions"]
            texts = {
                (await ca.call("memory.history", {"path": note, "version": v["version"]}))["version"]["content"]
                for v in versions
            }
            return versions if {"Plan: paint the boat blue.\n", "Plan: sell the boat.\n"} <= texts else None

        versions = await wait_for(settled)
        current = (await ca.call("memory.history", {"path": note, "version": versions[0]["version"]}))["version"]
        assert versions[0]["current"] and len(versions) == 3
        for folder in ("workspace-a", "workspace-b"):  # every folder holds the later one
            await wait_for(_reads(tmp_path / folder / "memory" / "plans.md", current["content"]))
    finally:
        await ca.close()
        await cb.close()


async def test_a_note_deleted_from_bs_folder_leaves_the_record_and_as_folder(start_gateway, postgres_url, tmp_path):
    """Deleting the file is how a person deletes a note: once B's sync confirms it gone, the record
    drops it (its versions stay) and A's mirror goes too."""
    a, b = await two(start_gateway, postgres_url, tmp_path)
    ca, cb = await a.client(), await b.client()
    try:
        await cb.call("memory.status")
        note = "memory/old-plans.md"
        await ca.call("memory.write", {"path": note, "content": "Paint the shed.\n"})
        at_a, at_b = (tmp_path / f"workspace-{g}" / "memory" / "old-plans.md" for g in "ab")
        await wait_for(_reads(at_b, "Paint the shed.\n"))
        await cb.call("memory.sync")
        at_b.unlink()
        await cb.call("memory.sync")

        async def gone_at_a():
            return not at_a.exists()

        await wait_for(gone_at_a)
        history = await ca.call("memory.history", {"path": note})
        assert [v["version"] for v in history["versions"]] == [1], "its versions stay"
        restored = await ca.call("memory.restore", {"path": note, "version": 1})
        assert restored["restoredFrom"] == 1
        await wait_for(_reads(at_b, "Paint the shed.\n"))  # and a restore brings it back everywhere
        assert [v["version"] for v in (await cb.call("memory.history", {"path": note}))["versions"]] == [2, 1]
    finally:
        await ca.close()
        await cb.close()
