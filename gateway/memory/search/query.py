"""A query into full-text terms: words, stems, FTS5 syntax that cannot be injected.

The query is cut into words (Unicode `\\w+`), lowercased, stopwords dropped, and each word is quoted as an
FTS5 string (`"word"`), so no query can be FTS5 syntax: quotes, `*`, `NEAR(`, `-`, `:` and parentheses
only ever separate words. Words are OR-ed and ranked by BM25. With the default unicode61 tokenizer,
words of 5+ letters also match their light stem as a prefix (`"painting"` → `"paint"*`), so inflections
meet. With the `trigram` tokenizer (CJK) a run of CJK characters becomes its overlapping 3-character
pieces.
"""

from __future__ import annotations

import re
from typing import Sequence

from .stopwords import DATE_STOPWORDS, STOPWORDS, TIME_WORDS

WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]")
MAX_TERMS = 48


def is_cjk(word: str) -> bool:
    return bool(_CJK.search(word))


def light_stem(word: str) -> str:
    """A conservative English suffix strip used only to widen matching by prefix."""
    for suf in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suf) and len(word) - len(suf) >= 4:
            stem = word[: -len(suf)]
            if suf in ("ing", "ed") and len(stem) > 4 and stem[-1] == stem[-2] and stem[-1] not in "aeiouls":
                stem = stem[:-1]  # planned → plan(n), running → run(n)
            return stem
    return word


def _is_date_word(words: Sequence[str], i: int) -> bool:
    """A stopword that is a month name here ("May" beside a number, or capitalised mid-sentence)."""
    w = words[i]
    if w.lower() not in DATE_STOPWORDS:
        return False
    near = [*words[max(0, i - 1) : i], *words[i + 1 : i + 2]]
    return any(x.isdigit() for x in near) or (i > 0 and w[:1].isupper() and not w.isupper())


def query_terms(text: str) -> list[str]:
    """Distinct lowercased words of a query, stopwords and single Latin letters removed, in order.
    A stopword that is a month name in a date ("in May 2023") is kept. Words that only say which time
    is asked about (TIME_WORDS: "now", "originally", "old", …) are left out unless nothing else is left."""
    seen: dict[str, None] = {}
    timely: dict[str, None] = {}
    words = [w.strip("_") for w in WORD.findall(text)]
    for i, orig in enumerate(words):
        w = orig.lower()
        if not w or (len(w) == 1 and not is_cjk(w) and not w.isdigit()):
            continue
        if w in STOPWORDS and not _is_date_word(words, i):
            continue
        (timely if w in TIME_WORDS else seen).setdefault(w, None)
        if len(seen) >= MAX_TERMS:
            break
    return list(seen or timely)[:MAX_TERMS]


# "What colour is my canoe?", "Which city am I in?", "What kind of car do I have?": the noun the question
# word asks for names the kind of answer, and the statement that answers seldom repeats it ("she's forest
# green now"). The re-rank counts such a word for less (snippets.SnippetContext).
_AUX = r"(?:is|are|was|were|do|does|did|can|could|will|would|am|has|have|had|should)"
_ANSWER_TYPE = re.compile(rf"^\W*(?:what|which)\s+((?:(?!{_AUX}\b)\w+\s+){{0,2}}?(?!{_AUX}\b)\w+)\s+{_AUX}\b", re.I)


def answer_type_terms(text: str) -> frozenset[str]:
    """The query term that only names the kind of answer wanted: the head noun after "what"/"which"
    ("which basketball team" → team; "what kind of car" → kind)."""
    m = _ANSWER_TYPE.match(text)
    if not m:
        return frozenset()
    words = m.group(1).lower().split()
    head = words[0] if len(words) > 2 and words[1] == "of" else words[-1]
    return frozenset(query_terms(head))


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fts_query(terms: Sequence[str], tokenizer: str) -> str | None:
    """An FTS5 MATCH expression that ORs the quoted terms; None when nothing is searchable."""
    parts = fts_phrases(terms, tokenizer)
    return " OR ".join(parts) if parts else None


def fts_phrases(terms: Sequence[str], tokenizer: str) -> list[str]:
    """The FTS5 phrases `fts_query` ORs, distinct, in order."""
    parts: list[str] = []
    for t in terms:
        if tokenizer == "trigram":
            if is_cjk(t):
                if len(t) < 3:
                    continue  # trigram cannot match shorter strings
                grams = {t[i : i + 3] for i in range(len(t) - 2)}
                parts.extend(_quote(g) for g in sorted(grams))
            elif len(t) >= 3:
                parts.append(_quote(t))
        elif tokenizer == "porter":
            parts.append(_quote(t))
        else:
            parts.append(_quote(t))
            stem = light_stem(t)
            if stem != t and not is_cjk(t):
                parts.append(_quote(stem) + "*")
    return list(dict.fromkeys(parts))
