"""Pure ranking functions (rerank.py), the circuit breaker and QMD output parsing (search/backends.py, search/qmd.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from gateway.memory.hit import Found, Hit
from gateway.memory.search.backends import BackendError, CircuitBreaker, merge
from gateway.memory.search.qmd import parse_results, workspace_path
from gateway.memory.layout import day_of
from gateway.memory.rerank import apply_time_decay, decay_factor, jaccard, mmr_rerank, mmr_select, token_set

NOW = datetime(2026, 11, 22, tzinfo=timezone.utc)


def res(path: str, score: float, snippet: str = "") -> Hit:
    return Hit(path, "memory", 1, 1, score, snippet)


def test_day_of_reads_day_files_only():
    assert day_of("memory/2026-11-20.md") == datetime(2026, 11, 20, tzinfo=timezone.utc)
    assert day_of("memory/journal/2025-01-02.md") == datetime(2025, 1, 2, tzinfo=timezone.utc)
    assert day_of("MEMORY.md") is None
    assert day_of("memory/keyed/facts/x.md") is None
    assert day_of("memory/2026-13-40.md") is None
    assert day_of("memory/notes-2026-11-20.md.bak") is None


def test_decay_factor_halves_per_half_life_and_never_grows():
    assert decay_factor(0, 30) == 1.0
    assert decay_factor(30, 30) == pytest.approx(0.5)
    assert decay_factor(60, 30) == pytest.approx(0.25)
    assert decay_factor(-5, 30) == 1.0  # future-dated: no boost
    with pytest.raises(ValueError):
        decay_factor(1, 0)


def test_time_decay_reorders_but_evergreen_files_keep_their_score():
    results = [res("memory/2026-01-01.md", 0.9), res("MEMORY.md", 0.5), res("memory/2026-11-21.md", 0.6)]
    dates = [day_of(r.path) for r in results]
    out = apply_time_decay(results, dates, NOW, half_life_days=30)
    assert [r.path for r in out] == ["memory/2026-11-21.md", "MEMORY.md", "memory/2026-01-01.md"]
    assert out[1].score == 0.5
    assert out[0].score == pytest.approx(0.6 * 0.5 ** (1 / 30), abs=1e-6)
    assert results[0].score == 0.9  # inputs untouched
    with pytest.raises(ValueError):
        apply_time_decay(results, dates[:2], NOW, 30)


def test_jaccard_and_token_sets():
    a, b = token_set("The cat sat on the mat"), token_set("the cat sat on a hat")
    assert "a" not in b  # one-letter words are dropped
    assert jaccard(a, b) == pytest.approx(4 / 6)
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_mmr_drops_near_duplicates_with_jaccard():
    results = [
        res("a.md", 0.9, "paris trip in may with anna"),
        res("b.md", 0.88, "paris trip in may with anna!"),
        res("c.md", 0.7, "bought a new bicycle yesterday"),
    ]
    out = mmr_rerank(results, k=2, lam=0.5)
    assert [r.path for r in out] == ["a.md", "c.md"]
    assert [r.path for r in mmr_rerank(results, k=3, lam=1.0)] == ["a.md", "b.md", "c.md"]


def test_mmr_uses_vectors_when_every_result_has_one():
    results = [res("a.md", 0.9, "x"), res("b.md", 0.85, "y"), res("c.md", 0.8, "z")]
    vecs = {0: np.array([1.0, 0.0]), 1: np.array([0.99, 0.05]), 2: np.array([0.0, 1.0])}
    assert [r.path for r in mmr_rerank(results, k=2, lam=0.5, vectors=vecs)] == ["a.md", "c.md"]
    # Snippets are all different words, so without every vector Jaccard sees no duplicates.
    assert [r.path for r in mmr_rerank(results, k=2, lam=0.5, vectors={0: vecs[0]})] == ["a.md", "b.md"]


def test_mmr_select_bounds():
    assert mmr_select([], 3, 0.5, lambda i, j: 0.0) == []
    assert mmr_select([0.1, 0.5], 5, 0.7, lambda i, j: 0.0) == [1, 0]
    with pytest.raises(ValueError):
        mmr_select([1.0], 1, 1.5, lambda i, j: 0.0)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_circuit_breaker_opens_then_half_opens_then_closes():
    clock = Clock()
    b = CircuitBreaker(failures=3, open_seconds=30, clock=clock)
    for _ in range(2):
        assert b.allow()
        b.failure()
    assert b.state == "closed"
    b.success()
    assert b.failures == 0
    for _ in range(3):
        assert b.allow()
        b.failure()
    assert b.state == "open" and not b.allow()
    assert b.snapshot() == {"state": "open", "failures": 3, "openForS": 30.0}
    clock.t += 30
    assert b.state == "half-open"
    assert b.allow() and not b.allow()  # one trial at a time
    b.failure()  # the trial failed: open again for a full window
    assert b.state == "open"
    clock.t += 30
    assert b.allow()
    b.success()
    assert b.snapshot() == {"state": "closed", "failures": 0}


def test_merge_sorts_by_score_and_joins_degraded():
    none = {"provider": "none", "model": ""}
    a = Found([res("MEMORY.md", 0.4)], "fts", none, "x")
    b = Found([res("sessions/s.jsonl", 0.8), res("sessions/t.jsonl", 0.1)], "hybrid", none)
    out = merge([a, b], 2, ["qmd failed"])
    assert [r.score for r in out.hits] == [0.8, 0.4]
    assert out.degraded == "qmd failed; x" and out.mode == "fts"
    assert merge([b], 2, []).degraded is None


WS = Path("/home/u/ws")


def test_qmd_paths_map_to_memory_files_only():
    assert workspace_path("qmd://jarvis-main/memory/2026-11-20.md", "jarvis-main", WS) == "memory/2026-11-20.md"
    assert workspace_path("jarvis-main/MEMORY.md", "jarvis-main", WS) == "MEMORY.md"
    assert workspace_path("/home/u/ws/memory/a.md", "jarvis-main", WS) == "memory/a.md"
    for bad in ("memory/../../etc/passwd.md", "/etc/passwd", "notes/x.md", "memory/x.txt", "", "memory//a.md"):
        assert workspace_path(bad, "jarvis-main", WS) is None, bad


def test_qmd_parse_results_defensively():
    raw = (
        b'[{"docid":"#abc123","score":0.93,"file":"qmd://c/memory/2026-11-20.md","title":"t",'
        b'"snippet":"@@ -12,3 @@ (11 before, 5 after)\\nline a\\nline b\\nline c"},'
        b'{"file":"c/MEMORY.md","score":7,"line":4,"snippet":"' + b"x" * 900 + b'"},'
        b'{"file":"c/../secret.md","score":0.5}, 42, {"score":0.2}, {"file":"c/memory/b.md","score":"high"}]'
    )
    out = parse_results(raw, "c", WS)
    assert out[0] == Hit("memory/2026-11-20.md", "memory", 12, 14, 0.93, "line a\nline b\nline c")
    assert (out[1].path, out[1].start_line, out[1].end_line, out[1].score, len(out[1].snippet)) == (
        "MEMORY.md",
        4,
        4,
        1.0,
        700,
    )
    assert (out[2].path, out[2].score, out[2].start_line) == ("memory/b.md", 0.0, 1)
    assert len(out) == 3
    assert parse_results(b"  \n", "c", WS) == []
    with pytest.raises(BackendError, match="not JSON"):
        parse_results(b"Error: something <html>", "c", WS)
    with pytest.raises(BackendError, match="not a list"):
        parse_results(b'{"oops": 1}', "c", WS)


def test_results_spread_over_files_gently():
    from gateway.memory.search.fusion import Candidate, spread_over_files

    def ranked(*items: tuple[str, float]) -> list:
        return [(Candidate(i, score=s), (i, path)) for i, (path, s) in enumerate(items)]

    pool = ranked(("a", 1.0), ("a", 0.95), ("a", 0.9), ("b", 0.88), ("c", 0.5))
    order = lambda got: [r[0] for _, r in got]  # noqa: E731
    assert order(spread_over_files(pool, 4, 1.0)) == [0, 1, 2, 3]  # off: plain ranking
    # 0.9: the second "a" (0.95 * 0.9 = 0.855) gives way to "b" (0.88); a weak "c" does not jump ahead.
    assert order(spread_over_files(pool, 4, 0.9)) == [0, 3, 1, 2]
    assert order(spread_over_files(pool, 10, 0.9)) == [0, 3, 1, 2, 4]
    assert [c.score for c, _ in spread_over_files(pool, 2, 0.9)] == [1.0, 0.88]  # scores are kept


def test_snippet_shows_how_the_next_message_begins():
    from gateway.memory.search.snippets import SnippetContext, snippet

    msgs = [
        "Ana: I adopted a greyhound called Pixel last week.",
        "Ben: " + "lovely " * 30,
        "Ana: She sleeps all day on the sofa and snores like a tractor every single night. " * 3,
    ]
    text = "\n".join(msgs)
    spans, off = [], 0
    for line, m in enumerate(msgs, start=2):
        spans.append((line, 0, off, off + len(m)))
        off += len(m) + 1
    ctx = SnippetContext.build(["greyhound"], [text])
    out = snippet(text, spans, ctx, 360)
    assert len(out) <= 360 and out.startswith(msgs[0] + "\n") and msgs[1] in out
    tail = out.split("\n")[-1]
    assert tail.startswith("Ana: She sleeps all day") and tail.endswith("…") and not tail.endswith(" …")
    # No room for a useful start: nothing is added.
    assert snippet(text, spans, ctx, len(msgs[0]) + len(msgs[1]) + 30) == msgs[0] + "\n" + msgs[1]
    # The match is in the last message and the one before is too long to show whole: its start leads.
    ctx = SnippetContext.build(["tractor"], [text])
    out = snippet(text, spans, ctx, len(msgs[2]) + 100)
    head, rest = out.split("\n", 1)
    assert rest == msgs[2] and head.startswith("Ben: lovely lovely") and head.endswith("…")
    assert len(out) <= len(msgs[2]) + 100


def test_a_segment_scores_the_same_with_only_the_needles_its_chunk_holds():
    """`needles_in` (issue 46): a chunk's segments are scored with only the query's (and related) words
    its whole window holds — the same scores and first matches as with all of them; a text that is not
    ASCII keeps them all (lowercasing a part of it need not give a part of the whole's)."""
    from gateway.memory.search.snippets import SnippetContext, needles_in, score_segment

    text = "User: The Greyhound leaves at nine.\nAssistant: Book the greyhounds early.\nUser: And the bus back?"
    context = "User: Trains are slower."
    whole = text + "\n" + context
    terms, related = ["greyhound", "bus", "ferry"], ["coach", "train"]
    full = SnippetContext.build(terms, [whole], related=related)
    some = SnippetContext.build(terms, [whole], related=related)
    there = needles_in(whole, some)
    assert [n[0] for n in there] == ["greyhound", "bus", "train"]  # (no ferry, no coach)
    for seg in [*text.split("\n"), context, whole]:
        a, b = score_segment(seg, full), score_segment(seg, some, there)
        assert (a.score, a.first_hit) == (b.score, b.first_hit)
    assert needles_in("Zoë took the Greyhound", some) == some.needles


def test_a_window_is_scored_as_a_segment_with_the_needles_it_holds():
    """`window_needles` (issue 46): a chunk's window lowercased once gives `needles_in`'s needles and
    `score_segment`'s score of the whole window, ASCII or not; without `cover` no score."""
    from gateway.memory.search.snippets import SnippetContext, needles_in, score_segment, window_needles

    terms, related = ["greyhound", "bus", "ferry", "leave"], ["coach", "train"]
    for whole in (
        "User: The Greyhound leaves at nine.\nAssistant: Book the greyhounds early.\nUser: And the bus back?",
        "Zoë took the Greyhound; the BUS-stop was shut.\nΣΟΦΙΑ: trains and a coach",
        "nothing of it here",
        "abus greyhoundish ferry_ leaving",
    ):
        ctx = SnippetContext.build(terms, [whole], related=related)
        there, cover = window_needles(whole, ctx)
        assert there == needles_in(whole, ctx)
        assert cover == score_segment(whole, SnippetContext.build(terms, [whole], related=related), there).score
        assert window_needles(whole, ctx, cover=False) == (there, 0.0)
