"""The ledger's contract (memory/ports.py's LedgerStore, and MemoryIndex.statements): statements about
the person kept beside the index as a real sync indexes real transcripts and notes, the same on every
engine. A later statement supersedes across the whole memory; an ending closes a subject; a question
states nothing; a file edited, removed or forgotten takes its statements with it; a forced rebuild makes
them anew; the memory service puts the current one first for a question in other words, and answers
memory.profile and asOf from it."""

from __future__ import annotations

import uuid

import pytest

from gateway.compose import memory_service
from gateway.errors import Invalid
from gateway.memory.index.sources import session_path
from gateway.memory.ledger.facts import facts
from gateway.memory.ports import Statement
from gateway.sessions import transcript as tx
from gateway.memory.search.request import SearchRequest
from tests.contract.test_memory_index import Opened, write_note

CONFIG = {"memory.embeddings.provider": "local"}  # tests/contract/conftest.py's `storage` reads it


async def said(sessions, day: str, *lines: str) -> str:
    """A session on `day` with these messages (user, assistant, …), its transcript on disk."""
    key = str(uuid.uuid4())
    await sessions.create(key=key)
    records = [
        tx.message_record(
            str(uuid.uuid4()), "user" if i % 2 == 0 else "assistant", text, timestamp=f"{day}T10:00:{i:02d}.000Z"
        )
        for i, text in enumerate(lines)
    ]
    await sessions.append_messages(key, *records)
    await sessions.local_transcript(key)
    return key


def current(statements: list[Statement], subject: str) -> str | None:
    fact = facts(statements).get(subject)
    now = fact.current if fact else None
    return now.value if now else None


async def test_statements_are_kept_as_memory_is_indexed_and_the_later_one_holds(storage, sessions):
    async with Opened(storage) as m:
        first = await said(sessions, "2025-02-01", "I live in Leeds, in a flat by the canal.", "Noted.")
        await said(sessions, "2025-03-01", "Where do I live?", "In Leeds.")  # a question states nothing
        await m.sync()
        got = await m.index.statements(["home"])
        assert [(s.subject, s.path, s.start_line) for s in got] == [("home", session_path(first), 2)]
        assert got[0].said.startswith("2025-02-01") and "Leeds" in got[0].value and got[0].source == "extractor"

        later = await said(sessions, "2025-09-01", "We moved to Dundee last week, got the keys on Friday.", "Nice!")
        await m.sync()
        got = await m.index.statements(["home"])
        assert [s.path for s in got] == [session_path(first), session_path(later)]  # oldest first
        assert "Dundee" in (current(got, "home") or "")
        fact = facts(got)["home"]
        assert fact.periods[0].until == got[1].said  # the earlier one held until the later was said

        # An ending closes the subject; other subjects are not read when some are asked for.
        await said(sessions, "2025-10-01", "My girlfriend is Elin.", "Lovely.")
        await said(sessions, "2025-11-01", "Elin and I broke up.", "Sorry to hear.")
        await m.sync()
        partner = await m.index.statements(["partner"])
        assert {s.subject for s in partner} == {"partner"} and partner[-1].ending
        assert current(partner, "partner") is None
        assert {s.subject for s in await m.index.statements()} >= {"home", "partner"}
        assert await m.index.statements([]) == []


async def test_a_qualified_subject_is_found_by_its_family_and_a_note_states_too(storage, sessions):
    async with Opened(storage) as m:
        write_note(storage, "memory/house.md", "# House\n\nThe garage door code is 4412.\n")
        await said(sessions, "2025-05-01", "My wifi password is otter-blue-7.", "Saved.")
        await m.sync()
        codes = await m.index.statements(["code"])
        assert {s.subject for s in codes} == {"code:garage", "code:wifi"}
        assert {s.path for s in codes} == {
            "memory/house.md",
            next(s.path for s in codes if s.path != "memory/house.md"),
        }
        assert await m.index.statements(["code:wifi"]) == [s for s in codes if s.subject == "code:wifi"]


async def test_a_statements_text_is_kept_as_said_quotes_backslashes_and_all(storage, sessions):
    """The statements of a batch go in as one JSON array (files engine: db.insert_rows): what JSON escapes
    comes back as it was, a literal backslash-u0000 (which sends the batch the slow way) included."""
    line = 'My locker code is 4821, “the blue one” \\u0000 "ü" \\ tab\there.'
    write_note(storage, "memory/gym.md", f"# Gym\n\n{line}\n")
    write_note(storage, "memory/bike.md", "# Bike\n\nMy bike lock combination is 7740.\n")
    async with Opened(storage) as m:
        await m.sync()
        got = {s.path: s for s in await m.index.statements(["code"])}
        assert got["memory/gym.md"].text == line and got["memory/gym.md"].value.startswith("4821")
        assert got["memory/bike.md"].text == "My bike lock combination is 7740."


async def test_a_file_edited_removed_or_forgotten_takes_its_statements_and_a_rebuild_makes_them_anew(storage, sessions):
    async with Opened(storage) as m:
        write_note(storage, "memory/car.md", "# Car\n\nI drive a red Fiat Panda.\n")
        key = await said(sessions, "2025-05-01", "My dentist is Dr Osei on Park Road.", "Noted.")
        await m.sync()
        assert {s.subject for s in await m.index.statements()} == {"vehicle", "dentist"}

        write_note(storage, "memory/car.md", "# Car\n\nSold the Panda; my new car is a blue Skoda.\n")
        await m.sync()
        cars = await m.index.statements(["vehicle"])
        assert len(cars) == 1 and "Skoda" in cars[0].text

        (storage.config.agent_workspace("main") / "memory/car.md").unlink()
        await m.sync()
        assert await m.index.statements(["vehicle"]) == []

        await sessions.delete(key)
        assert await m.index.forget_session(key, busy=False)
        assert await m.index.statements(["dentist"]) == []

        await said(sessions, "2025-06-01", "My dentist is Dr Osei on Park Road.", "Noted.")
        await m.sync(force=True)
        assert [s.subject for s in await m.index.statements()] == ["dentist"]


async def test_the_service_puts_the_current_statement_first_and_answers_the_profile_and_as_of(storage, sessions):
    storage.config.memory.enabled = True
    storage.config.memory.sync.on_start = False
    old = await said(sessions, "2025-01-10", "I've been seeing someone, her name is Elin.", "How lovely.")
    new = await said(sessions, "2025-08-20", "Noor and I made it official, she's my girlfriend now.", "Congrats!")
    await said(sessions, "2025-09-01", "Can you suggest a recipe with leeks?", "Leek and potato soup.")
    service = memory_service(storage.config, storage, "main")
    await service.open()
    try:
        await service.sync()
        res = await service.search(SearchRequest(query="Who am I going out with these days?", k=5))
        top = res["results"][0]
        assert top["path"] == session_path(new) and top["fact"]["subject"] == "partner"
        assert top["date"].startswith("2025-08-20")
        stale = [r for r in res["results"] if r["path"] == session_path(old)]
        assert all(r.get("supersededBy", "").startswith("2025-08-20") for r in stale)

        # As memory stood in March: Noor was not said yet, Elin leads.
        res = await service.search(
            SearchRequest(query="Who am I going out with these days?", k=5, as_of="2025-03-01T00:00:00.000Z")
        )
        assert res["results"][0]["path"] == session_path(old) and res["asOf"] == "2025-03-01T00:00:00.000Z"
        assert all(r["date"] <= "2025-03-01" for r in res["results"])

        # "originally": the first value.
        res = await service.search(SearchRequest(query="Who was I originally seeing?", k=5))
        assert res["results"][0]["path"] == session_path(old)

        prof = await service.profile()
        partner = next(f for f in prof["facts"] if f["subject"] == "partner")
        assert partner["since"].startswith("2025-08-20") and partner["evidence"]["path"] == session_path(new)
        assert [h["from"][:10] for h in partner["history"]] == ["2025-01-10"]
        assert partner["history"][0]["until"].startswith("2025-08-20")
    finally:
        await service.close()


async def test_the_profile_answers_a_bounded_page_by_cursor_subject_and_history(storage, sessions):
    """memory.profile is bounded (ledger/profile.py): `limit` facts, the next page by `nextCursor`, one
    subject or family, `history` earlier values per fact (the newest), and clear errors past the rules."""
    storage.config.memory.enabled = True
    storage.config.memory.sync.on_start = False
    things = ["alarm", "garage", "gate", "locker", "safe", "shed"]
    write_note(
        storage,
        "memory/codes.md",
        "# Codes\n\n" + "".join(f"The {t} code is {1000 + i}.\n" for i, t in enumerate(things)),
    )
    for day, line in [
        ("2025-01-05", "I live in Leeds, in a flat by the canal."),
        ("2025-03-05", "We moved to York last week."),
        ("2025-06-05", "We moved to Hull, got the keys on Monday."),
        ("2025-09-05", "We moved to Bath at last."),
    ]:
        await said(sessions, day, line, "Noted.")
    service = memory_service(storage.config, storage, "main")
    await service.open()
    try:
        await service.sync()
        whole = (await service.profile(limit=500))["facts"]
        assert {f["subject"] for f in whole} == {"home", *(f"code:{t}" for t in things)}

        # Page by page: each fact once, in the order of the whole, the last page without a cursor.
        seen, cursor = [], None
        for _ in range(10):
            res = await service.profile(limit=3, cursor=cursor)
            assert len(res["facts"]) <= 3
            seen += [f["subject"] for f in res["facts"]]
            cursor = res.get("nextCursor")
            if cursor is None:
                break
        assert seen == [f["subject"] for f in whole]

        # One family, one subject of it, one plain subject.
        assert {f["subject"] for f in (await service.profile(subject="code"))["facts"]} == {f"code:{t}" for t in things}
        assert [f["subject"] for f in (await service.profile(subject="code:shed"))["facts"]] == ["code:shed"]
        home = (await service.profile(subject="home"))["facts"]
        assert [f["subject"] for f in home] == ["home"] and "Bath" in home[0]["value"]
        towns = ["Leeds", "York", "Hull"]
        assert [t in h["value"] for t, h in zip(towns, home[0]["history"], strict=True)] == [True] * 3
        assert "historyOmitted" not in home[0]

        # History bounded: the newest earlier values kept, the count of the rest said.
        home = (await service.profile(subject="home", history=1))["facts"][0]
        assert len(home["history"]) == 1 and "Hull" in home["history"][0]["value"] and home["historyOmitted"] == 2
        assert (await service.profile(subject="home", history=0))["facts"][0]["history"] == []

        for kw, field in [({"subject": "spaceship"}, "subject"), ({"cursor": "not-a-cursor"}, "cursor")]:
            with pytest.raises(Invalid) as exc:
                await service.profile(**kw)
            assert exc.value.field == field and field in str(exc.value), exc.value
    finally:
        await service.close()


async def said_as(sessions, key: str, day: str, *lines: str) -> None:
    """`said` with the session's key given (the same files in another order)."""
    await sessions.create(key=key)
    records = [
        tx.message_record(
            str(uuid.uuid4()), "user" if i % 2 == 0 else "assistant", text, timestamp=f"{day}T10:00:{i:02d}.000Z"
        )
        for i, text in enumerate(lines)
    ]
    await sessions.append_messages(key, *records)
    await sessions.local_transcript(key)


async def test_statements_said_at_the_same_time_resolve_the_same_way_whatever_order_they_are_indexed_in(
    storage, sessions
):
    # Two conversations at the same second each give the person's home; a third, later, their manager.
    convos = {
        "00000000-0000-4000-8000-00000000000b": ("2025-04-01", "I live in Whitby now.", "Noted."),
        "00000000-0000-4000-8000-00000000000a": ("2025-04-01", "We moved to Harrogate last week.", "Nice."),
        "00000000-0000-4000-8000-00000000000c": ("2025-05-01", "My new manager is Gwen.", "Good luck."),
    }
    runs = []
    async with Opened(storage) as m:
        for order in (list(convos), list(reversed(convos))):
            for key in order:  # written (and so modified) in this order
                if await sessions.exists(key):
                    await sessions.delete(key, trash=False)
                    assert await m.index.forget_session(key, busy=False)
                await said_as(sessions, key, *convos[key])
            await m.sync(force=True)
            runs.append(await m.index.statements())
    first, again = runs
    assert first == again  # same statements, same order
    assert [s.value for s in first if s.subject == "home"] == ["Harrogate", "Whitby"]  # the tie: by path
    assert current(first, "home") == current(again, "home") == "Whitby"
