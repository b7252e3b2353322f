#!/usr/bin/env python3
"""Whether the embeddings (wordllama, the default local model) can give a statement its subject where no
rule's cue does (issue 48): each sentence of tests/data/ledger_paraphrases.json is embedded and matched
to the lexicon's subject descriptions (`about`), as recall matches a question. Reported per cosine
threshold (with recall's margin over the second subject): of the paraphrases the rules miss, how many the
match takes and to the right subject (recall, precision), and how many of the corpus's negatives and of its
first-person chatter it would wrongly give a subject (false positives; those the rules' mood and owner
filters already drop — questions, wishes, someone else's — are counted apart).

    .venv/bin/python scripts/measure_ledger_embedding.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.memory.embeddings.base import normalise  # noqa: E402
from gateway.memory.embeddings.local import embed_texts, load_wordllama  # noqa: E402
from gateway.memory.ledger.extract import message_statements  # noqa: E402
from gateway.memory.ledger.lexicon import SUBJECTS  # noqa: E402
from gateway.memory.ledger.recall import SUBJECT_MARGIN  # noqa: E402
from gateway.memory.ledger.whose import _ME, _NOT_YET, _OTHERS, _QUESTION, _RELATIVE_FIRST  # noqa: E402


def _filtered(s: str) -> bool:
    """Whether the rules' mood and owner filters drop the sentence before any subject is looked for."""
    return bool(
        _QUESTION.search(s)
        or _NOT_YET.search(s)
        or _RELATIVE_FIRST.search(s)
        or (_OTHERS.search(s) and not _ME.search(s))
    )


def main() -> None:
    corpus = json.loads((ROOT / "tests/data/ledger_paraphrases.json").read_text("utf-8"))
    missed: list[tuple[str, str]] = []  # (sentence, subject) the rules give no statement of its subject
    negatives: list[str] = []
    for subject, entry in corpus.items():
        if subject.startswith("_"):
            continue
        for message, _ in entry["say"]:
            if not any(s.split(":", 1)[0] == subject for s, _, _ in message_statements(message)):
                missed.append((message, subject))
        negatives += entry["not"]
    chatter = corpus["_chatter"]
    wl = load_wordllama()
    names = [s.name for s in SUBJECTS]
    about = normalise(embed_texts(wl, [s.about for s in SUBJECTS]))

    def best(texts: list[str]) -> list[tuple[str, float, float]]:
        sims = normalise(embed_texts(wl, texts)) @ about.T
        out = []
        for row in sims:
            order = np.argsort(-row)
            out.append((names[int(order[0])], float(row[order[0]]), float(row[order[0]] - row[order[1]])))
        return out

    m_best = best([m for m, _ in missed])
    n_best = best(negatives)
    c_best = best(chatter)
    n_live = [not _filtered(s) for s in negatives]
    print(
        f"missed by the rules: {len(missed)}; negatives: {len(negatives)} ({sum(n_live)} past the filters); chatter: {len(chatter)}"
    )
    print(" cosine  taken right precision | negatives taken (past filters) | chatter taken")
    for th in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55):
        took = [(b, s) for (b, c, g), (_, s) in zip(m_best, missed) if c >= th and g >= SUBJECT_MARGIN]
        right = sum(b == s for b, s in took)
        neg = [live for (b, c, g), live in zip(n_best, n_live) if c >= th and g >= SUBJECT_MARGIN]
        cha = sum(c >= th and g >= SUBJECT_MARGIN for b, c, g in c_best)
        prec = right / (len(took) + cha + sum(neg)) if took or cha or any(neg) else float("nan")
        print(f"  {th:.2f}  {len(took):5} {right:5} {prec:9.2f} | {len(neg):5} ({sum(neg)}) | {cha:5}")


if __name__ == "__main__":
    main()
