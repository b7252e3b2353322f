"""The files engine (no `storage.url`): everything in the state dir, for one gateway.

    engine.py    FilesStorage: makes each agent's stores
    sessions.py  SessionStore: sessions.json and the JSONL transcripts beside it
    ledger.py    RunLedger: idempotency keys in this process's memory
    keyed.py     KeyedStore: keyed memories as markdown files in the workspace
    memory.py    MemoryIndex: one SQLite file per agent (FTS5 + sqlite-vec or a matrix, an ANN graph
                 when big), a writer and a reader connection, the swap gate
    rebuild.py   the users lock, fresh build + swap, setting a damaged index aside
    migrations.py  the index's schema as named, ordered migrations

The index's pipeline (memory/index/: sources, chunking, indexer, vectors, ann) and its search
(memory/search/) are shared with the PostgreSQL engine where they can be; the SQL here is SQLite's.
"""
