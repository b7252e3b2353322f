"""What a result shows: the best part of a chunk within `snippetChars`, and how segments score.

A chunk that fits is shown whole; otherwise the segment (a transcript message, or a markdown line) that
matches the query best — query words weighted by their rarity among the candidates — plus its best
neighbours, whole, until the budget is used; 60 or more characters left show how the next segment
begins, then the one before. A single segment longer than the budget is cut around its first match.

The same segment scoring serves the searcher's re-rank (best message, questions that only echo the
query) and `Exclude` (a chat turn's own message is never recalled as its answer).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .query import WORD, is_cjk, light_stem
from .related import RELATED_WEIGHT
from .stopwords import STOPWORDS


ANSWER_TYPE_WEIGHT = 0.3


def term_weights(terms: Sequence[str], texts: Iterable[str]) -> dict[str, float]:
    """IDF-like weight of each query term among the candidate texts (rarer → heavier)."""
    return _weights(terms, [t.lower() for t in texts])


def _weights(terms: Sequence[str], texts: list[str]) -> dict[str, float]:
    """term_weights of texts already lowercased."""
    n = max(1, len(texts))
    out = {}
    for t in terms:
        df = sum(1 for x in texts if t in x)
        out[t] = math.log(1.0 + (n + 1) / (df + 0.5))
    return out


def _term_needles(terms: Sequence[str]) -> list[tuple[str, str, bool]]:
    """(term, lowercase needle, must start a word): light stems match inflections as a prefix."""
    return [(t, t, False) if is_cjk(t) else (t, light_stem(t), True) for t in terms]


def _find(hay: str, needle: str, word_start: bool) -> int:
    i = hay.find(needle)
    while i > 0 and word_start and (hay[i - 1].isalnum() or hay[i - 1] == "_"):
        i = hay.find(needle, i + 1)
    return i


@dataclass
class Segment:
    text: str
    score: float = 0.0
    first_hit: int = -1


@dataclass
class SnippetContext:
    terms: list[str]
    weights: dict[str, float] = field(default_factory=dict)
    needles: list[tuple[str, str, bool]] = field(default_factory=list)
    # Segments scored so far, by text: a search scores the same messages for its re-rank and again for the
    # snippets (a context lives for one search; issue 46).
    scored: dict[str, Segment] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        terms: Sequence[str],
        texts: Iterable[str],
        answer_types: Iterable[str] = (),
        related: Sequence[str] = (),
    ) -> "SnippetContext":
        """`answer_types`: terms that only name the kind of answer (query.answer_type_terms): they count
        ANSWER_TYPE_WEIGHT of their rarity. `related`: words related to the terms (search/related.py),
        matched too, at RELATED_WEIGHT of their rarity; `terms` stays the query's own."""
        terms = list(terms)
        texts = [t.lower() for t in texts]  # (once, for the query's words and the related ones)
        weights = _weights(terms, texts)
        for t in answer_types:
            if t in weights and len(terms) > 1:
                weights[t] *= ANSWER_TYPE_WEIGHT
        extra = [w for w in related if w not in weights]
        for w, v in _weights(extra, texts).items():
            weights[w] = v * RELATED_WEIGHT
        return cls(terms, weights, _term_needles(terms + extra))


def segments(text: str, spans: Sequence[Sequence[int]] | None, context: str) -> list[tuple[str, bool]]:
    """(segment, is core) in reading order: transcript messages (core and neighbours), or markdown lines."""
    if spans:
        return [((text if where == 0 else context)[a:b], where == 0) for _line, where, a, b in spans]
    return [(line, True) for line in text.split("\n")]


def needles_in(text: str, ctx: SnippetContext) -> list[tuple[str, str, bool]]:
    """The context's needles that `text` holds somewhere: all a part of it can hold, for `score_segment`
    of its segments (issue 46: most of the query's and related words are in no segment of a chunk).
    All of them when `text` is not ASCII (lowercasing a part is then not always a part of the whole's)."""
    if not text.isascii():
        return ctx.needles
    low = text.lower()
    return [n for n in ctx.needles if n[1] in low]


def window_needles(text: str, ctx: SnippetContext, cover: bool = True) -> tuple[list[tuple[str, str, bool]], float]:
    """`needles_in(text, ctx)` and, with `cover`, `score_segment(text, ctx, those).score`, with `text`
    lowercased once (issue 46: a chunk's window, its text and neighbours, was lowercased for each, and
    hashed to be looked up among the scored segments, where no window is)."""
    low = text.lower()
    there = ctx.needles if not text.isascii() else [n for n in ctx.needles if n[1] in low]
    score = 0.0
    if cover:
        weights = ctx.weights
        for term, needle, word_start in there:
            i = low.find(needle)
            if i > 0 and word_start:
                i = _find(low, needle, word_start)
            if i >= 0:
                score += weights.get(term, 1.0)
    return there, score


def score_segment(seg: str, ctx: SnippetContext, needles: list[tuple[str, str, bool]] | None = None) -> Segment:
    """The segment's weighted match (the same object for the same text within one context: not to change).
    `needles`: those of the context that can be in it (`needles_in` of a text it is part of), else all."""
    s = ctx.scored.get(seg)
    if s is not None:
        return s
    s = ctx.scored[seg] = Segment(seg)
    low = seg.lower()
    for term, needle, word_start in ctx.needles if needles is None else needles:
        i = low.find(needle)  # (most needles are not in a segment at all: no call for them)
        if i > 0 and word_start:
            i = _find(low, needle, word_start)
        if i >= 0:
            s.score += ctx.weights.get(term, 1.0)
            if s.first_hit < 0 or i < s.first_hit:
                s.first_hit = i
    return s


def matched_terms(text: str, ctx: SnippetContext) -> frozenset[str]:
    """The query terms `text` contains (light stems as word prefixes, as segments are scored)."""
    low = text.lower()
    return frozenset(
        term
        for term, needle, word_start in ctx.needles
        if (i := low.find(needle)) == 0 or (i > 0 and (not word_start or _find(low, needle, word_start) >= 0))
    )


# "User: ", "Assistant: ", "Caroline: ": who spoke, at the start of a transcript message (see chunking).
_LABEL = re.compile(r"^[^\W\d_][\w.'’-]*(?: [^\W\d_][\w.'’-]*){0,2}: ")


def message_body(seg: str) -> str:
    """A segment without its speaker label."""
    m = _LABEL.match(seg)
    return seg[m.end() :] if m else seg


class EchoTest:
    """Tells a message (or line) that asks rather than tells: a question, or one whose words are all
    the query's own (it adds nothing to what is asked). Such a segment is a poor answer to the query
    even when it matches it best — typically the same question asked earlier."""

    def __init__(self, query_terms_: Sequence[str]):
        self.stems = frozenset(light_stem(t) for t in query_terms_)
        # A message made of the query's words and stopwords is about as long as a query: a longer
        # one surely adds words (checked by length, not by finding every word: this runs per message).
        self.max_len = 24 * len(self.stems) + 40

    def __call__(self, seg: str) -> bool:
        body = message_body(seg).strip()
        if not body:
            return False
        if body.endswith("?"):
            return True
        if len(body) > self.max_len:
            return False
        seen = False
        for w in WORD.findall(body.lower()):  # stops at the first word the query does not have
            if w in STOPWORDS or (len(w) == 1 and not is_cjk(w)):
                continue
            if light_stem(w.strip("_")) not in self.stems:
                return False
            seen = True
        return seen


def only_asks(
    core: Sequence[tuple[float, str]], others: Sequence[str], ctx: "SnippetContext", is_echo: EchoTest
) -> bool:
    """A chunk whose core matches the query only in questions / echoes of it, with no statement in its
    whole window (core or neighbours) that matches the query: it asks what the query asks and holds no
    answer. (A question followed by its answer is not penalised: the answer is in the window.)
    `core`: (match score, text) of the core's segments; `others`: the neighbours' texts."""
    matched = [seg for sc, seg in sorted(core, key=lambda x: -x[0]) if sc > 0]  # a statement is usually best
    if not matched or not all(is_echo(seg) for seg in matched):
        return False  # the common case, decided without looking at the neighbours
    return not any(not is_echo(seg) and score_segment(seg, ctx).score > 0 for seg in others)


@dataclass(frozen=True)
class Exclude:
    """Leave out the chunks of transcript `path` whose core holds a message with this text (the
    message a chat turn answers: it must not be recalled as its own answer)."""

    path: str
    text: str

    def hits(self, path: str, text: str, spans: Sequence[Sequence[int]] | None, context: str) -> bool:
        if path != self.path or not spans:
            return False
        want = " ".join(self.text.split())
        # The message as indexed: with a speaker label ("User: …"), or as written when the transcript
        # names its speakers itself ("Caroline: …").
        # A message longer than a chunk is indexed in pieces: each is part of it.
        for seg, core in segments(text, spans, context):
            if not core:
                continue
            body, whole = " ".join(message_body(seg).split()), " ".join(seg.split())
            if want in (body, whole) or (len(body) >= 200 and body in want):
                return True
        return False


def _cut_around(text: str, pos: int, limit: int) -> str:
    if len(text) <= limit:
        return text
    pos = max(0, pos)
    start = max(0, min(pos - limit // 4, len(text) - limit))
    if start > 0:
        sp = text.find(" ", start, start + 40)
        if sp != -1:
            start = sp + 1
    piece = text[start : start + limit - (1 if start > 0 else 0) - 1]
    if start + len(piece) < len(text):
        sp = piece.rfind(" ", len(piece) - 40)
        if sp > 0:
            piece = piece[:sp]
        piece += "…"
    if start > 0:
        piece = "…" + piece
    return piece[:limit]


MIN_HEAD = 60  # characters of a neighbouring message worth showing (a name and the first words)


def snippet(
    text: str,
    spans: Sequence[Sequence[int]] | None,
    ctx: SnippetContext,
    limit: int = 700,
    context: str = "",
    shown: set[int] | None = None,
) -> str:
    """The best ≤ `limit` characters of a chunk: around its best-matching core segment, whole segments.
    `shown`: the lines of this transcript that better-ranked results of the same search show already
    (overlapping windows hold the same messages): those are left out unless nothing else is left, and
    the lines this snippet shows are added."""
    raw = segments(text, spans, context)
    lines = [int(sp[0]) for sp in spans] if spans and len(spans) == len(raw) else None
    if lines and shown and not all(n in shown for n, (_, is_core) in zip(lines, raw) if is_core):
        keep = [i for i, n in enumerate(lines) if n not in shown]
        raw, lines = [raw[i] for i in keep], [lines[i] for i in keep]
    out = _snippet(raw, ctx, limit)
    if lines is not None and shown is not None:
        shown.update(n for (seg, _), n in zip(raw, lines) if seg and seg in out)
    return out


def _snippet(raw: list[tuple[str, bool]], ctx: SnippetContext, limit: int) -> str:
    if sum(len(seg) + 1 for seg, _ in raw) - 1 <= limit:
        return "\n".join(seg for seg, _ in raw)
    segs = [score_segment(seg, ctx) for seg, _ in raw]
    core = [i for i, (_, is_core) in enumerate(raw) if is_core and segs[i].text.strip()]
    # Lead with the core's best match (neighbours then fill the room around it).
    scored = [i for i in core if segs[i].score > 0]
    if scored:
        best = max(scored, key=lambda i: (segs[i].score, -i))
    else:
        best = core[0] if core else 0
    if len(segs[best].text) >= limit:
        return _cut_around(segs[best].text, segs[best].first_hit, limit)
    chosen = {best}
    used = len(segs[best].text)
    lo, hi = best - 1, best + 1
    while True:
        options = []
        if lo >= 0 and used + 1 + len(segs[lo].text) <= limit:
            options.append((raw[lo][1], segs[lo].score, 0, lo))
        if hi < len(segs) and used + 1 + len(segs[hi].text) <= limit:
            options.append((raw[hi][1], segs[hi].score, 1, hi))
        if not options:
            break
        # Core before neighbours; then the better-matching side; on a tie, the following one.
        pick = max(options)[3]
        chosen.add(pick)
        used += 1 + len(segs[pick].text)
        if pick == lo:
            lo -= 1
        else:
            hi += 1
    out = "\n".join(segs[i].text for i in sorted(chosen))
    # The room left shows how the next message begins (cut at a word, marked "…"), then the one before.
    for side in (hi, lo):
        room = limit - len(out) - 1
        if 0 <= side < len(segs) and room >= MIN_HEAD and segs[side].text.strip():
            head = _head(segs[side].text, room - 1)
            out = out + "\n" + head if side == hi else head + "\n" + out
    return out[:limit]


def _head(text: str, n: int) -> str:
    """The first ≤ n characters of `text` and "…", cut at a word when one ends in the second half."""
    head = text[:n]
    sp = head.rfind(" ")
    return (head[:sp] if sp > n // 2 else head).rstrip() + "…"
