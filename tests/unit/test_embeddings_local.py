"""The local WordLlama embedder: the segment cache must give WordLlama's own vectors, for any text."""

from __future__ import annotations

import json
import random
import threading

import numpy as np

from gateway.memory.embeddings import local
from tests.helpers import ROOT

LOCOMO = ROOT.parent / "shared" / "bench" / "locomo"

ODD = [
    "",
    " ",
    "  ",
    "a  b",
    " leading",
    "trailing ",
    "\ttab\tx",
    "line\nnext\n\n",
    "café ☕ 日本語のテキスト",
    "emoji 👩‍👩‍👧 ok",
    "a <s> b",
    "</s>",
    "<unk>x",
    "x" * 500,
    "http://example.com/" + "a/b" * 100,
    "▁literal▁ ▁▁",
    "  double  spaces  ",
    "\u00a0nbsp",
    "Ｆｕｌｌｗｉｄｔｈ",
    "I'm 2023-05-08, #12345!",
    "tiny words " + "a " * 3000,
    # Numbers are cut at each digit (no token holds a digit beside anything else).
    "#123456.",
    "On 2023-05-08 at 3pm, $1,200.50 (v2.0b7, x86_64) was 42% off",
    "42",
    "7 ",
    "abc123def 9",
    "1st 2nd 3rd 4th",
    "00:15:30",
    "٣ arabic digit",
    "123" * 400,
    "ends with 5",
    "-1 +2 =3 .4",
]


def corpus() -> list[str]:
    rng = random.Random(5)
    words = "the a time person Caroline adoption agency café naïve 42 #9981 x-ray e-mail don't it's".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 120))) for _ in range(400)]
    for f in sorted(LOCOMO.glob("conv-*.json"))[:1]:
        conv = json.loads(f.read_text())
        conv = conv.get("conversation", conv)
        for k, v in conv.items():
            if k.startswith("session_") and isinstance(v, list):
                texts += [f"{t['speaker']}: {t['text']}" for t in v]
    return texts + ODD


def normalise(v: np.ndarray) -> np.ndarray:
    """Unit rows, zero rows kept (the provider's own `normalise` refuses them: an empty text's vector)."""
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.where(n == 0, 1.0, n)).astype(np.float32)


def reference(texts: list[str]) -> np.ndarray:
    return normalise(local.embed_texts(local.load_wordllama(), texts))


def test_segment_vectors_equal_wordllamas_own_even_while_evicting():
    texts = corpus()
    want = reference(texts)
    # Small: rows run out all the time (eviction, rows reused), and long texts take the plain path.
    for capacity, part in ((65_536, 4096), (64, 64)):
        sv = local.SegmentVectors(local.load_wordllama(), capacity=capacity, part_keys=part)
        for _ in range(2):  # cold, then with rows cached
            got = normalise(np.concatenate([sv.embed(texts[i : i + 97]) for i in range(0, len(texts), 97)]))
            assert np.abs(got - want).max() < 1e-5
    assert not np.any(reference([""]))  # an empty text stays a zero vector


def test_many_unseen_words_at_once_even_beside_odd_whitespace():
    # One step with hundreds of unseen words goes through the tokenizer in one call; segments that are
    # runs of "▁" (double spaces, a trailing space, literal "▁") go one by one, beside them.
    rng = random.Random(9)
    texts = [
        " ".join(f"zq{rng.randrange(10**6)}x" for _ in range(60)) + tail
        for tail in ("", "  double", " trailing ", " ▁lit▁ ▁▁", "\tta b  ")
    ] * 3
    sv = local.SegmentVectors(local.load_wordllama())
    assert sum(len(local._keys(t)) for t in texts) >= 4 * local.BATCH_TOKENIZE
    got = normalise(sv.embed(texts))
    assert np.abs(got - reference(texts)).max() < 1e-5
    assert np.abs(normalise(sv.embed(texts)) - got).max() < 1e-6  # again, from the cached rows


def test_numbers_are_cut_at_each_digit_not_tokenised_or_cached():
    sv = local.SegmentVectors(local.load_wordllama())
    assert sv.split_digits  # the shipped vocabulary has the property the cut relies on
    texts = ["paid #123456. on 2023-05-08 at 3pm", "#654321."]
    got = normalise(sv.embed(texts))
    assert np.abs(got - reference(texts)).max() < 1e-5
    assert " 1" in sv.index and " ." in sv.index and "#" in sv.index
    assert not any(k in sv.index or k in sv.seen for k in ("#123456.", "2023-05-08", "3pm", "#654321."))


def test_segment_vectors_are_thread_safe():
    texts = corpus()
    want = reference(texts)
    sv = local.SegmentVectors(local.load_wordllama(), capacity=64, part_keys=64)
    errors: list[float] = []

    def run(seed: int) -> None:
        order = list(range(len(texts)))
        random.Random(seed).shuffle(order)
        for i in range(0, len(order), 50):
            idx = order[i : i + 50]
            got = normalise(sv.embed([texts[j] for j in idx]))
            errors.append(float(np.abs(got - want[idx]).max()))

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors and max(errors) < 1e-5


def test_provider_embeds_through_the_segment_cache():
    p = local.LocalEmbeddings()
    texts = ["My sister Ana moved to Berlin.", "The boiler makes a clicking noise."]
    assert np.abs(p.embed_sync(texts) - reference(texts)).max() < 1e-5
    assert p.embed_sync([]).shape == (0, 256)
