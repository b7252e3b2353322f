"""Fts5Search.search's CPU time on a small index (below pruning.PRUNE_MIN_CHUNKS: no max-score), two
versions of gateway/storage/fts5.py (git refs, or `wt` for the working tree) alternating A B B A in one
process (time.process_time: SQLite runs in it). The index: CHUNKS generated chunks (a Zipf vocabulary of
6,000 words, 30-90 words each) in an external-content FTS5 table as the files engine's, built once in
DB_DIR. 300 queries of 2-4 words, n = 24; --rare: words of rank 100-5,999 only (cheap queries: fixed
costs show); --newgen: a new index generation every search (what a search after a sync pays).

    .venv/bin/python scripts/bench_fts_small.py /tmp/fts-small 15000 main wt [--rare] [--newgen]

docs/scaling.md ### small47."""

import asyncio
import importlib.util
import os
import random
import sqlite3
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import gateway.storage  # noqa


def load(arm):
    src = (
        open(f"{ROOT}/gateway/storage/fts5.py").read()
        if arm == "wt"
        else subprocess.check_output(["git", "-C", ROOT, "show", f"{arm}:gateway/storage/fts5.py"], text=True)
    )
    name = "gateway.storage._fts5_" + arm.replace("-", "_").replace(".", "_")
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "gateway.storage"
    sys.modules[name] = mod
    exec(compile(src, f"{arm}:fts5.py", "exec"), mod.__dict__)
    return mod


def build(path, n, seed=7):
    if os.path.exists(path):
        return
    rnd = random.Random(seed)
    vocab = [f"w{i}x" + "".join(rnd.choice("abcdefghij") for _ in range(3)) for i in range(6000)]
    weights = [1.0 / (i + 1) ** 1.05 for i in range(len(vocab))]
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, source TEXT NOT NULL, session_key TEXT, text TEXT)")
    conn.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, content='chunks', content_rowid='id', tokenize='porter unicode61')"
    )
    for i in range(1, n + 1):
        t = " ".join(rnd.choices(vocab, weights, k=rnd.randint(30, 90)))
        conn.execute("INSERT INTO chunks VALUES (?, 'memory', NULL, ?)", (i, t))
        conn.execute("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, '')", (i, t))
    conn.commit()
    open(path + ".vocab", "w").write("\n".join(vocab))


class Db:
    def __init__(self, c):
        self.conn = c

    async def call(self, fn):
        return fn(self.conn)

    async def fetchall(self, sql, p=()):
        return self.conn.execute(sql, p).fetchall()


def main() -> None:
    d, chunks, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    newgen = "--newgen" in sys.argv
    path = f"{d}/idx{chunks}.sqlite"
    build(path, chunks)
    vocab = open(path + ".vocab").read().split("\n")
    rnd = random.Random(11)
    pick = (
        (lambda: rnd.randint(100, 5999))
        if "--rare" in sys.argv
        else (lambda: min(int(rnd.paretovariate(0.6)) * rnd.randint(1, 4) - 1, 5999))
    )
    queries = [[vocab[pick()] for _ in range(rnd.randint(2, 4))] for _ in range(300)]
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    arms = {x: load(x) for x in (a, b)}
    searchers = {x: arms[x].Fts5Search(Db(conn), "porter", 0.5) for x in arms}
    gen = [0]

    async def one(x):
        s = searchers[x]
        out = []
        for q in queries:
            g = str(gen[0]) if newgen else "1"
            gen[0] += 1
            out.append(await s.search(q, 24, (), None, generation=g, total=chunks))
        return out

    cpu = {a: [], b: []}
    answers = {}
    for _rep in range(int(os.environ.get("REPS", 3))):
        for x in (a, b, b, a):
            t0 = time.process_time()
            got = asyncio.run(one(x))
            cpu[x].append(time.process_time() - t0)
            answers.setdefault(x, got)
    for x in (a, b):
        per = [c / len(queries) * 1e3 for c in cpu[x]]
        print(
            f"{x:>8}: chunks={chunks} newgen={newgen} rare={'--rare' in sys.argv} ms/search min={min(per):.3f} median={sorted(per)[len(per) // 2]:.3f}"
        )
    same_set = sum(set(h for h, _ in p) == set(h for h, _ in q) for p, q in zip(answers[a], answers[b]))
    same = sum(p == q for p, q in zip(answers[a], answers[b]))
    order = sum([h for h, _ in p] == [h for h, _ in q] for p, q in zip(answers[a], answers[b]))
    print(
        f"answers identical (hits+scores) {same}/{len(queries)}, same order {order}, same set {same_set}; load {open('/proc/loadavg').read().split()[:3]}"
    )


if __name__ == "__main__":
    main()
