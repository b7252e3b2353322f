"""The files engine (no `storage.url`): everything in the state dir, for one gateway.

    engine.py    FilesStorage: makes each agent's stores
    sessions.py  SessionStore: sessions.json and the JSONL transcripts beside it (its file format
                 sessions_file.py, its trash session_trash.py, whole sessions in and out session_copies.py)
    ledger.py    RunLedger: idempotency keys in this process's memory
    keyed.py     KeyedStore: keyed memories as markdown files in the workspace
    memory/      MemoryIndex: one SQLite file per agent (FTS5 + sqlite-vec or a matrix, an ANN graph
                 when big), a writer and reader connections, the swap gate; the ports the memory
                 pipeline writes and searches through (memory/ports.py), in SQLite's SQL

The pipeline itself (memory/index/: scanning, chunking, embedding, batching) and the search (memory/search/:
fusion, snippets, re-ranking) are the memory feature's, the same on either engine.
"""
