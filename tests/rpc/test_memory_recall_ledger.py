"""Recall from the ledger through the real memory.search over the WebSocket (issue 48 items 3–4), on
both engines: a small written life in dated notes — a home that moved twice, a partner who changed, a
wifi password that changed, and notes that only mention an old value later — and a table of questions,
each with the value that must come first and the superseded values that must never rank above it.

The present ("now", a question in the past tense that asks about no earlier time), "originally",
"before X", a month, `asOf` (the memory as it stood then) and a relative date resolved against it; a
question that shares no word with the statement it asks about."""

from __future__ import annotations

import pytest

NOTES = {
    "2025-01-10": "I live in Leeds, in a flat by the canal.",
    "2025-02-01": "I've been seeing someone for a few weeks, her name is Elin.",
    "2025-03-15": "My wifi password is otter-blue-7.",
    "2025-06-01": "We moved to York last week, got the keys to a terraced house.",
    "2025-08-20": "Noor and I made it official, she's my girlfriend now.",
    "2025-09-10": "Changed the router: the wifi password is heron-grey-4 now.",
    "2025-11-02": "Moved again: I now live in Dundee, by the river Tay.",
    # Later notes that only name old values: never a newer statement, never above the current one.
    "2025-11-20": "Elin sent a leek soup recipe, the one with crème fraîche.",
    "2025-12-01": "Leeds market still has the best cheese stall, York's is fine too.",
    "2025-12-05": "Reminder: the old wifi otter-blue-7 is still on the printer's settings.",
}

HOME = ["Leeds", "York", "Dundee"]
PARTNER = ["Elin", "Noor"]
WIFI = ["otter-blue-7", "heron-grey-4"]

# (question, asOf, the value the first hit must show, the superseded values never above it)
CASES = [
    ("Where do I live now?", None, "Dundee", ["Leeds", "York"]),  # present
    ("Which city is home these days?", None, "Dundee", ["Leeds", "York"]),
    ("Who am I dating?", None, "Noor", ["Elin"]),  # no word shared with "Noor and I made it official"
    ("What was the wifi password I set?", None, "heron-grey-4", ["otter-blue-7"]),  # past tense, the present
    ("Where did I live originally?", None, "Leeds", []),
    ("Where did I live before Dundee?", None, "York", []),
    ("Where did I live in March?", "2025-12-31", "Leeds", []),
    ("Where do I live?", "2025-07-01", "York", ["Leeds"]),  # as memory stood then: Dundee not said yet
    ("What is the wifi password?", "2025-10-05", "heron-grey-4", ["otter-blue-7"]),
    ("What was the wifi password last month?", "2025-10-05", "otter-blue-7", []),  # relative to asOf
]


@pytest.fixture(params=["files", "postgres"])
def engine(request) -> dict:
    """The storage settings of one engine (the embedded PostgreSQL for `postgres`)."""
    return {"storage.url": request.getfixturevalue("postgres_url")} if request.param == "postgres" else {}


@pytest.fixture
async def gateway(engine, start_gateway):
    gw = await start_gateway(memory=True, **engine)
    notes = gw.config.agent_workspace("main") / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    for day, line in NOTES.items():
        (notes / f"{day}.md").write_text(f"# {day}\n\n{line}\n")
    return gw


def shows(hit: dict, value: str) -> bool:
    return value.lower() in str(hit.get("snippet") or "").lower()


async def test_the_value_asked_about_comes_first_and_no_superseded_one_above_it(gateway):
    c = await gateway.client()
    try:
        await c.call("memory.sync", {})
        for query, as_of, first, stale in CASES:
            params: dict = {"query": query, "k": 6}
            if as_of:
                params["asOf"] = as_of
            hits = (await c.call("memory.search", params))["results"]
            assert hits, query
            top = hits[0]
            assert shows(top, first) and "fact" in top, (query, as_of, hits)
            assert all(r.get("date") for r in hits), (query, hits)  # every hit dated
            if as_of:
                assert all(r["date"][:10] <= as_of for r in hits), (query, hits)
            # Superseded: a hit that shows an old value and not the asked one is marked and ranks after
            # every hit that shows the asked one.
            for r in hits[1:]:
                old = [v for v in stale if shows(r, v)]
                if old and not shows(r, first):
                    assert r.get("supersededBy"), (query, r)
            last_current = max(i for i, r in enumerate(hits) if shows(r, first))
            first_stale = min(
                (i for i, r in enumerate(hits) if any(shows(r, v) for v in stale) and not shows(r, first)),
                default=len(hits),
            )
            assert last_current < first_stale, (query, [(r["snippet"][:60], r.get("supersededBy")) for r in hits])
    finally:
        await c.close()


async def test_a_question_the_ledger_cannot_answer_gets_the_plain_search(gateway):
    """No empty answers: a question about a subject the ledger holds nothing of is the hybrid search."""
    c = await gateway.client()
    try:
        await c.call("memory.sync", {})
        hits = (await c.call("memory.search", {"query": "leek soup recipe", "k": 3}))["results"]
        assert hits and "leek soup" in hits[0]["snippet"] and "fact" not in hits[0], hits
        hits = (await c.call("memory.search", {"query": "What's my dentist called?", "k": 3}))["results"]
        assert all("fact" not in r for r in hits), hits
    finally:
        await c.close()
