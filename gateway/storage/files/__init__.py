"""The files engine (no `storage.url`): everything in the state dir, for one gateway.

    engine.py    FilesStorage: makes each agent's stores
    sessions.py  SessionStore: sessions.json and the JSONL transcripts beside it
    ledger.py    RunLedger: idempotency keys in this process's memory
    keyed.py     KeyedStore: keyed memories as markdown files in the workspace

The memory index (SQLite: FTS5 + sqlite-vec) is still gateway/memory/ (index/, service.py).
"""
