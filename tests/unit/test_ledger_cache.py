"""The ledger's facts cache (memory/ledger/cache.py), by property against a ledger that changes: whatever
the generations and reads, the facts it answers are those of the statements read at the generation
asked — never an older generation's; it holds at most its bound; asOf and a dropped path filter
the kept statements as a read would."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.memory.ledger.cache import FactsCache
from gateway.memory.ledger.facts import facts
from gateway.memory.ports import Statement
from tests.unit.test_ledger_profile import said

FAMILIES = ["home", "partner", "code"]


class Ledger:
    """A ledger whose every change moves its generation, as both engines' syncs do."""

    def __init__(self) -> None:
        self.rows: list[Statement] = []
        self.gen = 0
        self.reads = 0

    async def statements(self, subjects=None) -> list[Statement]:
        self.reads += 1
        return [s for s in self.rows if subjects is None or s.subject.split(":", 1)[0] in subjects]


def brief(known) -> dict:
    return {k: [(p.value, p.since, p.ending) for p in f.periods] for k, f in known.items()}


steps = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.sampled_from(["home", "partner", "code:shed", "code:gate"]), st.integers(0, 99)),
        st.tuples(st.just("ask"), st.sampled_from([*FAMILIES, None]), st.integers(0, 99)),
        st.tuples(st.just("forget"), st.just(""), st.integers(0, 99)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(steps, st.integers(1, 6))
def test_the_facts_are_always_those_of_the_generation_asked_and_the_bound_holds(ops, bound):
    async def go() -> None:
        ledger, cache = Ledger(), FactsCache(max_statements=bound)
        for op, name, n in ops:
            if op == "say":
                ledger.rows.append(said(name, f"v{n % 3}", n))
                ledger.gen += 1
            elif op == "forget" and ledger.rows:
                ledger.rows.pop(n % len(ledger.rows))
                ledger.gen += 1
            elif op == "ask":
                names = None if name is None else [name]
                got = await cache.facts(names, str(ledger.gen), ledger.statements)
                assert brief(got) == brief(facts(await ledger.statements(names)))
                as_of = said("home", "x", n).said
                got = await cache.facts(names, str(ledger.gen), ledger.statements, as_of)
                assert brief(got) == brief(facts(await ledger.statements(names), as_of))
                path = f"sessions/{n}.jsonl"  # a chat turn's own statements (of value v0) left out
                got = await cache.facts(
                    names, str(ledger.gen), ledger.statements, drop=(path, lambda s: s.value == "v0")
                )
                kept = [s for s in await ledger.statements(names) if not (s.path == path and s.value == "v0")]
                assert brief(got) == brief(facts(kept))
            assert cache.held <= bound

    asyncio.run(go())


def test_a_generation_asked_again_reads_nothing_a_family_past_the_bound_is_not_kept_and_a_dropped_path_is_left_out():
    async def go() -> None:
        ledger, cache = Ledger(), FactsCache(max_statements=3)
        ledger.rows = [said("home", "Leeds", 1), said("home", "York", 2), said("partner", "Elin", 3)]
        await cache.facts(["home"], "1", ledger.statements)
        await cache.facts(["home", "partner"], "1", ledger.statements)
        assert ledger.reads == 2 and cache.held == 3
        await cache.facts(["home", "partner"], "1", ledger.statements)
        assert ledger.reads == 2  # kept
        got = await cache.facts(["home"], "1", ledger.statements, drop=("sessions/2.jsonl", lambda s: True))
        assert got["home"].current.value == "Leeds" and ledger.reads == 2  # type: ignore[union-attr]
        await cache.facts(None, "1", ledger.statements)  # all three: kept apart — the families stay
        assert cache.held == 3 and cache.held_all == 3 and ledger.reads == 3
        await cache.facts(["home", "partner"], "1", ledger.statements)
        assert ledger.reads == 3
        ledger.rows.append(said("code:shed", "4471", 4))
        await cache.facts(["code"], "2", ledger.statements)
        await cache.facts(["home", "partner"], "2", ledger.statements)  # four: past the bound, one goes
        assert ledger.reads == 6 and cache.held == 3
        await cache.facts(None, "2", ledger.statements)  # ALL: past the families' bound, kept apart
        await cache.facts(None, "2", ledger.statements)
        assert ledger.reads == 7 and cache.held_all == 4
        small = FactsCache(max_statements=3, max_all=3)
        await small.facts(None, "2", ledger.statements)  # past ALL's own bound: read and not kept
        await small.facts(None, "2", ledger.statements)
        assert ledger.reads == 9 and small.held_all == 0
        await cache.facts(["partner"], None, ledger.statements)  # no generation: nothing kept
        await cache.facts(["partner"], None, ledger.statements)
        assert ledger.reads == 11 and cache.held == 0

    asyncio.run(go())


def test_statement_vectors_past_their_bound_are_embedded_again_never_missing(monkeypatch):
    """More statements than recall keeps vectors of (a family of thousands of codes): the question is
    still ranked against each of them (it raised KeyError and recall gave up, every time)."""
    import numpy as np

    from gateway.memory.ledger import recall as recall_module
    from gateway.memory.ledger.recall import LedgerRecall

    monkeypatch.setattr(recall_module, "MAX_VECTORS", 3)
    calls: list[int] = []

    async def embed(texts: list[str]) -> np.ndarray:  # a word-count embedding: "shed" texts point one way
        calls.append(len(texts))
        return np.array([[1.0 + t.count("shed"), 1.0 + t.count("gate"), 0.1] for t in texts], dtype=np.float32)

    ss = [said(f"code:box{i}", f"{i}{i}{i}", i) for i in range(6)] + [
        Statement(
            "code:shed", "4471", said("home", "x", 9).said, "s.md", 1, 1, "the shed shed code", "extractor", False
        )
    ]

    async def go() -> None:
        recall = LedgerRecall(embed)
        for _ in range(2):
            picked = await recall.pick("What's the shed code?", facts(ss), recall_module.datetime.now())
            assert picked is not None and picked[0].subject == "code:shed"
        assert calls == [8, 5]  # past the bound: the 3 used last kept, the rest embedded again

    asyncio.run(go())


def test_a_hidden_session_s_statements_are_in_no_answer_until_the_sync_drops_them():
    """A session deleted while the index was busy is hidden from search at once (its rows go with the
    next sync, which moves the generation): the kept facts leave its statements out too, and a later
    call without it hidden sees them again (restored)."""
    ledger = Ledger()
    ledger.rows = [said("home", "Leeds", 1), said("home", "York", 5)]  # sessions/1.jsonl, sessions/5.jsonl

    async def go() -> None:
        cache = FactsCache()
        assert cache_value(await cache.facts(["home"], "g1", ledger.statements)) == "York"
        hidden = await cache.facts(["home"], "g1", ledger.statements, hidden=["sessions/5.jsonl"])
        assert cache_value(hidden) == "Leeds" and ledger.reads == 1  # from the kept family, no read
        assert cache_value(await cache.facts(["home"], "g1", ledger.statements)) == "York"

    asyncio.run(go())


def cache_value(known) -> str:
    return known["home"].periods[-1].value


def test_all_is_kept_apart_past_the_families_bound_and_a_big_ledger_is_built_off_the_event_loop():
    """Every chat turn asks for ALL (answers.relevant_facts): past MAX_STATEMENTS it was read and built
    on the event loop each turn, and when kept it evicted the subject families. Now it is kept apart,
    and building the facts of a big ledger (at its read, for a dropped path, for asOf) yields the loop:
    a task scheduled before it runs before it ends (the read below never yields)."""
    from gateway.memory.ledger import cache as cache_module

    ledger = Ledger()
    ledger.rows = [said(f"code:box{i}", f"{i:04d}", i % 90) for i in range(cache_module.OFFLOAD + 500)]
    ledger.rows.append(said("home", "Leeds", 1))

    async def ran_meanwhile(call) -> tuple[bool, object]:
        ticked = asyncio.Event()
        asyncio.get_running_loop().call_soon(ticked.set)
        got = await call()
        return ticked.is_set(), got

    async def go() -> None:
        cache = FactsCache(max_statements=100)
        await cache.facts(["home"], "g", ledger.statements)
        ran, known = await ran_meanwhile(lambda: cache.facts(None, "g", ledger.statements))
        assert ran and len(known) == len(ledger.rows) and ledger.reads == 2
        assert cache.held_all == len(ledger.rows) and cache.held == 1  # "home" not evicted
        await cache.facts(None, "g", ledger.statements)
        await cache.facts(["home"], "g", ledger.statements)
        assert ledger.reads == 2  # both kept
        ran, known = await ran_meanwhile(
            lambda: cache.facts(None, "g", ledger.statements, as_of=said("home", "x", 50).said)
        )
        assert ran and brief(known) == brief(facts(ledger.rows, said("home", "x", 50).said))
        dropped = ("sessions/1.jsonl", lambda s: s.subject == "home")
        known = await cache.facts(None, "g", ledger.statements, drop=dropped)
        kept = [s for s in ledger.rows if not (s.path == "sessions/1.jsonl" and s.subject == "home")]
        assert brief(known) == brief(facts(kept)) and "home" not in known and ledger.reads == 2

    asyncio.run(go())
