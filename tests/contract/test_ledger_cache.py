"""The ledger's facts kept between searches (memory/ledger/cache.py), on every engine: read once per
generation of the index, never stale — a statement said and synced is what the very next search and
profile answer with, and a removed file's statement is gone from them at once."""

from __future__ import annotations

from gateway.compose import memory_service
from gateway.memory.index.sources import session_path
from gateway.memory.search.snippets import Exclude
from gateway.memory.search.request import SearchRequest
from tests.contract.test_memory_ledger import said

CONFIG = {"memory.embeddings.provider": "local"}  # tests/contract/conftest.py's `storage` reads it
ASK = "Who am I going out with these days?"


async def test_a_new_statement_is_answered_by_the_next_search_and_profile_and_the_facts_are_read_once(
    storage, sessions
):
    storage.config.memory.enabled = True
    storage.config.memory.sync.on_start = False
    old = await said(sessions, "2025-01-10", "I've been seeing someone, her name is Elin.", "How lovely.")
    await said(sessions, "2025-02-01", "Can you suggest a recipe with leeks?", "Leek and potato soup.")
    service = memory_service(storage.config, storage, "main")
    await service.open()
    try:
        await service.sync()
        res = await service.search(SearchRequest(query=ASK, k=5))
        assert res["results"][0]["path"] == session_path(old) and res["results"][0]["fact"]["subject"] == "partner"
        reads = service.facts.reads
        for _ in range(3):  # the same generation: the facts kept, no statement read
            assert (await service.search(SearchRequest(query=ASK, k=5)))["results"][0]["path"] == session_path(old)
        assert service.facts.reads == reads
        partner = next(f for f in (await service.profile())["facts"] if f["subject"] == "partner")
        assert partner["evidence"]["path"] == session_path(old)
        reads = service.facts.reads
        await service.profile()
        assert service.facts.reads == reads

        new = await said(sessions, "2025-08-20", "Noor and I made it official, she's my girlfriend now.", "Congrats!")
        await service.sync()
        res = await service.search(SearchRequest(query=ASK, k=5))  # at once: no stale facts
        assert res["results"][0]["path"] == session_path(new) and res["results"][0]["fact"]["subject"] == "partner"
        assert all(r.get("supersededBy") for r in res["results"] if r["path"] == session_path(old))
        partner = next(f for f in (await service.profile())["facts"] if f["subject"] == "partner")
        assert partner["evidence"]["path"] == session_path(new)
        assert [h["from"][:10] for h in partner["history"]] == ["2025-01-10"]
        # A chat turn's own message is never its answer: left out of the kept facts for that search only.
        own = Exclude(session_path(new), "Noor and I made it official, she's my girlfriend now.")
        res = await service.search(SearchRequest(query=ASK, k=5, exclude=own))
        assert res["results"][0]["path"] == session_path(old) and res["results"][0]["fact"]["subject"] == "partner"
        assert (await service.search(SearchRequest(query=ASK, k=5)))["results"][0]["path"] == session_path(new)
        # asOf reads the kept statements as memory stood then
        res = await service.search(SearchRequest(query=ASK, k=5, as_of="2025-03-01T00:00:00.000Z"))
        assert res["results"][0]["path"] == session_path(old)

        # The newer statement's file is gone: the next search and profile say Elin again.
        await sessions.delete(new)
        await service.forget_session(new)
        res = await service.search(SearchRequest(query=ASK, k=5))
        assert res["results"][0]["path"] == session_path(old) and "supersededBy" not in res["results"][0]
        partner = next(f for f in (await service.profile())["facts"] if f["subject"] == "partner")
        assert partner["evidence"]["path"] == session_path(old) and partner["history"] == []
    finally:
        await service.close()
