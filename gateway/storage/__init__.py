"""Where the gateway keeps what several gateways must share.

With no `storage.url` everything lives in the state dir (sessions.json, JSONL transcripts, one SQLite
index per agent), for one gateway. With a postgresql:// URL, session metadata, transcripts,
idempotency keys and active runs live in PostgreSQL (postgres.py), and any number of gateways serve
the same sessions (gateway/cluster.py; docs/scaling.md).
"""
