"""The PostgreSQL engine (`storage.url`): everything several gateways share, in one database.

db.py        the schema and its migrations (the memory index's too), and applying them
sqlutil.py   the SQL helpers the stores share (an advisory lock's key, a purge's WHERE), the URL redacted
instance.py  Postgres: the pool, this gateway's liveness lock, notifications between gateways
sessions.py  SessionStore: sessions and transcript rows, a local mirror file per transcript; whole
             sessions in and out (jarvis migrate) are session_copies.py's, a row as metadata session_rows.py's
ledger.py    RunLedger: active runs and idempotency keys
keyed.py     KeyedStore: keyed memories as rows (versions, the trash)
mirror.py    KeyedMirror: the workspace files of the keyed memories, a mirror of the rows, reconciled
memory/      MemoryIndex: one index per agent shared by every gateway (no file, no swap: a changed
             signature resets the agent's rows, under its advisory lock), and the ports the memory
             pipeline writes and searches through (memory/ports.py), in PostgreSQL's SQL
"""

from .db import MIGRATIONS, migrate
from .instance import REFUSED, UNUSABLE, Postgres
from .sqlutil import create_database, lock_key, redact

__all__ = ["MIGRATIONS", "REFUSED", "UNUSABLE", "Postgres", "create_database", "lock_key", "migrate", "redact"]
